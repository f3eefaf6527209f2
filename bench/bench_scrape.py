"""Scrape latency, Kafka requests per scrape, and exporter memory at scale.

    .venv/bin/python bench/bench_scrape.py [--partitions 10000] [--groups 500] [--seconds 30]

Starts a broker (Apache Kafka from Maven Central, KAFKA_VERSION) behind a request-counting TCP proxy, creates the partitions and groups,
runs `txnwatch serve` (a child process) polling every 2 s, then:
  1. 4 concurrent scrapers hit /metrics for --seconds while polls run: p50/p99/max;
  2. request attribution: Kafka requests through the proxy in a window with the same 4
     scrapers vs an equal window without scrapes (the difference is what scrapes cost);
  3. the exporter's resident memory (process_resident_memory_bytes) after the polls.
"""

from __future__ import annotations

import argparse
import math
import statistics
import threading
import time
import urllib.request

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from txnwatch_dev.kafka import KafkaCluster, make_broker
from txnwatch_dev.net import free_port, wait_for
from txnwatch_dev.observability.exporter_proc import ExporterProcess
from txnwatch_dev.proxy import KafkaProxy

# A Kafka node keeps a file open per partition (its active segment): with this machine's
# hard RLIMIT_NOFILE of 20,000 (not raisable in the container), one node holds ~15,000.
PARTITIONS_PER_NODE = 15_000


def broker_for(partitions: int):
    """A not yet started broker for `partitions` partitions: one Kafka node up to
    PARTITIONS_PER_NODE, else a KRaft cluster of enough nodes (topics with RF 1)."""
    nodes = math.ceil(partitions / PARTITIONS_PER_NODE)
    if nodes <= 1:
        return make_broker()
    return KafkaCluster(nodes, heap="1g", properties={"default.replication.factor": 1,
                                                      "offsets.topic.replication.factor": 1,
                                                      "transaction.state.log.replication.factor": 1,
                                                      "transaction.state.log.min.isr": 1})


def create_partitions(bootstrap: str, partitions: int, prefix: str, per_topic: int = 100) -> list[str]:
    """`partitions` partitions in topics of `per_topic` named <prefix>-00000...; returns the names."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    names = [f"{prefix}-{i:05d}" for i in range(max(partitions // per_topic, 1))]
    for i in range(0, len(names), 50):
        for f in admin.create_topics([NewTopic(n, per_topic, 1) for n in names[i:i + 50]],
                                     operation_timeout=300, request_timeout=300).values():
            f.result()
    return names


def setup(bootstrap: str, partitions: int, groups: int, per_topic: int = 100) -> None:
    names = create_partitions(bootstrap, partitions, "scale", per_topic)
    commit_groups(bootstrap, names, groups, "scale")


def commit_groups(bootstrap: str, topics: list[str], groups: int, prefix: str) -> None:
    # the group coordinator learns of new topics from the controller a while after their creation,
    # and on a new multi-node cluster the __consumer_offsets leaders are still settling
    # the first commit creates __consumer_offsets: on a 7-node cluster still loading 100,000
    # new partitions its leaders take minutes
    for g in range(groups):
        wait_for(lambda g=g: _commit(bootstrap, f"{prefix}-group-{g:04d}", topics[g % len(topics)]),
                 900 if g == 0 else 120, interval=0.5,
                 what=f"a commit of group {g} (the new topics at the group coordinator)")


def _commit(bootstrap: str, group: str, topic: str) -> bool:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        c.commit(offsets=[TopicPartition(topic, p, 0) for p in range(20)], asynchronous=False)
        return True
    except KafkaException as exc:
        if exc.args[0].code() not in (KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError.NOT_COORDINATOR,
                                      KafkaError.COORDINATOR_NOT_AVAILABLE,
                                      KafkaError.COORDINATOR_LOAD_IN_PROGRESS):
            raise
        return False
    finally:
        c.close()


PROMETHEUS_HEADERS = {  # what Prometheus 2.x sends
    "Accept": "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,"
              "text/plain;version=0.0.4;q=0.5,*/*;q=0.1",
    "Accept-Encoding": "gzip",
}


def scrapers(url: str, seconds: float, n: int = 4, headers: dict | None = None) -> list[float]:
    lat: list[float] = []
    lock = threading.Lock()
    stop = time.monotonic() + seconds

    def run() -> None:
        while time.monotonic() < stop:
            t = time.perf_counter()
            with urllib.request.urlopen(urllib.request.Request(url, headers=headers or {}), timeout=30) as r:
                r.read()
            d = time.perf_counter() - t
            with lock:
                lat.append(d)

    threads = [threading.Thread(target=run) for _ in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return lat


def wrk(url: str, seconds: float, headers: dict | None = None) -> str:
    """Native load: 4 threads, 4 connections; returns wrk's latency distribution lines."""
    import shutil
    import subprocess

    if not shutil.which("wrk"):
        return "(wrk not installed: apt-get install wrk)"
    cmd = ["wrk", "-t4", "-c4", f"-d{int(seconds)}s", "--latency", url]
    for k, v in (headers or {}).items():
        cmd += ["-H", f"{k}: {v}"]
    out = subprocess.run(cmd, capture_output=True, text=True).stdout
    keep = [ln.strip() for ln in out.splitlines()
            if ln.strip().startswith(("50%", "75%", "90%", "99%", "Latency", "Requests/sec")) or "requests in" in ln]
    return "; ".join(keep)


