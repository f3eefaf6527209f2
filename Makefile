.PHONY: bootstrap test unit integration demo lint generate clean

bootstrap:
	@bash scripts/bootstrap.sh

# The whole suite: unit tests (no I/O), then integration and fault tests against
# real processes. Exits non-zero on any failure.
test: bootstrap
	.venv/bin/ruff check --quiet .
	.venv/bin/python -m pytest -q tests/unit
	.venv/bin/python -m pytest -q --durations=15 tests/integration
	.venv-spark-oldest/bin/python -m pytest -q $(OLDEST_SPARK_TESTS)

# The Spark tests of the listener's parsing and of the sink, on the oldest PySpark
# pyproject.toml claims (.venv-spark-oldest, made by bootstrap).
OLDEST_SPARK_TESTS = tests/integration/test_spark_listener.py tests/integration/test_sink.py \
	tests/integration/test_spark_kafka.py

unit: bootstrap
	.venv/bin/python -m pytest -q tests/unit

integration: bootstrap
	.venv/bin/python -m pytest -q --durations=15 tests/integration

lint: bootstrap
	.venv/bin/ruff check .

demo: bootstrap
	.venv/bin/python -m txnwatch_dev.demo $(DEMO_ARGS)

clean:
	rm -rf .venv .venv-spark-oldest .venv-flink .pytest_cache .demo
