"""Credentials never appear in logs, metrics or the page, even when the connection fails."""

import pytest

from tests.integration.helpers import cluster_config

pytestmark = pytest.mark.integration

SECRET = "hunter2-very-secret-value"


def test_sasl_password_never_leaks(broker, exporter_factory, tmp_path):
    pw_file = tmp_path / "pw"
    pw_file.write_text(SECRET)
    cfg = cluster_config(broker.bootstrap, poll_timeout_seconds=2)
    cfg["clusters"][0]["client"] = {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
                                    "sasl.username": "svc", "sasl.password": f"${{file:{pw_file}}}"}
    cfg["log_level"] = "DEBUG"  # even at DEBUG (kafka-python logs its config there)
    exp = exporter_factory(cfg, env={"TXNWATCH_INGEST_TOKEN": SECRET + "-token"})
    exp.wait_metric(lambda m: (m.get_value("txnwatch_poll_errors_total", source="poller") or 0) >= 2,
                    timeout=60, what="failed polls against a broker without SASL")
    for path in ("/metrics", "/", "/readyz"):
        status, body = exp.get(path)
        assert SECRET not in body, path
    assert SECRET not in exp.log()
