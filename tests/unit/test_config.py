import subprocess
import sys

import pytest

from txnwatch.config import ConfigError, load_config, parse_config, redacted


def write(tmp_path, text, name="txnwatch.yaml"):
    p = tmp_path / name
    p.write_text(text)
    return str(p)


def test_precedence_flags_over_env_over_file(tmp_path):
    path = write(tmp_path, """
clusters:
  - name: prod
    bootstrap_servers: file:9092
    poll_interval_seconds: 30
http: {port: 9999}
""")
    cfg = load_config({"config": path}, env={})
    assert cfg.clusters[0].bootstrap_servers == "file:9092" and cfg.http.port == 9999
    cfg = load_config({"config": path}, env={"TXNWATCH_BOOTSTRAP_SERVERS": "env:9092", "TXNWATCH_PORT": "8000"})
    assert cfg.clusters[0].bootstrap_servers == "env:9092" and cfg.http.port == 8000
    assert cfg.clusters[0].poll_interval_seconds == 30  # untouched file value survives
    cfg = load_config({"config": path, "bootstrap_servers": "flag:9092", "port": 7000},
                      env={"TXNWATCH_BOOTSTRAP_SERVERS": "env:9092", "TXNWATCH_PORT": "8000"})
    assert cfg.clusters[0].bootstrap_servers == "flag:9092" and cfg.http.port == 7000
    assert [c.name for c in cfg.clusters] == ["prod"]


def test_flags_add_a_named_cluster_to_a_multi_cluster_file(tmp_path):
    path = write(tmp_path, """
clusters:
  - {name: a, bootstrap_servers: "a:1"}
  - {name: b, bootstrap_servers: ["b:1", "b:2"]}
""")
    cfg = load_config({"config": path, "bootstrap_servers": "c:1", "cluster_name": "c"}, env={})
    assert [(c.name, c.bootstrap_servers) for c in cfg.clusters] == [("a", "a:1"), ("b", "b:1,b:2"), ("c", "c:1")]


def test_the_default_poll_interval_follows_the_process_model():
    """1 s (back to back) when a worker process polls; 15 s when polling shares the
    interpreter with serving; a configured value wins either way."""
    def interval(http: dict, cluster: dict | None = None) -> float:
        cfg = parse_config({"http": http, "clusters": [{"name": "a", "bootstrap_servers": "x", **(cluster or {})}]})
        return cfg.clusters[0].poll_interval_seconds

    assert interval({}) == 1.0
    assert interval({"worker_processes": False}) == 15.0
    assert interval({"worker_processes": False}, {"poll_interval_seconds": 2}) == 2.0
    assert interval({}, {"poll_interval_seconds": 30}) == 30.0


def test_canary_is_off_by_default_and_takes_true_or_a_mapping():
    def canary(value=None):
        c = {"name": "a", "bootstrap_servers": "x"}
        if value is not None:
            c["canary"] = value
        return parse_config({"clusters": [c]}).clusters[0].canary

    assert not canary().enabled
    assert canary(True).enabled and canary(True).interval_seconds == 10 and canary(True).abort_every == 10
    c = canary({"interval_seconds": 5, "abort_every": 0, "topic": "ops.canary", "replication_factor": 2})
    assert (c.enabled, c.interval_seconds, c.abort_every, c.topic, c.replication_factor) == (True, 5, 0, "ops.canary", 2)
    assert not canary({"enabled": False}).enabled


def test_defaults():
    cfg = load_config({"bootstrap_servers": "x:1"}, env={})
    c = cfg.clusters[0]
    assert (c.name, c.poll_interval_seconds, c.poll_duty_cycle, c.max_transactional_id_series, c.granularity) == \
        ("default", 1.0, 0.5, 500, "signal")    # a worker process polls back to back
    assert cfg.http.port == 10129
    assert not c.topics("__consumer_offsets") and c.topics("orders")


