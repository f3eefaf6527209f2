"""Reading the cluster for `txnwatch abort`: one poll of the exporter's own poller (partition
offsets and stall clocks, read_committed groups, find-hanging), then the KIP-664 calls that
name each transaction the target selects: the producers holding the partitions
(DescribeProducers: first offset, epoch, last write), their ids (ListTransactions by producer
id) and what their coordinators hold (DescribeTransactions). Reads only."""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass

from ..apps import AppResolver
from ..config import ClusterConfig
from ..exporter.model import OPEN_STATES, TP, ClusterSnapshot, GroupLag
from ..exporter.poll.poller import ClusterPoller
from ..kafka.answers import ActiveProducer, TxnDescription
from ..kafka.login import status_of as login_status
from .plan import BlockedGroup, Pin, Transaction, may_write_markers
from .targets import APP, HANGING, PARTITION, TRANSACTIONAL_ID, Target, TargetError


@dataclass(frozen=True)
class Survey:
    cluster: str
    bootstrap: str
    taken_at_ms: int
    transactions: tuple[Transaction, ...]
    may_write_markers: bool | None
    principal: str | None
    notes: tuple[str, ...] = ()       # what the target named that holds nothing open


class Surveyor:
    """The reads of one cluster, through the poller's clients (closed by close())."""

    def __init__(self, cfg: ClusterConfig) -> None:
        self.cfg = cfg
        self.poller = ClusterPoller(cfg)
        self.resolver = AppResolver(cfg.app_rules)
        self.api = self.poller.txn_api
        self.io = self.poller.io

    def survey(self, target: Target) -> Survey:
        snap = self.poller.poll_once()
        transactions, notes = self._select(target, snap)
        props = self.cfg.client_properties()
        return Survey(self.cfg.name, self.cfg.bootstrap_servers, int(time.time() * 1000), tuple(transactions),
                      may_write_markers(self.io.cluster_operations()), principal_of(props), tuple(notes))

    # ------------------------------------------------------------------ targets
    def _select(self, target: Target, snap: ClusterSnapshot) -> tuple[list[Transaction], list[str]]:
        if target.kind == HANGING:
            return self._hanging(snap), []
        if target.kind == PARTITION:
            return self._on_partition(target, snap), []
        if target.kind == TRANSACTIONAL_ID:
            return self._of_ids([target.value], snap, target.describe())
        if target.kind == APP:
            return self._of_ids(self._ids_of_app(target.value), snap, target.describe())
        raise TargetError(f"unknown target kind {target.kind!r}")

    def _hanging(self, snap: ClusterSnapshot) -> list[Transaction]:
        """The exporter's hanging transactions. Without KIP-664's find-hanging (an LSO stalled
        past the threshold), the producer whose open transaction starts at the LSO."""
        held = {(h.topic, h.partition, h.producer_id) for h in snap.hanging}
        producers = self._open_producers(sorted({(h.topic, h.partition) for h in snap.hanging}))
        chosen = [p for p in producers
                  if (p.topic, p.partition, p.producer_id) in held
                  or ((p.topic, p.partition, -1) in held and _holds_lso(p, snap))]
        return self._transactions(chosen, snap)

    def _on_partition(self, target: Target, snap: ClusterSnapshot) -> list[Transaction]:
        tp = (target.topic, target.partition)
        if tp not in snap.partitions:
            raise TargetError(unknown_partition(target.topic, target.partition, snap))
        return self._transactions(self._open_producers([tp]), snap)

    def _of_ids(self, ids: list[str], snap: ClusterSnapshot, what: str) -> tuple[list[Transaction], list[str]]:
        if not snap.txn_log:
            raise TargetError(f"{what}: no transactional producer has run on this cluster yet (it has no "
                              "__transaction_state topic)")
        described = self.api.describe_transactions(ids)
        unknown = [i for i in ids if i not in described]
        if len(ids) == 1 and unknown:
            raise TargetError(f"transactional id {ids[0]!r} is unknown to its coordinator: never used on this "
                              "cluster, or expired (transactional.id.expiration.ms); `txnwatch check` lists the "
                              "open ones")
        pids = {d.producer_id for d in described.values() if d.state in OPEN_STATES}
        # an id's earlier producer ids may still hang on partitions its coordinator forgot
        pids |= {h.producer_id for h in snap.hanging if h.transactional_id in described and h.producer_id >= 0}
        tps = {tp for d in described.values() if d.state in OPEN_STATES for tp in d.partitions}
        tps |= {(h.topic, h.partition) for h in snap.hanging if h.transactional_id in described}
        chosen = [p for p in self._open_producers(sorted(tps)) if p.producer_id in pids]
        notes = [] if chosen else [f"nothing open for {what} on any partition ({_states(described.values())})"]
        return self._transactions(chosen, snap), notes

    def _ids_of_app(self, app: str) -> list[str]:
        ids = sorted(t.transactional_id for t in self.api.list_transactions() if self.resolver(t.transactional_id) == app)
        if not ids:
            apps = sorted({self.resolver(t.transactional_id) for t in self.api.list_transactions()})
            raise TargetError(f"no transactional id of app {app!r} on this cluster; apps with ids: "
                              f"{', '.join(apps[:20]) or 'none'}{' ...' if len(apps) > 20 else ''}")
        return ids

    # ------------------------------------------------------------------ reads
    def _open_producers(self, tps: list[TP]) -> list[ActiveProducer]:
        """The producers with an open transaction on these partitions."""
        if not tps:
            return []
        return [p for p in self.api.describe_producers(tps) if p.txn_start_offset >= 0]

    def _transactions(self, producers: Iterable[ActiveProducer], snap: ClusterSnapshot) -> list[Transaction]:
        by_pid: dict[int, list[ActiveProducer]] = {}
        for p in producers:
            by_pid.setdefault(p.producer_id, []).append(p)
        if not by_pid:
            return []
        ids = self.api.pids_to_ids(by_pid)
        described = self.api.describe_transactions(sorted(set(ids.values())))
        reasons = {(h.topic, h.partition, h.producer_id): h.reason for h in snap.hanging}
        out = []
        for pid, held in sorted(by_pid.items()):
            tid = ids.get(pid)
            app, scheme = self.resolver.resolve(tid) if tid else (None, None)
            pins = tuple(_pin(p, snap) for p in sorted(held, key=lambda p: (p.topic, p.partition)))
            reason = next((reasons[(p.topic, p.partition, pid)] for p in held
                           if (p.topic, p.partition, pid) in reasons), None)
            if reason is None and any((p.topic, p.partition, -1) in reasons for p in held):
                reason = "lso_stalled"
            out.append(Transaction(pid, max(p.producer_epoch for p in held), tid, app, scheme,
                                   described.get(tid) if tid else None, reason, pins))
        return out

    def producer_holds(self, pin: Pin, producer_id: int) -> bool:
        """The producer's transaction still starts at the pin's offset on that partition (read
        again just before writing: a re-run never aborts twice)."""
        return any(p.producer_id == producer_id and p.txn_start_offset == pin.start_offset
                   for p in self._open_producers([(pin.topic, pin.partition)]))

    def last_stable_offsets(self, tps: Iterable[TP]) -> dict[TP, int]:
        wanted = set(tps)
        topics = {t: n for t, n in self.io.metadata(lambda name: name in {t for t, _ in wanted}).topics.items()}
        offsets, _ = self.io.offsets(topics, lambda t, n: [p for p in range(n) if (t, p) in wanted])
        return {(o.topic, o.partition): o.last_stable_offset for o in offsets}

    def committed(self, groups: Iterable[str], tps: Iterable[TP]) -> dict[tuple[str, str, int], int]:
        wanted_groups, wanted_tps = set(groups), set(tps)
        if not wanted_groups:
            return {}
        rows = self.io.group_offsets(lambda g: g in wanted_groups)
        return {(g, t, p): o for g, t, p, o in rows if (t, p) in wanted_tps}

    def close(self) -> None:
        self.io.close()
        self.api.close()


