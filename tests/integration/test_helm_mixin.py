"""The chart's alerts, dashboards and Alertmanager example follow its values as the Python
generator follows AlertConfig: config.cluster_label, prometheusRule.routingLabels,
.runbookBaseUrl and .dashboardBaseUrl. For several value sets, what `helm template` renders
equals, parsed and whole, what rule_groups, dashboard_json and alertmanager_config give with
the same settings. promtool then runs every alert unit test of tests/alerts/ on rules rendered
for a cluster label `kcluster`, a routing label `namespace` and a runbook base URL, their series
and expectations rewritten to match, and amtool checks the rendered Alertmanager example.
(The chart's files are generated with sentinels its templates replace: scripts/regenerate.py.)
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.integration.helm_helpers import ROOT, one, render
from txnwatch.alerts.alertmanager import alertmanager_config
from txnwatch.alerts.config import AlertConfig
from txnwatch.alerts.rules import rule_groups
from txnwatch.dashboards import dashboard_json
from txnwatch.dashboards.ids import DASHBOARDS
from txnwatch_dev.observability.prometheus import promtool_binary

pytestmark = [pytest.mark.integration]

RUNBOOKS = "https://wiki.example/txnwatch/runbooks"
SETTINGS = {
    "defaults": {},
    "cluster label kcluster": {"cluster_label": "kcluster"},
    "routing [namespace]": {"routing_labels": ("namespace",)},
    "routing [namespace, team]": {"routing_labels": ("namespace", "team")},
    "links": {"runbook_base_url": RUNBOOKS + "/", "dashboard_base_url": "https://grafana.example"},
    # app and the cluster label are in some by/on lists already: added only where they are not
    "all together": {"cluster_label": "kcluster", "routing_labels": ("namespace", "team", "app", "kcluster"),
                     "runbook_base_url": RUNBOOKS, "dashboard_base_url": "https://grafana.example/"},
}
VALUE_NAMES = {"routing_labels": "routingLabels", "runbook_base_url": "runbookBaseUrl",
               "dashboard_base_url": "dashboardBaseUrl"}


def values_file(settings: dict, path: Path) -> Path:
    """The chart's values for AlertConfig `settings` (the Alertmanager example on)."""
    values: dict = {"alertmanagerExample": {"enabled": True}, "config": {}, "prometheusRule": {}}
    for key, value in settings.items():
        if key == "cluster_label":
            values["config"][key] = value
        else:
            values["prometheusRule"][VALUE_NAMES[key]] = list(value) if isinstance(value, tuple) else value
    path.write_text(yaml.safe_dump(values))
    return path


@pytest.mark.parametrize("name", list(SETTINGS))
def test_the_rendered_rules_dashboards_and_alertmanager_example_are_the_generators(name, tmp_path):
    cfg = AlertConfig(**SETTINGS[name])
    docs = render(values_file(SETTINGS[name], tmp_path / "values.yaml"))
    assert one(docs, "PrometheusRule")["spec"]["groups"] == rule_groups(cfg)
    for ref in DASHBOARDS:
        stem = ref.file.removesuffix(".json")
        data = one(docs, "ConfigMap", f"txnwatch-dashboard-{stem}")["data"][f"txnwatch-{stem}.json"]
        assert json.loads(data) == dashboard_json(ref, cfg), ref.file
    example = one(docs, "ConfigMap", "txnwatch-alertmanager-example")["data"]["alertmanager.yml"]
    assert yaml.safe_load(example) == without_repeats(alertmanager_config(cfg))


def without_repeats(config: dict) -> dict:
    """alertmanager_config with each group_by label once: it appends routing labels it groups
    by already (app, the cluster label), which Alertmanager refuses; the chart does not."""
    config["route"]["group_by"] = list(dict.fromkeys(config["route"]["group_by"]))
    return config


