"""Consumer-group offsets: requests and time per poll, per-group path vs batched path.

    .venv/bin/python bench/bench_group_requests.py [--groups 500,5000] [--rounds 5] [--brokers 1]

Starts its own Apache Kafka (one KRaft node, or a `--brokers`-node cluster), creates 10
topics of 10 partitions and the largest number of `--groups` consumer groups, each with two
committed partitions (AlterConsumerGroupOffsets). For each size (the first N groups by
name) it runs `KafkaIO.group_offsets()` (ListGroups, then the committed offsets of the
selected groups) on both paths:
  per-group: librdkafka, one ListConsumerGroupOffsets call per group (the path before
             issue 14, still the fallback);
  batched:   FindCoordinator v4 for groups not in the coordinator cache, then OffsetFetch v8
             per coordinator, <= 500 groups per request. "first poll" has an empty cache.

Requests are counted by the broker: phase 1 runs with Kafka's request log at DEBUG
(kafka.request.logger, one line per request with its API name), and the requests each
poll caused are the lines it added (ListGroups, FindCoordinator, OffsetFetch); for the
batched path the client's own count is checked against them. Phase 2 restarts the broker
without the request log and times `--rounds` polls per path, alternating, checking that
both paths return the same rows. Prints a Markdown table.
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import shutil
import statistics
import tempfile
import time
from collections import Counter
from pathlib import Path

from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from txnwatch.kafka.admin import KafkaIO
from txnwatch_dev.kafka import KafkaCluster, make_broker
from txnwatch_dev.transactions.workload import commit_group_offset

TOPICS, PARTITIONS = 10, 10
APIS = {"LIST_GROUPS": "ListGroups", "FIND_COORDINATOR": "FindCoordinator", "OFFSET_FETCH": "OffsetFetch"}
API_NAME = re.compile(r'"requestApiKeyName":"(\w+)"')


def name(i: int) -> str:
    return f"bench-g{i:05d}"


def commit(admin: AdminClient, offsets: dict[str, list[TopicPartition]], timeout: float) -> dict:
    """AlterConsumerGroupOffsets for each group at once; returns the groups still to do."""
    futures = {}
    for g, tps in offsets.items():
        futures.update(admin.alter_consumer_group_offsets([ConsumerGroupTopicPartitions(g, tps)],
                                                          request_timeout=timeout))
    left = {}
    for g, f in futures.items():
        try:
            if all(tp.error is None for tp in f.result().topic_partitions):
                continue
        except Exception:  # noqa: BLE001 - a coordinator loading: next round
            pass
        left[g] = offsets[g]
    return left


def setup(bootstrap: str, groups: int, replication: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    topics = [f"bench-t{i:02d}" for i in range(TOPICS)]
    for f in admin.create_topics([NewTopic(t, PARTITIONS, replication) for t in topics],
                                 operation_timeout=60).values():
        f.result()
    # The first commit creates __consumer_offsets; until it is loaded librdkafka's admin calls
    # can hang to their timeout (and with a 3 s timeout on a 3-node cluster, librdkafka 2.16.0
    # aborted once: rd_kafka_enq_once_del_source_return assertion), so a consumer commits
    # one group first, retrying as consumers do.
    commit_group_offset(bootstrap, "bench-warm-up", topics[0], 0, 0)
    deadline = time.monotonic() + 120
    pending = {name(i): [TopicPartition(topics[i % TOPICS], (i // TOPICS) % PARTITIONS, 100 + i),
                         TopicPartition(topics[(i + 1) % TOPICS], 0, i)] for i in range(groups)}
    while pending and time.monotonic() < deadline + 600:
        left = {}
        for batch in [list(pending)[i:i + 1000] for i in range(0, len(pending), 1000)]:
            left.update(commit(admin, {g: pending[g] for g in batch}, 30))
        pending = left
    if pending:
        raise SystemExit(f"{len(pending)} groups could not be committed")


class RequestLog:
    """Requests the broker(s) completed since the last call, by API, from kafka-request.log."""

    def __init__(self, paths: list[Path]) -> None:
        self.paths = paths
        self.pos = {p: 0 for p in paths}
        self.take()

    def take(self) -> Counter:
        # A request is logged after its response went out, and a 500-group OffsetFetch makes
        # a long line: wait until the logs stop growing.
        sizes, stable_since, give_up = None, time.monotonic(), time.monotonic() + 15
        while time.monotonic() < give_up:
            now = [p.stat().st_size if p.exists() else 0 for p in self.paths]
            if now != sizes:
                sizes, stable_since = now, time.monotonic()
            elif time.monotonic() - stable_since >= 0.5:
                break
            time.sleep(0.05)
        out: Counter = Counter()
        for p in self.paths:
            if not p.exists():
                continue
            with open(p, errors="replace") as fh:
                fh.seek(self.pos[p])
                text = fh.read()
                self.pos[p] = fh.tell()
            for api in API_NAME.findall(text):
                if api in APIS:
                    out[APIS[api]] += 1
        return out


def ready(io: KafkaIO, selected, n: int, timeout: float = 120) -> None:
    """Until ListGroups lists the `n` groups and their offsets answer (a restarted broker loads
    __consumer_offsets first)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            io.metadata(lambda t: True)
            if len(io.list_groups(selected, time.monotonic() + 30)) >= n:
                return
        except Exception:  # noqa: BLE001 - loading
            pass
        if time.monotonic() > deadline:
            raise SystemExit(f"the {n} groups did not become readable")
        time.sleep(0.5)