def paced(seconds: float, period: float, call) -> list[float]:
    """call() every `period` seconds from a random phase, for `seconds`: each call's latency
    (an open loop: a slow answer does not delay the next call's start)."""
    import random

    lat = []
    next_at = time.monotonic() + random.uniform(0, period)
    stop = time.monotonic() + seconds
    while next_at < stop:
        time.sleep(max(0.0, next_at - time.monotonic()))
        t = time.perf_counter()
        call()
        lat.append(time.perf_counter() - t)
        next_at += period
    return lat


def _open_loop_worker(url: str, seconds: float, period: float, headers: dict, out) -> None:
    def get() -> None:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=30) as r:
            r.read()

    out.put(paced(seconds, period, get))


def open_loop(url: str, seconds: float, scrapers: int = 4, period: float = 0.25,
              headers: dict | None = None) -> list[float]:
    """`scrapers` separate processes (no shared GIL), each scraping every `period` seconds
    on its own schedule, like independent Prometheus servers (at a far higher rate)."""
    return in_processes(scrapers, _open_loop_worker, url, seconds, period, headers or {})


def in_processes(n: int, worker, *args) -> list[float]:
    """worker(*args, queue) in `n` processes of their own (no shared GIL): all their latencies."""
    import multiprocessing as mp

    q = mp.Queue()
    procs = [mp.Process(target=worker, args=(*args, q)) for _ in range(n)]
    for p in procs:
        p.start()
    lat = [x for _ in procs for x in q.get()]
    for p in procs:
        p.join()
    return lat


