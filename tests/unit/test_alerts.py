"""Generated Prometheus rules: structure, names, links, runbooks, config, and drift of deploy/."""

from __future__ import annotations

import filecmp
import importlib.util
import re
from pathlib import Path

import pytest
import yaml

from txnwatch.alerts import generate_alerts
from txnwatch.alerts.config import AlertConfig
from txnwatch.alerts.rules import alerts, prometheus_rule, rule_groups
from txnwatch.dashboards import dashboard_json
from txnwatch.dashboards import ids as dash_ids
from txnwatch.dashboards.names import metric_names, unknown_names
from txnwatch.dashboards.queries import iter_panels

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"

REQUIRED = {
    "KafkaTransactionHanging", "KafkaTransactionTimeoutHeadroomLow", "KafkaTransactionAbortRatioHigh",
    "KafkaTransactionFencingPersistent", "KafkaTransactionCommitLatencyHigh",
    "KafkaTransactionalIdNearExpiration", "KafkaReadCommittedConsumerBlocked",
    "KafkaTransactionStateLogBelowMinIsr", "KafkaProducerTransactionTimeoutAboveBrokerCap",
    "SparkStreamingQueryStalled", "SparkStreamingQueryFallingBehind", "SparkStreamingQueryFailed",
    "TxnwatchExporterDown", "TxnwatchSourceFailing",
}
DURATION = re.compile(r"^\d+[smhd]$")


def all_rules(cfg: AlertConfig | None = None) -> list[dict]:
    return [r for g in rule_groups(cfg) for r in g["rules"]]


def alert_rules(cfg: AlertConfig | None = None) -> list[dict]:
    return [r for r in all_rules(cfg) if "alert" in r]


def recorded_names(cfg: AlertConfig | None = None) -> set[str]:
    return {r["record"] for r in all_rules(cfg) if "record" in r}


def test_required_alerts_exist_once():
    names = [r["alert"] for r in alert_rules()]
    assert len(names) == len(set(names))
    assert REQUIRED <= set(names), REQUIRED - set(names)


@pytest.mark.parametrize("rule", alert_rules(), ids=lambda r: r["alert"])
def test_alert_has_severity_for_and_annotations(rule):
    assert rule["labels"]["severity"] in {"critical", "warning", "info"}
    assert DURATION.match(rule["for"]), rule["for"]
    ann = rule["annotations"]
    assert set(ann) >= {"summary", "description", "runbook"}
    # no link by default: a base URL nobody set would be a link that does not resolve
    assert not {"runbook_url", "dashboard_url"} & set(ann)
    if rule["alert"] != "TxnwatchExporterDown":   # its value is just up (0) or absent()'s 1
        assert "$value" in ann["description"], "the description must quote the value"


@pytest.mark.parametrize("rule", alert_rules(), ids=lambda r: r["alert"])
def test_alert_has_runbook(rule):
    assert rule["annotations"]["runbook"] == f"docs/runbooks/{rule['alert']}.md"
    page = ROOT / rule["annotations"]["runbook"]
    assert page.is_file(), page
    text = page.read_text()
    assert text.startswith(f"# {rule['alert']}")
    assert "txnwatch check" in text
    for section in ("## What it means", "## Confirm", "## What to do"):
        assert section in text, (page, section)


LINKED = AlertConfig(dashboard_base_url="https://grafana.example/", runbook_base_url="https://wiki.example/rb")


@pytest.mark.parametrize("rule", alert_rules(LINKED), ids=lambda r: r["alert"])
def test_dashboard_url_points_at_an_existing_panel(rule):
    url = rule["annotations"]["dashboard_url"]
    m = re.match(r"^https://grafana.example/d/(?P<uid>[\w-]+)/(?P<slug>[\w-]+)\?viewPanel=(?P<id>\d+)", url)
    assert m, url
    dash = {d.uid: d for d in dash_ids.DASHBOARDS}[m["uid"]]
    panels = {p["id"]: p for p in iter_panels(dashboard_json(dash))}
    assert int(m["id"]) in panels, (rule["alert"], m["id"])
    # the panel shows at least one series the alert's expression reads
    panel_names = set().union(*(metric_names(t["expr"]) for t in panels[int(m["id"])]["targets"]))
    alert_names = metric_names(rule["expr"])
    recorded = {r["record"]: r["expr"] for r in all_rules() if "record" in r}
    for name in list(alert_names):
        if name in recorded:
            alert_names |= metric_names(recorded[name])
    base = {re.sub(r"_(bucket|sum|count)$", "", n) for n in panel_names}
    alert_base = {re.sub(r"_(bucket|sum|count)$", "", n) for n in alert_names}
    assert base & alert_base, (rule["alert"], panel_names, alert_names)


