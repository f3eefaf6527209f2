"""How old the offsets a scrape returns are, and what the exporter spends to keep them so.

    .venv/bin/python bench/bench_freshness.py [--partitions 1000,10000] [--poll-interval S]
        [--groups 500] [--txn-producers 20] [--seconds 30]
    .venv/bin/python bench/bench_freshness.py --scrape-every 5,30 --schedule scrapes,interval
        [--partitions 1000,10000] [--scrapes 12]

Starts a broker (Apache Kafka where found), creates the partitions (100 per topic),
commits offsets for --groups consumer groups (20 partitions each), keeps --txn-producers
transactional producers committing a transaction every 0.2 s (so ListTransactions and
DescribeTransactions have open transactions to return), runs `txnwatch serve` (worker
processes, the default).

Without --scrape-every: on its default schedule or with --poll-interval, scrapes /metrics 4
times a second for --seconds and reads the age of the poller's data (now - when the served
snapshot was taken) from each scrape: median, p90, max, with the poll duration.

With --scrape-every: one scraper at each cadence as Prometheus is (a fixed cadence, one user
agent), for each --schedule (scrapes: polls timed to the scrapes, the default; interval:
back to back from 1 s, the schedule before issue 29). After the scraper's cadence is learnt
(its first 5 scrapes), over --scrapes more: the data age each scrape saw (median, p90), the polls
made (txnwatch_polls_total), the CPU of all the exporter's processes (/proc, user + system)
as a share of one core, and the worker's CPU per poll and per partition. Run by hand;
figures go to docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from bench_scrape import commit_groups, create_partitions  # bench/ is on sys.path when run as a script
from confluent_kafka import Producer

from txnwatch_dev.kafka import make_broker
from txnwatch_dev.observability.exporter_proc import ExporterProcess
from txnwatch_dev.observability.scrape import Metrics, parse_metrics


def transactions(bootstrap: str, topics: list[str], n: int, stop: threading.Event) -> list[threading.Thread]:
    """`n` transactional producers, each committing one small transaction every 0.2 s."""
    def run(i: int) -> None:
        p = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"fresh-txn-{i}", "linger.ms": 5})
        p.init_transactions(60)
        while not stop.is_set():
            p.begin_transaction()
            p.produce(topics[i % len(topics)], value=b"x", partition=i % 100)
            p.commit_transaction(30)
            stop.wait(0.2)

    threads = [threading.Thread(target=run, args=(i,), daemon=True) for i in range(n)]
    for t in threads:
        t.start()
    return threads


@contextmanager
def workload(bootstrap: str, partitions: int, a) -> Iterator[str]:
    """`partitions` partitions, a.groups groups with committed offsets and a.txn_producers
    transactional producers running while the block runs; yields the names' prefix."""
    prefix = f"fresh{partitions}"
    topics = create_partitions(bootstrap, partitions, prefix)
    commit_groups(bootstrap, topics, a.groups, prefix)
    stop = threading.Event()
    threads = transactions(bootstrap, topics, a.txn_producers, stop)
    try:
        yield prefix
    finally:
        stop.set()
        for t in threads:
            t.join(30)


def measure(bootstrap: str, prefix: str, interval: float | None, seconds: float) -> dict:
    cluster = {"name": "fresh", "bootstrap_servers": bootstrap, "poll_timeout_seconds": 60,
               "topics": {"include": [f"{prefix}-.*"]}, "groups": {"include": [f"{prefix}-group-.*"]}}
    if interval is not None:
        cluster["poll_interval_seconds"] = interval
    exp = ExporterProcess({"clusters": [cluster]}).start()
    try:
        exp.wait_metric(lambda m: m.get_value("txnwatch_up", source="poller") == 1, 300, what="first poll")
        ages, polls = [], []
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            m = exp.metrics()
            ages.append(m.get_value("txnwatch_data_age_seconds", source="poller"))
            polls.append(m.get_value("txnwatch_poll_duration_seconds", source="poller"))
            time.sleep(0.25)
        ages.sort()
        return {"scrapes": len(ages), "median": statistics.median(ages), "p90": ages[int(len(ages) * 0.9)],
                "max": ages[-1], "poll": statistics.median(polls)}
    finally:
        exp.stop()


