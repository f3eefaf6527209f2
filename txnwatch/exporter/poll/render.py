"""The poller's snapshot as metric families: run once per poll (in the worker process that
polled), never at scrape time. A snapshot in, families out; a RenderCache carries the
per-partition and per-group sample lines from one poll to the next, so a poll formats only
the topics and groups whose values changed (most of a big cluster's partitions do not move
between two polls)."""

from __future__ import annotations

import math
from collections import defaultdict

from ...metrics import FamilyWriter
from ...metrics.exposition import escape_label, format_value
from ..model import ClusterSnapshot, GroupLag, PartitionState
from ..transaction_series import OpenSeen, TransactionSeries, budgeted
from . import derive
from .granularity import (
    ALL_PARTITIONS,
    DEFAULT_LINGER_SECONDS,
    OTHER_PARTITIONS,
    PartitionSeries,
    group_sums,
    topic_sums,
)

PARTITION_FAMILIES = ("kafka_partition_high_watermark", "kafka_partition_last_stable_offset",
                      "kafka_partition_lso_lag_offsets", "kafka_partition_lso_stalled_seconds",
                      "kafka_transaction_hanging")
GROUP_FAMILIES = ("kafka_consumergroup_committed_offset", "kafka_consumergroup_read_committed_lag_offsets",
                  "kafka_consumergroup_read_uncommitted_lag_offsets")


class RenderCache:
    """The per-partition and per-group sample lines of the last render, by topic and by
    group, with the values they were formatted from. A topic is formatted again only when
    one of its partitions changed (derive.partition_states keeps the same state object for
    a partition that did not move) or its hanging count did; a group when a row changed."""

    def __init__(self, series: PartitionSeries | None = None, transactions: TransactionSeries | None = None) -> None:
        self.series = series if series is not None else PartitionSeries()   # granularity signal
        self.transactions = transactions if transactions is not None else TransactionSeries(DEFAULT_LINGER_SECONDS)
        self._topics: dict[str, tuple] = {}
        self._groups: dict[str, tuple] = {}
        self._topic_sums: dict[str, tuple] = {}
        self._group_sums: dict[str, tuple] = {}
        self.formatted = 0     # topics and groups formatted by the last render (tests, bench)

    def partition_lines(self, w: FamilyWriter, cluster: str, partitions, hanging) -> None:
        by_topic: dict[str, list[PartitionState]] = {}
        for (topic, _), state in partitions.items():
            by_topic.setdefault(topic, []).append(state)

        def hung(topic: str, states: list[PartitionState]) -> tuple:
            return tuple((s.partition, hanging[(topic, s.partition)]) for s in states
                         if (topic, s.partition) in hanging) if hanging else ()
        self._topics, self.formatted = _lines(
            w, self._topics, f'{w.exposed_label("cluster")}="{escape_label(cluster)}",topic="', by_topic,
            hung, lambda prefix, states, hang: _partition_bodies(prefix, states, dict(hang)), PARTITION_FAMILIES)

    def group_lines(self, w: FamilyWriter, cluster: str, groups) -> None:
        by_group: dict[str, list[GroupLag]] = {}
        for g in groups:
            by_group.setdefault(g.group, []).append(g)
        self._groups, formatted = _lines(
            w, self._groups, f'{w.exposed_label("cluster")}="{escape_label(cluster)}",group="', by_group,
            lambda group, rows: (), lambda prefix, rows, _: _group_bodies(prefix, rows), GROUP_FAMILIES)
        self.formatted += formatted

    def topic_sum_lines(self, w: FamilyWriter, cluster: str, sums: dict[str, list], rest: str) -> None:
        """topic_sums' values as the topics' lines of PARTITION_FAMILIES (partition=`rest`),
        formatted again only for the topics whose sums changed."""
        self._topic_sums, formatted = _lines(
            w, self._topic_sums, f'{w.exposed_label("cluster")}="{escape_label(cluster)}",topic="', sums,
            lambda topic, values: rest, lambda prefix, values, _: _sum_bodies(
                [f'{{{prefix}",partition="{rest}"}} '], [values], PARTITION_FAMILIES), PARTITION_FAMILIES)
        self.formatted += formatted

    def group_sum_lines(self, w: FamilyWriter, cluster: str, sums: dict[tuple[str, str], list[int]],
                        rest: str) -> None:
        """group_sums' values as each group's lines of GROUP_FAMILIES (partition=`rest`),
        formatted again only for the groups whose sums changed."""
        by_group: dict[str, list[tuple]] = {}
        for (group, topic), values in sums.items():
            by_group.setdefault(group, []).append((topic, *values))
        self._group_sums, formatted = _lines(
            w, self._group_sums, f'{w.exposed_label("cluster")}="{escape_label(cluster)}",group="', by_group,
            lambda group, rows: rest, lambda prefix, rows, _: _sum_bodies(
                [f'{{{prefix}",topic="{escape_label(r[0])}",partition="{rest}"}} ' for r in rows],
                [r[1:] for r in rows], GROUP_FAMILIES), GROUP_FAMILIES)
        self.formatted += formatted


