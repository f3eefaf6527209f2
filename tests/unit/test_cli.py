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
    assert ("prod: 192.0.2.1:9092 (poller; polls timed to the scrapes, at most one start per 1 s, one per 60 s "
            "unscraped)") in out
    assert "log INFO as logfmt" in out and "shard 1 of 0..1" in out


@pytest.mark.parametrize("argv, env, message", [
    (["serve", "--check-config"], {}, "no cluster configured"),
    (["serve", "--check-config", "--bootstrap-servers", "b:1"], {"TXNWATCH_LOG_FORMAT": "xml"},
     "log_format: must be one of text, json, logfmt, got 'xml'"),
    (["serve", "--check-config", "--bootstrap-servers", "b:1"], {"TXNWATCH_TOTAL_SHARDS": "two"},
     "TXNWATCH_TOTAL_SHARDS: expected a whole number of replicas (1 or more), got 'two'"),
    (["serve", "--check-config", "--bootstrap-servers", "b:1", "--shard", "3", "--total-shards", "2"], {},
     "--shard must be in 0..1"),
    (["serve", "--check-config"], {"TXNWATCH_CLUSTERS__0__NAME": "prod", "TXNWATCH_CLUSTERS__0__BOOTSTRAP_SERVERS": "b:1",
                                   "TXNWATCH_CLUSTERS__0__POLL_TIMEOUT_SECONDS": "soon"},
     "clusters[0].poll_timeout_seconds: expected a number, got 'soon' "
     "(set by TXNWATCH_CLUSTERS__0__POLL_TIMEOUT_SECONDS)"),
    (["serve", "--check-config", "--bootstrap-servers", "b:1"], {"TXNWATCH_HTTP__PROT": "80"},
     "http.prot: unknown key (allowed: auth, host, "),
    (["serve", "--check-config", "--bootstrap-servers", "b:1"], {"TXNWATCH_CLUSTERS__NEXT__NAME": "x"},
     "'NEXT' is not a list index (the items are numbered from 0) (set by TXNWATCH_CLUSTERS__NEXT__NAME)"),
    (["serve", "--check-config", "--bootstrap-servers", "b:1"], {"TXNWATCH_CLUSTER_LABEL": "topic"},
     "cluster_label: 'topic' is already a label of txnwatch's series"),
])
def test_a_bad_configuration_exits_2_naming_the_problem(argv, env, message, capsys, monkeypatch):
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    assert main(argv) == 2
    assert message in capsys.readouterr().err


def test_check_config_from_the_environment_alone_shows_the_cluster_label(capsys, monkeypatch):
    for k, v in {"TXNWATCH_CLUSTERS__0__NAME": "prod", "TXNWATCH_CLUSTERS__0__BOOTSTRAP_SERVERS": "192.0.2.1:9092",
                 "TXNWATCH_CLUSTERS__0__CANARY": "true", "TXNWATCH_CLUSTER_LABEL": "kafka"}.items():
        monkeypatch.setenv(k, v)
    assert main(["serve", "--check-config"]) == 0
    out = capsys.readouterr().out
    assert "prod: 192.0.2.1:9092 (poller, canary; polls timed to the scrapes" in out
    assert "cluster name in label kafka" in out


def test_check_config_says_a_configured_interval_wins(capsys):
    assert main(["serve", "--check-config", "--bootstrap-servers", "192.0.2.1:9092", "--cluster-name", "prod",
                 "--poll-interval", "5"]) == 0
    assert "prod: 192.0.2.1:9092 (poller; poll every 5 s)" in capsys.readouterr().out


def test_config_schema_prints_the_checked_in_schema(capsys):
    from txnwatch.config.schema import SCHEMA_FILE

    assert main(["config-schema"]) == 0
    assert capsys.readouterr().out == SCHEMA_FILE.read_text()


def test_a_bad_shard_variable_does_not_break_version(capsys, monkeypatch):
    monkeypatch.setenv("TXNWATCH_TOTAL_SHARDS", "two")
    with pytest.raises(SystemExit) as ei:
        main(["--version"])
    assert ei.value.code == 0 and capsys.readouterr().out.startswith("txnwatch ")
