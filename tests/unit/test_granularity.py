"""Which partitions keep series of their own (exporter/poll/granularity.py), and the render at
each granularity: the same sums per topic and per group's topic whatever the granularity."""

from __future__ import annotations

from collections import defaultdict
from types import MappingProxyType

import pytest

from txnwatch.apps import AppResolver
from txnwatch.exporter.model import ClusterSnapshot, GroupLag, HangingTransaction, PartitionState
from txnwatch.exporter.poll import derive
from txnwatch.exporter.poll.granularity import (
    OTHER_PARTITIONS,
    PartitionSeries,
    behind_since,
    linger,
    signalled,
    topic_sums,
)
from txnwatch.exporter.poll.render import GROUP_FAMILIES, PARTITION_FAMILIES, RenderCache, render_snapshot
from txnwatch.kafka.answers import ClusterFacts, TxnDescription
from txnwatch.metrics import FamilyWriter
from txnwatch_dev.observability.scrape import parse_metrics

QUIET = {("orders", p): PartitionState("orders", p, 100 + p, 100 + p) for p in range(6)}


def snap(partitions=QUIET, groups=(), hanging=(), txns=None, at=1000.0) -> ClusterSnapshot:
    return ClusterSnapshot("c1", at, 0.1, MappingProxyType(dict(partitions)), tuple(groups), ClusterFacts(brokers=1),
                           open_transactions=txns, hanging=tuple(hanging))


def with_state(**changed) -> dict:
    out = dict(QUIET)
    for key, state in changed.items():
        out[("orders", int(key[1:]))] = state
    return out


STILL = 120.0


def test_quiet_partitions_carry_no_signal():
    assert signalled(snap(), {}, frozenset(), STILL) == set()


def test_an_open_transaction_a_stall_and_a_hanging_transaction_are_signals():
    parts = with_state(p1=PartitionState("orders", 1, 120, 101),
                       p2=PartitionState("orders", 2, 102, 102, 900.0, 100.0))
    hung = HangingTransaction("orders", 3, 7, 0, 103, 2000.0, None, "lso_stalled")
    assert signalled(snap(parts, hanging=[hung]), {}, frozenset(), STILL) == {("orders", 1), ("orders", 2),
                                                                                ("orders", 3)}


def test_a_group_behind_is_a_signal_once_it_has_not_committed_for_the_still_time():
    behind = GroupLag("etl", "orders", 4, 90, 14, 14)
    rows = behind_since([behind], {}, 1000.0)
    assert rows == {("etl", "orders", 4): (90, 1000.0)}
    assert signalled(snap(groups=[behind], at=1000.0), rows, frozenset(), STILL) == set()
    rows = behind_since([behind], rows, 1000.0 + STILL - 1)                      # same offset, still there
    assert signalled(snap(groups=[behind], at=1000.0 + STILL - 1), rows, frozenset(), STILL) == set()
    rows = behind_since([behind], rows, 1000.0 + STILL)
    assert signalled(snap(groups=[behind], at=1000.0 + STILL), rows, frozenset(), STILL) == {("orders", 4)}
    moved = behind._replace(committed=95, lag_read_committed=9)
    rows = behind_since([moved], rows, 1000.0 + STILL + 1)                       # it committed: the clock restarts
    assert rows == {("etl", "orders", 4): (95, 1000.0 + STILL + 1)}
    assert signalled(snap(groups=[moved], at=1000.0 + STILL + 1), rows, frozenset(), STILL) == set()
    caught_up = GroupLag("etl", "orders", 4, 104, 0, 0)
    assert behind_since([caught_up], rows, 1200.0) == {}


def test_a_named_apps_groups_and_transactions_keep_their_partitions():
    descs = [TxnDescription("payments-7", "Ongoing", 1, 0, 60_000, 999_000, frozenset({("orders", 5)}))]
    txns = tuple(derive.open_transactions(descs, AppResolver(), now_ms=1_000_000))
    assert txns[0].app == "payments"
    rows = [GroupLag("payments", "orders", 0, 100, 0, 0), GroupLag("other", "orders", 1, 101, 0, 0)]
    assert signalled(snap(groups=rows, txns=txns), {}, frozenset({"payments"}), STILL) == {("orders", 0),
                                                                                          ("orders", 5)}
    assert signalled(snap(groups=rows, txns=txns), {}, frozenset(), STILL) == set()


def test_a_partition_keeps_its_series_for_the_linger_after_its_last_signal():
    parts = dict(QUIET)
    kept = linger({}, {("orders", 1)}, 1000.0, 3600, parts)
    assert linger(kept, set(), 1000.0 + 3599, 3600, parts) == {("orders", 1): 1000.0}
    assert linger(kept, set(), 1000.0 + 3600, 3600, parts) == {}
    assert linger(kept, {("orders", 1)}, 1000.0 + 3000, 3600, parts) == {("orders", 1): 4000.0}   # signalled again
    del parts[("orders", 1)]
    assert linger(kept, set(), 1001.0, 3600, parts) == {}                            # the partition is gone
    assert linger({}, {("deleted", 0)}, 1000.0, 3600, parts) == {}                   # never one of ours