def _sum_bodies(labels: list[str], values: list, families: tuple[str, ...]) -> tuple[bytes, ...]:
    """The lines of `families` for each labels' values (value i of a row goes to family i)."""
    return tuple("".join(f"{name}{lbl}{format_value(float(row[i]))}\n" for lbl, row in zip(labels, values, strict=True))
                 .encode() for i, name in enumerate(families))


def _lines(w: FamilyWriter, last: dict[str, tuple], label: str, rows_by_key: dict[str, list], extra,
           fmt, families: tuple[str, ...]) -> tuple[dict[str, tuple], int]:
    """Each key's (topic's, group's) lines of `families`: the last ones where its rows, its
    `extra(key, rows)` and the label are what they were formatted from, else `fmt(prefix, rows,
    extra)` anew. Adds them to `w`; returns what to keep for the next render and how many keys
    were formatted."""
    bodies: list[list[bytes]] = [[] for _ in families]
    kept: dict[str, tuple] = {}
    formatted = 0
    for key, rows in rows_by_key.items():
        more = extra(key, rows)
        entry = last.get(key)
        if entry is None or entry[0] != label or entry[1] != more or entry[2] != rows:
            entry = (label, more, rows, fmt(label + escape_label(key), rows, more))
            formatted += 1
        kept[key] = entry
        for out, body in zip(bodies, entry[3], strict=True):
            out.append(body)
    for name, parts in zip(families, bodies, strict=True):
        w.add_lines(name, b"".join(parts))
    return kept, formatted


def _partition_bodies(prefix: str, states: list[PartitionState], hanging: dict[int, int]) -> tuple[bytes, ...]:
    """One topic's lines of PARTITION_FAMILIES; `prefix` is its labels up to the topic name."""
    hwm, lso, lag, stalled, hang = [], [], [], [], []
    for s in states:
        lbl = f'{{{prefix}",partition="{s.partition}"}} '
        hwm.append(f"kafka_partition_high_watermark{lbl}{s.high_watermark}.0\n")
        lso.append(f"kafka_partition_last_stable_offset{lbl}{s.last_stable_offset}.0\n")
        lag.append(f"kafka_partition_lso_lag_offsets{lbl}{s.lso_lag}.0\n")
        stalled.append(f"kafka_partition_lso_stalled_seconds{lbl}{format_value(float(s.stalled_seconds))}\n")
        hang.append(f"kafka_transaction_hanging{lbl}{hanging.get(s.partition, 0)}.0\n")
    return tuple("".join(x).encode() for x in (hwm, lso, lag, stalled, hang))


def _group_bodies(prefix: str, rows: list[GroupLag]) -> tuple[bytes, ...]:
    """One group's lines of GROUP_FAMILIES; `prefix` is its labels up to the group name."""
    committed, rc, ru = [], [], []
    for g in rows:
        lbl = f'{{{prefix}",topic="{escape_label(g.topic)}",partition="{g.partition}"}} '
        committed.append(f"kafka_consumergroup_committed_offset{lbl}{g.committed}.0\n")
        rc.append(f"kafka_consumergroup_read_committed_lag_offsets{lbl}{g.lag_read_committed}.0\n")
        ru.append(f"kafka_consumergroup_read_uncommitted_lag_offsets{lbl}{g.lag_read_uncommitted}.0\n")
    return tuple("".join(x).encode() for x in (committed, rc, ru))