def cpu_seconds(pid: int) -> dict[int, float]:
    """User + system CPU seconds of `pid` and of its child processes, by pid."""
    tick = os.sysconf("SC_CLK_TCK")
    out = {}
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            fields = (d / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(d.name) == pid or int(fields[1]) == pid:
            out[int(d.name)] = (int(fields[11]) + int(fields[12])) / tick
    return out


def own_series(body: str) -> Metrics:
    """The exporter's own txnwatch_* series of a scrape, parsed without the rest: parsing
    every series of a 10k-partition scrape takes this process about a second of a core it
    shares with the exporter, which made the scraper late by seconds (Prometheus is not)."""
    lines = [ln for ln in body.splitlines() if ln.startswith(("txnwatch_", "# TYPE txnwatch_", "# HELP txnwatch_"))]
    return Metrics(parse_metrics("\n".join(lines) + "\n"))


def cadence(bootstrap: str, prefix: str, partitions: int, schedule: str, every: float, measured: int) -> dict:
    """One scraper every `every` s; after 5 scrapes, `measured` more of them measured."""
    cluster = {"name": "fresh", "bootstrap_servers": bootstrap, "poll_timeout_seconds": 60,
               "topics": {"include": [f"{prefix}-.*"]}, "groups": {"include": [f"{prefix}-group-.*"]},
               "poll_schedule": schedule, "poll_interval_seconds": 1}
    exp = ExporterProcess({"clusters": [cluster]}).start()
    try:
        exp.wait_metric(lambda m: m.get_value("txnwatch_up", source="poller") == 1, 300, what="first poll")
        t0 = time.monotonic()
        ages, start = [], None
        k = 0
        while True:
            time.sleep(max(0.0, t0 + k * every - time.monotonic()))
            _, body = exp.get("/metrics", headers={"User-Agent": "Prometheus/bench",
                                                   "X-Prometheus-Scrape-Timeout-Seconds": f"{min(every, 10):g}"},
                              timeout=30)
            k += 1
            m = own_series(body)
            if k == 5:
                start = (time.monotonic(), cpu_seconds(exp.proc.pid), m.get_value("txnwatch_polls_total"))
            elif k > 5:
                ages.append(m.get_value("txnwatch_data_age_seconds", source="poller"))
                if len(ages) >= measured:
                    break
        wall = time.monotonic() - start[0]
        cpu = cpu_seconds(exp.proc.pid)
        polls = m.get_value("txnwatch_polls_total") - start[2]
        total = sum(cpu.values()) - sum(start[1].values())
        worker = sum(v - start[1].get(p, 0.0) for p, v in cpu.items() if p != exp.proc.pid)
        ages.sort()
        return {"scrapes": len(ages), "median": statistics.median(ages), "p90": ages[int(len(ages) * 0.9)],
                "polls": polls, "cpu": total / wall, "per_poll": worker / max(polls, 1),
                "per_partition_us": worker / max(polls, 1) / partitions * 1e6}
    finally:
        exp.stop()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--partitions", default="1000,10000")
    ap.add_argument("--poll-interval", type=float, default=None, help="default: the exporter's (1 s, duty 0.5)")
    ap.add_argument("--groups", type=int, default=500)
    ap.add_argument("--txn-producers", type=int, default=20)
    ap.add_argument("--seconds", type=float, default=30)
    ap.add_argument("--scrape-every", default=None, help="scrapers' cadences, e.g. 5,30 (see above)")
    ap.add_argument("--schedule", default="scrapes,interval", help="with --scrape-every: scrapes, interval or both")
    ap.add_argument("--scrapes", type=int, default=12, help="with --scrape-every: scrapes measured per row")
    a = ap.parse_args()
    if a.scrape_every:
        return main_cadence(a)
    schedule = "the default schedule" if a.poll_interval is None else f"poll interval {a.poll_interval:g} s"
    print(f"machine: {platform.machine()}, Python {platform.python_version()}; {schedule}; {a.groups} groups, "
          f"{a.txn_producers} transactional producers")
    with make_broker() as broker:
        print("| partitions | scrapes | poll (median) | data age median | p90 | max |\n|---|---|---|---|---|---|")
        for n in [int(x) for x in a.partitions.split(",")]:
            with workload(broker.bootstrap, n, a) as prefix:
                r = measure(broker.bootstrap, prefix, a.poll_interval, a.seconds)
            print(f"| {n:,} | {r['scrapes']} | {r['poll'] * 1000:.0f} ms | **{r['median']:.2f} s** | "
                  f"{r['p90']:.2f} s | {r['max']:.2f} s |", flush=True)


def main_cadence(a) -> None:
    print(f"machine: {platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}; "
          f"{a.groups} groups, {a.txn_producers} transactional producers; {a.scrapes} scrapes measured per row")
    with make_broker() as broker:
        print("| partitions | scraped every | schedule | scrapes | data age median | p90 | polls | exporter CPU "
              "| worker CPU per poll | per partition |\n|---|---|---|---|---|---|---|---|---|---|")
        for n in [int(x) for x in a.partitions.split(",")]:
            with workload(broker.bootstrap, n, a) as prefix:
                for every in [float(x) for x in a.scrape_every.split(",")]:
                    for schedule in a.schedule.split(","):
                        r = cadence(broker.bootstrap, prefix, n, schedule, every, a.scrapes)
                        print(f"| {n:,} | {every:g} s | {schedule} | {r['scrapes']} | **{r['median']:.2f} s** | "
                              f"{r['p90']:.2f} s | {r['polls']:g} | **{r['cpu'] * 100:.1f} %** | "
                              f"{r['per_poll'] * 1000:.0f} ms | {r['per_partition_us']:.1f} us |", flush=True)


if __name__ == "__main__":
    main()
