"""Horizontal sharding: M exporter replicas split the work by a stable hash, as
kube-state-metrics does (`--shard N --total-shards M`).

- More clusters than shards: whole clusters (by the hash of the cluster name).
- Otherwise every replica watches every cluster and splits within it: the poller's topic
  partitions (at granularity signal and topic by the hash of the topic, so each topic's
  sums come whole from one replica; at partition by the hash of the topic + partition
  number, so a topic's partitions spread over the replicas), the transactional ids of KIP-664 by app (an app's ids stay together, so
  per-app series come from one replica), and the tap's `__transaction_state` partitions
  (partition number modulo M). Cluster-level facts (brokers, configs, capabilities) come
  from shard 0 only.

Per-partition and per-id series of the M replicas are disjoint and together equal one
exporter's. The tap's per-app counters are split by log partition: each replica counts the
transactions its log partitions hold, and their sum is one exporter's count (the
dashboards and alerts sum over replicas). The hash is CRC-32 of UTF-8 text: stable across
processes, machines and Python versions (Python's hash() is salted per process).
"""

from __future__ import annotations

import os
import re
import zlib
from collections.abc import Collection
from dataclasses import dataclass, replace
from functools import lru_cache


class ShardError(ValueError):
    pass


def stable_hash(text: str) -> int:
    return zlib.crc32(text.encode("utf-8"))


@lru_cache(maxsize=1 << 17)
def topic_hash(topic: str) -> int:
    """stable_hash of a topic name, remembered: a sharded poll asks it for every group row."""
    return stable_hash(topic)


@dataclass(frozen=True)
class Shard:
    index: int = 0
    total: int = 1
    # a topic's partitions all on one replica (granularity signal and topic: its per-topic
    # sums are then whole, exported once); else spread by topic + partition
    by_topic: bool = False

    def __post_init__(self) -> None:
        if self.total < 1:
            raise ShardError(f"--total-shards must be >= 1, got {self.total}")
        if not 0 <= self.index < self.total:
            raise ShardError(f"--shard must be in 0..{self.total - 1} (--total-shards {self.total}), got {self.index}")

    @property
    def sharded(self) -> bool:
        return self.total > 1

    def owns_key(self, key: str) -> bool:
        return stable_hash(key) % self.total == self.index

    def owns_partition(self, topic: str, partition: int) -> bool:
        if self.by_topic:
            return self.owns_topic(topic)
        return (topic_hash(topic) + partition) % self.total == self.index

    def owns_topic(self, topic: str) -> bool:
        """Whether this replica has the topic's partitions (when it keeps topics whole)."""
        return topic_hash(topic) % self.total == self.index

    def partitions_of(self, topic: str, count: int) -> range:
        """The partitions of a topic of `count` that owns_partition accepts, found at once:
        all or none by topic, else every total-th from the first whose number brings the
        topic's hash to this index."""
        if self.by_topic:
            return range(count if self.owns_topic(topic) else 0)
        return range((self.index - topic_hash(topic)) % self.total, count, self.total)

    def owns_log_partition(self, partition: int) -> bool:
        return partition % self.total == self.index


ALL = Shard()


@dataclass(frozen=True)
class ClusterShare:
    """What one replica does for one cluster."""

    watch: bool                  # False: another replica has the whole cluster
    split: Shard                 # the share within the cluster (ALL: everything)

    @property
    def cluster_level(self) -> bool:
        """Whether this replica exports the cluster-level facts."""
        return self.watch and self.split.index == 0


WHOLE = ClusterShare(True, ALL)


def plan(cluster_names: list[str], shard: Shard, whole_topics: Collection[str] = ()) -> dict[str, ClusterShare]:
    """Each cluster's share for this replica. `whole_topics`: the clusters whose topics stay
    whole on one replica when split (their per-topic series are sums over a topic)."""
    if not shard.sharded:
        return {n: ClusterShare(True, ALL) for n in cluster_names}
    if len(cluster_names) >= shard.total:
        return {n: ClusterShare(shard.owns_key(n), ALL) for n in cluster_names}
    return {n: ClusterShare(True, replace(shard, by_topic=n in whole_topics)) for n in cluster_names}


_ORDINAL = re.compile(r"-(\d+)$")


def from_flags(shard: str | None, total: int | None, env: dict[str, str] | None = None) -> Shard:
    """`--shard N|auto --total-shards M`. `auto` (or no --shard with M > 1) takes the
    StatefulSet pod ordinal: the number ending $POD_NAME or $HOSTNAME (`txnwatch-2` -> 2)."""
    env = os.environ if env is None else env
    total = 1 if total is None else int(total)
    if shard is None or str(shard).strip().lower() == "auto":
        if total == 1 and shard is None:
            return ALL
        name = env.get("POD_NAME") or env.get("HOSTNAME") or ""
        m = _ORDINAL.search(name)
        if not m:
            raise ShardError(f"--shard auto needs a StatefulSet pod name ending in -<ordinal> in POD_NAME or "
                             f"HOSTNAME, got {name!r}; or give --shard N")
        return Shard(int(m.group(1)), total)
    try:
        index = int(shard)
    except ValueError:
        raise ShardError(f"--shard must be a number or auto, got {shard!r}") from None
    return Shard(index, total)
