"""Pure derivations from polled data: LSO lag and stalls, group lag, open transactions,
timeout headroom, hanging transactions (kafka-transactions.sh find-hanging logic),
epoch bumps, the transaction log's ISR (findings.py words what a person should act on). No
I/O; time is always an argument."""

from __future__ import annotations

import itertools
import operator
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import NamedTuple

from ...kafka.answers import (
    ActiveProducer,
    ClusterFacts,
    PartitionOffsets,
    PartitionReplicas,
    TxnDescription,
)
from ..model import (
    OPEN_STATES,
    TP,
    GroupLag,
    HangingTransaction,
    OpenTransaction,
    PartitionState,
    is_two_phase,
)

_GROUP_TOPIC = operator.itemgetter(0, 1)     # a committed row's (group, topic)
_NEW_ROW = tuple.__new__

LATE_TRANSACTION_SLACK_MS = 5 * 60 * 1000   # Kafka's own slack for "late" transactions


def partition_states(offsets: Iterable[PartitionOffsets], previous: Mapping[TP, PartitionState],
                     now: float, lso_record_ts: Mapping[tuple[str, int, int], float] | None = None,
                     ) -> dict[TP, PartitionState]:
    """LSO lag and stall clocks. A partition is stalled while LSO < HWM and the LSO has not
    moved; the clock starts at the timestamp of the record at the LSO when known (the first
    record of the oldest open transaction, so an exporter restart does not reset it), else
    at the first poll that saw this LSO value. Any LSO movement restarts the clock.

    Built on a copy of `previous`, which keeps its keys: a partition whose offsets did not move
    costs no new object (at 100,000 partitions a new key each poll was megabytes of churn)."""
    lso_record_ts = lso_record_ts or {}
    offsets = offsets if isinstance(offsets, Sequence) else list(offsets)
    out: dict[TP, PartitionState] = dict(previous)
    known = 0        # partitions of `previous` read again
    for o in offsets:
        key = (o.topic, o.partition)
        prev = previous.get(key)
        known += prev is not None
        since: float | None = None
        if o.last_stable_offset >= o.high_watermark:
            if prev is not None and prev.stalled_since is None and prev.high_watermark == o.high_watermark \
                    and prev.last_stable_offset == o.last_stable_offset:
                continue     # unchanged: the same object, so the render reuses its lines
        else:
            if prev is not None and prev.stalled_since is not None and \
                    prev.last_stable_offset == o.last_stable_offset:
                since = prev.stalled_since
            else:
                since = now
            ts = lso_record_ts.get((o.topic, o.partition, o.last_stable_offset))
            if ts is not None and 0 < ts <= now:
                since = min(since, ts)
        if since is None:
            out[key] = o if o.stalled_since is None else o._replace(stalled_since=None, stalled_seconds=0.0)
        else:
            out[key] = PartitionState(o.topic, o.partition, o.high_watermark, o.last_stable_offset, since, now - since)
    if known < len(previous):      # partitions not read this poll are not this poll's
        read = {(o.topic, o.partition) for o in offsets}
        for key in [k for k in previous if k not in read]:
            del out[key]
    return out


def stalled_lsos(offsets: Iterable[PartitionOffsets]) -> set[tuple[str, int, int]]:
    """(topic, partition, lso) of every partition whose LSO is below its HWM."""
    return {(o.topic, o.partition, o.last_stable_offset) for o in offsets
            if o.last_stable_offset < o.high_watermark}


def lso_timestamps_needed(stalled: Iterable[tuple[str, int, int]],
                          known: Mapping[tuple[str, int, int], float]) -> list[tuple[str, int, int]]:
    """(topic, partition, lso) whose first-open-record timestamp is not known yet."""
    return sorted(k for k in stalled if k not in known)


