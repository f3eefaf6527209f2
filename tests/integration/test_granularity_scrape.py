"""The series a real scrape carries at each granularity (exporter/poll/granularity.py), for one
topic on the real broker polled three times over: signal (the default), partition and topic."""

from __future__ import annotations

import re
from collections import defaultdict

import pytest
from confluent_kafka import Producer

from tests.integration.helpers import cluster_config
from txnwatch.exporter.poll.render import GROUP_FAMILIES, PARTITION_FAMILIES
from txnwatch_dev.transactions.workload import commit_group_offsets, create_topics, watermarks

pytestmark = [pytest.mark.integration]

RECORDS = 5
SUMMED = [f for f in PARTITION_FAMILIES if not f.endswith("_seconds")]   # a stall is the longest, not a sum


def clusters(bootstrap: str, topic: str) -> dict:
    one = cluster_config(bootstrap, [topic])["clusters"][0]
    # the group behind counts as a signal after 1 s without a commit (default 2 min)
    return {"clusters": [{**one, "name": "signal", "series_group_still_seconds": 1},
                         {**one, "name": "every", "granularity": "partition"},
                         {**one, "name": "bytopic", "granularity": "topic"}]}


def partitions_of(m, family: str, cluster: str, **labels) -> set[str]:
    return {lbl["partition"] for lbl, _ in m.select(family, kafka_cluster=cluster, **labels)}


def sums(m, cluster: str) -> dict:
    out: dict = defaultdict(float)
    for family in SUMMED:
        for lbl, v in m.select(family, kafka_cluster=cluster):
            out[(family, lbl["topic"])] += v
    for family in GROUP_FAMILIES:
        for lbl, v in m.select(family, kafka_cluster=cluster):
            out[(family, lbl["group"], lbl["topic"])] += v
    return dict(out)


def test_series_sets_at_each_granularity_on_a_real_scrape(broker, producers, unique, exporter_factory):
    topic, behind, current = unique("grain"), unique("behind"), unique("current")
    create_topics(broker.bootstrap, [topic], partitions=4)
    plain = Producer({"bootstrap.servers": broker.bootstrap})
    for p in range(4):
        for i in range(RECORDS):
            plain.produce(topic, value=b"%d" % i, partition=p)
    assert plain.flush(30) == 0
    # partition 0: a transaction left open (LSO below HWM)
    producers(broker.bootstrap, topic, unique("grain-writer"), action="commit", count=1, records=2, partition=0,
              then_hang=True, timeout_ms=120_000).wait_line("open")
    ends = watermarks(broker.bootstrap, topic, 4)
    # partition 1: a group behind that does not move; everything else caught up
    commit_group_offsets(broker.bootstrap, behind, [(topic, 1, 0), (topic, 2, ends[2][1]), (topic, 3, ends[3][1])])
    commit_group_offsets(broker.bootstrap, current, [(topic, p, ends[p][1]) for p in (1, 2, 3)])
    exp = exporter_factory(clusters(broker.bootstrap, topic))

    def settled(m) -> bool:
        return "1" in partitions_of(m, "kafka_partition_high_watermark", "signal") \
            and len(partitions_of(m, "kafka_consumergroup_committed_offset", "every", group=behind)) == 3 \
            and partitions_of(m, "kafka_consumergroup_committed_offset", "bytopic", group=current) == {"all"}

    m = exp.wait_metric(settled, 60, what="the group behind seen for a second, every cluster's groups")
    for family in PARTITION_FAMILIES:
        assert partitions_of(m, family, "every", topic=topic) == {"0", "1", "2", "3"}, family
        assert partitions_of(m, family, "bytopic", topic=topic) == {"all"}, family
        # the open transaction's partition and the one the group is stuck on keep theirs
        assert partitions_of(m, family, "signal", topic=topic) == {"0", "1", "__other__"}, family
    for family in GROUP_FAMILIES:
        for group in (behind, current):
            assert partitions_of(m, family, "every", group=group) == {"1", "2", "3"}, (family, group)
            assert partitions_of(m, family, "bytopic", group=group) == {"all"}, (family, group)
            assert partitions_of(m, family, "signal", group=group) == {"1", "__other__"}, (family, group)
    # the same figures per topic and per group's topic, whatever the granularity
    assert sums(m, "signal") == sums(m, "every") == sums(m, "bytopic")
    assert m.get_value("kafka_partition_lso_lag_offsets", kafka_cluster="signal", topic=topic, partition=0) == \
        ends[0][1] - ends[0][0] > 0
    assert m.get_value("kafka_consumergroup_read_committed_lag_offsets", kafka_cluster="signal", group=behind,
                       partition=1) == RECORDS
    # what the scrape carries is what txnwatch_series says: 3 + 4 + 1 series per partition family
    for family in PARTITION_FAMILIES + GROUP_FAMILIES:
        assert m.get_value("txnwatch_series", family=family) == len(m.select(family)), family
    assert m.get_value("txnwatch_series", family="kafka_partition_high_watermark") == 8


PER_ID = ("kafka_transaction_timeout_headroom_seconds", "kafka_transaction_state_unchanged_seconds",
          "kafka_transaction_last_append_age_seconds")


def test_per_id_series_at_signal_are_the_transactions_that_matter(broker, producers, unique, exporter_factory):
    """Two transactions left open with a 10 min timeout, seconds old: at signal the one of an
    app named in series_apps has its id, the other is its app's __other__; at partition both
    have theirs; the lowest headroom and the highest ages per app are the same."""
    topic = unique("grain-ids")
    create_topics(broker.bootstrap, [topic], partitions=2)
    young, named = unique("grainyoung"), unique("grainnamed")
    for partition, tid in enumerate((young, named)):
        producers(broker.bootstrap, topic, tid, action="commit", count=1, records=2, partition=partition,
                  then_hang=True, timeout_ms=600_000).wait_line("open")
    # the session broker holds other tests' open transactions: only these two are watched
    one = {**cluster_config(broker.bootstrap, [topic])["clusters"][0],
           "transactional_ids": {"include": [re.escape(young), re.escape(named)]}}
    exp = exporter_factory({"clusters": [{**one, "name": "signal", "series_apps": ["grainnamed"]},
                                         {**one, "name": "every", "granularity": "partition"}]})

    def ids(m, family: str, cluster: str) -> dict:
        return {(lbl["app"], lbl["transactional_id"]): v for lbl, v in m.select(family, kafka_cluster=cluster)}

    m = exp.wait_metric(lambda m: all(len(ids(m, f, c)) == 2 for f in PER_ID for c in ("signal", "every")), 60,
                        what="both open transactions in every per-id family of both clusters")
    for family in PER_ID:
        assert ids(m, family, "every").keys() == {("grainyoung", young), ("grainnamed", named)}, family
        assert ids(m, family, "signal").keys() == {("grainyoung", "__other__"), ("grainnamed", named)}, family
        # one transaction per app: its figure, whatever its series is called
        assert sorted(ids(m, family, "signal").values()) == pytest.approx(
            sorted(ids(m, family, "every").values()), abs=5.0), family
    assert 0 < m.get_value("kafka_transaction_timeout_headroom_seconds", kafka_cluster="signal", app="grainyoung",
                           transactional_id="__other__") <= 600
