"""How old the offsets a scrape returns are: txnwatch_data_age_seconds at scrape time.

    .venv/bin/python bench/bench_freshness.py [--partitions 1000,10000] [--poll-interval S]
        [--groups 500] [--txn-producers 20] [--seconds 30]

Starts a broker (Apache Kafka where found), creates the partitions (100 per topic),
commits offsets for --groups consumer groups (20 partitions each), keeps --txn-producers
transactional producers committing a transaction every 0.2 s (so ListTransactions and
DescribeTransactions have open transactions to return), runs `txnwatch serve` (worker
processes, the default) on its default schedule or with --poll-interval, then scrapes
/metrics 4 times a second for --seconds and reads the age of the poller's data (now -
when the served snapshot was taken) from each scrape: median, p90, max, with the poll
duration. Run by hand; figures go to docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import threading
import time

from bench_scrape import commit_groups, create_partitions  # bench/ is on sys.path when run as a script
from confluent_kafka import Producer

from txnwatch_dev.exporter_proc import ExporterProcess
from txnwatch_dev.kafka import make_broker


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


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--partitions", default="1000,10000")
    ap.add_argument("--poll-interval", type=float, default=None, help="default: the exporter's (1 s, duty 0.5)")
    ap.add_argument("--groups", type=int, default=500)
    ap.add_argument("--txn-producers", type=int, default=20)
    ap.add_argument("--seconds", type=float, default=30)
    a = ap.parse_args()
    schedule = "the default schedule" if a.poll_interval is None else f"poll interval {a.poll_interval:g} s"
    print(f"machine: {platform.machine()}, Python {platform.python_version()}; {schedule}; {a.groups} groups, "
          f"{a.txn_producers} transactional producers")
    with make_broker() as broker:
        print("| partitions | scrapes | poll (median) | data age median | p90 | max |\n|---|---|---|---|---|---|")
        for n in [int(x) for x in a.partitions.split(",")]:
            prefix = f"fresh{n}"
            topics = create_partitions(broker.bootstrap, n, prefix)
            commit_groups(broker.bootstrap, topics, a.groups, prefix)
            stop = threading.Event()
            threads = transactions(broker.bootstrap, topics, a.txn_producers, stop)
            try:
                r = measure(broker.bootstrap, prefix, a.poll_interval, a.seconds)
            finally:
                stop.set()
                for t in threads:
                    t.join(30)
            print(f"| {n:,} | {r['scrapes']} | {r['poll'] * 1000:.0f} ms | **{r['median']:.2f} s** | "
                  f"{r['p90']:.2f} s | {r['max']:.2f} s |", flush=True)


if __name__ == "__main__":
    main()