def selector(n: int):
    last = name(n - 1)
    return lambda g: g.startswith("bench-g") and g <= last


def ios(bootstrap: str, timeout: float = 120) -> tuple[KafkaIO, KafkaIO]:
    per_group = KafkaIO({"bootstrap.servers": bootstrap}, timeout)
    per_group.offset_fetch_path.turn_off("bench: the per-group path", forever=True)
    return per_group, KafkaIO({"bootstrap.servers": bootstrap}, timeout)


def prepared(bootstrap: str, n: int):
    """(group filter, per-group KafkaIO, batched KafkaIO), both having listed the n groups."""
    selected = selector(n)
    per_group, batched = ios(bootstrap)
    ready(per_group, selected, n)
    ready(batched, selected, n)
    return selected, per_group, batched


def count_requests(bootstrap: str, sizes: list[int], log: RequestLog, polls: int, interval: float) -> dict:
    out = {}
    for n in sizes:
        selected, per_group, batched = prepared(bootstrap, n)
        log.take()
        per = []
        for _ in range(polls):
            per_group.group_offsets(selected)
            per.append(log.take())
            time.sleep(interval)
        cold_rows = batched.group_offsets(selected)
        cold = log.take()
        assert cold - Counter({"ListGroups": cold["ListGroups"]}) == batched.group_offsets_report.requests, \
            (cold, batched.group_offsets_report.requests)
        warm = []
        for _ in range(polls):
            time.sleep(interval)
            batched.metadata(lambda t: True)
            log.take()
            batched.group_offsets(selected)
            warm.append(log.take())
        out[n] = {"per_group": per, "cold": cold, "warm": warm, "rows": len(cold_rows),
                  "coordinators": len(batched.group_offsets_report.coordinators)}
        per_group.close()
        batched.close()
    return out


