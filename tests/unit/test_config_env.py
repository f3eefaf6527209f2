"""Every configuration key from the environment (TXNWATCH_A__B__0__C), and the JSON Schema
generated from the one declaration (txnwatch/config/schema.py)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

from txnwatch.config import ConfigError, load_config
from txnwatch.config.schema import NONE, ROOT, SCHEMA_FILE, json_schema, leaves, render

ROOT_DIR = Path(__file__).resolve().parents[2]
BASE = {"TXNWATCH_CLUSTERS__0__NAME": "base", "TXNWATCH_CLUSTERS__0__BOOTSTRAP_SERVERS": "base:9092"}


def _patterns(f):
    return [p.pattern for p in f]


def _rule(cfg):
    return cfg.clusters[0].app_rules[0]


# Where each leaf of the declaration lands in the Config. A leaf missing here fails
# test_every_leaf_has_an_accessor: a new key needs its line (and, to pass, parser support).
ACCESSORS = {
    "clusters[].name": lambda c: c.clusters[0].name,
    "clusters[].bootstrap_servers": lambda c: c.clusters[0].bootstrap_servers,
    "clusters[].poll_interval_seconds": lambda c: c.clusters[0].poll_interval_seconds,
    "clusters[].poll_duty_cycle": lambda c: c.clusters[0].poll_duty_cycle,
    "clusters[].poll_schedule": lambda c: c.clusters[0].poll_schedule,
    "clusters[].poll_idle_interval_seconds": lambda c: c.clusters[0].poll_idle_interval_seconds,
    "clusters[].poll_timeout_seconds": lambda c: c.clusters[0].poll_timeout_seconds,
    "clusters[].open_transaction_min_age_seconds": lambda c: c.clusters[0].open_transaction_min_age_seconds,
    "clusters[].client": lambda c: dict(c.clusters[0].client),
    "clusters[].topics.include": lambda c: _patterns(c.clusters[0].topics.include),
    "clusters[].topics.exclude": lambda c: _patterns(c.clusters[0].topics.exclude),
    "clusters[].groups.include": lambda c: _patterns(c.clusters[0].groups.include),
    "clusters[].groups.exclude": lambda c: _patterns(c.clusters[0].groups.exclude),
    "clusters[].transactional_ids.include": lambda c: _patterns(c.clusters[0].transactional_ids.include),
    "clusters[].transactional_ids.exclude": lambda c: _patterns(c.clusters[0].transactional_ids.exclude),
    "clusters[].app_rules[].match": lambda c: _rule(c).pattern.pattern,
    "clusters[].app_rules[].app": lambda c: _rule(c).app,
    "clusters[].app_rules[].scheme": lambda c: _rule(c).name,
    "clusters[].max_transactional_id_series": lambda c: c.clusters[0].max_transactional_id_series,
    "clusters[].granularity": lambda c: c.clusters[0].granularity,
    "clusters[].series_apps": lambda c: list(c.clusters[0].series_apps),
    "clusters[].series_linger_seconds": lambda c: c.clusters[0].series_linger_seconds,
    "clusters[].series_group_still_seconds":
        lambda c: c.clusters[0].series_group_still_seconds,
    "clusters[].transaction_log_tap": lambda c: c.clusters[0].transaction_log_tap,
    "clusters[].hanging_threshold_seconds": lambda c: c.clusters[0].hanging_threshold_seconds,
    "clusters[].two_phase_commit_max_age_seconds": lambda c: c.clusters[0].two_phase_commit_max_age_seconds,
    "clusters[].default_transaction_max_timeout_ms": lambda c: c.clusters[0].default_transaction_max_timeout_ms,
    "clusters[].default_transactional_id_expiration_ms":
        lambda c: c.clusters[0].default_transactional_id_expiration_ms,
    "clusters[].describe_configs_every": lambda c: c.clusters[0].describe_configs_every,
    "clusters[].canary.enabled": lambda c: c.clusters[0].canary.enabled,
    "clusters[].canary.interval_seconds": lambda c: c.clusters[0].canary.interval_seconds,
    "clusters[].canary.abort_every": lambda c: c.clusters[0].canary.abort_every,
    "clusters[].canary.topic": lambda c: c.clusters[0].canary.topic,
    "clusters[].canary.create_topic": lambda c: c.clusters[0].canary.create_topic,
    "clusters[].canary.replication_factor": lambda c: c.clusters[0].canary.replication_factor,
    "clusters[].canary.visibility_timeout_seconds": lambda c: c.clusters[0].canary.visibility_timeout_seconds,
    "clusters[].canary.instance": lambda c: c.clusters[0].canary.instance,
    "http.host": lambda c: c.http.host,
    "http.port": lambda c: c.http.port,
    "http.listen_addresses": lambda c: list(c.http.listen_addresses),
    "http.telemetry_path": lambda c: c.http.telemetry_path,
    "http.threads": lambda c: c.http.threads,
    "http.ingest_token": lambda c: c.http.ingest_token,
    "http.ingest_max_bytes": lambda c: c.http.ingest_max_bytes,
    "http.spark_query_ttl_seconds": lambda c: c.http.spark_query_ttl_seconds,
    "http.worker_processes": lambda c: c.http.worker_processes,
    "http.auth.bearer_token": lambda c: c.http.auth_bearer_token,
    "http.web_config_file": lambda c: c.http.web_config_file,
    "log_level": lambda c: c.log_level,
    "log_format": lambda c: c.log_format,
    "cluster_label": lambda c: c.cluster_label,
}
# Keys the parser accepts only together with another.
COMPANIONS = {
    "clusters[].app_rules[].match": ["clusters[].app_rules[].app"],
    "clusters[].app_rules[].app": ["clusters[].app_rules[].match"],
    "clusters[].app_rules[].scheme": ["clusters[].app_rules[].match", "clusters[].app_rules[].app"],
}
LEAVES = dict(leaves())


def env_var(path: str) -> str:
    """The documented rule, written out independently of txnwatch.config: upper-cased keys,
    `__` between levels, list items by index."""
    return "TXNWATCH_" + "__".join(seg.replace("[]", "__0").upper() for seg in path.split("."))


def env_text(value) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    return json.dumps(value) if isinstance(value, list | dict) else str(value)


def env_for(path: str, value) -> dict[str, str]:
    if LEAVES[path].values is not None:      # client: one variable per librdkafka property
        return {f"{env_var(path)}__{prop.replace('.', '_').upper()}": env_text(v) for prop, v in value.items()}
    return {env_var(path): env_text(value)}


@pytest.fixture
def tls_files(tmp_path):
    """Files that must exist: the web config (basic auth only: no certificate to make)."""
    web = tmp_path / "web-config.yml"
    web.write_text("basic_auth_users:\n  prometheus: $2y$10$" + "a" * 53 + "\n")
    return {"http.web_config_file": str(web)}


def test_every_leaf_has_an_accessor_and_a_non_default_example():
    assert set(LEAVES) == set(ACCESSORS), "add the new key to ACCESSORS (and to the parser)"
    for path, key in LEAVES.items():
        assert key.example is not NONE and key.example != key.default, path


@pytest.mark.parametrize("path", sorted(LEAVES))
def test_every_leaf_can_be_set_from_the_environment_alone(path, tls_files):
    example = {p: tls_files.get(p, LEAVES[p].example) for p in [path, *COMPANIONS.get(path, [])]}
    env = dict(BASE)
    for p, value in example.items():
        env.update(env_for(p, value))
    cfg = load_config(flags={}, env=env)
    assert ACCESSORS[path](cfg) == example[path], (path, env)


@pytest.mark.parametrize("path", sorted(p for p, k in LEAVES.items() if k.default is not NONE))
def test_every_declared_default_is_the_parsers(path):
    cfg = load_config(flags={}, env={**BASE, "TXNWATCH_CLUSTERS__0__CANARY": "{}"})
    assert ACCESSORS[path](cfg) == LEAVES[path].default, path


def test_two_clusters_entirely_from_the_environment():
    """The example of docs/configuration.md."""
    env = {
        "TXNWATCH_CLUSTERS__0__NAME": "prod", "TXNWATCH_CLUSTERS__0__BOOTSTRAP_SERVERS": "kafka-1:9092,kafka-2:9092",
        "TXNWATCH_CLUSTERS__0__CLIENT__SECURITY_PROTOCOL": "SASL_SSL",
        "TXNWATCH_CLUSTERS__0__CLIENT__SASL_MECHANISM": "SCRAM-SHA-512",
        "TXNWATCH_CLUSTERS__0__CLIENT__SASL_USERNAME": "txnwatch",
        "TXNWATCH_CLUSTERS__0__CLIENT__SASL_PASSWORD": "s3cr3t",
        "TXNWATCH_CLUSTERS__0__TOPICS__INCLUDE": '["orders\\\\..*", "payments"]',
        "TXNWATCH_CLUSTERS__1__NAME": "staging", "TXNWATCH_CLUSTERS__1__BOOTSTRAP_SERVERS": '["stg-1:9092"]',
        "TXNWATCH_CLUSTERS__1__CANARY__INTERVAL_SECONDS": "30",
        "TXNWATCH_CLUSTERS__1__APP_RULES": '[{"match": "^billing-(\\\\w+)-", "app": "billing-\\\\1"}]',
        "TXNWATCH_HTTP__PORT": "9000", "TXNWATCH_LOG_FORMAT": "json", "TXNWATCH_CLUSTER_LABEL": "kafka",
    }
    cfg = load_config(flags={}, env=env)
    prod, staging = cfg.clusters
    assert (prod.name, prod.bootstrap_servers, staging.name, staging.bootstrap_servers) == \
        ("prod", "kafka-1:9092,kafka-2:9092", "staging", "stg-1:9092")
    assert prod.client_properties()["sasl.password"] == "s3cr3t" and prod.redacted_client()["sasl.password"] == "***"
    assert prod.topics("orders.eu") and not prod.topics("ordersX") and prod.topics("payments")
    assert staging.canary.enabled and staging.canary.interval_seconds == 30 and not prod.canary.enabled
    assert staging.app_rules[0].apply("billing-eu-7") == "billing-eu"
    assert (cfg.http.port, cfg.log_format, cfg.cluster_label, cfg.source) == (9000, "json", "kafka", "flags/environment")


@pytest.fixture
def two_cluster_file(tmp_path):
    path = tmp_path / "txnwatch.yaml"
    path.write_text("""
