"""The poller's snapshot as metric families: run once per poll (in the worker process that
polled), never at scrape time. Pure: a snapshot in, families out."""

from __future__ import annotations

import math
from collections import defaultdict

from ...apps import fold_ids
from ...metrics import FamilyWriter
from ..model import ClusterSnapshot
from . import derive


def render_snapshot(w: FamilyWriter, snap: ClusterSnapshot, granularity: str, id_cap: int,
                    render_open_transactions: bool = True, cluster_level: bool = True) -> int:
    """Write one cluster's poller snapshot. Returns how many id series were folded.
    `cluster_level=False` (a shard other than 0 of a split cluster) leaves out the facts
    about the whole cluster, which shard 0 exports."""
    if cluster_level:
        _render_cluster_facts(w, snap)
    return _render_partitions_and_transactions(w, snap, granularity, id_cap, render_open_transactions)


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
                                        render_open_transactions: bool) -> int:
    c = snap.cluster
    hanging = defaultdict(int)
    for h in snap.hanging:
        hanging[(h.topic, h.partition)] += 1
    if granularity == "topic":
        _render_topics(w, snap, hanging)
    else:
        for (topic, part), p in snap.partitions.items():
            lbl = {"cluster": c, "topic": topic, "partition": part}
            w.add("kafka_partition_high_watermark", lbl, p.high_watermark)
            w.add("kafka_partition_last_stable_offset", lbl, p.last_stable_offset)
            w.add("kafka_partition_lso_lag_offsets", lbl, p.lso_lag)
            w.add("kafka_partition_lso_stalled_seconds", lbl, p.stalled_seconds)
            w.add("kafka_transaction_hanging", lbl, hanging.get((topic, part), 0))
    for (topic, part), cause in snap.unavailable.items():
        w.add("kafka_partition_unavailable", {"cluster": c, "topic": topic, "partition": part, "cause": cause}, 1)
    for group, cause in snap.groups_unavailable.items():
        w.add("kafka_consumergroup_unavailable", {"cluster": c, "group": group, "cause": cause}, 1)
    for g in snap.groups:
        base = {"cluster": c, "group": g.group, "topic": g.topic, "partition": g.partition}
        w.add("kafka_consumergroup_committed_offset", base, g.committed)
        w.add("kafka_consumergroup_read_committed_lag_offsets", base, g.lag_read_committed)
        w.add("kafka_consumergroup_read_uncommitted_lag_offsets", base, g.lag_read_uncommitted)
    for app, n in snap.epoch_bumps.items():
        w.add("kafka_transaction_epoch_bumps", {"cluster": c, "app": app}, n)

    folded = 0
    if snap.open_transactions is not None and render_open_transactions:
        per_app: dict[str, list] = defaultdict(list)
        for t in snap.open_transactions:
            per_app[t.app].append(t)
        for app, txns in per_app.items():
            lbl = {"cluster": c, "app": app}
            w.add("kafka_transaction_open", lbl, len(txns))
            for name, group in (("kafka_transaction_oldest_open_age_seconds", [t for t in txns if not t.two_phase]),
                                ("kafka_transaction_two_phase_oldest_age_seconds", [t for t in txns if t.two_phase])):
                ages = [t.age_seconds for t in group if t.age_seconds is not None]
                if group:
                    w.add(name, lbl, max(ages) if ages else None)
            two_phase = sum(1 for t in txns if t.two_phase)
            if two_phase:
                w.add("kafka_transaction_two_phase_open", lbl, two_phase)
        series, folded = fold_ids(((t.app, t.transactional_id, t.headroom_seconds)
                                   for t in snap.open_transactions if t.headroom_seconds is not None), id_cap)
        best: dict[tuple[str, str], float] = {}
        for app, tid, v in series:
            best[(app, tid)] = min(v, best.get((app, tid), v))
        for (app, tid), v in best.items():
            w.add("kafka_transaction_timeout_headroom_seconds",
                  {"cluster": c, "app": app, "transactional_id": tid}, v)
    return folded


def _render_topics(w: FamilyWriter, snap: ClusterSnapshot, hanging) -> None:
    agg: dict[str, list[float]] = {}
    for (topic, part), p in snap.partitions.items():
        a = agg.setdefault(topic, [0, 0, 0, 0.0, 0])
        a[0] += p.high_watermark
        a[1] += p.last_stable_offset
        a[2] += p.lso_lag
        a[3] = max(a[3], p.stalled_seconds)
        a[4] += hanging.get((topic, part), 0)
    for topic, (hwm, lso, lag, stalled, hang) in agg.items():
        lbl = {"cluster": snap.cluster, "topic": topic, "partition": "all"}
        w.add("kafka_partition_high_watermark", lbl, hwm)
        w.add("kafka_partition_last_stable_offset", lbl, lso)
        w.add("kafka_partition_lso_lag_offsets", lbl, lag)
        w.add("kafka_partition_lso_stalled_seconds", lbl, stalled)
        w.add("kafka_transaction_hanging", lbl, hang)
