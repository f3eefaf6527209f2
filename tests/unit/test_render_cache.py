"""The poller render's per-topic and per-group line cache (poll/render.py RenderCache): the
lines equal what FamilyWriter.add formats for the same samples, and a poll formats again
only the topics and groups that changed."""

from __future__ import annotations

from types import MappingProxyType

from txnwatch.exporter.model import ClusterSnapshot, GroupLag, HangingTransaction
from txnwatch.exporter.poll import derive
from txnwatch.exporter.poll.granularity import ALL_PARTITIONS
from txnwatch.exporter.poll.render import GROUP_FAMILIES, PARTITION_FAMILIES, RenderCache, render_snapshot
from txnwatch.kafka.answers import ClusterFacts, PartitionOffsets
from txnwatch.metrics import FamilyWriter

TOPICS = ("orders", 'we"ird\\topic', "payments")


def offsets(moved: dict | None = None) -> list[PartitionOffsets]:
    moved = moved or {}
    return [PartitionOffsets(t, p, *moved.get((t, p), (100 + p, 100 + p))) for t in TOPICS for p in range(4)]


def snap(states, groups=(), hanging=()) -> ClusterSnapshot:
    return ClusterSnapshot("c1", 1.0, 0.1, MappingProxyType(states), tuple(groups), ClusterFacts(brokers=1),
                           hanging=tuple(hanging))


def groups_of(states, committed=50):
    return derive.group_lags([("g-1", "orders", p, committed) for p in range(4)] +
                             [('g"2', "payments", 1, 7)], states)


def lines(w: FamilyWriter, families) -> dict[str, set[bytes]]:
    chunks = w.chunks()
    return {name: set(chunks[name].body.splitlines()) for name in families if name in chunks}


def reference(s: ClusterSnapshot, cluster_label: str) -> FamilyWriter:
    """The same samples through FamilyWriter.add, the path the render took before the cache."""
    w = FamilyWriter(cluster_label=cluster_label)
    hanging = {(h.topic, h.partition): 1 for h in s.hanging}
    for (topic, part), p in s.partitions.items():
        lbl = {"cluster": s.cluster, "topic": topic, "partition": part}
        for name, v in zip(PARTITION_FAMILIES, (p.high_watermark, p.last_stable_offset, p.lso_lag,
                                                p.stalled_seconds, hanging.get((topic, part), 0)), strict=True):
            w.add(name, lbl, v)
    for g in s.groups:
        lbl = {"cluster": s.cluster, "group": g.group, "topic": g.topic, "partition": g.partition}
        for name, v in zip(GROUP_FAMILIES, (g.committed, g.lag_read_committed, g.lag_read_uncommitted), strict=True):
            w.add(name, lbl, v)
    return w


def render(s: ClusterSnapshot, cache: RenderCache, cluster_label: str = "kafka_cluster") -> FamilyWriter:
    w = FamilyWriter(cluster_label=cluster_label)
    render_snapshot(w, s, "partition", 100, cache=cache)
    return w


def test_cached_lines_are_what_family_writer_formats():
    states = derive.partition_states(offsets({("orders", 1): (120, 110)}), {}, now=1000.0)
    s = snap(states, groups_of(states), [HangingTransaction("orders", 1, 7, 0, 110, 5.0, None, "lso_stalled")])
    for label in ("kafka_cluster", "cluster"):
        families = PARTITION_FAMILIES + GROUP_FAMILIES
        got, want = lines(render(s, RenderCache(), label), families), lines(reference(s, label), families)
        assert got == want and len(got) == len(families)


def test_a_poll_formats_only_what_moved():
    cache = RenderCache()
    first = derive.partition_states(offsets(), {}, now=1000.0)
    render(snap(first, groups_of(first)), cache)
    assert cache.formatted == len(TOPICS) + 2

    same = derive.partition_states(offsets(), first, now=1005.0)
    w = render(snap(same, groups_of(same)), cache)
    assert cache.formatted == 0
    assert lines(w, PARTITION_FAMILIES) == lines(reference(snap(same), "kafka_cluster"), PARTITION_FAMILIES)

    # one partition of orders moves: orders and the group reading it are formatted again
    moved = derive.partition_states(offsets({("orders", 2): (150, 150)}), same, now=1010.0)
    w = render(snap(moved, groups_of(moved)), cache)
    assert cache.formatted == 2
    assert b'kafka_partition_high_watermark{kafka_cluster="c1",topic="orders",partition="2"} 150.0' in \
        w.chunks()["kafka_partition_high_watermark"].body
    assert b'kafka_consumergroup_read_uncommitted_lag_offsets{kafka_cluster="c1",group="g-1",topic="orders",' \
        b'partition="2"} 100.0' in w.chunks()["kafka_consumergroup_read_uncommitted_lag_offsets"].body

    # a committed offset moves: that group only
    render(snap(moved, groups_of(moved, committed=60)), cache)
    assert cache.formatted == 1


