"""Immutable snapshot types. A poll builds one ClusterSnapshot; a scrape renders the last one.
What the Kafka calls answer (partition offsets, replicas, broker configs, KIP-664's
listings) are the Kafka room's plain values (txnwatch/kafka/answers.py), kept in the
snapshot as they came."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import NamedTuple

from ..kafka.answers import ClusterFacts, PartitionReplicas

TP = tuple[str, int]
OPEN_STATES = frozenset({"Ongoing", "PrepareCommit", "PrepareAbort", "PrepareEpochFence"})
# KIP-939 two-phase commit: a producer with transaction.two.phase.commit.enable gets this
# transaction timeout (Integer.MAX_VALUE) from the coordinator, which then never aborts its
# transactions: an external transaction manager decides when they end.
TWO_PHASE_TIMEOUT_MS = 2_147_483_647


def is_two_phase(timeout_ms: int) -> bool:
    """A KIP-939 two-phase-commit transaction (recognised by its timeout)."""
    return timeout_ms >= TWO_PHASE_TIMEOUT_MS


# The per-partition and per-row records below are NamedTuples, not dataclasses: a poll of a
# big cluster builds one per partition and group row, and a tuple is built in a third of a
# frozen dataclass's time.
class PartitionState(NamedTuple):
    """One partition after derivation. `stalled_since` is when the LSO got stuck below the
    HWM (the timestamp of the first record at the LSO when known, else first observation)."""

    topic: str
    partition: int
    high_watermark: int
    last_stable_offset: int
    stalled_since: float | None = None
    stalled_seconds: float = 0.0

    @property
    def lso_lag(self) -> int:
        return max(self.high_watermark - self.last_stable_offset, 0)


class GroupLag(NamedTuple):
    group: str
    topic: str
    partition: int
    committed: int
    lag_read_committed: int      # LSO - committed
    lag_read_uncommitted: int    # HWM - committed


@dataclass(frozen=True, slots=True)
class OpenTransaction:
    transactional_id: str
    app: str
    producer_id: int
    producer_epoch: int
    state: str
    start_ms: int          # -1 when unknown
    timeout_ms: int
    partitions: tuple[TP, ...]
    age_seconds: float | None
    headroom_seconds: float | None   # None for two-phase-commit transactions: they never time out

    @property
    def two_phase(self) -> bool:
        return is_two_phase(self.timeout_ms)


@dataclass(frozen=True, slots=True)
class HangingTransaction:
    topic: str
    partition: int
    producer_id: int
    producer_epoch: int
    start_offset: int
    age_seconds: float | None
    transactional_id: str | None
    reason: str


@dataclass(frozen=True)
class Finding:
    """Something a person should look at: severity is 'warning' or 'critical'."""

    severity: str
    kind: str
    message: str


@dataclass(frozen=True)
class ClusterSnapshot:
    cluster: str
    taken_at: float                      # unix time the poll finished
    poll_seconds: float
    partitions: Mapping[TP, PartitionState] = field(default_factory=dict)
    groups: tuple[GroupLag, ...] = ()
    facts: ClusterFacts = ClusterFacts()
    open_transactions: tuple[OpenTransaction, ...] | None = None   # None: not observable (no KIP-664)
    hanging: tuple[HangingTransaction, ...] = ()
    hanging_method: str = "lso_stall"    # producer_state (KIP-664) | lso_stall
    epoch_bumps: Mapping[str, int] = field(default_factory=dict)   # app -> monotonic count
    capabilities: Mapping[str, bool] = field(default_factory=dict)
    findings: tuple[Finding, ...] = ()
    # group type (classic, consumer, share, streams) -> selected groups of that type; empty
    # where the broker has no group types (ListGroups < v5) or KIP-664's client is unusable
    group_types: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    features: Mapping[str, int] = field(default_factory=dict)   # finalized feature -> level
    txn_log: tuple[PartitionReplicas, ...] = ()    # __transaction_state's partitions (empty: none yet)
    degraded: tuple[PartitionReplicas, ...] = ()   # selected partitions offline or under-replicated
    unavailable: Mapping[TP, str] = field(default_factory=dict)   # partition -> why its offsets are old
    missing_brokers: Mapping[int, int] = field(default_factory=dict)   # absent broker -> partitions it replicates
    groups_unavailable: Mapping[str, str] = field(default_factory=dict)   # group -> why its offsets are old
