"""The demo with no fault for a while: what pages a healthy exactly-once estate gets.

    .venv/bin/python bench/bench_healthy_demo.py [--minutes 10] [--rate 200] [--trigger-seconds 1]
        [--granularity signal|partition|topic] [--series-linger SECONDS]

Runs `make demo`'s program (`python -m txnwatch_dev.demo --fault-interval 0`): a Kafka
broker, the reference Spark pipeline (orders-totals: Kafka source, read_committed, through
the exactly-once sink at the demo's 2 s trigger, or --trigger-seconds), the Kafka Streams app and its outbox sink, the
Flink job, the transactional canary, the exporter with its transaction-log tap, and
Prometheus with the generated rules at the demo's short `for`s (fencing_for 10 s above
0.05 fences a minute: stricter than the defaults). Every 30 s and at the end it reads
Prometheus: every alert that fired (ALERTS), and per app the highest rate of fences the
fencing alert reads and the tap's counts of fences and re-initialisations. Prints a JSON
summary; nothing should fire. It also gives the series Prometheus's head block created per
hour while it ran (prometheus_tsdb_head_series_created_total, from the first batch on), per
family the series that appeared and those that came and went during the run (Prometheus's
series API), and the exporter's series per partition and group family (txnwatch_series).
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import platform
import signal
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from pathlib import Path

from txnwatch_dev.net import free_port, wait_for
from txnwatch_dev.observability.exporter_proc import ExporterProcess
from txnwatch_dev.observability.prometheus import PrometheusProcess
from txnwatch_dev.procs import terminal_signals

ROOT = Path(__file__).resolve().parents[1]


def series_created(prom_port: int) -> float:
    """Series Prometheus's head block has created since it started (its own /metrics)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{prom_port}/metrics", timeout=10) as r:
        for line in r.read().decode().splitlines():
            if line.startswith("prometheus_tsdb_head_series_created_total "):
                return float(line.split()[1])
    raise RuntimeError("Prometheus's /metrics has no prometheus_tsdb_head_series_created_total")


def series_between(prom_port: int, start: float, end: float) -> set[tuple]:
    """The label sets of the series Prometheus held between `start` and `end` (its series API)."""
    query = urllib.parse.urlencode({"match[]": '{job!=""}', "start": start, "end": end})
    with urllib.request.urlopen(f"http://127.0.0.1:{prom_port}/api/v1/series?{query}", timeout=60) as r:
        return {tuple(sorted(s.items())) for s in json.load(r)["data"]}


def series_new(prom_port: int, since: float) -> dict[str, int]:
    """Per family, the series that appeared after `since` (held since then, not in the minute
    before): what the run created, the 8 largest."""
    before = series_between(prom_port, since - 60, since)
    new = collections.Counter(dict(lbl)["__name__"] for lbl in series_between(prom_port, since, time.time()) - before)
    return dict(new.most_common(8))


