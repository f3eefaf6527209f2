"""Which partitions keep series of their own, and the sums the rest are exported as.

Three granularities for the per-partition families (partition offsets, LSO lag and stall,
hanging, consumer-group offsets and lags):
- partition: every partition its own series;
- topic: every topic (and every group's topic) one series, partition="all";
- signal (the default): a partition keeps its own series while it carries a signal (an open
  transaction, a stalled LSO, a hanging transaction, a read_committed group behind it that
  has not committed for a while, a named app's transactions or group), and for `linger`
  seconds after, so a partition whose transactions come and go keeps one series instead of a
  new one per transaction; the rest of each topic is one series, partition="__other__".
A sum over a topic (or a group's topic) is the same at every granularity, so alerts and
panels that aggregate by topic read the same figures. Pure: the snapshot and time in."""

from __future__ import annotations

from collections.abc import Container, Iterable, Mapping
from itertools import groupby
from operator import attrgetter, le
from typing import TypeVar

from ..model import TP, ClusterSnapshot, GroupLag, PartitionState

ALL_PARTITIONS = "all"            # the partition label of a topic's sum at granularity topic
OTHER_PARTITIONS = "__other__"    # ... of the partitions without a signal at granularity signal
DEFAULT_LINGER_SECONDS = 3600.0   # a partition whose transactions come and go keeps one series
DEFAULT_GROUP_STILL_SECONDS = 120.0

RowKey = tuple[str, str, int]     # group, topic, partition
K = TypeVar("K")


def signalled(snap: ClusterSnapshot, behind: Mapping[RowKey, tuple[int, float]], apps: frozenset[str],
              still_seconds: float) -> set[TP]:
    """The partitions carrying a signal in this poll. A group row counts once it has been
    behind its LSO at the same committed offset for `still_seconds` (`behind`: behind_since
    of this snapshot's rows): a consumer that keeps up commits in between (every 5 s by
    default, at each checkpoint for Flink) and is not a signal."""
    out = {tp for tp, s in snap.partitions.items() if s.last_stable_offset < s.high_watermark or s.stalled_seconds}
    out.update((h.topic, h.partition) for h in snap.hanging)
    out.update((topic, partition) for (_, topic, partition), (_, since) in behind.items()
               if snap.taken_at - since >= still_seconds)
    if apps:
        out.update((g.topic, g.partition) for g in snap.groups if g.group in apps)
    for t in snap.open_transactions or ():
        if t.app in apps:
            out.update(t.partitions)
    return out


def behind_since(groups: Iterable[GroupLag], before: Mapping[RowKey, tuple[int, float]],
                 now: float) -> dict[RowKey, tuple[int, float]]:
    """The group rows behind their LSO: {row: (committed offset, since when it has been behind
    there)}; a row that committed since the last poll starts again at `now`."""
    out = {}
    for g in groups:
        if g.lag_read_committed > 0:
            key = (g.group, g.topic, g.partition)
            seen = before.get(key)
            out[key] = seen if seen is not None and seen[0] == g.committed else (g.committed, now)
    return out


def linger(last_signal: Mapping[K, float], now_signalled: Iterable[K], now: float, seconds: float,
           among: Container[K] | None = None) -> dict[K, float]:
    """When each key (a partition, a transactional id) last carried a signal, kept while within
    `seconds` of `now` and, with `among`, while still in it (the snapshot's partitions)."""
    out = {k: at for k, at in last_signal.items() if now - at < seconds and (among is None or k in among)}
    out.update((k, now) for k in now_signalled if among is None or k in among)
    return out


class PartitionSeries:
    """The signal granularity's memory between polls (one per cluster, in the thread that
    renders): when each partition last carried a signal, and the group rows behind."""

    def __init__(self, linger_seconds: float = DEFAULT_LINGER_SECONDS, apps: Iterable[str] = (),
                 group_still_seconds: float = DEFAULT_GROUP_STILL_SECONDS) -> None:
        self.linger_seconds = linger_seconds
        self.group_still_seconds = group_still_seconds
        self.apps = frozenset(apps)
        self._last_signal: dict[TP, float] = {}
        self._behind: dict[RowKey, tuple[int, float]] = {}

    def update(self, snap: ClusterSnapshot) -> frozenset[TP]:
        """The partitions that keep series of their own after this poll."""
        self._behind = behind_since(snap.groups, self._behind, snap.taken_at)
        now_signalled = signalled(snap, self._behind, self.apps, self.group_still_seconds)
        self._last_signal = linger(self._last_signal, now_signalled, snap.taken_at, self.linger_seconds,
                                   snap.partitions)
        return frozenset(self._last_signal)


_TOPIC = attrgetter("topic")


def topic_sums(states: Iterable[PartitionState], hanging: Mapping[TP, int]) -> dict[str, list]:
    """{topic: [HWM, LSO, LSO lag, longest stall, hanging]} summed over `states` (the stall is
    the longest: a sum of seconds means nothing). By columns, each topic's partitions at once:
    at 100,000 partitions a loop over the states was most of a render's CPU."""
    by_topic: dict[str, list[PartitionState]] = {}
    for topic, run in groupby(states, key=_TOPIC):     # a snapshot lists a topic's partitions together
        by_topic.setdefault(topic, []).extend(run)
    out: dict[str, list] = {}
    for topic, run in by_topic.items():
        _, parts, hwms, lsos, _, stalls = zip(*run, strict=True)
        hwm, lso = sum(hwms), sum(lsos)
        # the LSO never passes the HWM in a snapshot (derivation clamps it), so the lags' sum is
        # the sums' difference; an odd state is summed one by one
        lag = hwm - lso if all(map(le, lsos, hwms)) else sum(max(h - s, 0) for h, s in zip(hwms, lsos, strict=True))
        hung = sum(hanging.get((topic, p), 0) for p in parts) if hanging else 0
        out[topic] = [hwm, lso, lag, max(0.0, max(stalls)), hung]
    return out


def group_sums(rows: Iterable[GroupLag]) -> dict[tuple[str, str], list[int]]:
    """{(group, topic): [committed, read_committed lag, read_uncommitted lag]} summed over `rows`."""
    out: dict[tuple[str, str], list[int]] = {}
    for g in rows:
        a = out.get((g.group, g.topic))
        if a is None:
            a = out[(g.group, g.topic)] = [0, 0, 0]
        a[0] += g.committed
        a[1] += g.lag_read_committed
        a[2] += g.lag_read_uncommitted
    return out
