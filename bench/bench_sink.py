"""Exactly-once sink vs at-least-once: the reference pipeline's throughput, same run.

    .venv/bin/python bench/bench_sink.py [--records 200000] [--keys 5000] [--triggers 1,5] [--reps 2]

Starts its own broker (Apache Kafka where found, else Tansu; or uses --bootstrap), writes one input set (2 partitions,
read_committed, event time increasing so windows close every batch), then for each
trigger interval runs the same pipeline (Python Kafka source -> keyed windowed
aggregation with watermark -> sink) over the same input from the start, alternating
--sink eos and --sink at-least-once (fresh checkpoint and output topic per run), `--reps`
times each, in one SparkSession. maxRecordsPerBatch scales with the trigger
(--records-per-second-of-trigger), as a deployment sized to its trigger would.

Reported per run: processing throughput = input rows / sum of executed batches'
durations (what the query can sustain; unaffected by idle trigger time), wall-clock
throughput = input rows / (first batch start to last batch end), output rows, batches.
The ratio is EOS / at-least-once of the medians.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import tempfile
import time
from pathlib import Path

from txnwatch.devtools.broker import make_broker
from txnwatch.devtools.workload import create_topics
from txnwatch.pipeline import Settings, executed, run_until_idle, spark_session, start_query
from txnwatch.producer import TransactionalProducer

BASE = 1_700_000_000


def write_input(bootstrap: str, topic: str, records: int, keys: int, per_second: int) -> None:
    p = TransactionalProducer({"bootstrap.servers": bootstrap, "transactional.id": f"bench-input-{topic}",
                               "linger.ms": 20})
    p.init_transactions()
    per_part = records // 2
    chunk = 20_000
    for start in range(0, per_part, chunk):
        p.begin()
        for part in (0, 1):
            for j in range(start, min(per_part, start + chunk)):
                i = j * 2 + part
                key = f"k{(i * 7919) % keys}"
                ts = BASE + j / (per_second / 2)
                p.produce(topic, value=json.dumps({"key": key, "amount": i % 13, "ts": ts}).encode(),
                          key=key.encode(), partition=part)
        p.commit()
    p.begin()
    for part in (0, 1):
        p.produce(topic, value=json.dumps({"key": "__flush__", "amount": 0, "ts": BASE + 10 ** 6}).encode(),
                  partition=part)
    p.commit()


def _settings(bootstrap, topic, sink, trigger, max_records, tmp, tag) -> Settings:
    out = f"bench-out-{tag}"
    create_topics(bootstrap, [out], partitions=2)
    return Settings(bootstrap=bootstrap, input_topic=topic, output_topic=out, checkpoint=str(tmp / tag),
                    name=f"bench_{tag}", sink=sink, num_tasks=2, trigger_seconds=trigger,
                    max_records_per_batch=max_records, window="1 second", watermark="1 second",
                    transaction_timeout_ms=max(60_000, int(trigger * 4000)), broker_max_timeout_ms=900_000)


def _measure(q, sk, sink: str, trigger: float) -> dict:
    from txnwatch.spark_listener.events import parse_timestamp

    progress = [p for p in q.recentProgress if executed(p)]
    data = [p for p in progress if p["numInputRows"] > 0]
    rows = sum(p["numInputRows"] for p in data)
    busy = sum(p["batchDuration"] for p in progress) / 1000.0
    t0 = parse_timestamp(progress[0]["timestamp"])
    last = progress[-1]
    t1 = parse_timestamp(last["timestamp"]) + last["batchDuration"] / 1000.0
    add_batch = [p["durationMs"].get("addBatch", 0) for p in progress]
    return {"sink": sink, "trigger": trigger, "rows": rows, "batches": len(progress),
            "output_rows": sk.stats.get("rows", 0), "busy_s": busy, "wall_s": t1 - t0,
            "processing_rows_per_s": rows / busy, "wall_rows_per_s": rows / (t1 - t0),
            "median_add_batch_ms": statistics.median(add_batch),
            "task_write_s": sum(sk.task_seconds), "tasks_writing": len(sk.task_seconds),
            "transactions": sk.stats.get("transactions_committed", 0)}


def run_once(spark, bootstrap: str, topic: str, sinks: tuple[str, ...], trigger: float, max_records: int,
             tmp: Path, tag: str) -> list[dict]:
    """Run the pipeline once per sink in `sinks`, all at the same time (same input, same
    trigger, same machine load), each until idle."""
    started = []
    try:
        for sink in sinks:
            s = _settings(bootstrap, topic, sink, trigger, max_records, tmp, f"{tag}-{sink}")
            started.append((sink, *start_query(spark, s)))
        idle = max(3.0, trigger * 2 + 1)
        for sink, q, _ in started:
            how = run_until_idle(q, idle, 1800)
            if how != "idle":
                raise RuntimeError(f"{tag} {sink}: {how} {q.exception()}")
        return [_measure(q, sk, sink, trigger) for sink, q, sk in started]
    finally:
        for _, q, _ in started:
            q.stop()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bootstrap", default=None)
    ap.add_argument("--records", type=int, default=200_000)
    ap.add_argument("--keys", type=int, default=5000)
    ap.add_argument("--event-rate", type=int, default=20_000,
                    help="input records per second of event time (windows of 1 s)")
    ap.add_argument("--triggers", default="1,5", help="trigger intervals in seconds")
    ap.add_argument("--records-per-second-of-trigger", type=int, default=20_000)
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--mode", choices=["concurrent", "sequential"], default="concurrent",
                    help="concurrent: both sinks' queries run at the same time over the same input "
                         "(same load); sequential: one after the other, alternating order")
    ap.add_argument("--json-out", default=None)
    a = ap.parse_args()
    broker = None
    bootstrap = a.bootstrap
    if bootstrap is None:
        broker = make_broker().start()
        bootstrap = broker.bootstrap
    results = []
    try:
        topic = f"bench-in-{int(time.time())}"
        create_topics(bootstrap, [topic], partitions=2)
        t = time.perf_counter()
        write_input(bootstrap, topic, a.records, a.keys, a.event_rate)
        print(f"input: {a.records} records in {time.perf_counter() - t:.1f} s", flush=True)
        spark = spark_session("local[2]", "bench-sink", 2)
        tmp = Path(tempfile.mkdtemp(prefix="bench-sink-"))
        # Warm-up (discarded): JVM, Python workers, producers' first connections.
        warm = f"{topic}-warmup"
        create_topics(bootstrap, [warm], partitions=2)
        write_input(bootstrap, warm, min(a.records, 20_000), a.keys, a.event_rate)
        run_once(spark, bootstrap, warm, ("eos", "at-least-once"), 1.0, 10_000, tmp, "warmup")
        n = 0
        for trig in [float(x) for x in a.triggers.split(",")]:
            max_records = int(trig * a.records_per_second_of_trigger)
            for rep in range(a.reps):
                order = ("eos", "at-least-once") if rep % 2 == 0 else ("at-least-once", "eos")
                groups = [order] if a.mode == "concurrent" else [(x,) for x in order]
                for group in groups:
                    n += 1
                    for r in run_once(spark, bootstrap, topic, group, trig, max_records, tmp, f"{n}"):
                        r["rep"] = rep
                        r["max_records_per_batch"] = max_records
                        results.append(r)
                        print(json.dumps(r), flush=True)
        spark.stop()
    finally:
        if broker is not None:
            broker.cleanup()
    print(f"\nmachine: {platform.processor() or platform.machine()}, python {platform.python_version()}")
    print("| trigger | max records/batch | sink | processing rows/s (median) | wall rows/s (median) "
          "| sink write s per run (median) | output rows | batches | median addBatch ms |")
    print("|---|---|---|---|---|---|---|---|---|")
    for trig in sorted({r["trigger"] for r in results}):
        med = {}
        for sink in ("eos", "at-least-once"):
            rs = [r for r in results if r["trigger"] == trig and r["sink"] == sink]
            med[sink] = {k: statistics.median(r[k] for r in rs)
                         for k in ("processing_rows_per_s", "wall_rows_per_s", "task_write_s",
                                   "median_add_batch_ms")}
            m = med[sink]
            print(f"| {trig:g} s | {rs[0]['max_records_per_batch']} | {sink} | {m['processing_rows_per_s']:,.0f} "
                  f"| {m['wall_rows_per_s']:,.0f} | {m['task_write_s']:.2f} | {rs[0]['output_rows']} "
                  f"| {rs[0]['batches']} | {m['median_add_batch_ms']:.0f} |")
        per_rep = []
        for rep in sorted({r["rep"] for r in results}):
            pair = {r["sink"]: r for r in results if r["trigger"] == trig and r["rep"] == rep}
            per_rep.append(pair["eos"]["processing_rows_per_s"] / pair["at-least-once"]["processing_rows_per_s"])
        e, l_ = med["eos"], med["at-least-once"]
        print(f"| {trig:g} s | | **ratio eos / at-least-once** | **{e['processing_rows_per_s'] / l_['processing_rows_per_s']:.3f}** "
              f"| **{e['wall_rows_per_s'] / l_['wall_rows_per_s']:.3f}** | | | | |")
        print(f"per-rep processing ratios at {trig:g} s: {', '.join(f'{x:.3f}' for x in per_rep)}")
    if a.json_out:
        Path(a.json_out).write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