def render_snapshot(w: FamilyWriter, snap: ClusterSnapshot, granularity: str, id_cap: int,
                    render_open_transactions: bool = True, cluster_level: bool = True,
                    cache: RenderCache | None = None) -> dict[str, int]:
    """Write one cluster's poller snapshot. Returns {metric name: ids folded into
    transactional_id="__other__"}.
    `cluster_level=False` (a shard other than 0 of a split cluster) leaves out the facts
    about the whole cluster, which shard 0 exports. `cache` (the worker keeps one per
    cluster) carries unchanged sample lines over from the last render."""
    if cluster_level:
        _render_cluster_facts(w, snap)
    return _render_partitions_and_transactions(w, snap, granularity, id_cap, render_open_transactions,
                                               cache if cache is not None else RenderCache())


def _render_cluster_facts(w: FamilyWriter, snap: ClusterSnapshot) -> None:
    c = snap.cluster
    f = snap.facts
    w.add("kafka_cluster_brokers", {"cluster": c}, f.brokers)
    for name, ms in (("kafka_broker_transaction_max_timeout_seconds", f.transaction_max_timeout_ms),
                     ("kafka_broker_transactional_id_expiration_seconds", f.transactional_id_expiration_ms),
                     ("kafka_broker_producer_id_expiration_seconds", f.producer_id_expiration_ms)):
        w.add(name, {"cluster": c}, None if ms is None else ms / 1000)
    w.add("kafka_broker_transaction_state_log_min_isr_replicas", {"cluster": c}, f.transaction_state_log_min_isr)
    w.add("kafka_broker_transaction_state_log_replication_factor", {"cluster": c},
          f.transaction_state_log_replication_factor)
    for topic, ms in f.topic_retention_ms.items():
        w.add("kafka_topic_retention_seconds", {"cluster": c, "topic": topic}, ms / 1000 if ms >= 0 else math.inf)
    for api, ok in snap.capabilities.items():
        w.add("txnwatch_capability", {"cluster": c, "api": api}, 1 if ok else 0)
    for group_type, names in snap.group_types.items():
        w.add("kafka_cluster_groups", {"cluster": c, "group_type": group_type}, len(names))
    for feature, level in snap.features.items():
        w.add("kafka_cluster_feature_level", {"cluster": c, "feature": feature}, level)
    _render_txn_log(w, snap)
    for broker, n in snap.missing_brokers.items():
        w.add("kafka_broker_missing_replicas", {"cluster": c, "broker": broker}, n)


def _render_txn_log(w: FamilyWriter, snap: ClusterSnapshot) -> None:
    """__transaction_state's ISR per partition against the minimum its writes need."""
    if not snap.txn_log:
        return
    c = snap.cluster
    min_isr = derive.txn_log_min_isr(snap.facts)
    for p in snap.txn_log:
        lbl = {"cluster": c, "partition": p.partition}
        w.add("kafka_transaction_state_log_partition_isr_replicas", lbl, len(p.isr))
        if min_isr is not None:
            w.add("kafka_transaction_state_log_partition_min_isr_replicas", lbl,
                  derive.effective_min_isr(min_isr, len(p.replicas)))
    w.add("kafka_transaction_state_log_partitions_below_min_isr", {"cluster": c},
          len(derive.txn_log_below_min_isr(snap.txn_log, min_isr)))


