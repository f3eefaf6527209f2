"""Immutable snapshot types. A poll builds one ClusterSnapshot; a scrape renders the last one."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import NamedTuple

TP = tuple[str, int]
TRANSACTION_STATE_TOPIC = "__transaction_state"
OPEN_STATES = frozenset({"Ongoing", "PrepareCommit", "PrepareAbort", "PrepareEpochFence"})
# KIP-939 two-phase commit: a producer with transaction.two.phase.commit.enable gets this
# transaction timeout (Integer.MAX_VALUE) from the coordinator, which then never aborts its
# transactions: an external transaction manager decides when they end.
TWO_PHASE_TIMEOUT_MS = 2_147_483_647


def is_two_phase(timeout_ms: int) -> bool:
    """A KIP-939 two-phase-commit transaction (recognised by its timeout)."""
    return timeout_ms >= TWO_PHASE_TIMEOUT_MS


# The three per-partition and per-row records below are NamedTuples, not dataclasses: a
# poll of a big cluster builds one per partition and group row, and a tuple is built in a
# third of a frozen dataclass's time (issue 29).
class PartitionOffsets(NamedTuple):
    topic: str
    partition: int
    high_watermark: int
    last_stable_offset: int


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
class ClusterFacts:
    brokers: int | None = None
    transaction_max_timeout_ms: int | None = None
    transactional_id_expiration_ms: int | None = None
    producer_id_expiration_ms: int | None = None
    transaction_state_log_min_isr: int | None = None
    transaction_state_log_replication_factor: int | None = None
    topic_retention_ms: Mapping[str, int] = field(default_factory=dict)
    configs_from_broker: bool = False   # False: DescribeConfigs gave no values
    # min.insync.replicas of the __transaction_state topic itself (set from the broker's
    # transaction.state.log.min.isr when the topic was created; an operator may alter it)
    transaction_state_min_insync_replicas: int | None = None


@dataclass(frozen=True, slots=True)
class PartitionReplicas:
    """A partition's leader, replicas and ISR as the cluster metadata shows them."""

    topic: str
    partition: int
    leader: int                  # -1: no leader (offline)
    replicas: tuple[int, ...]
    isr: tuple[int, ...]

    @property
    def offline(self) -> bool:
        return self.leader < 0


@dataclass(frozen=True)
class ClusterMetadata:
    """What one metadata request says about the cluster, as plain values."""

    brokers: tuple[int, ...]                      # live broker ids
    topics: Mapping[str, int]                     # selected topics -> partition count
    txn_log: tuple[PartitionReplicas, ...] = ()   # __transaction_state's partitions (none before the first producer)
    # partitions of the selected topics that are offline or under-replicated (the rest are
    # healthy and not kept, so a poll of a big cluster builds nothing per partition here)
    degraded: tuple[PartitionReplicas, ...] = ()
    # selected topics -> leader of each partition by index (-1: none): where ListOffsets goes
    leaders: Mapping[str, tuple[int, ...]] = field(default_factory=dict)


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


# ------------------------------------------------------------------ KIP-664 answers, as plain values
@dataclass(frozen=True, slots=True)
class TxnListing:
    transactional_id: str
    producer_id: int
    state: str


@dataclass(frozen=True, slots=True)
class TxnDescription:
    transactional_id: str
    state: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    start_ms: int
    partitions: frozenset[TP]


@dataclass(frozen=True, slots=True)
class ActiveProducer:
    topic: str
    partition: int
    producer_id: int
    producer_epoch: int
    last_timestamp_ms: int
    coordinator_epoch: int
    txn_start_offset: int        # -1: no open transaction on this partition