def group_lags(committed: Iterable[tuple[str, str, int, int]],
               partitions: Mapping[TP, PartitionState], cache: dict | None = None) -> list[GroupLag]:
    """Lag of each (group, topic, partition, committed offset) against the LSO and the HWM.

    `cache` (a dict the caller keeps from one poll to the next): a group's topic whose rows
    and partition states are those of the last poll (compared whole, at C speed: an unchanged
    partition keeps its state object) gets last poll's GroupLag objects. Most of a big
    estate's groups commit nothing new between two polls, and their topics do not move."""
    out: list[GroupLag] = []
    last = {} if cache is None else cache
    kept: dict = {}
    get = partitions.get
    for key, run in itertools.groupby(committed, key=_GROUP_TOPIC):   # a group's topic's rows together
        rows = list(run)
        seen = last.get(key)
        if seen is not None and seen[0] == rows:
            states = tuple(map(get, seen[1]))
            if states == seen[2]:
                kept[key] = seen
                out.extend(seen[3])
                continue
        group, topic = key
        _, _, indexes, offsets = zip(*rows, strict=True)
        tps = tuple(zip(itertools.repeat(topic), indexes))
        states = tuple(map(get, tps))
        # tuple.__new__ is the named tuple's own constructor without its Python-level
        # __new__: a third of the time, at one GroupLag per committed partition
        lags = [_NEW_ROW(GroupLag, (group, topic, index, offset,
                                    s.last_stable_offset - offset if s.last_stable_offset > offset else 0,
                                    s.high_watermark - offset if s.high_watermark > offset else 0, 0))
                for index, offset, s in zip(indexes, offsets, states, strict=True) if s is not None and offset >= 0]
        kept[key] = (rows, tps, states, lags)
        out.extend(lags)
    if cache is not None:
        cache.clear()
        cache.update(kept)     # only this poll's rows: a group or topic gone is forgotten
    return out


# ------------------------------------------------------------------ lag that is only markers
# A commit or abort marker takes an offset of its own, which no consumer ever receives: a
# read_committed consumer that commits the offset after its last record sits one marker below
# the LSO for good. Small gaps that have not moved since the last poll are read once (by a
# read_committed consumer: it reaches the LSO without a record) and their verdict applied.
# "Small": one marker per transaction end, so a few back-to-back ends, read in one small fetch.
# (The help of kafka_consumergroup_read_committed_lag_offsets and docs/exporter.md name it.)
MARKER_GAP_MAX_OFFSETS = 5

MarkerGap = tuple[str, int, int, int]    # (topic, partition, committed offset, LSO)


def steady_marker_gaps(groups: Iterable[GroupLag], partitions: Mapping[TP, PartitionState],
                       previous_groups: Iterable[GroupLag], previous_partitions: Mapping[TP, PartitionState],
                       max_offsets: int = MARKER_GAP_MAX_OFFSETS) -> set[MarkerGap]:
    """The gaps between a group's committed offset and the LSO that may hold only markers:
    `groups` as group_lags made them (lag against the LSO), at most `max_offsets` wide, with
    the same committed offset and the same LSO as at the last poll (a consumer still reading
    moves on by itself)."""
    small = [g for g in groups if 0 < g.lag_read_committed <= max_offsets]
    if not small:
        return set()
    before = {(g.group, g.topic, g.partition): g.committed for g in previous_groups}
    out = set()
    for g in small:
        tp = (g.topic, g.partition)
        now, then = partitions.get(tp), previous_partitions.get(tp)
        if now is None or then is None or now.last_stable_offset != then.last_stable_offset:
            continue
        if before.get((g.group, g.topic, g.partition)) == g.committed:
            out.add((g.topic, g.partition, g.committed, now.last_stable_offset))
    return out


def marker_gaps_to_read(steady: Iterable[MarkerGap], verdicts: Mapping[MarkerGap, bool],
                        max_partitions: int) -> list[MarkerGap]:
    """The steady gaps without a verdict yet, sorted, from at most `max_partitions` partitions
    (one read per partition answers all of its gaps)."""
    out: list[MarkerGap] = []
    seen: set[TP] = set()
    for gap in sorted(k for k in steady if k not in verdicts):
        tp = gap[:2]
        if tp not in seen and len(seen) >= max_partitions:
            continue
        seen.add(tp)
        out.append(gap)
    return out


