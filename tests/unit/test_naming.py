"""The catalogue against Prometheus's naming rules (txnwatch_dev.observability.naming): units that say
what is counted, one measurement per family, no aggregates or `type` as label values, no
name another Kafka exporter uses, `_info` on info metrics, rates left to PromQL. A real
scrape is checked with the same rules (and promtool) in test_dashboards_e2e."""

from __future__ import annotations

import re

from txnwatch.metrics import CATALOG, DEFAULT_CLUSTER_LABEL, FamilyWriter, MetricSpec
from txnwatch_dev.observability import naming


def test_the_catalogue_follows_the_naming_rules():
    assert naming.catalogue_problems() == []


def test_each_rule_catches_what_it_is_for(monkeypatch):
    """Every rule fails on the 0.1.0 name it was written against."""
    old = {s.name: s for s in [
        MetricSpec("kafka_partition_lso_lag_messages", "gauge", "h", ("cluster", "topic", "partition")),
        MetricSpec("kafka_consumergroup_lag_x_offsets", "gauge", "h", ("cluster", "isolation")),
        MetricSpec("kafka_brokers", "gauge", "h", ("cluster",)),
        MetricSpec("kafka_groups_count_x", "gauge", "h", ("cluster", "type")),
        MetricSpec("spark_streaming_input_rows_per_second", "gauge", "h", ()),
        MetricSpec("x_offsets_behind_latest_offsets", "gauge", "h", ("stat",)),
        MetricSpec("kafka_topic_retention_seconds", "gauge", "Topic retention.ms (-1: infinite).", ()),
        MetricSpec("txnwatch_shard_info", "gauge", "which share", ("shard",)),
    ]}
    monkeypatch.setattr(naming, "CATALOG", old)
    problems = "\n".join(naming.catalogue_problems())
    for needle in ("kafka_partition_lso_lag_messages: counts offsets", "['isolation']",
                   "kafka_brokers: a name another Kafka exporter uses", "['type']",
                   "rows_per_second: a rate", "['stat']", "retention_seconds: HELP documents a -1",
                   "txnwatch_shard_info: _info gauge", "kafka_groups_count_x: ends in 'x'"):
        assert needle in problems, (needle, problems)


def test_the_cluster_label_is_exposed_under_its_configured_name():
    for label in (DEFAULT_CLUSTER_LABEL, "k"):
        w = FamilyWriter(cluster_label=label)
        w.add("kafka_cluster_brokers", {"cluster": "prod"}, 3)
        w.histogram("kafka_transaction_completion_seconds", {"cluster": "prod", "app": "a", "outcome": "committed"},
                    [1] + [0] * len(CATALOG["kafka_transaction_completion_seconds"].buckets), 0.001)
        text = b"".join(c.body for c in w.chunks().values()).decode()
        assert f'kafka_cluster_brokers{{{label}="prod"}} 3.0' in text
        assert not re.search(r'[{,]cluster="', text)
        assert naming.scrape_problems("".join(_with_headers(w)), label) == []


def test_scrape_checks_find_sentinels_and_stray_labels():
    text = ("# TYPE kafka_cluster_brokers gauge\nkafka_cluster_brokers{cluster=\"a\"} -1\n"
            "# TYPE nope gauge\nnope 1\n")
    problems = "\n".join(naming.scrape_problems(text))
    assert "negative (a sentinel?)" in problems and "exposes `cluster`" in problems
    assert "nope: not in the catalogue" in problems


def test_infinite_retention_is_inf_not_minus_one():
    from txnwatch.exporter.model import ClusterSnapshot
    from txnwatch.exporter.poll.render import render_snapshot
    from txnwatch.kafka.answers import ClusterFacts

    facts = ClusterFacts(brokers=1, topic_retention_ms={"forever": -1, "week": 604_800_000})
    w = FamilyWriter()
    render_snapshot(w, ClusterSnapshot("c", 1.0, 0.1, facts=facts), "partition", 10)
    body = w.chunks()["kafka_topic_retention_seconds"].body.decode()
    assert 'topic="forever"} +Inf' in body and 'topic="week"} 604800.0' in body   # min() stays right


def _with_headers(w: FamilyWriter):
    for name, chunk in w.chunks().items():
        yield f"# TYPE {name} {chunk.kind}\n" + chunk.body.decode()
