"""The poller's render at each granularity, on a synthetic snapshot of a big cluster: series,
exposition bytes and render time (first render, then a render of the next poll with the
cache warm), side by side in one run.

    .venv/bin/python bench/bench_render.py [--partitions 100000] [--per-topic 100] [--groups 2000]
        [--rows-per-group 20] [--open 200] [--moved 0.1] [--rounds 5]

The snapshot: --partitions partitions, --per-topic per topic, --groups groups committing
--rows-per-group partitions each (of one topic, as bench_scrape.setup commits them), --open
partitions with an open transaction (LSO below HWM). Each following poll moves the offsets of
--moved of the partitions (new records, every group caught up), so the cache re-formats what
moved. No Kafka: this measures txnwatch's own work per poll, not the broker's. Run by hand;
figures go to docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import time
from types import MappingProxyType

from txnwatch.exporter.model import ClusterSnapshot, GroupLag, PartitionState
from txnwatch.exporter.poll.granularity import PartitionSeries
from txnwatch.exporter.poll.render import RenderCache, render_snapshot
from txnwatch.kafka.answers import ClusterFacts
from txnwatch.metrics import FamilyWriter


def snapshot(a: argparse.Namespace, poll: int) -> ClusterSnapshot:
    step = max(int(1 / a.moved), 1) if a.moved else 0
    parts = {}
    for i in range(a.partitions):
        topic, p = f"topic-{i // a.per_topic:05d}", i % a.per_topic
        hwm = 1000 + (poll if step and i % step == poll % step else 0)
        lso = hwm - 5 if i < a.open else hwm
        parts[(topic, p)] = PartitionState(topic, p, hwm, lso)
    topics = a.partitions // a.per_topic
    rows = []
    for g in range(a.groups):
        topic = f"topic-{g % topics:05d}"
        for p in range(a.rows_per_group):
            s = parts[(topic, p)]
            rows.append(GroupLag(f"group-{g:05d}", topic, p, s.last_stable_offset, 0, s.high_watermark - s.last_stable_offset))
    return ClusterSnapshot("big", 1000.0 + poll, 1.0, MappingProxyType(parts), tuple(rows), ClusterFacts(brokers=7))


def render(granularity: str, snap: ClusterSnapshot, cache: RenderCache) -> tuple[float, int, int]:
    t = time.perf_counter()
    w = FamilyWriter()
    render_snapshot(w, snap, granularity, 500, cache=cache)
    chunks = w.chunks()
    took = time.perf_counter() - t
    body = b"".join(c.body for c in chunks.values())
    return took, body.count(b"\n"), len(body)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--partitions", type=int, default=100_000)
    ap.add_argument("--per-topic", type=int, default=100)
    ap.add_argument("--groups", type=int, default=2000)
    ap.add_argument("--rows-per-group", type=int, default=20)
    ap.add_argument("--open", type=int, default=200)
    ap.add_argument("--moved", type=float, default=0.1)
    ap.add_argument("--rounds", type=int, default=5)
    a = ap.parse_args()
    snaps = [snapshot(a, poll) for poll in range(a.rounds + 1)]
    print(f"{platform.processor() or platform.machine()}, Python {platform.python_version()}; "
          f"{a.partitions:,} partitions, {a.groups:,} groups x {a.rows_per_group} rows, {a.open} open, "
          f"{a.moved:.0%} moved per poll")
    print("| granularity | series | exposition | first render | next polls (median) |")
    print("|---|---|---|---|---|")
    for granularity in ("partition", "signal", "topic"):
        cache = RenderCache(PartitionSeries())
        first, series, size = render(granularity, snaps[0], cache)
        nexts = [render(granularity, s, cache)[0] for s in snaps[1:]]
        print(f"| {granularity} | {series:,} | {size / 1e6:.1f} MB | {first * 1000:.0f} ms | "
              f"{statistics.median(nexts) * 1000:.0f} ms |")


if __name__ == "__main__":
    main()
