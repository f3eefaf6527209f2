"""Immutable snapshot types. A poll builds one ClusterSnapshot; a scrape renders the last one.
What the Kafka calls answer (partition offsets, replicas, broker configs, KIP-664's
listings) are the Kafka room's plain values (txnwatch/kafka/answers.py), kept in the
snapshot as they came."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import NamedTuple

from ..kafka.answers import ClusterFacts, PartitionOffsets, PartitionReplicas
from ..metrics import ALIVE_WITHIN_SECONDS

TP = tuple[str, int]
OPEN_STATES = frozenset({"Ongoing", "PrepareCommit", "PrepareAbort", "PrepareEpochFence"})
# KIP-939 two-phase commit: a producer with transaction.two.phase.commit.enable gets this
# transaction timeout (Integer.MAX_VALUE) from the coordinator, which then never aborts its
# transactions: an external transaction manager decides when they end.
TWO_PHASE_TIMEOUT_MS = 2_147_483_647


def is_two_phase(timeout_ms: int) -> bool:
    """A KIP-939 two-phase-commit transaction (recognised by its timeout)."""
    return timeout_ms >= TWO_PHASE_TIMEOUT_MS


# A partition after derivation: its offsets as read and its LSO stall clock, one type
# (kafka/answers.py says why).
PartitionState = PartitionOffsets


# The per-row records below are NamedTuples, not dataclasses: a poll of a big cluster builds
# one per group row, and a tuple is built in a third of a frozen dataclass's time.


class GroupLag(NamedTuple):
    group: str
    topic: str
    partition: int
    committed: int
    lag_read_committed: int      # LSO - committed, but 0 where only markers lie between them
    lag_read_uncommitted: int    # HWM - committed
    # offsets between the committed offset and the LSO read and found to hold only transaction
    # markers (and aborted records, which a read_committed consumer never sees either)
    marker_offsets: int = 0

    @property
    def lag_note(self) -> str:
        """Why the read_committed lag is 0 although the committed offset is below the LSO."""
        return "lag 0: only transaction markers between the committed offset and the LSO" \
            if self.marker_offsets else ""


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
    state_unchanged_seconds: float | None = None    # now - the coordinator's last change of its state
    last_append_age_seconds: float | None = None    # now - its producer's last append (None: not described)

    @property
    def two_phase(self) -> bool:
        return is_two_phase(self.timeout_ms)

    @property
    def last_sign_of_life_seconds(self) -> float | None:
        """Since the later of the coordinator's last change and the producer's last append: a
        producer streaming into a long transaction changes no coordinator state, but appends."""
        known = [s for s in (self.state_unchanged_seconds, self.last_append_age_seconds) if s is not None]
        return min(known) if known else None

    def liveness(self, fmt: Callable[[float], str] = lambda s: f"{s:.0f}s") -> str:
        """The page's and `txnwatch check`'s words for it (see sign_of_life)."""
        return sign_of_life(self.last_sign_of_life_seconds, self.age_seconds, fmt)


def sign_of_life(last_sign_seconds: float | None, age_seconds: float | None,
                 fmt: Callable[[float], str] = lambda s: f"{s:.0f}s") -> str:
    """How an open transaction reads: "alive, slow (last sign of life N ago)" while its last sign
    of life is at most ALIVE_WITHIN_SECONDS old ("alive" alone while the transaction itself is
    younger than that), else "no sign of life for N"; "" when nothing tells."""
    if last_sign_seconds is None:
        return ""
    if last_sign_seconds > ALIVE_WITHIN_SECONDS:
        return f"no sign of life for {fmt(last_sign_seconds)}"
    slow = age_seconds is None or age_seconds > ALIVE_WITHIN_SECONDS
    return f"alive{', slow' if slow else ''} (last sign of life {fmt(last_sign_seconds)} ago)"


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


@dataclass(frozen=True, slots=True)
class HangingEnded:
    """A hanging transaction the poller saw end, and how (derive.how_hanging_ended)."""

    hanging: HangingTransaction
    app: str
    how: str                   # producer | coordinator | markers | unknown
    at: float                  # unix time of the poll that saw it gone


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
    # hanging transactions seen to end: (app, how) -> monotonic count, and the latest ones
    hanging_ended: Mapping[tuple[str, str], int] = field(default_factory=dict)
    hanging_ended_recent: tuple[HangingEnded, ...] = ()