def with_marker_gaps(groups: list[GroupLag], verdicts: Mapping[MarkerGap, bool]) -> list[GroupLag]:
    """`groups` (as group_lags made them) with a read_committed lag of 0 where the gap to the
    LSO was found to hold only markers; the gap's width is kept as marker_offsets."""
    if not any(verdicts.values()):
        return groups
    out = []
    for g in groups:
        gap = (g.topic, g.partition, g.committed, g.committed + g.lag_read_committed)
        if g.lag_read_committed > 0 and verdicts.get(gap):
            g = g._replace(lag_read_committed=0, marker_offsets=g.lag_read_committed)
        out.append(g)
    return out


def blocked_groups(groups: Iterable[GroupLag], partitions: Mapping[TP, PartitionState],
                   min_stall_seconds: float = 0.0) -> list[GroupLag]:
    """read_committed groups sitting on a partition whose LSO is stalled: they cannot read
    past the open transaction whatever their lag against the HWM says."""
    out = []
    for g in groups:
        p = partitions.get((g.topic, g.partition))
        if p and p.stalled_since is not None and p.stalled_seconds >= min_stall_seconds:
            out.append(g)
    return out


# ------------------------------------------------------------------ KIP-664 derived
def open_transactions(descriptions: Iterable[TxnDescription], app_of: Callable[[str], str],
                      now_ms: int, states: Mapping[str, StateSeen] | None = None,
                      last_append_ms: Mapping[str, int] | None = None) -> list[OpenTransaction]:
    """Open transactions with age and timeout headroom (start + timeout - now), oldest first.
    Two-phase-commit transactions (KIP-939) have no headroom: their timeout is never applied.
    `states` (state_since) and `last_append_ms` (last_appends) give each its signs of life."""
    states, last_append_ms = states or {}, last_append_ms or {}
    out = []
    for d in descriptions:
        if d.state not in OPEN_STATES:
            continue
        known = d.start_ms >= 0
        age = (now_ms - d.start_ms) / 1000 if known else None
        headroom = (d.start_ms + d.timeout_ms - now_ms) / 1000 if known and not is_two_phase(d.timeout_ms) else None
        seen = states.get(d.transactional_id)
        appended = last_append_ms.get(d.transactional_id)
        out.append(OpenTransaction(d.transactional_id, app_of(d.transactional_id), d.producer_id,
                                   d.producer_epoch, d.state, d.start_ms, d.timeout_ms,
                                   tuple(sorted(d.partitions)), age, headroom,
                                   None if seen is None else max(0.0, (now_ms - seen.since_ms) / 1000),
                                   None if appended is None else max(0.0, (now_ms - appended) / 1000)))
    out.sort(key=lambda t: (t.start_ms < 0, t.start_ms))
    return out


class StateSeen(NamedTuple):
    """An open transaction's coordinator state as the polls saw it, and since when."""

    state: tuple[str, int, int, frozenset[TP]]    # status, producer id, epoch, partitions
    start_ms: int
    since_ms: int


def state_since(previous: Mapping[str, StateSeen], descriptions: Iterable[TxnDescription],
                now_ms: int) -> dict[str, StateSeen]:
    """When each open transaction's coordinator state last changed, as far as polls can tell
    (DescribeTransactions has no last-update time): the time a poll first saw that state. A
    transaction no earlier poll saw counts from its start, the earliest its state can date from
    (so an exporter restart does not make a stuck transaction look alive). Only this poll's
    open ids are kept: ids no longer open are forgotten."""
    out = {}
    for d in descriptions:
        if d.state not in OPEN_STATES:
            continue
        state = (d.state, d.producer_id, d.producer_epoch, d.partitions)
        prev = previous.get(d.transactional_id)
        if prev is not None and prev.start_ms == d.start_ms:
            since = prev.since_ms if prev.state == state else now_ms
        else:
            since = min(d.start_ms, now_ms) if d.start_ms >= 0 else now_ms
        out[d.transactional_id] = StateSeen(state, d.start_ms, since)
    return out


