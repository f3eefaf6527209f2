import pytest

pytestmark = pytest.mark.integration


@pytest.fixture
def exporter_factory(tmp_path):
    """Start `txnwatch serve` child processes; all are stopped at teardown."""
    from txnwatch_dev.observability.exporter_proc import ExporterProcess

    started = []

    def start(config: dict, **kwargs) -> ExporterProcess:
        e = ExporterProcess(config, log_path=tmp_path / f"exporter-{len(started)}.log", **kwargs).start()
        started.append(e)
        return e

    yield start
    errors = []
    for e in started:     # every exporter is stopped, even when stopping one fails
        try:
            e.stop()
        except Exception as exc:  # noqa: BLE001
            e.kill()
            errors.append(f"{e.url}: {exc!r}")
    assert not errors, f"exporters that did not stop on SIGTERM: {errors}"