@pytest.mark.parametrize("text,key", [
    ("clusters: [{name: a, bootstrap_servers: x, pol_interval: 3}]", "clusters[0].pol_interval"),
    ("clusters: [{name: a, bootstrap_servers: x, poll_interval_seconds: abc}]", "clusters[0].poll_interval_seconds"),
    ("clusters: [{name: a, bootstrap_servers: x, poll_interval_seconds: -1}]", "clusters[0].poll_interval_seconds"),
    ("clusters: [{name: a, bootstrap_servers: x, app_rules: [{match: '(', app: x}]}]",
     "clusters[0].app_rules[0].match"),
    ("clusters: [{name: a, bootstrap_servers: x, app_rules: [{match: 'a', app: '\\\\2'}]}]",
     "clusters[0].app_rules[0].app"),
    ("clusters: [{name: a, bootstrap_servers: x, app_rules: [{match: 'a', app: b, scheme: flink}]}]",
     "clusters[0].app_rules[0].scheme"),
    ("clusters: [{name: a, bootstrap_servers: x, topics: {include: ['[']}}]", "clusters[0].topics.include[0]"),
    ("clusters: [{name: a, bootstrap_servers: x, granularity: broker}]", "clusters[0].granularity"),
    ("clusters: [{name: a, bootstrap_servers: x, transaction_log_tap: maybe}]", "clusters[0].transaction_log_tap"),
    ("clusters: [{name: a, bootstrap_servers: x, client: {sasl.password: '${env:NOPE_NOT_SET}'}}]",
     "clusters[0].client.sasl.password"),
    ("clusters: [{name: a, bootstrap_servers: x}, {name: a, bootstrap_servers: y}]", "clusters"),
    ("clusters: [{name: a}]", "clusters[0].bootstrap_servers"),
    ("http: {port: 70000}", "http.port"),
    ("clusters: {a: 1}", "clusters"),
    ("log_level: LOUD", "log_level"),
    ("cluster_label: topic", "cluster_label"),
    ("cluster_label: kafka-cluster", "cluster_label"),
    ("surprise: 1", "surprise"),
    ("clusters: [1", "(yaml)"),
])
def test_bad_config_names_key_and_file(tmp_path, text, key):
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as exc:
        load_config({"config": path}, env={})
    assert exc.value.key == key
    assert path in str(exc.value) and key in str(exc.value)


def test_bad_config_exits_2_from_the_cli(tmp_path):
    path = write(tmp_path, "clusters: [{name: a, bootstrap_servers: x, poll_interval_seconds: soon}]")
    out = subprocess.run([sys.executable, "-m", "txnwatch.cli", "serve", "--config", path],
                         capture_output=True, text=True, timeout=30)
    assert out.returncode == 2
    assert "clusters[0].poll_interval_seconds" in out.stderr and path in out.stderr


def test_no_cluster_is_an_error():
    with pytest.raises(ConfigError) as exc:
        load_config({}, env={})
    assert exc.value.key == "clusters"


def test_secret_references_resolve_and_are_redacted(tmp_path, monkeypatch):
    secret_file = tmp_path / "pw"
    secret_file.write_text("s3cr3t-from-file\n")
    monkeypatch.setenv("KAFKA_PW", "s3cr3t-from-env")
    path = write(tmp_path, f"""
clusters:
  - name: a
    bootstrap_servers: x:1
    client:
      security.protocol: SASL_SSL
      sasl.mechanism: SCRAM-SHA-512
      sasl.username: svc
      sasl.password: ${{env:KAFKA_PW}}
      ssl.key.password: ${{file:{secret_file}}}
""")
    c = load_config({"config": path}, env={}).clusters[0]
    props = c.client_properties()
    assert props["sasl.password"] == "s3cr3t-from-env" and props["ssl.key.password"] == "s3cr3t-from-file"
    shown = c.redacted_client()
    assert shown["sasl.password"] == "***" and shown["ssl.key.password"] == "***" and shown["sasl.username"] == "svc"
    assert "s3cr3t" not in repr(c)  # references, not values, live in the config object
    assert redacted({"sasl.oauthbearer.client.secret": "x"}) == {"sasl.oauthbearer.client.secret": "***"}
    # where a secret is kept (an endpoint, a file) is shown: logs name the token endpoint they failed on
    assert redacted({"sasl.oauthbearer.token.endpoint.url": "https://idp/token", "ssl.keystore.password": "p",
                     "sasl.oauthbearer.token": "t", "ssl.keystore.location": "/k.p12"}) == {
        "sasl.oauthbearer.token.endpoint.url": "https://idp/token", "ssl.keystore.password": "***",
        "sasl.oauthbearer.token": "***", "ssl.keystore.location": "/k.p12"}