def pct(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--partitions", type=int, default=10_000)
    ap.add_argument("--groups", type=int, default=500)
    ap.add_argument("--seconds", type=float, default=30)
    ap.add_argument("--pin", action="store_true",
                    help="pin the broker and the scrapers to CPU 1 and the exporter to CPU 0 (taskset), "
                         "as if the broker and Prometheus ran on other machines")
    ap.add_argument("--poll-interval", type=float, default=2.0,
                    help="2 s keeps a 10k-partition poller busy all the time (the worst case)")
    a = ap.parse_args()
    proxy_port = free_port()
    with make_broker(advertised_port=proxy_port) as broker:
        proxy = KafkaProxy("127.0.0.1", broker.port, port=proxy_port).start()
        t0 = time.perf_counter()
        setup(broker.bootstrap, a.partitions, a.groups)
        print(f"setup {a.partitions} partitions / {a.groups} groups: {time.perf_counter() - t0:.0f}s")
        exp = ExporterProcess({"clusters": [{"name": "bench", "bootstrap_servers": f"127.0.0.1:{proxy_port}",
                                             "poll_interval_seconds": a.poll_interval,
                                             "poll_timeout_seconds": 60}]}).start()
        if a.pin:
            import os
            import subprocess

            subprocess.run(["taskset", "-a", "-pc", "1", str(broker.pid)], check=True, capture_output=True)
            subprocess.run(["taskset", "-a", "-pc", "0", str(exp.proc.pid)], check=True, capture_output=True)
            os.sched_setaffinity(0, {1})  # this process, its proxy thread and the scrapers it starts
        try:
            exp.wait_metric(lambda m: m.get_value("txnwatch_up") == 1, timeout=300, what="first poll")
            m0 = exp.metrics()
            polls0 = m0.get_value("txnwatch_last_success_timestamp_seconds")
            body = urllib.request.urlopen(exp.url + "/metrics").read()
            gz = urllib.request.urlopen(urllib.request.Request(exp.url + "/metrics", headers=PROMETHEUS_HEADERS)).read()
            lines = body.count(b"\n")
            print(f"/metrics body: {len(body) / 1e6:.1f} MB, {lines} lines; gzip as Prometheus asks: "
                  f"{len(gz) / 1e6:.2f} MB")
            for label, headers in (("plain text", None), ("Prometheus headers (OpenMetrics+gzip)",
                                                          PROMETHEUS_HEADERS)):
                lat = scrapers(exp.url + "/metrics", a.seconds, headers=headers)
                m1 = exp.metrics()
                print(f"{label}: 4 scrapers x {a.seconds:.0f}s while polling every {a.poll_interval:g} s: {len(lat)} scrapes, "
                      f"p50 {statistics.median(lat) * 1000:.1f} ms, p99 {pct(lat, 99) * 1000:.1f} ms, "
                      f"max {max(lat) * 1000:.1f} ms; last poll took "
                      f"{m1.get_value('txnwatch_poll_duration_seconds') * 1000:.0f} ms, polls advanced "
                      f"{m1.get_value('txnwatch_last_success_timestamp_seconds') - polls0:.0f}s")
                print(f"  wrk (native client, closed loop: saturation) {label}: "
                      f"{wrk(exp.url + '/metrics', a.seconds, headers)}")
                ol = open_loop(exp.url + "/metrics", a.seconds, headers=headers)
                print(f"  open loop, 4 scraper processes x 4 scrapes/s each: {len(ol)} scrapes, "
                      f"p50 {statistics.median(ol) * 1000:.1f} ms, p99 {pct(ol, 99) * 1000:.1f} ms, "
                      f"max {max(ol) * 1000:.1f} ms")
            rss = exp.metrics().get_value("process_resident_memory_bytes")
            print(f"exporter RSS at {a.partitions} partitions / {a.groups} groups: {rss / 1e6:.0f} MB")
        finally:
            exp.stop()
        # Request attribution with polls parked (interval 1 h after the first poll): any
        # Kafka request in a window of scrapes would be the scrapes' doing.
        exp = ExporterProcess({"clusters": [{"name": "bench", "bootstrap_servers": f"127.0.0.1:{proxy_port}",
                                             "poll_interval_seconds": 3600, "poll_timeout_seconds": 60}]}).start()
        try:
            exp.wait_metric(lambda m: m.get_value("txnwatch_up") == 1, timeout=300, what="first poll")
            win = 10.0
            proxy.reset_count()
            time.sleep(win)
            quiet = proxy.reset_count()
            n = len(scrapers(exp.url + "/metrics", win, headers=PROMETHEUS_HEADERS))
            busy = proxy.reset_count()
            print(f"polls parked: Kafka requests in {win:.0f}s windows: {quiet} without scrapes, "
                  f"{busy} during {n} scrapes by 4 scrapers")
        finally:
            exp.stop()
            proxy.stop()


if __name__ == "__main__":
    main()
