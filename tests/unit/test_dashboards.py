"""Generated Grafana dashboards: valid JSON, unique ids, descriptions, units, thresholds,
catalogue-only queries, template variables, links, and the e2e helpers."""

from __future__ import annotations

import json
import re

import pytest

from txnwatch.alerts.config import AlertConfig
from txnwatch.dashboards import (
    CONDITIONAL_PANELS,
    FAULT_ONLY_PANELS,
    dashboard_json,
    dashboard_queries,
    expr_sources,
    generate_dashboards,
    ids,
)
from txnwatch.dashboards.names import exposed_names, metric_names, unknown_names
from txnwatch.dashboards.queries import iter_panels, substitute_variables

DASHBOARDS = {d.uid: dashboard_json(d) for d in ids.DASHBOARDS}
PANELS = [(uid, p) for uid, dj in DASHBOARDS.items() for p in iter_panels(dj)]
REQUIRED_VARS = {"datasource", "cluster", "app", "transactional_id", "query"}


def pid(item):
    uid, p = item
    return f"{uid}:{p['id']}"


def test_generate_writes_valid_json(tmp_path):
    paths = generate_dashboards(tmp_path)
    assert sorted(p.name for p in paths) == sorted(d.file for d in ids.DASHBOARDS)
    for path in paths:
        data = json.loads(path.read_text())
        assert data["uid"] in DASHBOARDS
        assert data["panels"]
        assert data == DASHBOARDS[data["uid"]]


@pytest.mark.parametrize("uid", DASHBOARDS)
def test_panel_ids_unique_and_as_declared(uid):
    panel_ids = [p["id"] for p in iter_panels(DASHBOARDS[uid])]
    assert len(panel_ids) == len(set(panel_ids))
    assert sorted(panel_ids) == sorted(ids.PANEL_IDS[uid].values())
    titles = [p["title"] for p in iter_panels(DASHBOARDS[uid])]
    assert len(titles) == len(set(titles)), "panel titles identify panels in FAULT_ONLY_PANELS"