def series_gone(prom_port: int, span: int) -> dict[str, int]:
    """Per family, the series Prometheus held during the last `span` seconds (its series API)
    less those an instant query finds now: the series that came and went, the 8 largest."""
    now = time.time()
    url = f"http://127.0.0.1:{prom_port}/api/v1/"
    query = urllib.parse.urlencode({"match[]": '{job!=""}', "start": now - span, "end": now})
    with urllib.request.urlopen(f"{url}series?{query}", timeout=60) as r:
        seen = collections.Counter(s["__name__"] for s in json.load(r)["data"])
    query = urllib.parse.urlencode({"query": 'count by (__name__) ({job!=""})'})
    with urllib.request.urlopen(f"{url}query?{query}", timeout=60) as r:
        present = {x["metric"]["__name__"]: int(x["value"][1]) for x in json.load(r)["data"]["result"]}
    return dict(sorted(((name, n - present.get(name, 0)) for name, n in seen.items()), key=lambda kv: -kv[1])[:8])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--minutes", type=float, default=10.0)
    ap.add_argument("--rate", type=int, default=200)
    ap.add_argument("--trigger-seconds", type=float, default=2.0, help="the Spark pipeline's trigger interval")
    ap.add_argument("--granularity", choices=("signal", "partition", "topic"), default=None)
    ap.add_argument("--series-linger", type=float, default=None)
    args = ap.parse_args()
    state = Path(tempfile.mkdtemp(prefix="txnwatch-healthy-demo-"))
    ex_port, prom_port = free_port(), free_port()
    cmd = [sys.executable, "-m", "txnwatch_dev.demo", "--fault-interval", "0", "--state-dir", str(state),
           "--exporter-port", str(ex_port), "--prometheus-port", str(prom_port), "--rate", str(args.rate),
           "--trigger-seconds", f"{args.trigger_seconds:g}",
           "--duration", str(args.minutes * 60 + 120)]
    for flag, value in (("--granularity", args.granularity), ("--series-linger", args.series_linger)):
        if value is not None:
            cmd += [flag, str(value)]
    log = open(state / "demo.out", "wb")
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                            preexec_fn=terminal_signals)
    exporter = ExporterProcess({"clusters": []}, port=ex_port)
    prom = PrometheusProcess([], port=prom_port)
    fired: set[tuple[str, str]] = set()
    worst: dict[str, float] = {}
    try:
        wait_for(lambda: exporter.get("/healthz")[0] == 200 or proc.poll() is not None, 300, what="the demo")
        wait_for(lambda: (exporter.metrics().get_value("spark_streaming_batch_id") or 0) > 0
                 or proc.poll() is not None, 300, what="the pipeline's first batch")
        started = time.monotonic()
        started_at = time.time()
        created_before = series_created(prom_port)
        while time.monotonic() - started < args.minutes * 60 and proc.poll() is None:
            time.sleep(30)
            span = int(time.monotonic() - started) + 30
            for r in prom.query(f'max_over_time(ALERTS{{alertstate="firing"}}[{span}s])'):
                lbl = r["metric"]
                fired.add((lbl["alertname"], lbl.get("app") or lbl.get("group") or lbl.get("topic") or ""))
            for r in prom.query("max by (app, reason) (max_over_time("
                                f"cluster_app_reason:kafka_transaction_fencing_events:rate15m[{span}s])) * 60"):
                key = f"{r['metric'].get('app')}/{r['metric'].get('reason')}"
                worst[key] = max(worst.get(key, 0.0), float(r["value"][1]))
        m = exporter.metrics()
        apps = sorted({lbl["app"] for lbl, _ in m.select("kafka_transactions_total")})
        per_app = {a: {"committed": m.get_value("kafka_transactions_total", app=a, outcome="committed"),
                       "fences": {lbl["reason"]: v for lbl, v in m.select("kafka_transaction_fencing_events_total",
                                                                          app=a) if v},
                       "reinits": m.get_value("kafka_transactional_id_reinitializations_total", app=a)}
                   for a in apps}
        created = series_created(prom_port) - created_before
        span = int(time.monotonic() - started)
        gone = series_gone(prom_port, span)
        new = series_new(prom_port, started_at)
        hours = (time.monotonic() - started) / 3600
        series = {lbl["family"]: v for lbl, v in m.select("txnwatch_series")}
        summary = {"minutes": round((time.monotonic() - started) / 60, 1),
                   "granularity": args.granularity or "default", "linger": args.series_linger,
                   "head_series_created_per_hour": round(created / hours),
                   "series_gone_during_the_run_by_family": gone,
                   "series_new_during_the_run_by_family": new,
                   "series_exported": sum(series.values()),
                   "partition_and_group_series": {f: v for f, v in series.items()
                                                  if f.startswith(("kafka_partition_", "kafka_consumergroup_"))}, "machine": platform.processor() or
                   platform.machine(), "cpus": os.cpu_count(), "alerts_fired": sorted(fired),
                   "max_fences_per_minute_read_by_the_alert": worst, "apps": per_app}
        print(json.dumps(summary, indent=2, sort_keys=True))
        return 1 if fired else 0
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGINT)
            try:
                proc.wait(120)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
        log.close()


if __name__ == "__main__":
    sys.exit(main())
