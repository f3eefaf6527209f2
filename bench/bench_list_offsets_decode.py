"""ListOffsets answers read in one loop (list_offsets._common_topics) against field by field,
alternating in one process, so both sides share the machine's minute.

    .venv/bin/python bench/bench_list_offsets_decode.py [--topics 1000] [--partitions 14] [--answers 14]
    .venv/bin/python bench/bench_list_offsets_decode.py --bootstrap HOST:PORT --topics-regex 'k100-.*' \\
        --groups-regex 'k100-group-.*' --rounds 8

Without --bootstrap: answers encoded by kafka-python's own schema (v11), shaped as one poll's
of a 100,000-partition cluster of 7 leaders by default (each of 14 answers, a leader and an
isolation level, lists 1,000 topics of about 14 partitions); the CPU to decode them all.
With --bootstrap (a cluster set up before, e.g. bench_scrape's): whole polls and their render
(ClusterPoller.poll_once, as bench_poll), the CPU of this process per poll and per partition.
The field-by-field side is the same code with the loop switched off here, in the bench.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import time

from kafka.protocol.consumer.offsets import ListOffsetsResponse

from txnwatch.kafka import list_offsets as lo

COMMON_TOPICS = lo._common_topics


def field_by_field(r, n, out) -> int:
    return 0


def use(loop: bool) -> None:
    lo._common_topics = COMMON_TOPICS if loop else field_by_field


def answers(topics: int, partitions: int, count: int) -> list[bytes]:
    rt = ListOffsetsResponse.ListOffsetsTopicResponse
    part = rt.ListOffsetsPartitionResponse
    return [ListOffsetsResponse(throttle_time_ms=0, topics=[
        rt(name=f"bench-{t:05d}", partitions=[part(partition_index=a + count * p, error_code=0, timestamp=-1,
                                                   offset=1_000_000 + p, leader_epoch=3)
                                              for p in range(partitions)])
        for t in range(topics)]).encode(version=11) for a in range(count)]


def decode_side_by_side(bodies: list[bytes], rounds: int) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {"one loop": [], "field by field": []}
    for i in range(rounds):
        for loop in (True, False) if i % 2 else (False, True):
            use(loop)
            c = time.process_time()
            for b in bodies:
                lo.decode_response(11, b)
            out["one loop" if loop else "field by field"].append(time.process_time() - c)
    use(True)
    return out


def polls_side_by_side(bootstrap: str, topics: str, groups: str, rounds: int) -> tuple[dict[str, list[float]], int]:
    from txnwatch.config import load_config
    from txnwatch.exporter.poll.poller import ClusterPoller
    from txnwatch.exporter.poll.render import RenderCache, render_snapshot
    from txnwatch.metrics import FamilyWriter

    cfg = load_config({"bootstrap_servers": bootstrap, "poll_timeout": 60, "topics": {"include": [topics]},
                       "groups": {"include": [groups]}}, env={}).clusters[0]
    poller = ClusterPoller(cfg)
    cache = RenderCache()

    def poll() -> int:
        snap = poller.poll_once()
        w = FamilyWriter()
        render_snapshot(w, snap, cfg.granularity, cfg.max_transactional_id_series, cache=cache)
        w.chunks()
        return len(snap.partitions)

    out: dict[str, list[float]] = {"one loop": [], "field by field": []}
    try:
        partitions = poll()    # connections, the capability probe and the configs: not measured
        for i in range(rounds):
            for loop in (True, False) if i % 2 else (False, True):
                use(loop)
                c = time.process_time()
                partitions = poll()
                out["one loop" if loop else "field by field"].append(time.process_time() - c)
    finally:
        use(True)
        poller.stop()
    return out, partitions


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--topics", type=int, default=1000)
    ap.add_argument("--partitions", type=int, default=14, help="per topic and answer")
    ap.add_argument("--answers", type=int, default=14)
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--bootstrap", default=None)
    ap.add_argument("--topics-regex", default=".*")
    ap.add_argument("--groups-regex", default=".*")
    a = ap.parse_args()
    print(f"machine: {platform.machine()}, python {platform.python_version()}")
    if a.bootstrap:
        runs, per = polls_side_by_side(a.bootstrap, a.topics_regex, a.groups_regex, a.rounds)
        what = f"poll + render of {per:,} partitions"
    else:
        bodies = answers(a.topics, a.partitions, a.answers)
        runs = decode_side_by_side(bodies, a.rounds)
        per = a.topics * a.partitions * a.answers // 2      # partitions: two answers each
        what = f"{a.answers} answers of {a.topics:,} topics x {a.partitions} partitions ({sum(map(len, bodies)):,} bytes)"
    print(f"CPU of {what}, medians of {a.rounds} alternating rounds:")
    for name, xs in runs.items():
        m = statistics.median(xs)
        print(f"  {name:15s} {m * 1000:7.1f} ms  {m / per * 1e6:5.2f} us a partition  "
              f"(all: {[round(x * 1000, 1) for x in xs]})")
    loop, plain = (statistics.median(runs[k]) for k in ("one loop", "field by field"))
    print(f"  ratio: {loop / plain:.2f}x")


if __name__ == "__main__":
    main()
