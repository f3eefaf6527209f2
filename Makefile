.PHONY: bootstrap test unit integration demo lint generate schema image release clean

bootstrap:
	@bash scripts/bootstrap.sh

# The whole suite: unit tests (no I/O), then integration and fault tests against
# real processes. Exits non-zero on any failure.
test: bootstrap
	.venv/bin/ruff check --quiet .
	@# The oldest-PySpark run (a Spark JVM and a broker of its own, mostly waiting on them) goes
	@# beside the unit tests (pure, CPU only): neither depends on the other's timing.
	@log=$$(mktemp); echo ".venv-spark-oldest/bin/python -m pytest -q $(OLDEST_SPARK_TESTS) (beside the unit tests)"; \
	  .venv-spark-oldest/bin/python -m pytest -q $(OLDEST_SPARK_TESTS) > $$log 2>&1 & oldest=$$!; \
	  echo ".venv/bin/python -m pytest -q tests/unit"; .venv/bin/python -m pytest -q tests/unit; unit=$$?; \
	  wait $$oldest; spark=$$?; echo "--- oldest PySpark:"; cat $$log; rm -f $$log; \
	  test $$unit -eq 0 -a $$spark -eq 0
	@$(MAKE) --no-print-directory integration

# The Spark tests of the listener's parsing and of the sink, on the oldest PySpark
# pyproject.toml claims (.venv-spark-oldest, made by bootstrap).
OLDEST_SPARK_TESTS = tests/integration/test_spark_listener.py tests/integration/test_sink.py \
	tests/integration/test_sink_stream.py tests/integration/test_spark_kafka.py

unit: bootstrap
	.venv/bin/python -m pytest -q tests/unit

# Two workers (pytest-xdist, a module at a time; the
# compute-heavy modules together on one worker: tests/conftest.py): most integration tests wait on a broker's or
# Spark's clocks, not on the CPU. Each worker has its own session broker and SparkSession;
# ports come from one registry of the machine (txnwatch_dev/net.py). The demo (run_alone:
# it takes the whole machine) and then the compatibility check, which reads what every
# process recorded, run after the workers in one process.
INTEGRATION_WORKERS ?= 2

integration: bootstrap
	@rec=$$(mktemp -d); \
	  echo ".venv/bin/python -m pytest -q -n $(INTEGRATION_WORKERS) --dist loadgroup tests/integration"; \
	  TXNWATCH_COMPAT_RECORDS=$$rec .venv/bin/python -m pytest -q -n $(INTEGRATION_WORKERS) --dist loadgroup \
	    --durations=15 tests/integration; status=$$?; \
	  if [ $$status -eq 0 ]; then \
	    echo ".venv/bin/python -m pytest -q -m 'run_alone or run_last' tests/integration (alone, then what all recorded)"; \
	    TXNWATCH_COMPAT_RECORDS=$$rec .venv/bin/python -m pytest -q -m "run_alone or run_last" --durations=3 \
	      tests/integration; status=$$?; fi; \
	  rm -rf $$rec; exit $$status

lint: bootstrap
	.venv/bin/ruff check .

# The configuration's JSON Schema, generated from txnwatch/config/schema.py
# (tests/unit/test_config_env.py fails when the checked-in file is stale).
schema:
	.venv/bin/txnwatch config-schema > schema/txnwatch-config.schema.json

# The exporter image, txnwatch:<version>, built by podman (scripts/build-image.sh, which a
# release reuses). It builds on the Dockerfile's base (the official python image, pinned by
# digest) unless BASE_IMAGE names another: where no registry is reachable, the one bootstrap
# makes from Debian's packages: make image BASE_IMAGE=localhost/txnwatch-base-bookworm
BASE_IMAGE ?=

image:
	BASE_IMAGE=$(BASE_IMAGE) bash scripts/build-image.sh

# What users install, into dist/ (scripts/release.sh): the wheel and the sdist, the chart, the
# image as an OCI archive, a CycloneDX SBOM of the image's Python environment, SHA256SUMS.
# BASE_IMAGE as for `make image`. tests/integration/test_release.py installs or loads each one.
release: bootstrap
	BASE_IMAGE=$(BASE_IMAGE) bash scripts/release.sh

demo: bootstrap
	.venv/bin/python -m txnwatch_dev.demo $(DEMO_ARGS)

clean:
	rm -rf .venv .venv-spark-oldest .venv-flink .venv-kerberos .pytest_cache .demo