def test_partition_series_follows_polls_by_their_time():
    series = PartitionSeries(linger_seconds=60)
    open_txn = with_state(p2=PartitionState("orders", 2, 130, 102))
    assert series.update(snap(open_txn, at=1000.0)) == {("orders", 2)}
    assert series.update(snap(at=1059.0)) == {("orders", 2)}
    assert series.update(snap(at=1060.0)) == frozenset()


def samples(granularity: str, s: ClusterSnapshot, cache: RenderCache | None = None) -> dict:
    w = FamilyWriter(cluster_label="cluster")
    render_snapshot(w, s, granularity, 100, cache=cache)
    text = "".join(c.body.decode() for c in w.chunks().values())
    return parse_metrics(text)


def by_key(found: dict, family: str, key: tuple[str, ...]) -> dict:
    """Sum (max for seconds) of `family` by the label names `key`."""
    out: dict = defaultdict(float)
    for (name, labels), v in found.items():
        if name == family:
            k = tuple(dict(labels)[n] for n in key)
            out[k] = max(out[k], v) if family.endswith("_seconds") else out[k] + v
    return dict(out)


def busy() -> ClusterSnapshot:
    parts = with_state(p1=PartitionState("orders", 1, 120, 101), p2=PartitionState("orders", 2, 130, 102, 900.0, 80.0))
    parts.update({("payments", p): PartitionState("payments", p, 50 * p, 50 * p) for p in range(3)})
    rows = [GroupLag("etl", "orders", p, 100, 1 + p, 20 + p) for p in range(4)] + \
        [GroupLag("etl", "payments", p, 10 * p, 40 * p, 40 * p) for p in range(3)]
    hung = HangingTransaction("orders", 2, 7, 0, 102, 2000.0, None, "lso_stalled")
    return snap(parts, rows, [hung])


@pytest.mark.parametrize("granularity", ["topic", "signal"])
def test_sums_per_topic_and_per_groups_topic_are_those_of_partition_granularity(granularity):
    every = samples("partition", busy())
    folded = samples(granularity, busy())
    for family in PARTITION_FAMILIES:
        assert by_key(folded, family, ("topic",)) == by_key(every, family, ("topic",)), family
    for family in GROUP_FAMILIES:
        assert by_key(folded, family, ("group", "topic")) == by_key(every, family, ("group", "topic")), family


def test_topic_sums_take_partitions_in_any_order_and_odd_states_one_by_one():
    states = [PartitionState("a", 0, 10, 7, 990.0, 10.0), PartitionState("b", 0, 5, 5),
              PartitionState("a", 1, 20, 20), PartitionState("b", 1, 3, 4)]     # b/1: LSO past the HWM
    assert topic_sums(states, {("a", 0): 1}) == {"a": [30, 27, 3, 10.0, 1], "b": [8, 9, 0, 0.0, 0]}
    assert topic_sums(reversed(states), {}) == {"b": [8, 9, 0, 0.0, 0], "a": [30, 27, 3, 10.0, 0]}
    assert topic_sums([], {}) == {}


def label_sets(found: dict, family: str) -> set[tuple[str, str]]:
    return {(dict(labels)["topic"], dict(labels)["partition"]) for name, labels in found if name == family}


def test_series_at_each_granularity():
    s = busy()
    assert label_sets(samples("partition", s), "kafka_partition_high_watermark") == \
        {(t, str(p)) for t, p in s.partitions}
    assert label_sets(samples("topic", s), "kafka_partition_high_watermark") == {("orders", "all"), ("payments", "all")}
    assert label_sets(samples("topic", s), "kafka_consumergroup_committed_offset") == \
        {("orders", "all"), ("payments", "all")}
    # signal: the open transaction (1) and the stalled, hanging partition (2) keep theirs
    signal = samples("signal", s)
    assert label_sets(signal, "kafka_partition_high_watermark") == \
        {("orders", "1"), ("orders", "2"), ("orders", OTHER_PARTITIONS), ("payments", OTHER_PARTITIONS)}
    assert label_sets(signal, "kafka_consumergroup_committed_offset") == \
        {("orders", "1"), ("orders", "2"), ("orders", OTHER_PARTITIONS), ("payments", OTHER_PARTITIONS)}
    assert signal[("kafka_transaction_hanging", (("cluster", "c1"), ("partition", "2"), ("topic", "orders")))] == 1


def test_the_signal_granularity_keeps_its_partitions_between_polls_through_the_cache():
    cache = RenderCache(PartitionSeries(linger_seconds=600))
    first = samples("signal", busy(), cache)
    quiet_later = samples("signal", snap(at=1300.0), cache)          # everything committed and caught up
    assert label_sets(first, "kafka_partition_lso_lag_offsets") >= {("orders", "1"), ("orders", "2")}
    assert label_sets(quiet_later, "kafka_partition_lso_lag_offsets") == \
        {("orders", "1"), ("orders", "2"), ("orders", OTHER_PARTITIONS)}
    gone = samples("signal", snap(at=1000.0 + 600), cache)
    assert label_sets(gone, "kafka_partition_lso_lag_offsets") == {("orders", OTHER_PARTITIONS)}
