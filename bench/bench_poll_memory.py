"""What a poll keeps per partition: the poller and its render in this process, at two sizes.

    .venv/bin/python bench/bench_poll_memory.py [--sizes 4000,12000] [--groups 100] [--polls 4]
        [--granularity signal] [--top 15]

For each size: a fresh one-node broker (txnwatch_dev.kafka) with that many partitions (100 per
topic) and --groups consumer groups of 20 committed partitions, then ClusterPoller.poll_once()
and render_snapshot() --polls times in this process, as the worker does each poll. Printed per
size (the cluster filled from another process): this process's RSS after the polls (and after glibc's malloc_trim, what the allocator
held free), and Python's own account (tracemalloc, a second pass: the bytes still allocated
after the polls and the peak during them, with the --top lines that hold the most). The
growth between the two sizes, divided by the partitions added, is the cost per partition:
the fixed part (imports, connections) cancels out. Memory is not timing: a busy machine
changes it little. Run by hand; figures go to docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import multiprocessing
import tracemalloc

from bench_scrape import broker_for, setup  # bench/ is on sys.path when run as a script

from txnwatch.config import load_config
from txnwatch.exporter.poll.poller import ClusterPoller
from txnwatch.exporter.poll.render import RenderCache, render_snapshot
from txnwatch.metrics import FamilyWriter


def rss_kib() -> int:
    with open("/proc/self/status") as fh:
        return next(int(line.split()[1]) for line in fh if line.startswith("VmRSS:"))


def run_polls(bootstrap: str, polls: int, granularity: str, traced: bool) -> dict:
    """The poller's polls and renders; what the process holds after them."""
    cfg = load_config({"bootstrap_servers": bootstrap, "poll_timeout": 60, "granularity": granularity},
                      env={}).clusters[0]
    gc.collect()
    if traced:
        tracemalloc.start(1)
    poller, cache = ClusterPoller(cfg), RenderCache()
    try:
        for _ in range(polls):
            snap = poller.poll_once()
            writer = FamilyWriter()
            render_snapshot(writer, snap, cfg.granularity, cfg.max_transactional_id_series, cache=cache)
            writer.chunks()
        gc.collect()
        out = {"partitions": len(snap.partitions), "group_rows": len(snap.groups)}
        if traced:
            out["traced"], out["peak"] = tracemalloc.get_traced_memory()
            out["top"] = tracemalloc.take_snapshot().statistics("lineno")
            tracemalloc.stop()
        else:
            out["rss"] = rss_kib() * 1024
            ctypes.CDLL("libc.so.6").malloc_trim(0)
            out["trimmed"] = rss_kib() * 1024
        return out
    finally:
        poller.stop()


def measure(partitions: int, groups: int, polls: int, granularity: str, top: int) -> dict:
    with broker_for(partitions) as broker:
        # in a process of its own: the clients that fill the cluster must not count as the poller's
        with multiprocessing.get_context("spawn").Pool(1) as pool:
            pool.apply(setup, (broker.bootstrap, partitions, groups))
        out = run_polls(broker.bootstrap, polls, granularity, traced=False)
        traced = run_polls(broker.bootstrap, polls, granularity, traced=True)
    out.update(traced=traced["traced"], peak=traced["peak"])
    print(f"\n{partitions:,} partitions, {out['group_rows']:,} group rows: RSS {out['rss'] / 2**20:.1f} MiB "
          f"({out['trimmed'] / 2**20:.1f} MiB trimmed); Python's allocations {traced['traced'] / 2**20:.1f} MiB "
          f"held, {traced['peak'] / 2**20:.1f} MiB at the peak. Most held, per partition:")
    for stat in traced["top"][:top]:
        print(f"  {stat.size / partitions:7.0f} B  {stat.count:8,} blocks  {stat.traceback[0]}")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="4000,12000")
    ap.add_argument("--groups", type=int, default=100)
    ap.add_argument("--polls", type=int, default=4)
    ap.add_argument("--granularity", default="signal")
    ap.add_argument("--top", type=int, default=15)
    args = ap.parse_args()
    small, large = (int(s) for s in args.sizes.split(","))
    a = measure(small, args.groups, args.polls, args.granularity, args.top)
    b = measure(large, args.groups, args.polls, args.granularity, args.top)
    added = b["partitions"] - a["partitions"]
    print(f"\n| per partition added ({small:,} -> {large:,}) | RSS | RSS trimmed | Python's, held | Python's, peak |")
    print("|---|---|---|---|---|")
    print("| bytes | " + " | ".join(f"{(b[k] - a[k]) / added:,.0f}" for k in ("rss", "trimmed", "traced", "peak")) + " |")


if __name__ == "__main__":
    main()
