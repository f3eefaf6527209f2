.PHONY: bootstrap test unit integration demo lint generate clean

bootstrap:
	@bash scripts/bootstrap.sh

# The whole suite: unit tests (no I/O), then integration and fault tests against
# real processes. Exits non-zero on any failure.
test: bootstrap
	.venv/bin/ruff check --quiet .
	.venv/bin/python -m pytest -q tests/unit
	.venv/bin/python -m pytest -q --durations=15 tests/integration

unit: bootstrap
	.venv/bin/python -m pytest -q tests/unit

integration: bootstrap
	.venv/bin/python -m pytest -q --durations=15 tests/integration

lint: bootstrap
	.venv/bin/ruff check .

demo: bootstrap
	.venv/bin/python -m txnwatch.devtools.demo $(DEMO_ARGS)

clean:
	rm -rf .venv .pytest_cache .demo
