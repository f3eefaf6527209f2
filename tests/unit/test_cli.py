"""The `txnwatch` command's own checks: nothing here contacts Kafka."""

from __future__ import annotations

import pytest

from txnwatch.cli import main


def test_check_config_validates_and_exits_0_without_contacting_kafka(capsys, monkeypatch):
    monkeypatch.setenv("TXNWATCH_LOG_FORMAT", "logfmt")
    # an address nothing listens on: a check that tried to connect would hang or fail
    assert main(["serve", "--check-config", "--bootstrap-servers", "192.0.2.1:9092", "--cluster-name", "prod",
                 "--total-shards", "2", "--shard", "1"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("configuration valid (flags/environment): 1 cluster(s)")
    assert "prod: 192.0.2.1:9092 (poller; poll every 1 s)" in out
    assert "log INFO as logfmt" in out and "shard 1 of 0..1" in out


@pytest.mark.parametrize("argv, env, message", [
    (["serve", "--check-config"], {}, "no cluster configured"),
    (["serve", "--check-config", "--bootstrap-servers", "b:1"], {"TXNWATCH_LOG_FORMAT": "xml"},
     "log_format: must be one of text, json, logfmt, got 'xml'"),
    (["serve", "--check-config", "--bootstrap-servers", "b:1"], {"TXNWATCH_TOTAL_SHARDS": "two"},
     "TXNWATCH_TOTAL_SHARDS: expected a whole number of replicas (1 or more), got 'two'"),
    (["serve", "--check-config", "--bootstrap-servers", "b:1", "--shard", "3", "--total-shards", "2"], {},
     "--shard must be in 0..1"),
])
def test_a_bad_configuration_exits_2_naming_the_problem(argv, env, message, capsys, monkeypatch):
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    assert main(argv) == 2
    assert message in capsys.readouterr().err


def test_a_bad_shard_variable_does_not_break_version(capsys, monkeypatch):
    monkeypatch.setenv("TXNWATCH_TOTAL_SHARDS", "two")
    with pytest.raises(SystemExit) as ei:
        main(["--version"])
    assert ei.value.code == 0 and capsys.readouterr().out.startswith("txnwatch ")
