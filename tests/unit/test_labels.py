"""Renaming the Kafka cluster's label in generated PromQL and templates (txnwatch.alerts.labels)."""

from __future__ import annotations

from txnwatch.alerts.config import AlertConfig
from txnwatch.alerts.labels import mask_selectors, rename_in_promql, rename_in_template


def test_label_positions_are_renamed_and_nothing_else():
    expr = ('max by (cluster, app) (kafka_cluster_brokers{cluster=~"$cluster", x="cluster"}) '
            'and on (cluster) cluster_app:kafka_transactions:rate5m > 0')
    assert rename_in_promql(expr, "k") == (
        'max by (k, app) (kafka_cluster_brokers{k=~"$cluster", x="cluster"}) '
        'and on (k) cluster_app:kafka_transactions:rate5m > 0')
    assert rename_in_promql("label_values(txnwatch_up, cluster)", "k") == "label_values(txnwatch_up, k)"
    assert rename_in_promql(expr, "cluster") == expr


def test_templates():
    assert rename_in_template("on {{ $labels.cluster }} ({{cluster}}/{{app}})", "k") == \
        "on {{ $labels.k }} ({{k}}/{{app}})"
    assert rename_in_template("the cluster is down", "k") == "the cluster is down"


def test_the_users_selectors_are_kept_as_written():
    cfg = AlertConfig(cluster_selector='cluster=~"eu-.*"', exporter_job_selector='job="tw"')
    masked, restore = mask_selectors(cfg, ("cluster_selector", "exporter_job_selector", "spark_selector"))
    generated = f"sum by (cluster) (x{{{masked.kafka_selector}}})"
    assert restore(rename_in_promql(generated, "k")) == 'sum by (k) (x{job="tw", cluster=~"eu-.*"})'