def last_appends(descriptions: Iterable[TxnDescription], producers: Iterable[ActiveProducer]) -> dict[str, int]:
    """Each open transaction's producer's latest append (DescribeProducers' last timestamp, ms)
    on any of its partitions that a leader described with a transaction of it open there."""
    latest: dict[tuple[str, int, int], int] = {}
    for p in producers:
        if p.txn_start_offset >= 0 and p.last_timestamp_ms >= 0:
            key = (p.topic, p.partition, p.producer_id)
            latest[key] = max(latest.get(key, p.last_timestamp_ms), p.last_timestamp_ms)
    out = {}
    for d in descriptions:
        if d.state not in OPEN_STATES:
            continue
        seen = [latest[k] for k in ((t, p, d.producer_id) for t, p in d.partitions) if k in latest]
        if seen:
            out[d.transactional_id] = max(seen)
    return out


def hanging_may_hold(partitions: Mapping[TP, PartitionState], unavailable: Mapping[TP, str]) -> list[TP]:
    """The partitions that may hold a hanging transaction and can be asked about their
    producers, sorted: their LSO is stalled below the HWM, and their leader answered this poll."""
    return sorted(tp for tp, s in partitions.items() if s.stalled_since is not None and tp not in unavailable)


def hanging_candidates(producers: Iterable[ActiveProducer], max_timeout_ms: int,
                       now_ms: int) -> list[ActiveProducer]:
    """Producers with an open transaction on a partition whose last write is older than the
    broker's transaction.max.timeout.ms: the coordinator should have ended it by now."""
    return [p for p in producers
            if p.txn_start_offset >= 0 and now_ms - p.last_timestamp_ms > max_timeout_ms]


def find_hanging(candidates: Iterable[ActiveProducer], txn_id_of_pid: Mapping[int, str],
                 descriptions: Mapping[str, TxnDescription], now_ms: int) -> list[HangingTransaction]:
    """kafka-transactions.sh find-hanging: a candidate hangs when no transactional id maps
    to its producer id, the coordinator has no description, the description belongs to
    another producer id, or the described transaction does not include the partition."""
    out = []
    for c in candidates:
        tid = txn_id_of_pid.get(c.producer_id)
        d = descriptions.get(tid) if tid else None
        if tid is None:
            reason = "no_transactional_id"
        elif d is None:
            reason = "no_coordinator_state"
        elif d.producer_id != c.producer_id:
            reason = "producer_id_mismatch"
        elif d.state not in OPEN_STATES:
            reason = "coordinator_not_open"
        elif (c.topic, c.partition) not in d.partitions:
            reason = "partition_not_in_transaction"
        else:
            continue
        out.append(HangingTransaction(c.topic, c.partition, c.producer_id, c.producer_epoch,
                                      c.txn_start_offset, (now_ms - c.last_timestamp_ms) / 1000, tid,
                                      reason))
    return out


# How a hanging transaction ended, as far as the coordinator's state of its id says.
ENDED_BY_PRODUCER, ENDED_BY_COORDINATOR, ENDED_BY_MARKERS, ENDED_UNKNOWN = "producer", "coordinator", "markers", "unknown"
HANGING_ENDED_KEPT = 20     # the latest ends the page lists


@dataclass(frozen=True, slots=True)
class HangingSeen:
    """A hanging transaction as the last poll saw it, with what its id's coordinator held then."""

    hanging: HangingTransaction
    coordinator: TxnDescription | None


def hanging_key(h: HangingTransaction) -> tuple[str, int, int, int]:
    return h.topic, h.partition, h.producer_id, h.start_offset