@pytest.mark.parametrize("item", PANELS, ids=pid)
def test_every_panel_has_description_unit_thresholds_and_targets(item):
    _, p = item
    assert p["title"]
    assert p.get("description") and len(p["description"]) > 20
    defaults = p["fieldConfig"]["defaults"]
    assert defaults.get("unit"), p["title"]
    steps = defaults["thresholds"]["steps"]
    assert steps and steps[0]["value"] is None
    values = [s["value"] for s in steps[1:]]
    assert values == sorted(values)
    assert p["targets"]
    assert p["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
    assert p["gridPos"]["w"] > 0 and p["gridPos"]["x"] + p["gridPos"]["w"] <= 24


@pytest.mark.parametrize("item", PANELS, ids=pid)
def test_targets_use_catalogue_series_only(item):
    _, p = item
    for t in p["targets"]:
        names = metric_names(t["expr"])
        assert names, t["expr"]
        assert not unknown_names(t["expr"]), (p["title"], t["expr"])
        assert t["refId"]


def test_name_parser():
    expr = ('histogram_quantile(0.99, sum by (app, le) (rate(kafka_producer_transaction_commit_seconds_bucket'
            '{app=~"$app", error=~"a|b"}[$__rate_interval]))) / on (app) group_left () up{job="x"} '
            'or label_replace(vector(1), "a", "b", "__name__", ".*") and time() - foo offset 5m')
    assert metric_names(expr) == {"kafka_producer_transaction_commit_seconds_bucket", "up", "foo"}
    assert unknown_names(expr) == {"foo"}
    assert "kafka_transactions_total" in exposed_names()
    assert "txnwatch_build_info" in exposed_names()
    assert "kafka_transaction_completion_seconds_count" in exposed_names()


@pytest.mark.parametrize("uid", DASHBOARDS)
def test_template_variables(uid):
    variables = {v["name"]: v for v in DASHBOARDS[uid]["templating"]["list"]}
    assert REQUIRED_VARS <= set(variables)
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    for name, v in variables.items():
        if name == "datasource":
            continue
        assert v["type"] == "query" and v["includeAll"] and v["multi"] and v["allValue"] == ".*"
        query = v["query"]["query"]
        m = re.fullmatch(r"label_values\((.+),\s*(\w+)\)", query)
        assert m, query
        selector, label = m.groups()
        names = {n for group in re.findall(r'__name__=~"([^"]+)"', selector) for n in group.split("|")}
        names |= metric_names(re.sub(r'__name__=~"[^"]*"', "", selector))
        assert names and not (names - set(exposed_names())), (name, query)
        # the Grafana variable `cluster` holds values of the Kafka cluster's label (kafka_cluster)
        assert label == {"cluster": AlertConfig().cluster_label}.get(name, name), (name, query)
    # every variable a query uses exists
    used = set()
    for p in iter_panels(DASHBOARDS[uid]):
        for t in p["targets"]:
            used |= set(re.findall(r"\$(\w+)", t["expr"]))
    assert used - {"__rate_interval"} <= set(variables), used


@pytest.mark.parametrize("uid", DASHBOARDS)
def test_dashboards_link_to_each_other(uid):
    dj = DASHBOARDS[uid]
    assert "txnwatch" in dj["tags"]
    assert any(link["type"] == "dashboards" and link["tags"] == ["txnwatch"] and link["includeVars"]
               for link in dj["links"])


def test_overview_panels_link_to_detail_dashboards():
    uids = {d.uid for d in ids.DASHBOARDS}
    links = [link for p in iter_panels(DASHBOARDS[ids.OVERVIEW.uid]) for link in p.get("links", [])]
    assert links
    for link in links:
        m = re.match(r"^/d/([\w-]+)/", link["url"])
        assert m and m.group(1) in uids


def test_issue_panels_exist():
    titles = {(dj["title"], p["title"]) for dj in DASHBOARDS.values() for p in iter_panels(dj)}
    flat = " | ".join(t for _, t in titles).lower()
    for words in ("open transactions", "hanging", "oldest open", "abort ratio", "fencing", "commit latency",
                  "stalled", "heatmap", "timeouts", "headroom", "lso lag", "read_committed", "phases",
                  "commit time", "input vs processed", "source offsets", "state store", "watermark",
                  "sources up", "poll errors"):
        assert words in flat, words
    heatmaps = [p for _, p in PANELS if p["type"] == "heatmap"]
    assert len(heatmaps) >= 2
    stacked = [p for _, p in PANELS if p["type"] == "timeseries"
               and p["fieldConfig"]["defaults"]["custom"]["stacking"].get("mode") == "normal"]
    assert any("phases" in p["title"].lower() for p in stacked)


def test_dashboard_queries_are_substituted():
    queries = dashboard_queries()
    total_targets = sum(len(p["targets"]) for _, p in PANELS)
    assert len(queries) == total_targets
    titles = {ids.OVERVIEW.title, ids.TRANSACTIONS.title, ids.PARTITIONS.title, ids.SPARK.title, ids.EXPORTER.title}
    for dash, panel, expr in queries:
        assert dash in titles and panel
        assert "$" not in expr, expr
        assert '=~".*"' in expr or "$" not in expr
    assert substitute_variables('x{cluster=~"$cluster"}[$__rate_interval]', "2m") == 'x{cluster=~".*"}[2m]'
    assert substitute_variables('x{a=~"${app}"}') == 'x{a=~".*"}'


def test_fault_only_and_conditional_panels_exist():
    titles = {(dj["title"], p["title"]) for dj in DASHBOARDS.values() for p in iter_panels(dj)}
    assert FAULT_ONLY_PANELS and set(FAULT_ONLY_PANELS) <= titles
    assert set(CONDITIONAL_PANELS) <= titles
    assert not set(FAULT_ONLY_PANELS) & set(CONDITIONAL_PANELS)


def test_expr_sources():
    assert expr_sources("sum(rate(kafka_transactions_total[1m])) / up") == {"tap", "prometheus"}
    assert expr_sources("spark_streaming_query_active") == {"spark"}


def test_query_requirements():
    from txnwatch.dashboards import query_requirements

    assert query_requirements("kafka_partition_lso_stalled_seconds > 0") == frozenset()
    assert query_requirements("min(kafka_transaction_timeout_headroom_seconds)") == {"kip664"}
    assert query_requirements("max(kafka_broker_transaction_max_timeout_seconds)") == {"broker_configs"}
    assert query_requirements("rate(kafka_transactions_total[1m]) / rate(kafka_producer_transactions_total[1m])") \
        == {"tap", "client"}
    # every panel that needs nothing but the exporter's poller, and is not fault-only or
    # conditional, is what an e2e test against any broker can expect data from
    baseline = [(d, p) for d, p, e in dashboard_queries() if not query_requirements(e)
                and (d, p) not in FAULT_ONLY_PANELS and (d, p) not in CONDITIONAL_PANELS]
    assert (ids.PARTITIONS.title, "LSO stalled time, top 20") in baseline
    assert (ids.EXPORTER.title, "Sources up") in baseline


def test_provisioning_fits_an_existing_grafana(tmp_path):
    """No datasource that claims the default or a common name; dashboards in a folder of
    their own; every dashboard chains job -> instance -> cluster -> app."""
    import yaml

    from txnwatch.dashboards.build import generate_provisioning

    ds_path, provider_path = generate_provisioning(tmp_path)
    [ds] = yaml.safe_load(ds_path.read_text())["datasources"]
    assert ds["isDefault"] is False and ds["name"] not in ("Prometheus", "prometheus", "default")
    assert ds["uid"].startswith("txnwatch-demo") and "leave this file out" in ds_path.read_text()
    [provider] = yaml.safe_load(provider_path.read_text())["providers"]
    assert provider["folder"] == "txnwatch"
    for uid, dj in DASHBOARDS.items():
        q = {v["name"]: v["query"]["query"] for v in dj["templating"]["list"] if v["name"] != "datasource"}
        assert '{job=~"$job"}' in q["instance"], uid
        assert 'job=~"$job", instance=~"$instance"' in q["cluster"], uid
        assert 'kafka_cluster=~"$cluster"' in q["app"], uid
