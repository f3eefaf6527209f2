"""Spark queries against the partitions they read: blocked by an open transaction, or slow.

A read_committed query (Spark's Kafka source with `kafka.isolation.level=read_committed`)
plans its batches up to each partition's last stable offset (LSO): that is its
`latestOffset`. Behind an open transaction that never ends, its offsets behind latest are
0, its batches are empty and it looks healthy, while records pile up above the LSO. Only
the exporter knows both sides: the query's read position (from the listener's progress
events) and the partition's LSO, high watermark (HWM) and how long the LSO has been stalled
(from the poller). Pure functions of both; no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from ...spark_listener.state import SourcePosition
from ..model import ClusterSnapshot

BLOCKED, BEHIND, CAUGHT_UP = "blocked", "behind", "caught_up"


@dataclass(frozen=True, slots=True)
class SparkPartitionStatus:
    cluster: str
    query: str
    query_id: str
    topic: str
    partition: int
    offset: int                  # the query's next offset to read
    last_stable_offset: int
    high_watermark: int
    state: str                   # blocked | behind | caught_up
    stalled_seconds: float       # how long the LSO has been stuck (0 when it is not)
    holder: str | None           # what holds the LSO, when the poller knows it

    @property
    def behind_lso(self) -> int:
        """Records the query can read now and has not read yet (slow query)."""
        return max(self.last_stable_offset - self.offset, 0)

    @property
    def held_back(self) -> int:
        """Records above the query's position that read_committed cannot return yet."""
        return max(self.high_watermark - max(self.offset, self.last_stable_offset), 0)


def _holder(snap: ClusterSnapshot, topic: str, partition: int) -> str | None:
    for h in snap.hanging:
        if h.topic == topic and h.partition == partition:
            who = f"transactional id {h.transactional_id}" if h.transactional_id else f"producer id {h.producer_id}"
            if h.producer_id < 0:
                return "an open transaction that has held the LSO longer than any transaction may last"
            return f"hanging transaction of {who} (epoch {h.producer_epoch}) from offset {h.start_offset}"
    for t in snap.open_transactions or ():
        if (topic, partition) in t.partitions:
            age = "" if t.age_seconds is None else f", open {t.age_seconds:.0f}s"
            return f"open transaction {t.transactional_id} ({t.state}{age})"
    return None


def classify(positions: Iterable[SourcePosition], snapshots: Mapping[str, ClusterSnapshot | None],
             min_stall_seconds: float = 0.0) -> tuple[list[SparkPartitionStatus], list[SourcePosition]]:
    """Match each read position to the cluster holding its topic partition and classify it.

    Blocked: the query has read up to the LSO (position >= LSO), the LSO is below the HWM,
    and the LSO has been stalled for at least `min_stall_seconds`. Behind: the position is
    below the LSO (the query is slow, not blocked). A topic partition found on several
    clusters cannot be matched by name: those positions come back as the second list."""
    by_tp: dict[tuple[str, int], list[tuple[str, ClusterSnapshot]]] = {}
    for name, snap in snapshots.items():
        if snap is None:
            continue
        for tp in snap.partitions:
            by_tp.setdefault(tp, []).append((name, snap))
    out, ambiguous = [], []
    for pos in positions:
        where = by_tp.get((pos.topic, pos.partition), [])
        if len(where) != 1:
            if len(where) > 1:
                ambiguous.append(pos)
            continue
        cluster, snap = where[0]
        p = snap.partitions[(pos.topic, pos.partition)]
        offset = int(pos.offset)
        stalled = p.stalled_seconds if p.stalled_since is not None else 0.0
        if offset < p.last_stable_offset:
            state = BEHIND
        elif p.high_watermark > p.last_stable_offset and p.stalled_since is not None \
                and stalled >= min_stall_seconds:
            state = BLOCKED
        else:
            state = CAUGHT_UP
        out.append(SparkPartitionStatus(cluster, pos.query, pos.query_id, pos.topic, pos.partition, offset,
                                        p.last_stable_offset, p.high_watermark, state, stalled,
                                        _holder(snap, pos.topic, pos.partition) if state == BLOCKED else None))
    return out, ambiguous