def test_stalls_hanging_counts_and_the_cluster_label_are_never_stale():
    cache = RenderCache()
    stalled = derive.partition_states(offsets({("payments", 0): (120, 110)}), {}, now=1000.0)
    render(snap(stalled), cache)
    # a stalled partition's clock moves every poll: its topic is formatted again, the rest kept
    later = derive.partition_states(offsets({("payments", 0): (120, 110)}), stalled, now=1007.0)
    w = render(snap(later), cache)
    assert cache.formatted == 1
    assert b'kafka_partition_lso_stalled_seconds{kafka_cluster="c1",topic="payments",partition="0"} 7.0' in \
        w.chunks()["kafka_partition_lso_stalled_seconds"].body
    # a hanging transaction found on an unchanged partition
    w = render(snap(later, hanging=[HangingTransaction("orders", 3, 9, 0, 103, 1.0, None, "lso_stalled")]), cache)
    assert cache.formatted == 1
    assert b'kafka_transaction_hanging{kafka_cluster="c1",topic="orders",partition="3"} 1.0' in \
        w.chunks()["kafka_transaction_hanging"].body
    # another label name for the cluster: everything again
    render(snap(later), cache, cluster_label="cluster")
    assert cache.formatted == len(TOPICS)


def test_a_topic_gone_from_the_snapshot_is_gone_from_the_lines():
    cache = RenderCache()
    states = derive.partition_states(offsets(), {}, now=1000.0)
    render(snap(states, [GroupLag("g", "orders", 0, 1, 99, 99)]), cache)
    fewer = {k: v for k, v in states.items() if k[0] != "orders"}
    w = render(snap(fewer), cache)
    body = b"".join(c.body for c in w.chunks().values())
    assert b'topic="orders"' not in body and b'group="g"' not in body


def sums_reference(s: ClusterSnapshot, rest: str) -> FamilyWriter:
    """Per-topic and per-group sums through FamilyWriter.add, as the render wrote them before."""
    w = FamilyWriter()
    by_topic: dict[str, list] = {}
    for (topic, _), p in s.partitions.items():
        a = by_topic.setdefault(topic, [0, 0, 0, 0.0, 0])
        a[0] += p.high_watermark
        a[1] += p.last_stable_offset
        a[2] += p.lso_lag
        a[3] = max(a[3], p.stalled_seconds)
    for topic, values in by_topic.items():
        for name, v in zip(PARTITION_FAMILIES, values, strict=True):
            w.add(name, {"cluster": s.cluster, "topic": topic, "partition": rest}, v)
    by_group: dict[tuple, list] = {}
    for g in s.groups:
        a = by_group.setdefault((g.group, g.topic), [0, 0, 0])
        a[0] += g.committed
        a[1] += g.lag_read_committed
        a[2] += g.lag_read_uncommitted
    for (group, topic), values in by_group.items():
        for name, v in zip(GROUP_FAMILIES, values, strict=True):
            w.add(name, {"cluster": s.cluster, "group": group, "topic": topic, "partition": rest}, v)
    return w


def test_sums_per_topic_and_group_are_formatted_once_until_they_move():
    """At granularity topic, a topic's and a group's summed lines are what FamilyWriter.add
    formats for the sums, and are formatted again only when the sums change."""
    cache = RenderCache()
    families = PARTITION_FAMILIES + GROUP_FAMILIES

    def topic_render(s):
        w = FamilyWriter()
        render_snapshot(w, s, "topic", 100, cache=cache)
        return w

    first = derive.partition_states(offsets({("orders", 1): (120, 110)}), {}, now=1000.0)
    s = snap(first, groups_of(first))
    assert lines(topic_render(s), families) == lines(sums_reference(s, ALL_PARTITIONS), families)
    assert cache.formatted == len(TOPICS) + 2

    same = derive.partition_states(offsets({("orders", 1): (120, 110)}), first, now=1000.0)
    topic_render(snap(same, groups_of(same)))
    assert cache.formatted == 0

    moved = derive.partition_states(offsets({("orders", 1): (120, 110), ("payments", 1): (130, 130)}), same,
                                    now=1000.0)
    s = snap(moved, groups_of(moved))
    assert lines(topic_render(s), families) == lines(sums_reference(s, ALL_PARTITIONS), families)
    assert cache.formatted == 2          # payments, and the group reading it
