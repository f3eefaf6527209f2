"""What the Kafka calls answer, as plain immutable values: the cluster's metadata, partition
offsets, broker and topic configs, and the KIP-664 transaction APIs' listings, descriptions
and producer states. The clients turn their libraries' objects into these at the call, so
nothing above the Kafka room ever holds a librdkafka or kafka-python object."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import NamedTuple

TRANSACTION_STATE_TOPIC = "__transaction_state"


# A NamedTuple, not a dataclass: a poll of a big cluster builds one per partition, and a
# tuple is built in a third of a frozen dataclass's time.
class PartitionOffsets(NamedTuple):
    """A partition's log end offsets as read, and the LSO stall clock the exporter derives
    from one read to the next (unset as read). One type for both, the exporter's
    PartitionState: a partition whose LSO is not stalled is then one object from the answer
    to the snapshot, where two per partition were a fifth of what the poller's Python held
    per partition (bench/bench_poll_memory.py). `stalled_since` is when the LSO got stuck below the HWM (the timestamp of the
    first record at the LSO when known, else first observation)."""

    topic: str
    partition: int
    high_watermark: int
    last_stable_offset: int
    stalled_since: float | None = None
    stalled_seconds: float = 0.0

    @property
    def lso_lag(self) -> int:
        return max(self.high_watermark - self.last_stable_offset, 0)


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
class ClusterFacts:
    """The broker configs that matter to transactions and the topics' retention, as
    DescribeConfigs gave them (None: not reported), and the live broker count."""

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


# ------------------------------------------------------------------ KIP-664 answers
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
    partitions: frozenset[tuple[str, int]]


@dataclass(frozen=True, slots=True)
class ActiveProducer:
    topic: str
    partition: int
    producer_id: int
    producer_epoch: int
    last_timestamp_ms: int
    coordinator_epoch: int
    txn_start_offset: int        # -1: no open transaction on this partition