def time_polls(bootstrap: str, sizes: list[int], rounds: int, interval: float) -> dict:
    out = {}
    for n in sizes:
        selected, per_group, batched = prepared(bootstrap, n)
        t = time.perf_counter()
        cold = batched.group_offsets(selected)
        cold_s = time.perf_counter() - t
        old_t, new_t = [], []
        for _ in range(rounds):
            time.sleep(interval)
            t = time.perf_counter()
            old = per_group.group_offsets(selected)
            old_t.append(time.perf_counter() - t)
            time.sleep(interval)
            batched.metadata(lambda t: True)
            t = time.perf_counter()
            new = batched.group_offsets(selected)
            new_t.append(time.perf_counter() - t)
            assert old == new == cold, "the two paths disagree"
        out[n] = {"per_group": old_t, "cold": cold_s, "warm": new_t}
        per_group.close()
        batched.close()
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--groups", default="500,5000")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--count-polls", type=int, default=3, help="polls per path counted in phase 1")
    ap.add_argument("--interval", type=float, default=1.0, help="seconds between polls")
    ap.add_argument("--brokers", type=int, default=1)
    a = ap.parse_args()
    sizes = sorted(int(x) for x in a.groups.split(","))
    work = Path(tempfile.mkdtemp(prefix="txnwatch-bench-groups-"))
    if a.brokers > 1:
        cluster = KafkaCluster(a.brokers, workdir=work / "cluster", request_log=True)
        nodes = cluster.nodes
    else:
        cluster = make_broker(workdir=work / "broker", request_log=True)
        nodes = [cluster]
    cluster.start()
    try:
        t0 = time.perf_counter()
        setup(cluster.bootstrap, sizes[-1], min(a.brokers, 3))
        print(f"setup: {TOPICS} topics x {PARTITIONS} partitions, {sizes[-1]:,} groups with 2 committed "
              f"partitions each, in {time.perf_counter() - t0:.1f}s on {cluster.describe()}")
        log = RequestLog([n.log_dir / "kafka-request.log" for n in nodes])
        counts = count_requests(cluster.bootstrap, sizes, log, a.count_polls, a.interval)

        # phase 2: the same broker(s) without the request log, for the times
        for n in nodes:
            n.stop()
            n.request_log = False
        cluster.start()
        times = time_polls(cluster.bootstrap, sizes, a.rounds, a.interval)
    finally:
        cluster.cleanup()
        shutil.rmtree(work, ignore_errors=True)

    def fmt(c: Counter) -> tuple[int, int, int, int]:
        return c["ListGroups"], c["FindCoordinator"], c["OffsetFetch"], sum(c.values())

    def med(cs: list[Counter]) -> Counter:
        return Counter({k: statistics.median(c[k] for c in cs) for k in APIS.values()})

    def ms(xs: list[float]) -> str:
        return ", ".join(f"{x * 1000:.0f}" for x in xs)

    print()
    print(f"| groups (offsets) | path | ListGroups | FindCoordinator | OffsetFetch | requests per poll | "
          f"poll time, median of {a.rounds} | all rounds (ms) |")
    print("|---|---|---|---|---|---|---|---|")
    for n in sizes:
        c, t = counts[n], times[n]
        label = f"{n:,} ({c['rows']:,})"
        lg, fc, of, total = fmt(med(c["per_group"]))
        print(f"| {label} | per-group (librdkafka) | {lg:.0f} | {fc:.0f} | {of:.0f} | **{total:,.0f}** | "
              f"{statistics.median(t['per_group']) * 1000:.0f} ms | {ms(t['per_group'])} |")
        lg, fc, of, total = fmt(c["cold"])
        print(f"| {label} | batched, first poll | {lg} | {fc} | {of} | {total} | {t['cold'] * 1000:.0f} ms | |")
        lg, fc, of, total = fmt(med(c["warm"]))
        print(f"| {label} | batched, later polls | {lg:.0f} | {fc:.0f} | {of:.0f} | **{total:.0f}** | "
              f"{statistics.median(t['warm']) * 1000:.0f} ms | {ms(t['warm'])} |")
    print("\nrequests per poll in phase 1, each poll (ListGroups, FindCoordinator, OffsetFetch):")
    for n in sizes:
        c = counts[n]
        print(f"  {n:,} groups, {c['coordinators']} coordinator(s): per-group {[fmt(x)[:3] for x in c['per_group']]}, "
              f"batched first {fmt(c['cold'])[:3]}, later {[fmt(x)[:3] for x in c['warm']]}")
    print(f"\nmachine: {platform.machine()}, {os.cpu_count()} CPUs, python {platform.python_version()}")


if __name__ == "__main__":
    main()