def test_the_rendered_alertmanager_example_passes_amtool(tmp_path):
    amtool = shutil.which("amtool")
    assert amtool, "amtool not found: apt-get install -y prometheus-alertmanager"
    docs = render(values_file(SETTINGS["all together"], tmp_path / "values.yaml"))
    path = tmp_path / "alertmanager.yml"
    path.write_text(one(docs, "ConfigMap", "txnwatch-alertmanager-example")["data"]["alertmanager.yml"])
    r = subprocess.run([amtool, "check-config", str(path)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and "SUCCESS" in r.stdout, r.stdout + r.stderr


# ---------------------------------------------------------------- promtool on the rendered rules
PROMTOOL_SETTINGS = {"cluster_label": "kcluster", "routing_labels": ("namespace",), "runbook_base_url": RUNBOOKS}
NAMESPACE = "payments"


def rendered_rules(tmp_path: Path) -> Path:
    docs = render(values_file(PROMTOOL_SETTINGS, tmp_path / "values.yaml"))
    path = tmp_path / "rules.yml"
    path.write_text(yaml.safe_dump({"groups": one(docs, "PrometheusRule")["spec"]["groups"]}))
    return path


def promtool(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([promtool_binary(), *args], cwd=cwd, capture_output=True, text=True, timeout=300)


def series(text: str) -> str:
    """A series of the tests, as an exporter with cluster_label kcluster serves it, scraped
    by a target in namespace payments."""
    text = re.sub(r"([{,]\s*)kafka_cluster(\s*=)", r"\1kcluster\2", text)
    name, brace, rest = text.partition("{")
    if not brace:
        return f'{name}{{namespace="{NAMESPACE}"}}'
    return f'{name}{{namespace="{NAMESPACE}"' + ("" if rest.lstrip().startswith("}") else ",") + rest


def expected_labels(labels: dict) -> dict:
    out = {("kcluster" if k == "kafka_cluster" else k): v for k, v in labels.items()}
    # absent() knows only the labels its selector fixes: no target, no namespace
    if not set(out) <= {"severity", "job"}:
        out["namespace"] = NAMESPACE
    return out


def rewrite(case: dict) -> dict:
    for s in case.get("input_series", []):
        s["series"] = series(s["series"])
    for t in case.get("alert_rule_test", []):
        for alert in t.get("exp_alerts") or []:
            alert["exp_labels"] = expected_labels(alert["exp_labels"])
            alert.setdefault("exp_annotations", {})["runbook_url"] = f"{RUNBOOKS}/{t['alertname']}.md"
    for t in case.get("promql_expr_test", []):
        t["expr"] = re.sub(r"([{,]\s*)kafka_cluster(\s*=)", r"\1kcluster\2", t["expr"])
        for sample in t.get("exp_samples") or []:
            sample["labels"] = series(sample["labels"])
    return case


def test_every_alert_unit_test_passes_on_rules_rendered_for_other_labels(tmp_path):
    """tests/alerts/ (written for the default rules) with kafka_cluster renamed kcluster, every
    series in namespace payments and every alert expected with it and its runbook_url: the
    rendered rules keep the routing label through every aggregation and join."""
    rules = rendered_rules(tmp_path)
    files = []
    for src in sorted((ROOT / "tests" / "alerts").glob("*.yml")):
        suite = yaml.safe_load(src.read_text())
        suite["rule_files"] = [str(rules)]
        suite["tests"] = [rewrite(case) for case in suite["tests"]]
        (tmp_path / src.name).write_text(yaml.safe_dump(suite, sort_keys=False))
        files.append(src.name)
    assert files
    r = promtool("test", "rules", *files, cwd=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.count("SUCCESS") == len(files), r.stdout


def test_a_hanging_transaction_alert_carries_kcluster_namespace_and_runbook_url(tmp_path):
    """One case written out: the rendered rules on series of an exporter whose cluster label
    is kcluster, beside the target labels `cluster` (the Kubernetes cluster) and namespace."""
    rules = rendered_rules(tmp_path)
    case = {"rule_files": [str(rules)], "evaluation_interval": "1m", "tests": [{
        "interval": "1m",
        "input_series": [{"series": 'kafka_transaction_hanging{job="txnwatch",kcluster="prod",cluster="k8s-eu",'
                                    'namespace="payments",topic="t",partition="0"}',
                          "values": "1 1 1 1 1"}],
        "alert_rule_test": [{"eval_time": "4m", "alertname": "KafkaTransactionHanging", "exp_alerts": [{
            "exp_labels": {"severity": "critical", "kcluster": "prod", "namespace": "payments", "topic": "t",
                           "partition": "0", "signal": "hanging"},
            "exp_annotations": {
                "summary": "A Kafka transaction is hanging on cluster prod",
                "description": "1 hanging transaction(s) on t-0 (open past transaction.max.timeout.ms + 5 min with no "
                               "live coordinator state, or, without KIP-664, a last stable offset stalled past the "
                               "hanging threshold): read_committed consumers cannot read past it.",
                "runbook": "docs/runbooks/KafkaTransactionHanging.md",
                "runbook_url": f"{RUNBOOKS}/KafkaTransactionHanging.md"}}]}]}]}
    (tmp_path / "hanging_test.yml").write_text(yaml.safe_dump(case))
    r = promtool("test", "rules", "hanging_test.yml", cwd=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