def _holds_lso(p: ActiveProducer, snap: ClusterSnapshot) -> bool:
    state = snap.partitions.get((p.topic, p.partition))
    return state is not None and state.last_stable_offset == p.txn_start_offset


def _pin(p: ActiveProducer, snap: ClusterSnapshot) -> Pin:
    state = snap.partitions.get((p.topic, p.partition))
    lso, hwm = (state.last_stable_offset, state.high_watermark) if state else (-1, -1)
    groups = tuple(_blocked(g) for g in snap.groups
                   if g.topic == p.topic and g.partition == p.partition and g.lag_read_uncommitted > 0)
    return Pin(p.topic, p.partition, p.txn_start_offset, p.coordinator_epoch, p.last_timestamp_ms, lso, hwm,
               state.stalled_since if state else None, groups)


def _blocked(g: GroupLag) -> BlockedGroup:
    return BlockedGroup(g.group, g.committed, g.lag_read_committed, g.lag_read_uncommitted)


def _states(described: Iterable[TxnDescription]) -> str:
    return ", ".join(f"{d.transactional_id} {d.state}" for d in described) or "none described"


def unknown_partition(topic: str, partition: int, snap: ClusterSnapshot) -> str:
    count = sum(1 for t, _ in snap.partitions if t == topic)
    if count:
        return f"partition {topic}-{partition} does not exist: {topic} has partitions 0 to {count - 1}"
    return (f"no topic {topic!r} on this cluster (or the configuration's `topics` leaves it out); "
            "check the name with kafka-topics.sh --list")


def principal_of(props) -> str | None:
    """The Kafka principal the command acts as (for the audit trail and the ACL line)."""
    status = login_status(props)
    if status is not None and status.principal:
        return status.principal
    return props.get("sasl.username") or None