def hanging_gone(previous: Mapping[tuple, HangingSeen], current: Iterable[HangingTransaction],
                 partitions: Mapping[TP, PartitionState], unavailable: Mapping[TP, str]) -> list[HangingSeen]:
    """The last poll's hanging transactions that ended since: not hanging any more, their
    partition read this poll and its LSO past their first offset (not merely unread)."""
    now = {hanging_key(h) for h in current}
    out = []
    for key, seen in previous.items():
        tp = key[:2]
        p = partitions.get(tp)
        if key in now or tp in unavailable or p is None or p.last_stable_offset <= seen.hanging.start_offset:
            continue
        out.append(seen)
    return out


def how_hanging_ended(seen: HangingSeen, after: TxnDescription | None, now_ms: int) -> str:
    """Who wrote the marker that ended a hanging transaction. The coordinator writes markers
    for its id's current producer only, when a transaction of it ends: if its state for that
    producer did not change while the hanging one ended, the markers were written straight to
    the partition (an operator's abort: `txnwatch abort`, `kafka-transactions.sh abort`).
    If a later transaction of the same producer ended, its markers closed the partition too:
    the coordinator's, when that one was aborted past its timeout, else the producer's."""
    h, before = seen.hanging, seen.coordinator
    if h.producer_id < 0:
        return ENDED_UNKNOWN                  # found by a stalled LSO: no producer to ask about
    if after is None or after.producer_id != h.producer_id or _same_state(before, after):
        return ENDED_BY_MARKERS
    timed_out = after.state in ("PrepareAbort", "CompleteAbort") and after.start_ms >= 0 \
        and after.start_ms + after.timeout_ms < now_ms
    return ENDED_BY_COORDINATOR if timed_out else ENDED_BY_PRODUCER


def _same_state(before: TxnDescription | None, after: TxnDescription) -> bool:
    return before is not None and (before.producer_id, before.producer_epoch, before.state, before.start_ms) == \
        (after.producer_id, after.producer_epoch, after.state, after.start_ms)


def lso_hanging(partitions: Mapping[TP, PartitionState], threshold_seconds: float) -> list[HangingTransaction]:
    """Fallback without KIP-664: a partition whose LSO has been stalled longer than the
    threshold holds a transaction the coordinator should have ended."""
    return [HangingTransaction(p.topic, p.partition, -1, -1, p.last_stable_offset, p.stalled_seconds,
                               None, "lso_stalled")
            for p in partitions.values()
            if p.stalled_since is not None and p.stalled_seconds >= threshold_seconds]


def hanging_threshold_seconds(facts: ClusterFacts, configured: float | None, default_max_ms: int) -> float:
    if configured is not None:
        return configured
    max_ms = facts.transaction_max_timeout_ms or default_max_ms
    return (max_ms + LATE_TRANSACTION_SLACK_MS) / 1000


def ended_since(previously_open: Iterable[str], now_open: set[str]) -> set[str]:
    """Transactional ids open at the last poll that are not open now: described once more
    to see how their transaction ended (an id expired since is simply not described)."""
    return {tid for tid in previously_open if tid not in now_open}


def remember_epochs(epochs: dict[str, tuple[int, int]], described: Iterable[TxnDescription], limit: int) -> None:
    """Keep the (producer id, epoch) each id was last described with, for epoch_bumps, at most
    `limit` ids: the least recently described are forgotten first (an id idle that long
    is next compared from its next description)."""
    for d in described:
        epochs.pop(d.transactional_id, None)    # re-inserted last: dicts keep insertion order
        epochs[d.transactional_id] = (d.producer_id, d.producer_epoch)
    for tid in list(itertools.islice(epochs, max(0, len(epochs) - limit))):
        del epochs[tid]