def _render_partitions_and_transactions(w: FamilyWriter, snap: ClusterSnapshot, granularity: str, id_cap: int,
                                        render_open_transactions: bool, cache: RenderCache) -> dict[str, int]:
    c = snap.cluster
    hanging = defaultdict(int)
    for h in snap.hanging:
        hanging[(h.topic, h.partition)] += 1
    _render_offsets(w, snap, granularity, hanging, cache)
    for (topic, part), cause in snap.unavailable.items():
        w.add("kafka_partition_unavailable", {"cluster": c, "topic": topic, "partition": part, "cause": cause}, 1)
    for group, cause in snap.groups_unavailable.items():
        w.add("kafka_consumergroup_unavailable", {"cluster": c, "group": group, "cause": cause}, 1)
    for app, n in snap.epoch_bumps.items():
        w.add("kafka_transaction_epoch_bumps", {"cluster": c, "app": app}, n)
    for (app, how), n in snap.hanging_ended.items():
        w.add("kafka_transaction_hanging_ended", {"cluster": c, "app": app, "how": how}, n)

    folded: dict[str, int] = {}
    if snap.open_transactions is None:
        return folded
    txns = snap.open_transactions
    own = None if granularity == "partition" else cache.transactions.update(
        (OpenSeen(t.app, t.transactional_id, t.age_seconds, t.timeout_ms, t.two_phase) for t in txns), snap.taken_at,
        snap.facts.transaction_max_timeout_ms)
    # the partition leaders' word on the producers: the tap cannot tell, so also beside it
    families = [("kafka_transaction_last_append_age_seconds", lambda t: t.last_append_age_seconds, True)]
    if render_open_transactions:
        _render_open_counts(w, c, txns)
        families += [("kafka_transaction_timeout_headroom_seconds", lambda t: t.headroom_seconds, False),
                     ("kafka_transaction_state_unchanged_seconds", lambda t: t.state_unchanged_seconds, True)]
    for name, value, highest in families:
        series, folded[name] = budgeted(((t.app, t.transactional_id, value(t)) for t in txns), own, id_cap,
                                        highest=highest)
        for app, tid, v in series:
            w.add(name, {"cluster": c, "app": app, "transactional_id": tid}, v)
    return folded


def _render_open_counts(w: FamilyWriter, cluster: str, txns) -> None:
    per_app: dict[str, list] = defaultdict(list)
    for t in txns:
        per_app[t.app].append(t)
    for app, app_txns in per_app.items():
        lbl = {"cluster": cluster, "app": app}
        w.add("kafka_transaction_open", lbl, len(app_txns))
        for name, group in (("kafka_transaction_oldest_open_age_seconds", [t for t in app_txns if not t.two_phase]),
                            ("kafka_transaction_two_phase_oldest_age_seconds", [t for t in app_txns if t.two_phase])):
            ages = [t.age_seconds for t in group if t.age_seconds is not None]
            if group:
                w.add(name, lbl, max(ages) if ages else None)
        two_phase = sum(1 for t in app_txns if t.two_phase)
        if two_phase:
            w.add("kafka_transaction_two_phase_open", lbl, two_phase)


def _render_offsets(w: FamilyWriter, snap: ClusterSnapshot, granularity: str, hanging, cache: RenderCache) -> None:
    """The partition and group families at `granularity` (poll/granularity.py): partitions with
    series of their own through the cache, the rest summed per topic and per group's topic."""
    c = snap.cluster
    if granularity == "partition":
        cache.partition_lines(w, c, snap.partitions, hanging)
        cache.group_lines(w, c, snap.groups)
        return
    own = cache.series.update(snap) if granularity == "signal" else frozenset()
    rest = OTHER_PARTITIONS if granularity == "signal" else ALL_PARTITIONS
    # `own` is a few partitions among many: a row's topic is looked up first, and only the
    # rows of those few topics make a (topic, partition) key
    topics = {topic for topic, _ in own}
    cache.partition_lines(w, c, {tp: s for tp, s in snap.partitions.items() if tp[0] in topics and tp in own}
                          if own else {}, hanging)
    cache.group_lines(w, c, [g for g in snap.groups if g.topic in topics and (g.topic, g.partition) in own]
                      if own else [])
    sums = topic_sums((s for tp, s in snap.partitions.items() if tp[0] not in topics or tp not in own)
                      if own else snap.partitions.values(), hanging)
    cache.topic_sum_lines(w, c, sums, rest)
    rows = (g for g in snap.groups if g.topic not in topics or (g.topic, g.partition) not in own) if own else snap.groups
    cache.group_sum_lines(w, c, group_sums(rows), rest)