@pytest.mark.parametrize("rule", all_rules(), ids=lambda r: r.get("alert") or r["record"])
def test_exprs_use_catalogue_series_only(rule):
    assert not unknown_names(rule["expr"], allowed=recorded_names()), rule["expr"]


def test_recording_rules_cover_abort_ratio_fencing_and_latency_quantiles():
    rec = recorded_names()
    assert "cluster_app:kafka_transactions_abort_ratio:rate5m" in rec
    assert "app:kafka_producer_transactions_abort_ratio:rate5m" in rec
    assert "cluster_app_reason:kafka_transaction_fencing_events:rate15m" in rec
    assert "app:kafka_producer_transaction_fencing_errors:rate15m" in rec
    quantiles = {r["labels"]["quantile"] for r in all_rules() if "record" in r and "quantile" in r.get("labels", {})}
    assert quantiles == {"0.5", "0.95", "0.99"}


def test_recording_rules_come_before_the_alerts_using_them():
    for group in rule_groups():
        seen: set[str] = set()
        for r in group["rules"]:
            if "record" in r:
                seen.add(r["record"])
            else:
                used = metric_names(r["expr"]) & recorded_names()
                assert used <= seen, (group["name"], r["alert"], used - seen)


def test_job_and_cluster_selectors_reach_every_kafka_and_self_series():
    cfg = AlertConfig(cluster_selector='kafka_cluster=~"prod-.*"', spark_selector='namespace="spark"',
                      client_selector='namespace="apps"', exporter_job_selector='job="tw"')
    for r in all_rules(cfg):
        expr = r["expr"]
        for m in re.finditer(r"(?<![\w:])(kafka_(?!producer_)\w+|txnwatch_\w+)(\{[^}]*\})?(?!\w)", expr):
            if m.group(1) in recorded_names(cfg) or m.group(1) == cfg.cluster_label:
                continue
            # every series the exporter serves: its job, then the clusters (kafka_exporter's
            # series of similar names never enter)
            assert m.group(2) and 'kafka_cluster=~"prod-.*"' in m.group(2), (r.get("alert") or r["record"], m.group(0))
            assert 'job="tw"' in m.group(2), (r.get("alert") or r["record"], m.group(0))
        for m in re.finditer(r"(?<![\w:])(kafka_producer_\w+)(\{[^}]*\})?", expr):
            assert m.group(2) and 'namespace="apps"' in m.group(2), m.group(0)
        for m in re.finditer(r"\b(spark_streaming_\w+)(\{[^}]*\})?", expr):
            if m.group(1) == "spark_streaming_source_blocked_seconds":     # the exporter's own
                assert 'job="tw"' in m.group(2) and 'kafka_cluster=~"prod-.*"' in m.group(2), m.group(0)
                continue
            assert m.group(2) and 'namespace="spark"' in m.group(2), m.group(0)
        if r.get("alert") == "TxnwatchExporterDown":
            assert 'up{job="tw"}' in expr


def test_config_changes_thresholds_links_and_labels():
    cfg = AlertConfig(abort_ratio=0.25, dashboard_base_url="https://grafana.example/",
                      runbook_base_url="https://wiki.example/runbooks", extra_labels={"team": "data"},
                      spark_trigger_intervals={"orders": 300}, hanging_for="7m")
    rules = {r["alert"]: r for r in alert_rules(cfg)}
    assert "> 0.25" in rules["KafkaTransactionAbortRatioHigh"]["expr"]
    assert rules["KafkaTransactionHanging"]["for"] == "7m"
    assert all(r["labels"]["team"] == "data" for r in rules.values())
    assert rules["TxnwatchSourceFailing"]["annotations"]["dashboard_url"].startswith(
        "https://grafana.example/d/txnwatch-exporter/")
    assert rules["TxnwatchSourceFailing"]["annotations"]["runbook_url"] == \
        "https://wiki.example/runbooks/TxnwatchSourceFailing.md"
    behind = rules["SparkStreamingQueryFallingBehind"]["expr"]
    assert 'query="orders"' in behind and '"trigger_interval_seconds", "300"' in behind
    assert 'query!="orders"' in behind and '"trigger_interval_seconds", "60"' in behind


def test_bad_quantile_is_rejected():
    with pytest.raises(ValueError):
        AlertConfig(commit_latency_quantile="0.9")


