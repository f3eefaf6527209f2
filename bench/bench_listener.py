"""Benchmark: the Spark listener's overhead per micro-batch.

One run, one local SparkSession: the same stateless query (rate source -> projection ->
noop sink) runs in alternating rounds without and with TxnWatchListener attached in its
heaviest configuration (driver-side state + serve(port) + forwarding to a local
ingest endpoint on the exporter's HTTP server). Alternating rounds cancel slow drifts (JIT warm-up,
page cache). Reported:
- the ratio of median batch durations with / without the listener (Spark's own
  batchDuration of executed batches), the figure asked for;
- the listener's own time per event (measured inside the callbacks) against the median
  batch duration: the direct cost, which the ratio above cannot resolve below its noise.

    .venv/bin/python bench/bench_listener.py [--rounds 3] [--batches 20] [--markdown docs/benchmarks.md]
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

SECTION = "## Spark listener"


def session():
    from txnwatch.pipeline import spark_session

    return spark_session("local[2]", "txnwatch-bench-listener", 2,
                         **{"spark.sql.streaming.forceDeleteTempCheckpointLocation": "true"})


def run_query(spark, name: str, batches: int, trigger: str) -> list[float]:
    """Run until `batches` executed batches; return their batchDuration in ms."""
    from pyspark.sql import functions as F

    from txnwatch_dev.net import wait_for

    df = spark.readStream.format("rate").option("rowsPerSecond", 2000).load()
    q = (df.select((F.col("value") * 2).alias("v"), "timestamp")
         .writeStream.queryName(name).format("noop").trigger(processingTime=trigger).start())

    def executed():
        return [p for p in q.recentProgress if "addBatch" in (p["durationMs"] or {})]

    try:
        wait_for(lambda: len(executed()) >= batches + 1, 600, interval=0.05, what=f"{batches} batches")
    finally:
        q.stop()
    return [float(p["batchDuration"]) for p in executed()[1:batches + 1]]   # skip the cold first batch


class Ingest:
    def __init__(self):
        from flask import Flask

        from txnwatch.config import HttpConfig
        from txnwatch.config.web import WebConfig
        from txnwatch.exporter.serve.server import make_server
        from txnwatch.exporter.spark.ingest import make_ingest_blueprint
        from txnwatch.spark_listener.state import SparkQueryState
        from txnwatch_dev.net import free_port

        self.state = SparkQueryState()
        app = Flask("bench-ingest")
        app.register_blueprint(make_ingest_blueprint(self.state, "bench"))
        self.port = free_port()
        self.server = make_server(app, HttpConfig(host="127.0.0.1", port=self.port, threads=2), WebConfig())
        threading.Thread(target=self.server.run, daemon=True).start()

    def close(self):
        self.server.close()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--batches", type=int, default=20, help="executed batches per round and mode")
    ap.add_argument("--trigger", default="100 milliseconds")
    ap.add_argument("--markdown", type=Path, help="write/replace the '## Spark listener' section here")
    args = ap.parse_args(argv)

    from txnwatch.spark_listener import attach, detach
    from txnwatch_dev.net import wait_for

    spark = session()
    ingest = Ingest()
    without: list[float] = []
    with_listener: list[float] = []
    callback_s = 0.0
    events = 0
    try:
        run_query(spark, "warmup", 5, args.trigger)
        for r in range(args.rounds):
            without += run_query(spark, f"bench_plain_{r}", args.batches, args.trigger)
            listener = attach(spark, serve_port=0, host="127.0.0.1",
                              forward_url=f"http://127.0.0.1:{ingest.port}", token="bench")
            try:
                with_listener += run_query(spark, f"bench_listener_{r}", args.batches, args.trigger)
                # the termination event arrives asynchronously: let it through before detaching
                wait_for(lambda lst=listener: lst.counts.get("terminated", 0) >= 1, 30, what="termination event")
                listener.forwarder.flush(10)
            finally:
                detach(spark, listener)
            callback_s += listener.callback_seconds
            events += listener.events
            assert listener.errors() == {}, listener.errors()
            assert listener.forwarder.dropped == {}, listener.forwarder.dropped
    finally:
        ingest.close()
        spark.stop()

    med_without = statistics.median(without)
    med_with = statistics.median(with_listener)
    ratio = med_with / med_without
    per_event_ms = 1000.0 * callback_s / max(1, events)
    direct = per_event_ms / med_with
    cmd = "python bench/bench_listener.py " + " ".join(argv if argv is not None else sys.argv[1:])
    machine = (f"{platform.machine()}, {os.cpu_count()} CPUs, {platform.system()} {platform.release()}, "
               f"Python {platform.python_version()}")
    import pyspark

    lines = [
        SECTION,
        "",
        "Per-batch overhead of TxnWatchListener (state + serve(port) + forwarding to a local ingest),",
        "the same query without and with it in alternating rounds of one run "
        "(rate 2000 rows/s -> projection -> noop sink, trigger "
        f"{args.trigger}, local[2], {args.rounds} rounds x {args.batches} executed batches per mode).",
        "",
        "| measure | value |",
        "|---|---|",
        f"| median batch duration without listener | {med_without:.1f} ms |",
        f"| median batch duration with listener | {med_with:.1f} ms |",
        f"| **ratio with / without** | **{ratio:.3f}** |",
        f"| listener time per event (inside callbacks) | {per_event_ms:.3f} ms ({events} events) |",
        f"| listener time per event / median batch | {100 * direct:.3f} % |",
        "",
        f"Batch-duration spread (p25-p75): without {q(without, 1):.0f}-{q(without, 3):.0f} ms, "
        f"with {q(with_listener, 1):.0f}-{q(with_listener, 3):.0f} ms; the ratio "
        + ("lies inside that run-to-run noise." if q(without, 1) <= med_with <= q(without, 3)
           else "is outside the p25-p75 band of the runs without the listener."),
        "The callback time is the listener's direct cost; callbacks run on Spark's listener-bus",
        "thread, not on the stream thread.",
        "",
        f"Command: `{cmd.strip()}`  ",
        f"Machine: {machine}, Spark {pyspark.__version__}  ",
        f"Date: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}",
        "",
    ]
    text = "\n".join(lines)
    print(text)
    if args.markdown:
        write_section(args.markdown, text)
    return 0


def q(values: list[float], k: int) -> float:
    """k-th quartile (1 or 3)."""
    return statistics.quantiles(values, n=4)[k - 1]


def write_section(path: Path, section: str) -> None:
    """Replace our section (up to the next '## ') or append it; other sections are untouched."""
    old = path.read_text() if path.exists() else "# Benchmarks\n"
    start = old.find(SECTION + "\n")
    if start < 0:
        new = old.rstrip("\n") + "\n\n" + section
    else:
        end = old.find("\n## ", start + len(SECTION))
        new = old[:start] + section + (old[end + 1:] if end >= 0 else "")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(new)


if __name__ == "__main__":
    raise SystemExit(main())
