"""The transactional canary's overhead: broker requests per round and CPU.

    .venv/bin/python bench/bench_canary.py [--nodes 3] [--interval 10] [--seconds 120]

Starts an Apache Kafka KRaft cluster of --nodes nodes with JMX on loopback, then measures
two windows of --seconds each: the cluster idle, and the cluster with one canary
(`CanaryProbe`, as `txnwatch serve` runs it, with its defaults but --interval) running in
this process. The broker's own request counters (kafka.network RequestMetrics
RequestsPerSec, read over JMX by bench/JmxCounts.java, summed over the nodes) give the requests the
canary adds per round by API (the idle window's counts, replication's fetches included,
are subtracted); /proc gives the brokers' CPU and this process's CPU (the canary's
threads and librdkafka's). Run by hand; figures go to docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import time
from collections import Counter
from pathlib import Path

from txnwatch.canary.probe import CanaryProbe
from txnwatch.config import CanaryConfig
from txnwatch_dev.kafka import KafkaCluster
from txnwatch_dev.net import free_port, wait_for

CLK_TCK = os.sysconf("SC_CLK_TCK")
REQUESTS = "kafka.network:type=RequestMetrics,name=RequestsPerSec,*"


def jmx_opts(port: int) -> str:
    return (f"-Dcom.sun.management.jmxremote -Dcom.sun.management.jmxremote.port={port} "
            f"-Dcom.sun.management.jmxremote.rmi.port={port} -Dcom.sun.management.jmxremote.local.only=true "
            "-Dcom.sun.management.jmxremote.authenticate=false -Dcom.sun.management.jmxremote.ssl=false "
            "-Djava.rmi.server.hostname=127.0.0.1")


def request_counts(port: int) -> Counter:
    """Requests a node has received since it started, by API (FetchConsumer and FetchFollower apart)."""
    out = subprocess.run(["java", str(Path(__file__).with_name("JmxCounts.java")),
                          f"service:jmx:rmi:///jndi/rmi://127.0.0.1:{port}/jmxrmi", REQUESTS],
                         capture_output=True, text=True, timeout=60, check=True)
    counts: Counter = Counter()
    for line in out.stdout.splitlines():
        name, value = line.split("\t")
        api = name.split("request=")[1].split(",")[0]
        counts[api] += int(value)
    return counts


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK   # utime + stime


def sample(cluster: KafkaCluster, ports: list[int]) -> tuple[Counter, float, float]:
    counts: Counter = Counter()
    for port in ports:
        counts += request_counts(port)
    return counts, sum(cpu_seconds(n.pid) for n in cluster.nodes), time.process_time()


def window(cluster, ports, seconds, probe=None) -> dict:
    rounds0 = dict(probe.view().rounds) if probe else {}
    c0, b0, p0 = sample(cluster, ports)
    t0 = time.monotonic()
    time.sleep(seconds)   # the window itself: what runs meanwhile is what is measured
    c1, b1, p1 = sample(cluster, ports)
    wall = time.monotonic() - t0
    rounds = sum(probe.view().rounds.values()) - sum(rounds0.values()) if probe else 0
    return {"requests": c1 - c0, "broker_cpu": b1 - b0, "process_cpu": p1 - p0, "wall": wall, "rounds": rounds,
            "failures": dict(probe.view().failures) if probe else {}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", type=int, default=3)
    ap.add_argument("--interval", type=float, default=10.0)
    ap.add_argument("--seconds", type=float, default=120.0)
    args = ap.parse_args()

    cluster = KafkaCluster(args.nodes)
    ports = [free_port() for _ in cluster.nodes]
    for node, port in zip(cluster.nodes, ports, strict=True):
        node.jvm_opts = jmx_opts(port)
    cluster.start()
    try:
        print(f"{cluster.describe()}; {platform.processor() or platform.machine()}, {os.cpu_count()} cpus")
        cfg = CanaryConfig(enabled=True, interval_seconds=args.interval)
        # One round first, so that the idle window already has what a production cluster has:
        # __transaction_state and the canary topic, replicated (their followers' fetches).
        first = CanaryProbe("bench", {"bootstrap.servers": cluster.bootstrap}, cfg, "bench").check_once()
        if not first["ok"]:
            raise SystemExit(f"the first canary round failed: {first['failure']}")
        time.sleep(5)
        idle = window(cluster, ports, args.seconds)
        probe = CanaryProbe("bench", {"bootstrap.servers": cluster.bootstrap}, cfg, "bench")
        probe.start()
        wait_for(lambda: probe.view().rounds.get("committed", 0) >= 2, 120, what="two committed canary rounds")
        busy = window(cluster, ports, args.seconds, probe)
        probe.stop()
        v = probe.view()
    finally:
        cluster.stop()

    scale = busy["wall"] / idle["wall"]
    # "Fetch" counts FetchConsumer and FetchFollower together: left out of the sum
    added = {api: busy["requests"][api] - idle["requests"][api] * scale
             for api in set(busy["requests"]) | set(idle["requests"]) if api != "Fetch"}
    rounds = busy["rounds"]
    print(f"window {busy['wall']:.0f} s, interval {args.interval:g} s: {rounds} rounds "
          f"(failures {busy['failures'] or 'none'}); canary partitions: {len(v.visibility)}")
    print(f"{'API':<28}{'idle/s':>9}{'canary/s':>10}{'added/round':>13}")
    for api in sorted(added, key=lambda a: -abs(added[a])):
        if abs(added[api]) / max(1, rounds) < 0.05 and idle["requests"][api] == 0:
            continue
        print(f"{api:<28}{idle['requests'][api] / idle['wall']:>9.2f}{busy['requests'][api] / busy['wall']:>10.2f}"
              f"{added[api] / max(1, rounds):>13.1f}")
    total = sum(added.values())
    every = {k: sum(n for api, n in w["requests"].items() if api != "Fetch") / w["wall"] for k, w in
             (("idle", idle), ("busy", busy))}
    print(f"{'all':<28}{every['idle']:>9.2f}{every['busy']:>10.2f}{total / max(1, rounds):>13.1f}")
    print(f"broker CPU (all nodes): idle {idle['broker_cpu'] / idle['wall'] * 100:.2f}% of a core, "
          f"with the canary {busy['broker_cpu'] / busy['wall'] * 100:.2f}%")
    print(f"canary (this process) CPU: {busy['process_cpu'] / busy['wall'] * 100:.2f}% of a core, "
          f"{busy['process_cpu'] / max(1, rounds) * 1000:.1f} ms per round "
          f"(idle window: {idle['process_cpu'] / idle['wall'] * 100:.2f}%)")
    commit = v.commit
    print(f"commit mean {commit.sum / max(1, commit.count) * 1000:.1f} ms; visibility mean "
          + ", ".join(f"p{p} {h.sum / max(1, h.count) * 1000:.1f} ms" for p, h in sorted(v.visibility.items())))


if __name__ == "__main__":
    main()
