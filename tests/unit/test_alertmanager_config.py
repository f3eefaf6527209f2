"""The Alertmanager configuration (txnwatch.alerts.alertmanager) against the rules."""

from __future__ import annotations

import re

from txnwatch.alerts.alertmanager import alertmanager_config
from txnwatch.alerts.config import AlertConfig
from txnwatch.alerts.rules import alerts


def _names(matchers: list[str]) -> set[str]:
    out = set()
    for m in matchers:
        k, op, v = re.fullmatch(r'(\w+)(=~|=)"(.*)"', m).groups()
        if k == "alertname":
            out |= set(v.split("|")) if op == "=~" else {v}
    return out


def test_every_inhibition_names_real_alerts_and_labels_they_keep():
    cfg = AlertConfig(cluster_label="kafka")
    known = {a.name: a for a in alerts(cfg)}
    am = alertmanager_config(cfg)
    for rule in am["inhibit_rules"]:
        for side in ("source_matchers", "target_matchers"):
            assert _names(rule[side]) and _names(rule[side]) <= set(known), (side, rule)
        assert rule["equal"][0] == "kafka"     # the configured cluster label
    assert am["route"]["group_by"] == ["alertname", "kafka", "app"]
    assert am["route"]["routes"] == [{"matchers": ['severity="critical"'], "receiver": "pager"}]


def test_routing_labels_join_the_grouping():
    am = alertmanager_config(AlertConfig(routing_labels=("namespace",)))
    assert am["route"]["group_by"][-1] == "namespace"


def test_a_routing_label_already_grouped_by_is_listed_once():
    am = alertmanager_config(AlertConfig(routing_labels=("app", "kafka_cluster", "namespace")))
    assert am["route"]["group_by"] == ["alertname", "kafka_cluster", "app", "namespace"]