clusters:
  - name: a
    bootstrap_servers: a:1
    poll_interval_seconds: 30
    topics: {include: ["orders.*"]}
    canary: true
  - {name: b, bootstrap_servers: "b:1", poll_timeout_seconds: 7}
http: {port: 9999, threads: 2}
""")
    return str(path)


def test_the_environment_merges_into_the_files_clusters_key_by_key(two_cluster_file):
    env = {"TXNWATCH_CLUSTERS__0__POLL_TIMEOUT_SECONDS": "3", "TXNWATCH_CLUSTERS__0__CANARY__INTERVAL_SECONDS": "5",
           "TXNWATCH_HTTP__THREADS": "4"}
    cfg = load_config({"config": two_cluster_file}, env=env)
    a, b = cfg.clusters
    assert (a.name, a.bootstrap_servers, a.poll_interval_seconds, a.poll_timeout_seconds) == ("a", "a:1", 30, 3)
    assert _patterns(a.topics.include) == ["orders.*"] and _patterns(a.topics.exclude) == ["__.*"]
    assert a.canary.enabled and a.canary.interval_seconds == 5     # `canary: true` plus one setting
    assert (b.name, b.poll_timeout_seconds) == ("b", 7)
    assert (cfg.http.port, cfg.http.threads, cfg.source) == (9999, 4, two_cluster_file)


def test_an_index_one_past_the_end_appends_a_cluster(two_cluster_file):
    env = {"TXNWATCH_CLUSTERS__2__NAME": "c", "TXNWATCH_CLUSTERS__2__BOOTSTRAP_SERVERS": "c:1",
           "TXNWATCH_CLUSTERS__3__NAME": "d", "TXNWATCH_CLUSTERS__3__BOOTSTRAP_SERVERS": "d:1"}
    cfg = load_config({"config": two_cluster_file}, env=env)
    assert [c.name for c in cfg.clusters] == ["a", "b", "c", "d"]


def test_a_whole_list_as_json_then_refined_by_index():
    env = {"TXNWATCH_CLUSTERS": '[{"name": "a", "bootstrap_servers": "a:1"}]',
           "TXNWATCH_CLUSTERS__0__POLL_TIMEOUT_SECONDS": "3", "TXNWATCH_CLUSTERS__0__CANARY": "true"}
    cfg = load_config({}, env=env)
    assert [(c.name, c.poll_timeout_seconds, c.canary.enabled) for c in cfg.clusters] == [("a", 3, True)]


def test_the_flat_names_still_work_and_win_over_the_nested_ones(two_cluster_file):
    env = {"TXNWATCH_PORT": "8000", "TXNWATCH_HTTP__PORT": "8001", "TXNWATCH_CLUSTER_NAME": "b",
           "TXNWATCH_POLL_TIMEOUT": "9", "TXNWATCH_CLUSTERS__1__POLL_TIMEOUT_SECONDS": "8",
           "TXNWATCH_LOG_LEVEL": "debug"}
    cfg = load_config({"config": two_cluster_file}, env=env)
    assert cfg.http.port == 8000 and cfg.clusters[1].poll_timeout_seconds == 9 and cfg.log_level == "DEBUG"
    assert load_config({"config": two_cluster_file, "port": 7000}, env=env).http.port == 7000   # flags first


def test_variables_that_are_not_configuration_keys_are_left_alone():
    env = {**BASE, "TXNWATCH_SHARD": "auto", "TXNWATCH_TOTAL_SHARDS": "2", "TXNWATCH_SPARK_KAFKA_JARS": "/jars",
           "TXNWATCH_COMPAT_RECORDS": "/tmp/x", "TXNWATCH_CLUSTER_LABLE": "typo without __: not a key",
           "TXNWATCH_HTTP__PORT": "", "OTHER__THING": "1"}
    cfg = load_config({}, env=env)
    assert cfg.clusters[0].name == "base" and cfg.http.port == 10129


def test_client_properties_from_the_environment():
    env = {**BASE, "TXNWATCH_CLUSTERS__0__CLIENT__SSL_KEY_PASSWORD": "k3y",
           "TXNWATCH_CLUSTERS__0__CLIENT__LOG_LEVEL": "7",          # one of librdkafka's two names with `_`
           "TXNWATCH_CLUSTERS__0__CLIENT__ENABLE_IDEMPOTENCE": "false"}
    assert dict(load_config({}, env=env).clusters[0].client) == \
        {"ssl.key.password": "k3y", "log_level": "7", "enable.idempotence": "false"}


def test_secrets_from_the_environment_are_secrets(tmp_path):
    pw_file = tmp_path / "pw"
    pw_file.write_text("from-a-file\n")
    env = {**BASE, "TXNWATCH_HTTP__AUTH__BEARER_TOKEN": "scrape-pw",
           "TXNWATCH_HTTP__INGEST_TOKEN": "ingest-tok", "TXNWATCH_CLUSTERS__0__CLIENT__SASL_PASSWORD": "sasl-pw",
           "TXNWATCH_CLUSTERS__0__CLIENT__SSL_KEY_PASSWORD": f"${{file:{pw_file}}}"}
    cfg = load_config({}, env=env)
    assert set(cfg.secret_values()) == {"scrape-pw", "ingest-tok", "sasl-pw", "from-a-file"}
    assert cfg.clusters[0].redacted_client() == {"sasl.password": "***", "ssl.key.password": "***"}
    assert "sasl-pw" not in str(cfg.clusters[0].redacted_client())
    bearer = load_config({}, env={**BASE, "TXNWATCH_HTTP__AUTH__BEARER_TOKEN": "bt"})
    assert bearer.secret_values() == ["bt"]


@pytest.mark.parametrize("env, says", [
    ({"TXNWATCH_CLUSTERS__0__POLL_TIMEOUT_SECONDS": "soon"},
     "clusters[0].poll_timeout_seconds: expected a number, got 'soon' (set by TXNWATCH_CLUSTERS__0__POLL_TIMEOUT_SECONDS)"),
    ({"TXNWATCH_HTTP__PORT": "http"}, "http.port: expected an integer, got 'http' (set by TXNWATCH_HTTP__PORT)"),
    ({"TXNWATCH_CLUSTERS__0__GRANULARITY": "broker"},
     "clusters[0].granularity: must be signal, partition or topic, got 'broker': signal keeps a partition's own "
     "series while it carries a signal, partition keeps every partition's, topic sums each topic's (set by TXNWATCH_CLUSTERS__0__GRANULARITY)"),
    ({"TXNWATCH_CLUSTERS__0__CANARY__ABORT_EVERY": "-1"}, "(set by TXNWATCH_CLUSTERS__0__CANARY__ABORT_EVERY)"),
    ({"TXNWATCH_CLUSTERS__0__TRANSACTION_LOG_TAP": "maybe"}, "(set by TXNWATCH_CLUSTERS__0__TRANSACTION_LOG_TAP)"),
    ({"TXNWATCH_HTTP__PROT": "80"},
     "http.prot: unknown key (allowed: auth, host, ingest_max_bytes, ingest_token, listen_addresses, port, "
     "spark_query_ttl_seconds, telemetry_path, threads, web_config_file, worker_processes) (set by TXNWATCH_HTTP__PROT)"),
    ({"TXNWATCH_CLUSTERS__0__CANARY__INTERVAL": "5"}, "clusters[0].canary.interval: unknown key (allowed: abort_every"),
    ({"TXNWATCH_CLUSTERS__FIRST__NAME": "x"}, "clusters: 'FIRST' is not a list index (the items are numbered from 0) "
                                             "(set by TXNWATCH_CLUSTERS__FIRST__NAME)"),
    ({"TXNWATCH_CLUSTERS__2__NAME": "x"}, "index 2 is past the end: there are 1 item(s), so the next one is 1 "
                                          "(set by TXNWATCH_CLUSTERS__2__NAME)"),
    ({"TXNWATCH_CLUSTERS__1__NAME": "x"}, "clusters[1].bootstrap_servers: is required (set by TXNWATCH_CLUSTERS__1__NAME)"),
    ({"TXNWATCH_CLUSTERS__1__NAME": "base", "TXNWATCH_CLUSTERS__1__BOOTSTRAP_SERVERS": "b:1"},
     "duplicate cluster name 'base' (set by TXNWATCH_CLUSTERS__0__BOOTSTRAP_SERVERS, TXNWATCH_CLUSTERS__0__NAME, "
     "TXNWATCH_CLUSTERS__1__BOOTSTRAP_SERVERS, TXNWATCH_CLUSTERS__1__NAME)"),   # all that set the list
    ({"TXNWATCH_HTTP__PORT__NUMBER": "1"}, "http.port: takes a single value"),
    ({"TXNWATCH_CLUSTERS__0__TOPICS__INCLUDE": '["orders", "["]'},
     "clusters[0].topics.include[1]: bad regular expression '['"),
    ({"TXNWATCH_CLUSTERS__0__APP_RULES": '[{"match": "a"'}, "clusters[0].app_rules: not valid JSON"),
    ({"TXNWATCH_CLUSTERS__0__APP_RULES__0__MATCH": "^a"}, "clusters[0].app_rules[0]: needs both"),
    ({"TXNWATCH_CLUSTERS__0__CLIENT__SASL_PASSWORD": "${env:TXNWATCH_TEST_NOT_SET}"},
     "clusters[0].client.sasl.password: environment variable TXNWATCH_TEST_NOT_SET is not set "
     "(set by TXNWATCH_CLUSTERS__0__CLIENT__SASL_PASSWORD)"),
    ({"TXNWATCH_HTTP__AUTH__USERNAME": "u"}, "http.auth.username: unknown key (allowed: bearer_token)"),
    ({"TXNWATCH_WEB_CONFIG_FILE": "/nope/web.yml"}, "http.web_config_file: web config /nope/web.yml: cannot read it "),
    ({"TXNWATCH_CLUSTER_LABEL": "topic"}, "cluster_label: 'topic' is already a label of txnwatch's series (e.g. "),
    ({"TXNWATCH_CLUSTER_LABEL": "le"}, "'le' is already a label of txnwatch's series (histogram buckets)"),
    ({"TXNWATCH_CLUSTER_LABEL": "__cluster"}, "must be a Prometheus label name"),
    ({"TXNWATCH_CLUSTER_LABEL": "kafka-cluster"}, "must be a Prometheus label name"),
])
def test_a_bad_value_from_the_environment_names_the_variable(env, says):
    with pytest.raises(ConfigError) as ei:
        load_config({}, env={**BASE, **env})
    assert says in str(ei.value)
    assert next(iter(env)) in str(ei.value)


def test_cluster_label_cannot_be_a_label_txnwatch_already_uses():
    from txnwatch.metrics import CATALOG

    taken = {label for s in CATALOG.values() for label in s.labels} - {"cluster"} | {"le", "quantile"}
    for label in sorted(taken):
        with pytest.raises(ConfigError, match="already a label"):
            load_config({}, env={**BASE, "TXNWATCH_CLUSTER_LABEL": label})
    assert load_config({}, env={**BASE, "TXNWATCH_CLUSTER_LABEL": "cluster"}).cluster_label == "cluster"
    assert load_config({}, env=BASE).cluster_label == "kafka_cluster"


# ---------------------------------------------------------------- the JSON Schema

def test_the_checked_in_schema_is_generated_from_the_declaration():
    assert SCHEMA_FILE == ROOT_DIR / "schema" / "txnwatch-config.schema.json"
    assert SCHEMA_FILE.read_text() == render(), \
        "schema/txnwatch-config.schema.json is stale: run `make schema` (or " \
        "`.venv/bin/txnwatch config-schema > schema/txnwatch-config.schema.json`)"


def test_the_schema_rejects_unknown_keys_where_the_parser_does():
    def closed(node: dict, path: str):
        if node.get("properties"):
            assert node.get("additionalProperties") is False, path
            for name, sub in node["properties"].items():
                closed(sub, f"{path}.{name}")
        if isinstance(node.get("items"), dict):
            closed(node["items"], path + "[]")

    schema = json_schema()
    closed(schema, "")
    assert "$id" not in schema and schema["$schema"].endswith("/draft/2020-12/schema")
    assert set(schema["properties"]) == ROOT.names


def _validator():
    """jsonschema_rs (schemathesis's validator, already in .venv), else jsonschema."""
    try:
        import jsonschema_rs
    except ImportError:
        jsonschema = pytest.importorskip("jsonschema")
        jsonschema.Draft202012Validator.check_schema(json_schema())
        v = jsonschema.Draft202012Validator(json_schema())
        return lambda doc: [e.message for e in v.iter_errors(doc)]
    assert jsonschema_rs.meta.is_valid(json_schema())
    v = jsonschema_rs.validator_for(json_schema())
    return lambda doc: [str(e).splitlines()[0] for e in v.iter_errors(doc)]


def example_configs() -> dict[str, dict]:
    """The repository's example configurations: ConfigMaps under deploy/ and ```yaml blocks
    of the docs, wherever they have a `clusters:` key."""
    found = {}
    for path in sorted((ROOT_DIR / "deploy").rglob("*.y*ml")):
        for i, doc in enumerate(yaml.safe_load_all(path.read_text())):
            texts = (doc.get("data") or {}).values() if isinstance(doc, dict) and doc.get("kind") == "ConfigMap" else []
            for text in texts:
                data = yaml.safe_load(text)
                if isinstance(data, dict) and "clusters" in data:
                    found[f"{path.relative_to(ROOT_DIR)}#{i}"] = data
    for path in [ROOT_DIR / "README.md", *sorted((ROOT_DIR / "docs").glob("*.md"))]:
        for i, block in enumerate(re.findall(r"^```yaml\n(.*?)^```", path.read_text(), re.M | re.S)):
            try:
                data = yaml.safe_load(block)
            except yaml.YAMLError:       # a fragment, not a whole file
                continue
            if isinstance(data, dict) and "clusters" in data:
                found[f"{path.relative_to(ROOT_DIR)}#{i}"] = data
    return found


def test_every_example_config_in_the_repository_passes_the_schema():
    errors = _validator()
    examples = example_configs()
    assert len(examples) >= 4, sorted(examples)
    for where, doc in examples.items():
        assert errors(doc) == [], where


def test_the_schema_takes_the_declared_examples_and_rejects_what_the_parser_rejects():
    errors = _validator()
    doc: dict = {}
    for path, key in LEAVES.items():       # one document holding every leaf's example
        node, parts = doc, path.split(".")
        for part in parts[:-1]:
            name = part.removesuffix("[]")
            node = node.setdefault(name, [{}])[0] if part.endswith("[]") else node.setdefault(name, {})
        node[parts[-1]] = key.example
    listen = doc["http"].pop("listen_addresses")    # the listen address's other spelling than host and port
    assert errors(doc) == []
    assert errors({"http": {"listen_addresses": listen}}) == []
    one = {"name": "a", "bootstrap_servers": "a:1"}
    for bad in [{"http": {"prot": 1}}, {"clusters": [{"name": "a"}]}, {"clusters": [{**one, "pol_interval": 1}]},
                {"clusters": [{**one, "poll_duty_cycle": 1.5}]}, {"clusters": [{**one, "granularity": "broker"}]},
                {"clusters": [{**one, "client": {"bootstrap.servers": "x"}}]}, {"http": {"auth": {"username": "u"}}},
                {"http": {"port": 0}}, {"http": {"port": 1, "listen_addresses": [":2"]}},
                {"http": {"telemetry_path": "metrics"}}, {"cluster_label": "__x"}, {"cluster_label": "a-b"}, {"log_format": "xml"}]:
        assert errors(bad), bad