def test_prometheus_rule_manifest_has_the_same_groups(tmp_path):
    paths = generate_alerts(tmp_path)
    assert [p.name for p in paths] == ["rules.yml", "prometheusrule.yaml"]
    rules = yaml.safe_load(paths[0].read_text())
    manifest = yaml.safe_load(paths[1].read_text())
    assert manifest["apiVersion"] == "monitoring.coreos.com/v1"
    assert manifest["kind"] == "PrometheusRule"
    assert manifest["metadata"]["name"] == "txnwatch"
    assert manifest["spec"]["groups"] == rules["groups"] == rule_groups()
    assert prometheus_rule(AlertConfig(prometheus_rule_namespace="monitoring"))["metadata"]["namespace"] == \
        "monitoring"


def test_every_alert_has_a_promtool_test():
    tests_text = "\n".join(p.read_text() for p in (ROOT / "tests" / "alerts").glob("*.yml"))
    for a in alerts():
        assert f"alertname: {a.name}" in tests_text, a.name
        assert re.search(rf"alertname: {a.name}\n\s+exp_alerts:\n\s+- exp_labels", tests_text), \
            f"{a.name}: no firing expectation"


def _load_regenerate():
    spec = importlib.util.spec_from_file_location("regenerate", ROOT / "scripts" / "regenerate.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_committed_deploy_files_match_the_generators(tmp_path):
    """Fails on drift: run `python scripts/regenerate.py` and commit deploy/ and the chart's files/."""
    deploy, chart_files = tmp_path / "deploy", tmp_path / "chart-files"
    written = _load_regenerate().regenerate(deploy, chart_files)
    assert written
    drift = []
    committed_chart_files = ROOT / "charts" / "txnwatch" / "files"
    for path in written:
        base, committed_base = (deploy, DEPLOY) if path.is_relative_to(deploy) else (chart_files, committed_chart_files)
        rel = path.relative_to(base)
        committed = committed_base / rel
        if not committed.is_file() or not filecmp.cmp(path, committed, shallow=False):
            drift.append(str(committed.relative_to(ROOT)))
    stale_chart = [str(p.relative_to(ROOT)) for p in committed_chart_files.rglob("*")
                   if p.is_file() and chart_files / p.relative_to(committed_chart_files) not in written]
    assert not stale_chart, f"files in the chart's files/ no generator writes: {stale_chart}"
    generated = {p.relative_to(deploy) for p in written if p.is_relative_to(deploy)}
    stale = [str(p.relative_to(DEPLOY)) for p in DEPLOY.rglob("*")
             if p.is_file() and p.relative_to(DEPLOY) not in generated
             and p.relative_to(DEPLOY).parts[0] in ("grafana", "prometheus", "alertmanager")]
    assert not drift, f"deploy/ is out of date, run scripts/regenerate.py: {drift}"
    assert not stale, f"files in deploy/ no generator writes: {stale}"


def test_config_from_mapping():
    cfg = AlertConfig.from_mapping({"cluster_selector": 'kafka_cluster="prod"', "abort_ratio": 0.2,
                                    "headroom_low_seconds": 4.5, "hanging_for": "5m",
                                    "spark_trigger_intervals": {"orders": 120}})
    assert cfg.abort_ratio == 0.2 and cfg.headroom_low_seconds == 4.5 and cfg.hanging_for == "5m"
    assert AlertConfig.from_mapping(None) == AlertConfig()
    with pytest.raises(ValueError, match="abort_ration"):
        AlertConfig.from_mapping({"abort_ration": 0.2})
    with pytest.raises(ValueError, match="abort_ratio"):
        AlertConfig.from_mapping({"abort_ratio": "high"})
    with pytest.raises(ValueError, match="hanging_for"):
        AlertConfig.from_mapping({"hanging_for": "five minutes"})
    with pytest.raises(ValueError, match="spark_trigger_intervals"):
        AlertConfig.from_mapping({"spark_trigger_intervals": [1, 2]})


def test_every_setting_is_documented():
    import dataclasses

    text = (ROOT / "docs" / "alerts.md").read_text()
    missing = [f.name for f in dataclasses.fields(AlertConfig) if f"| `{f.name}` |" not in text]
    assert not missing, f"docs/alerts.md lacks {missing}"


def test_routing_labels_from_a_file_and_their_check():
    cfg = AlertConfig.from_mapping({"routing_labels": ["namespace", "team"]})
    assert cfg.routing_labels == ("namespace", "team")
    expr = {r["alert"]: r for r in alert_rules(cfg)}["KafkaTransactionAbortRatioHigh"]["expr"]
    assert "by (kafka_cluster, app, namespace, team)" in expr or "on (kafka_cluster, app, namespace, team)" in expr, expr
    with pytest.raises(ValueError, match="routing_labels"):
        AlertConfig.from_mapping({"routing_labels": "namespace"})
    with pytest.raises(ValueError, match="routing_labels"):
        AlertConfig(routing_labels=("name-space",))