def epoch_bumps(previous: Mapping[str, tuple[int, int]], current: Iterable[TxnDescription]) -> list[str]:
    """Transactional ids whose producer epoch rose (same producer id) or whose producer id
    changed since the last poll. Under transaction version 2 every completion bumps the
    epoch, so this is a rate of epoch changes, not of fencing."""
    bumped = []
    for d in current:
        prev = previous.get(d.transactional_id)
        if prev and (prev[0] != d.producer_id or d.producer_epoch > prev[1]):
            bumped.append(d.transactional_id)
    return bumped


# ------------------------------------------------------------------ the transaction log's ISR
def effective_min_isr(min_insync_replicas: int, replication_factor: int) -> int:
    """The ISR a __transaction_state partition needs for the coordinator's writes (acks=all):
    min.insync.replicas capped at the partition's replica count, as the leader's append check
    reads it (Kafka's Partition.effectiveMinIsr; a single 3.9 or 4.x node with min ISR 2 and
    RF 1 commits transactions: tests/integration/test_poller.py)."""
    return min(min_insync_replicas, replication_factor) if replication_factor > 0 else min_insync_replicas


def txn_log_min_isr(facts: ClusterFacts) -> int | None:
    """__transaction_state's min.insync.replicas: the topic's own, else the broker default it
    was created with (transaction.state.log.min.isr); None when neither is known."""
    if facts.transaction_state_min_insync_replicas is not None:
        return facts.transaction_state_min_insync_replicas
    return facts.transaction_state_log_min_isr


def txn_log_below_min_isr(parts: Iterable[PartitionReplicas],
                          min_isr: int | None) -> list[tuple[PartitionReplicas, int]]:
    """(partition, its effective minimum ISR) for every __transaction_state partition that
    cannot take the coordinator's writes: no leader, or an ISR below its effective minimum.
    Every InitProducerId and EndTxn of the transactional ids that hash to it blocks."""
    out = []
    for p in parts:
        need = effective_min_isr(min_isr, len(p.replicas)) if min_isr is not None else 1
        if p.leader < 0 or len(p.isr) < need:
            out.append((p, need))
    return out


def missing_brokers(parts: Iterable[PartitionReplicas], live: Iterable[int]) -> dict[int, int]:
    """{broker id: partitions listing it as a replica} for brokers absent from the cluster
    metadata (a broker that is down), from the partitions the metadata showed degraded."""
    live = set(live)
    out: dict[int, int] = {}
    for p in parts:
        for r in p.replicas:
            if r not in live:
                out[r] = out.get(r, 0) + 1
    return out


def with_unavailable(partitions: Mapping[TP, PartitionState], previous: Mapping[TP, PartitionState],
                     unavailable: Iterable[TP]) -> Mapping[TP, PartitionState]:
    """This poll's partitions, plus the last known state of those it could not read (an
    offline partition, a leader that did not answer): never lost, served as of when read.
    Copied only when one is added: at 100,000 partitions a copy is megabytes each poll."""
    kept = [tp for tp in unavailable if tp not in partitions and tp in previous]
    if not kept:
        return partitions
    out = dict(partitions)
    for tp in kept:
        out[tp] = previous[tp]
    return out


def with_groups_unavailable(groups: list[GroupLag], previous: Iterable[GroupLag],
                            unavailable: Mapping[str, str]) -> list[GroupLag]:
    """This poll's group lags, plus the last known ones of groups whose coordinator did not
    answer (left out of this poll): never lost, served as of when read."""
    if not unavailable:
        return groups
    return groups + [g for g in previous if g.group in unavailable]


def java_string_hash(s: str) -> int:
    """Java's String.hashCode (UTF-16 code units, 32-bit overflow)."""
    data = s.encode("utf-16-be")
    h = 0
    for i in range(0, len(data), 2):
        h = (31 * h + (data[i] << 8 | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def txn_log_partition_of(transactional_id: str, partitions: int) -> int:
    """The __transaction_state partition (and so the coordinator) of a transactional id, as
    the broker computes it: Utils.abs(transactionalId.hashCode) % partitions."""
    h = java_string_hash(transactional_id)
    return (0 if h == -(1 << 31) else abs(h)) % partitions
