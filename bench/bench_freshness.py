"""How old the offsets a scrape returns are: txnwatch_data_age_seconds at scrape time.

    .venv/bin/python bench/bench_freshness.py [--partitions 1000,10000] [--poll-interval 0.1] [--seconds 20]

Starts a broker (Apache Kafka where found), creates the partitions (100 per topic), runs
`txnwatch serve` (worker processes, the default) polling with the given minimum interval,
then scrapes /metrics 4 times a second for --seconds and reads the age of the poller's
data (now - when the served snapshot was taken) from each scrape: median, p90, max, with
the poll duration. Run by hand; figures go to docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import time

from bench_scrape import create_partitions  # bench/ is on sys.path when run as a script

from txnwatch.devtools.broker import make_broker
from txnwatch.devtools.exporter_proc import ExporterProcess


def measure(bootstrap: str, prefix: str, interval: float, seconds: float) -> dict:
    exp = ExporterProcess({"clusters": [{"name": "fresh", "bootstrap_servers": bootstrap,
                                         "poll_interval_seconds": interval, "poll_timeout_seconds": 60,
                                         "topics": {"include": [f"{prefix}-.*"]}}]}).start()
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
    ap.add_argument("--poll-interval", type=float, default=0.1)
    ap.add_argument("--seconds", type=float, default=20)
    a = ap.parse_args()
    print(f"machine: {platform.machine()}, Python {platform.python_version()}; poll interval {a.poll_interval:g} s")
    with make_broker() as broker:
        print("| partitions | scrapes | poll (median) | data age median | p90 | max |\n|---|---|---|---|---|---|")
        for n in [int(x) for x in a.partitions.split(",")]:
            prefix = f"fresh{n}"
            create_partitions(broker.bootstrap, n, prefix)
            r = measure(broker.bootstrap, prefix, a.poll_interval, a.seconds)
            print(f"| {n:,} | {r['scrapes']} | {r['poll'] * 1000:.0f} ms | **{r['median']:.2f} s** | "
                  f"{r['p90']:.2f} s | {r['max']:.2f} s |", flush=True)


if __name__ == "__main__":
    main()