CLUSTER_BAD_VALUES = {
    "name": [None, "", 5], "bootstrap_servers": [None, ""], "poll_interval_seconds": ["x", 0, -1, [1]],
    "poll_schedule": ["always", 5, ["scrapes"]], "poll_idle_interval_seconds": ["x", 0, -60],
    "poll_duty_cycle": ["x", 0, -0.5, 1.5], "poll_timeout_seconds": ["x", 0],
    "open_transaction_min_age_seconds": ["x", -1],
    "canary": ["x", 5, {"interval": 10}, {"interval_seconds": 0}, {"abort_every": -1}, {"topic": ""},
               {"replication_factor": 0}, {"enabled": "sometimes"}], "client": ["x", [1], {"a": {"b": 1}}, {"a": None}],
    "topics": ["x", {"include": "["}, {"only": []}], "groups": [5, {"exclude": [")"]}],
    "transactional_ids": [7, {"include": ["("]}, {"pattern": "x"}],
    "app_rules": ["x", [{"match": "a"}], [{"match": "(", "app": "x"}], [5]],
    "max_transactional_id_series": ["many", 0, 1.5], "granularity": ["broker", 3],
    "series_apps": [5, {"orders": 1}, [""], [3]], "series_linger_seconds": ["long", 0],
    "series_group_still_seconds": [-1, "a while"],
    "transaction_log_tap": ["perhaps", 2], "hanging_threshold_seconds": ["x", -5],
    "two_phase_commit_max_age_seconds": ["an hour", 0],
    "default_transaction_max_timeout_ms": ["x", 0], "default_transactional_id_expiration_ms": [-1],
    "describe_configs_every": ["x", 0],
}
HTTP_BAD_VALUES = {"host": [5, ""], "port": [0, 70000, "x"], "threads": [0, "x"], "ingest_token": [5],
                   "ingest_max_bytes": [0, "x"], "spark_query_ttl_seconds": ["x", 0],
                   "auth": ["x", {"username": "u"}, {"token": "t"}, {}], "tls": ["x", {"cert_file": "/nope"}],
                   "web_config_file": [5, "/nope/web.yml"],
                   "worker_processes": ["maybe", 2],
                   "listen_addresses": [5, [], "9000", ["::1:9000"], ["[::1]:0"], ["http://h:1"], [":1", "[::]:1"],
                                        ["h:1", "h:1"], ["0.0.0.0:1", "127.0.0.1:1"]],
                   "telemetry_path": ["metrics", "/", "/healthz", "/api/v1/x", "/a b", 5]}


def test_every_invalid_value_names_its_key():
    from txnwatch.config import parse_config

    checked = 0
    for key, bads in CLUSTER_BAD_VALUES.items():
        for bad in bads:
            data = {"clusters": [{"name": "a", "bootstrap_servers": "x:1", key: bad}]}
            with pytest.raises(ConfigError) as exc:
                parse_config(data, "f.yaml")
            assert exc.value.key.startswith(f"clusters[0].{key}"), (key, bad, str(exc.value))
            assert "f.yaml" in str(exc.value)
            checked += 1
    for key, bads in HTTP_BAD_VALUES.items():
        for bad in bads:
            with pytest.raises(ConfigError) as exc:
                parse_config({"http": {key: bad}}, "f.yaml")
            assert exc.value.key.startswith(f"http.{key}"), (key, bad, str(exc.value))
            checked += 1
    from dataclasses import fields

    from txnwatch.config import ClusterConfig, HttpConfig

    # every documented key has bad values above
    assert set(CLUSTER_BAD_VALUES) == {f.name for f in fields(ClusterConfig)}
    assert set(HTTP_BAD_VALUES) >= {"host", "port", "threads", "ingest_token", "ingest_max_bytes",
                                    "spark_query_ttl_seconds"}
    assert {f.name for f in fields(HttpConfig)} - {"auth_bearer_token", "web", "listen"} <= set(HTTP_BAD_VALUES)
    assert checked > 50


