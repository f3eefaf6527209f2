"""Poll-cycle benchmark: txnwatch's full poll vs the bare requests it needs.

    .venv/bin/python bench/bench_poll.py [--partitions 10000] [--topics 100] [--groups 500] [--rounds 5]

Starts its own broker (Apache Kafka from Maven Central, KAFKA_VERSION), creates `--topics` topics sharing `--partitions`
partitions, commits offsets for `--groups` consumer groups, then times
  floor: ListOffsets in both isolation levels + list groups (confluent-kafka, the same
         batched futures) + the groups' offsets batched per coordinator (kafka-python's
         list_group_offsets: FindCoordinator v4 + OffsetFetch v8), issued bare, and
  poll:  ClusterPoller.poll_once() (the same requests plus derivations and snapshot)
in the same run, alternating, and prints medians and the ratio.
"""

from __future__ import annotations

import argparse
import platform
import resource
import statistics
import time

from bench_scrape import broker_for, commit_groups  # bench/ is on sys.path when run as a script
from confluent_kafka import ConsumerGroupTopicPartitions, IsolationLevel, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic, OffsetSpec

from txnwatch.config import load_config
from txnwatch.exporter.kafka.admin import OFFSETS_CHUNK
from txnwatch.exporter.poll.poller import ClusterPoller


def setup(bootstrap: str, topics: int, partitions: int, groups: int) -> list[str]:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    per = max(partitions // topics, 1)
    names = [f"bench-{i:04d}" for i in range(topics)]
    for i in range(0, len(names), 50):
        for f in admin.create_topics([NewTopic(n, per, 1) for n in names[i:i + 50]],
                                     operation_timeout=300, request_timeout=300).values():
            f.result()
    commit_groups(bootstrap, names, groups, "bench")   # 20 partitions each
    return names


def floor_cycle(admin: AdminClient, topics: dict[str, int], timeout: float, chunk: int,
                group_admin=None) -> float:
    """The same requests as the poller, bare: metadata, ListOffsets in both isolation levels
    (in calls of `chunk` partitions), list groups and the groups' offsets: batched
    (FindCoordinator v4 + OffsetFetch v8 per coordinator, through kafka-python's own
    list_group_offsets) when `group_admin` is given, else one call per group (librdkafka)."""
    t0 = time.perf_counter()
    md = admin.list_topics(timeout=timeout)
    tps = [TopicPartition(t, p) for t, n in topics.items() for p in range(n)]
    futs = []
    for i in range(0, len(tps), chunk):
        part = {tp: OffsetSpec.latest() for tp in tps[i:i + chunk]}
        for iso in (IsolationLevel.READ_UNCOMMITTED, IsolationLevel.READ_COMMITTED):
            futs += list(admin.list_offsets(part, isolation_level=iso, request_timeout=timeout).values())
    groups = admin.list_consumer_groups(request_timeout=timeout).result().valid
    if group_admin is not None:
        group_admin.list_group_offsets({g.group_id: None for g in groups})
    else:
        for g in groups:
            futs += list(admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(g.group_id)],
                                                           request_timeout=timeout).values())
    for f in futs:
        f.result()
    del md
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--partitions", type=int, default=10_000)
    ap.add_argument("--topics", type=int, default=100)
    ap.add_argument("--groups", type=int, default=500)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--profile", action="store_true", help="then profile one poll (cProfile, own time)")
    a = ap.parse_args()
    with broker_for(a.partitions) as broker:
        t0 = time.perf_counter()
        names = setup(broker.bootstrap, a.topics, a.partitions, a.groups)
        print(f"setup: {a.topics} topics / {a.partitions} partitions / {a.groups} groups in "
              f"{time.perf_counter() - t0:.1f}s")
        cfg = load_config({"bootstrap_servers": broker.bootstrap, "poll_timeout": 60}, env={}).clusters[0]
        poller = ClusterPoller(cfg)
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        md = admin.list_topics(timeout=30)
        topics = {n: len(md.topics[n].partitions) for n in names}
        poller.poll_once()          # warm-up: connections, capability probe, DescribeConfigs
        total = sum(topics.values())
        from kafka.admin import KafkaAdminClient
        group_admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=60_000)
        floor_cycle(admin, topics, 60, OFFSETS_CHUNK, group_admin)
        polls, floors, single = [], [], []
        for _ in range(a.rounds):
            floors.append(floor_cycle(admin, topics, 60, OFFSETS_CHUNK, group_admin))
            single.append(floor_cycle(admin, topics, 60, total, group_admin))
            t = time.perf_counter()
            snap = poller.poll_once()
            polls.append(time.perf_counter() - t)
        fl, po = statistics.median(floors), statistics.median(polls)
        print(f"floor, one ListOffsets call per isolation level for all {total} partitions, median: "
              f"{statistics.median(single) * 1000:.0f} ms (all: {[round(x * 1000) for x in single]})")
        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        print(f"partitions polled: {len(snap.partitions)}, group-partitions: {len(snap.groups)}")
        print(f"floor (bare, same requests: ListOffsets in calls of {OFFSETS_CHUNK}, batched OffsetFetch) median: "
              f"{fl * 1000:.0f} ms  (all: {[round(x * 1000) for x in floors]})")
        print(f"txnwatch poll_once       median: {po * 1000:.0f} ms  (all: {[round(x * 1000) for x in polls]})")
        print(f"ratio poll/floor: {po / fl:.2f}x")
        print(f"bench process max RSS: {rss:.0f} MB; machine: {platform.machine()}, "
              f"{platform.processor() or 'cpu'}, python {platform.python_version()}")
        if a.profile:
            import cProfile
            import pstats

            prof = cProfile.Profile()
            t = time.perf_counter()
            prof.runcall(poller.poll_once)
            print(f"profiled poll: {(time.perf_counter() - t) * 1000:.0f} ms wall (under cProfile); "
                  "top functions by own time:")
            pstats.Stats(prof).sort_stats("tottime").print_stats(12)


if __name__ == "__main__":
    main()
