"""promtool against the generated rules and dashboards: Prometheus 3's (built by
scripts/bootstrap-prometheus.sh), and for the alert unit tests Debian's 2.42 as well.

Fails, never skips, when either is missing (`make bootstrap` provides both)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from txnwatch.alerts import generate_alerts
from txnwatch.alerts.config import AlertConfig
from txnwatch.dashboards import dashboard_queries
from txnwatch_dev.observability.alertmanager import DEBIAN_AMTOOL, alertmanager_binary
from txnwatch_dev.observability.prometheus import debian_promtool, promtool_binary

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "deploy" / "prometheus" / "rules.yml"


@pytest.fixture(scope="module")
def promtool() -> str:
    return promtool_binary()


def run(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    return subprocess.run(list(args), cwd=cwd, capture_output=True, text=True, timeout=300)


def test_check_committed_rules(promtool):
    r = run(promtool, "check", "rules", str(RULES))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "SUCCESS" in r.stdout


def test_check_rules_with_selectors_and_overrides(promtool, tmp_path):
    cfg = AlertConfig(cluster_selector='kafka_cluster=~"prod-.*"', client_selector='namespace="apps"',
                      spark_selector='namespace="spark"', exporter_job_selector='job=~"txnwatch|txnwatch-.*"',
                      spark_trigger_intervals={"orders": 300, "payments-eu": 30},
                      extra_labels={"team": "data"})
    rules, manifest = generate_alerts(tmp_path, cfg)
    r = run(promtool, "check", "rules", str(rules))
    assert r.returncode == 0, r.stdout + r.stderr
    # the PrometheusRule's spec is a rule file too
    spec = tmp_path / "spec.yml"
    spec.write_text(yaml.safe_dump(yaml.safe_load(manifest.read_text())["spec"]))
    r = run(promtool, "check", "rules", str(spec))
    assert r.returncode == 0, r.stdout + r.stderr


@pytest.mark.parametrize("which", ["prometheus3", "debian"])
def test_promtool_unit_tests(which):
    """Every alert's cases pass on Prometheus 3's promtool (left-open range selectors) and on
    Debian's 2.42 (left-closed): no case sits on the edge where the two differ."""
    promtool = promtool_binary() if which == "prometheus3" else debian_promtool()
    version = run(promtool, "--version").stdout.split("\n", 1)[0]
    assert version.startswith("promtool, version " + ("3." if which == "prometheus3" else "2.")), version
    files = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "tests" / "alerts").glob("*.yml"))
    assert files
    r = run(promtool, "test", "rules", *files)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.count("SUCCESS") == len(files), r.stdout


def test_the_pinned_tools_are_found_by_their_own_path_whatever_is_first_on_path(tmp_path, monkeypatch):
    """A Prometheus user's promtool 3 (and an amtool of theirs) first on PATH: the harness still
    runs Debian's 2.42 promtool and Debian's Alertmanager, found where their package put them."""
    first = tmp_path / "bin"
    first.mkdir()
    (first / "promtool").symlink_to(promtool_binary())
    (first / "amtool").symlink_to(promtool_binary())
    monkeypatch.setenv("PATH", f"{first}:{os.environ['PATH']}")
    debian_promtool.cache_clear()
    assert shutil.which("promtool") == str(first / "promtool")
    found = debian_promtool()
    assert found == "/usr/bin/promtool"
    assert run(found, "--version").stdout.startswith("promtool, version 2.42.")
    assert alertmanager_binary() == "/usr/bin/prometheus-alertmanager"
    assert alertmanager_binary(DEBIAN_AMTOOL) == "/usr/bin/amtool"


def test_sample_prometheus_config(promtool):
    r = run(promtool, "check", "config", str(ROOT / "deploy" / "prometheus" / "prometheus.yml"))
    assert r.returncode == 0, r.stdout + r.stderr


def test_every_dashboard_query_parses(promtool, tmp_path):
    queries = dashboard_queries()
    rules = [{"record": f"txnwatch_dashboard_query_{i}", "expr": expr} for i, (_, _, expr) in enumerate(queries)]
    path = tmp_path / "queries.yml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboard-queries", "rules": rules}]}))
    r = run(promtool, "check", "rules", str(path))
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"SUCCESS: {len(queries)} rules found" in r.stdout


