"""Exporter memory and poll/scrape cost as the cluster grows.

    .venv/bin/python bench/bench_memory.py [--sizes 1000,10000,50000] [--groups 500]
        [--granularities signal,partition,topic]

For each size: a fresh broker (Apache Kafka where found, see txnwatch_dev.kafka) with that many partitions (100 per topic) and
--groups consumer groups, `txnwatch serve` (child process, at each of --granularities in turn) on its default schedule (a
worker process polling back to back); after 10 s of polls it reads the serving process's
process_resident_memory_bytes and the worker processes' RSS (/proc), the last poll's
duration, the /metrics size and a Prometheus-style scrape's latency, and prints a table of
how each grows with size (`--json FILE` for bench/plot_growth.py).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
import urllib.request
from pathlib import Path

from bench_scrape import PROMETHEUS_HEADERS, broker_for, setup

from txnwatch_dev.observability.exporter_proc import ExporterProcess


def children(pid: int) -> list[int]:
    """Pids whose parent is `pid` (the exporter's worker processes)."""
    out = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                stat = (d / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                out.append(int(d.name))
    return out


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024 * 1.048576
    return 0.0


def measure(partitions: int, groups: int, granularities: list[str]) -> list[dict]:
    """One broker of `partitions`, then an exporter at each granularity in turn."""
    with broker_for(partitions) as broker:
        t0 = time.perf_counter()
        setup(broker.bootstrap, partitions, groups)
        setup_s = time.perf_counter() - t0
        return [{"partitions": partitions, "groups": groups, "setup_s": setup_s, "granularity": g,
                 **exporter_costs(broker.bootstrap, g)} for g in granularities]


def exporter_costs(bootstrap: str, granularity: str) -> dict:
    exp = ExporterProcess({"clusters": [{"name": "bench", "bootstrap_servers": bootstrap, "granularity": granularity,
                                         "poll_timeout_seconds": 120}]}).start()   # default schedule
    try:
        first = exp.wait_metric(lambda m: m.get_value("txnwatch_up") == 1, timeout=600, what="first poll")
        t_first = first.get_value("txnwatch_last_success_timestamp_seconds")
        m = exp.wait_metric(lambda m: m.get_value("txnwatch_last_success_timestamp_seconds") >= t_first + 10,
                            timeout=600, what="3 polls")
        lat = []
        for _ in range(20):
            t = time.perf_counter()
            with urllib.request.urlopen(urllib.request.Request(exp.url + "/metrics",
                                                               headers=PROMETHEUS_HEADERS)) as r:
                gz = r.read()
            lat.append(time.perf_counter() - t)
        plain = urllib.request.urlopen(exp.url + "/metrics").read()
        workers = children(exp.proc.pid)
        return {"rss_mb": m.get_value("process_resident_memory_bytes") / 1e6,
                "worker_rss_mb": sum(rss_mb(p) for p in workers), "workers": len(workers),
                "poll_s": m.get_value("txnwatch_poll_duration_seconds"),
                "series": plain.count(b"\n") - plain.count(b"\n#"), "plain_mb": len(plain) / 1e6,
                "gzip_mb": len(gz) / 1e6, "scrape_ms_median": statistics.median(lat) * 1000}
    finally:
        exp.stop()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="1000,10000,50000")
    ap.add_argument("--groups", type=int, default=500)
    ap.add_argument("--granularities", default="signal",
                    help="comma-separated: an exporter at each, in turn, on the same broker")
    ap.add_argument("--json", help="also write the rows to this file (bench/plot_growth.py draws them)")
    a = ap.parse_args()
    rows = []
    for n in a.sizes.split(","):
        rows += measure(int(n), a.groups, a.granularities.split(","))
        print(rows[-1], flush=True)
        if a.json:
            Path(a.json).write_text(json.dumps(rows, indent=1))
    print("| partitions | groups | granularity | series | /metrics plain | gzip | serving RSS | worker RSS | poll | "
          "scrape (median) |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['partitions']:,} | {r['groups']} | {r['granularity']} | {r['series']:,} | {r['plain_mb']:.1f} MB | "
              f"{r['gzip_mb']:.2f} MB | {r['rss_mb']:.0f} MB | {r['worker_rss_mb']:.0f} MB | {r['poll_s']:.2f} s | "
              f"{r['scrape_ms_median']:.1f} ms |")


if __name__ == "__main__":
    main()