def test_transactional_ids_filter_and_the_pattern_a_broker_gets():
    import re as _re

    from txnwatch.config import parse_config

    cfg = parse_config({"clusters": [{"name": "a", "bootstrap_servers": "x:1",
                                      "transactional_ids": {"include": ["orders-.*", "payments-[0-9]+"],
                                                            "exclude": ["orders-test-.*"]}}]}, "f.yaml")
    ids = cfg.clusters[0].transactional_ids
    assert ids("orders-1") and ids("payments-7") and not ids("orders-test-1") and not ids("billing-1")
    pattern = ids.include_pattern()
    assert pattern == "(?:orders-.*)|(?:payments-[0-9]+)"
    # the broker matches the whole id (KIP-1152), as re.fullmatch does
    assert _re.fullmatch(pattern, "payments-12") and not _re.fullmatch(pattern, "xpayments-12")
    every = parse_config({"clusters": [{"name": "a", "bootstrap_servers": "x:1"}]}, "f.yaml").clusters[0]
    assert every.transactional_ids.everything and every.transactional_ids.include_pattern() is None


@pytest.mark.parametrize("flags, env, says", [
    ({"bootstrap_servers": "b:1"}, {"TXNWATCH_PORT": "abc"}, "http.port: expected an integer, got 'abc' (set by TXNWATCH_PORT)"),
    ({"bootstrap_servers": "b:1", "port": 99999}, {}, "(set by --port)"),
    ({}, {"TXNWATCH_BOOTSTRAP_SERVERS": "b:1", "TXNWATCH_POLL_INTERVAL": "fast"},
     "clusters[0].poll_interval_seconds: expected a number, got 'fast' (set by TXNWATCH_POLL_INTERVAL)"),
    ({"bootstrap_servers": "b:1"}, {"TXNWATCH_LOG_FORMAT": "xml"}, "(set by TXNWATCH_LOG_FORMAT)"),
])
def test_a_bad_value_from_the_environment_or_a_flag_names_where_it_came_from(flags, env, says):
    with pytest.raises(ConfigError) as ei:
        load_config(flags, env=env)
    assert says in str(ei.value)


def test_a_bad_file_is_named_before_the_environment(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("http: {port: 70000}\nclusters: [{name: a, bootstrap_servers: 'x:1'}]\n")
    with pytest.raises(ConfigError) as ei:
        load_config({"config": str(path)}, env={"TXNWATCH_PORT": "80"})
    assert str(ei.value).startswith(f"config error in {path}: http.port") and "set by" not in str(ei.value)


def test_the_poll_schedule_defaults_to_the_scrapes_and_a_configured_interval_wins():
    from txnwatch.config import parse_config

    def cluster(**kw):
        return parse_config({"clusters": [{"name": "a", "bootstrap_servers": "x:1", **kw}]}, "f.yaml").clusters[0]

    c = cluster()
    assert (c.poll_schedule, c.poll_interval_seconds, c.poll_idle_interval_seconds) == ("scrapes", 1.0, 60.0)
    assert cluster(poll_interval_seconds=5).poll_schedule == "interval"
    # both set: timed to the scrapes, at most one poll start per 5 s
    c = cluster(poll_interval_seconds=5, poll_schedule="scrapes", poll_idle_interval_seconds=120)
    assert (c.poll_schedule, c.poll_interval_seconds, c.poll_idle_interval_seconds) == ("scrapes", 5.0, 120.0)
    with pytest.raises(ConfigError, match="must be scrapes or interval, got 'often'"):
        cluster(poll_schedule="often")