def test_rules_from_a_config_file_pass_promtool(promtool, tmp_path):
    """`txnwatch alerts --config FILE` and `txnwatch dashboards --config FILE` read one YAML
    file (AlertConfig's fields): the rules it makes pass promtool and carry its settings."""
    import json
    import sys

    cfg = tmp_path / "mixin.yaml"
    cfg.write_text("abort_ratio: 0.25\nhanging_for: 7m\ncluster_label: kafka\ncluster_selector: 'kafka=~\"prod-.*\"'\n"
                   "runbook_base_url: https://wiki.example/runbooks\ndashboard_base_url: https://grafana.example\n"
                   "extra_labels: {team: data}\n")
    r = run(sys.executable, "-m", "txnwatch.cli", "alerts", "--out", str(tmp_path / "rules"), "--config", str(cfg))
    assert r.returncode == 0, r.stderr
    r = run(promtool, "check", "rules", str(tmp_path / "rules" / "rules.yml"))
    assert r.returncode == 0, r.stdout + r.stderr
    rules = {x["alert"]: x for g in yaml.safe_load((tmp_path / "rules" / "rules.yml").read_text())["groups"]
             for x in g["rules"] if "alert" in x}
    hanging = rules["KafkaTransactionHanging"]
    assert hanging["for"] == "7m" and hanging["labels"]["team"] == "data" and 'kafka=~"prod-.*"' in hanging["expr"]
    assert "by (kafka, topic, partition)" in hanging["expr"] and "$labels.kafka " in hanging["annotations"]["summary"]
    assert hanging["annotations"]["runbook_url"] == "https://wiki.example/runbooks/KafkaTransactionHanging.md"
    assert "> 0.25" in rules["KafkaTransactionAbortRatioHigh"]["expr"]
    r = run(sys.executable, "-m", "txnwatch.cli", "dashboards", "--out", str(tmp_path / "grafana"), "--config", str(cfg))
    assert r.returncode == 0, r.stderr
    overview = json.loads((tmp_path / "grafana" / "dashboards" / "overview.json").read_text())
    assert "25%" in json.dumps(overview)     # the abort-ratio panel's threshold text follows the file
    cluster_var = next(v for v in overview["templating"]["list"] if v["name"] == "cluster")
    assert 'kafka=~\\"$cluster\\"' in json.dumps(overview) and cluster_var["query"]["query"].endswith(", kafka)")
    bad = tmp_path / "bad.yaml"
    bad.write_text("abort_ration: 0.2\n")
    r = run(sys.executable, "-m", "txnwatch.cli", "alerts", "--out", str(tmp_path / "x"), "--config", str(bad))
    assert r.returncode == 2 and "abort_ration" in r.stderr and str(bad) in r.stderr, r.stderr


def test_routing_labels_and_a_cluster_label_reach_the_alerts(promtool, tmp_path):
    """routing_labels: a target label (namespace) kept by every aggregation and join, so
    the alert carries it for Alertmanager's routes; cluster_label: rules generated for an
    exporter whose Kafka cluster label is `kafka` (beside the target's own `cluster`).
    promtool evaluates the generated rules."""
    rules, _ = generate_alerts(tmp_path, AlertConfig(routing_labels=("namespace",), cluster_label="kafka"))

    def annotations(description: str) -> dict:
        return {"summary": "A Kafka transaction is hanging on cluster c1", "description": description,
                "runbook": "docs/runbooks/KafkaTransactionHanging.md"}
    r = run(promtool, "check", "rules", str(rules))
    assert r.returncode == 0, r.stdout + r.stderr
    case = {"rule_files": [str(rules)], "evaluation_interval": "1m", "tests": [{
        "interval": "1m",
        "input_series": [
            {"series": 'kafka_transaction_hanging{job="txnwatch",kafka="c1",cluster="k8s",topic="t",partition="0",'
                       'namespace="payments"}',
             "values": "1 1 1 1 1"},
            {"series": 'kafka_partition_lso_stalled_seconds{job="txnwatch",kafka="c1",cluster="k8s",topic="u",'
                       'partition="0",namespace="orders"}',
             "values": "700 760 820 880 940"},
            {"series": 'kafka_partition_high_watermark{job="txnwatch",kafka="c1",cluster="k8s",topic="u",partition="0",'
                       'namespace="orders"}',
             "values": "0+10x4"}],
        "alert_rule_test": [{"eval_time": "4m", "alertname": "KafkaTransactionHanging", "exp_alerts": [
            {"exp_labels": {"severity": "critical", "kafka": "c1", "topic": "t", "partition": "0",
                            "namespace": "payments", "signal": "hanging"},
             "exp_annotations": annotations(
                 "1 hanging transaction(s) on t-0 (open past transaction.max.timeout.ms + 5 min with no live "
                 "coordinator state, or, without KIP-664, a last stable offset stalled past the hanging "
                 "threshold): read_committed consumers cannot read past it.")},
            {"exp_labels": {"severity": "critical", "kafka": "c1", "topic": "u", "partition": "0",
                            "namespace": "orders", "signal": "lso_stalled"},
             "exp_annotations": annotations(
                 "The last stable offset of u-0 has not moved for 15m 40s while its high watermark keeps "
                 "growing: read_committed consumers cannot read past an open transaction.")}]}]}]}
    path = tmp_path / "routing_test.yml"
    path.write_text(yaml.safe_dump(case))
    r = run(promtool, "test", "rules", str(path), cwd=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr


def test_alertmanager_config_passes_amtool():
    """The shipped Alertmanager configuration (routes and inhibitions) as Alertmanager reads it.
    Fails, never skips, when amtool is missing (bootstrap installs prometheus-alertmanager)."""
    amtool = alertmanager_binary(DEBIAN_AMTOOL)
    r = run(amtool, "check-config", str(ROOT / "deploy" / "alertmanager" / "alertmanager.yml"))
    assert r.returncode == 0 and "SUCCESS" in r.stdout and "3 inhibit rules" in r.stdout, r.stdout + r.stderr
