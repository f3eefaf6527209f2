"""Exactly-once sink vs Spark's own Kafka sink: throughput and latency, same input, same run.

    .venv/bin/python bench/bench_sink.py [--triggers 1,10] [--reps 2] [--phases throughput,latency]
        [--records 200000] [--rate 1000] [--bootstrap H:P]

Starts its own broker (`txnwatch_dev.kafka.make_broker()`: Apache Kafka where found)
unless --bootstrap is given, and one local[2] SparkSession. Every run gets a fresh
checkpoint, output topic and sink name; the sinks alternate (eos first in even
repetitions, spark-kafka first in odd ones) at each trigger interval, so both see the
same machine, the same JVM and the same input.

Sinks (`txnwatch.pipeline.Settings.sink`):
- eos: txnwatch's ExactlyOnceKafkaSink through foreachBatch (num_tasks=2 transactional
  producers, progress committed in the transactions), each batch shuffled on key, written
  by its default writer: Spark's JVM with Kafka's Java producer, where the jar loads;
- eos-python: the same sink written from Python workers (mapInArrow, librdkafka);
- eos-input: the eos sink with partitioning="input": the batch's own 2 partitions (the
  agg's shuffle partitions, or the input topic's 2 partitions) written as they are;
- eos-stream: the eos sink as the query's own sink (`sink.write_stream(df)`, no foreachBatch:
  each batch written in its own job, hashed on key by Spark), from Spark's JVM;
- eos-stream-input: eos-stream with partitioning="input" (no shuffle);
- eos-baseline: the Python writer as it was before issue 21 (shuffle on key, no spare producers:
  a task id taken over by another Python worker starts a cold producer);
- spark-kafka: Spark's own Kafka sink (`writeStream.format("kafka")`, at least once);
- at-least-once (optional, --sinks): txnwatch's plain-producer sink through foreachBatch,
  i.e. the eos write path (mapInArrow, Python producers) without transactions.

Phase `throughput` (backlog): one input set written up front (2 partitions, committed
transactions, event time increasing so 1-second windows close every batch); each run
reads it from the start with maxOffsetsPerTrigger = --records-per-second-of-trigger x
trigger seconds and stops once all input is read (and, for `agg`, the closing no-data
batch ran). Transforms (--throughput-transforms): `agg` = the reference pipeline
(`start_query`: JSON parse -> watermark -> count/sum per key and 1 s window),
`projection` = key/value passed through (every input row is an output row). Reported:
processing rows/s = input rows / sum of executed batches' durations (what the query
sustains), the same after the first data batch (where eos initialises the run's fresh
transactional ids: a once-per-query cost), wall rows/s = input rows / first batch start
to last batch end, and the output rows counted by reading the output topic
read_committed (foreachBatch queries report sink.numOutputRows = -1).

Phase `latency` (steady rate): a producer thread writes --rate records/s into a fresh
input topic in committed transactions of --input-txn-ms, each value carrying `ts` = its
produce wall-clock time (also its event time) and a sequence number, while the query
(`read_input` -> select key, value -> sink) runs; a read_committed consumer thread on the
output topic notes when each output record became visible. Latency per record = visible
time - `ts` of the input record it carries (a projection: each output record covers
exactly one input record), so it includes the input transaction's commit, the wait for
the trigger, the batch, the sink's commit and one consumer fetch. Records produced in
the first max(3 s, trigger + 0.5 s) are not measured (the first batch starts the
sink's producers). Also reported: output CreateTime -> visible (the sink's own share:
for eos the wait for its transaction's commit), duplicates and missing sequence numbers.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from txnwatch.pipeline import Settings, executed, read_input, spark_session, start_query, start_sink
from txnwatch.producer import TransactionalProducer
from txnwatch_dev.kafka import make_broker
from txnwatch_dev.transactions.workload import create_topics

BASE = 1_700_000_000
SINKS = ("eos-baseline", "eos", "eos-python", "eos-input", "eos-stream", "eos-stream-input", "spark-kafka",
         "at-least-once")


# --------------------------------------------------------------------------- input

def write_input(bootstrap: str, topic: str, records: int, keys: int, per_second: int) -> None:
    """The backlog: `records` over 2 partitions, event time increasing at `per_second`,
    then one far-future record per partition so the last windows close."""
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
    p.close()


class SteadyProducer(threading.Thread):
    """`rate` records/s for `seconds`, in transactions of `txn_seconds`; value =
    {"key", "amount", "ts": wall clock at produce, "seq"}."""

    def __init__(self, bootstrap: str, topic: str, rate: int, seconds: float, keys: int,
                 txn_seconds: float) -> None:
        super().__init__(daemon=True)
        self.p = TransactionalProducer({"bootstrap.servers": bootstrap, "linger.ms": 5,
                                        "transactional.id": f"bench-steady-{topic}"})
        self.p.init_transactions()
        self.topic, self.rate, self.seconds, self.keys, self.txn_seconds = topic, rate, seconds, keys, txn_seconds
        self.sent = 0
        self.started = 0.0
        self.error: BaseException | None = None
        self.commit_s: list[float] = []

    def run(self) -> None:
        try:
            self.started = time.time()
            end = self.started + self.seconds
            seq = 0
            while time.time() < end:
                self.p.begin()
                txn_end = min(end, time.time() + self.txn_seconds)
                while True:
                    now = time.time()
                    due = int((min(now, end) - self.started) * self.rate)
                    while seq < due:
                        key = f"k{seq % self.keys}"
                        value = json.dumps({"key": key, "amount": seq % 13, "ts": time.time(), "seq": seq})
                        self.p.produce(self.topic, value=value.encode(), key=key.encode(), partition=seq % 2)
                        seq += 1
                    if now >= txn_end:
                        break
                    time.sleep(0.005)
                t = time.perf_counter()
                self.p.commit()
                self.commit_s.append(time.perf_counter() - t)
                self.sent = seq
        except BaseException as exc:  # noqa: BLE001 - reported by the run
            self.error = exc
        finally:
            self.p.close()


class VisibleRecorder(threading.Thread):
    """read_committed consumer on the output topic: (receive wall time, value, CreateTime ms)
    for every record, parsed later so parsing never delays the receive times."""

    def __init__(self, bootstrap: str, topic: str, partitions: int = 2) -> None:
        super().__init__(daemon=True)
        from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

        self.c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-visible-{topic}",
                           "enable.auto.commit": False, "isolation.level": "read_committed",
                           "fetch.wait.max.ms": 10, "fetch.min.bytes": 1, "auto.offset.reset": "earliest"})
        self.c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
        self.got: list[tuple[float, bytes, int]] = []
        self.stop = threading.Event()

    def run(self) -> None:
        try:
            while not self.stop.is_set():
                msgs = self.c.consume(1000, 0.1)
                now = time.time()
                for m in msgs:
                    if m.error() is None:
                        self.got.append((now, m.value(), m.timestamp()[1]))
        finally:
            self.c.close()


def count_topic(bootstrap: str, topic: str, partitions: int = 2, timeout: float = 60.0) -> int:
    """Records visible to read_committed in `topic` (read to the end)."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-count-{topic}",
                  "enable.auto.commit": False, "isolation.level": "read_committed",
                  "enable.partition.eof": True, "fetch.wait.max.ms": 10})
    c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
    n, eof = 0, set()
    deadline = time.monotonic() + timeout
    try:
        while len(eof) < partitions and time.monotonic() < deadline:
            for m in c.consume(5000, 0.5):
                if m.error() is None:
                    n += 1
                elif m.error().code() == KafkaError._PARTITION_EOF:
                    eof.add(m.partition())
    finally:
        c.close()
    if len(eof) < partitions:
        raise TimeoutError(f"counting {topic}: no end of partitions {set(range(partitions)) - eof}")
    return n


# --------------------------------------------------------------------------- queries

def settings(bootstrap: str, in_topic: str, sink: str, trigger: float, max_records: int | None, tmp: Path,
             tag: str) -> Settings:
    out = f"bench-out-{tag}"
    create_topics(bootstrap, [out], partitions=2)
    partitioning = "input" if sink.endswith("-input") else "key"
    return Settings(bootstrap=bootstrap, input_topic=in_topic, output_topic=out, checkpoint=str(tmp / tag),
                    name=f"bench_{tag}", sink="eos" if sink.startswith("eos") else sink, num_tasks=2,
                    sink_partitioning=partitioning, sink_warm_spares=sink != "eos-baseline",
                    sink_writer="python" if sink in ("eos-python", "eos-baseline") else "auto",
                    sink_form="stream" if sink.startswith("eos-stream") else "foreachBatch",
                    trigger_seconds=trigger,
                    max_records_per_batch=max_records, window="1 second", watermark="1 second",
                    transaction_timeout_ms=max(60_000, int(trigger * 4000)), broker_max_timeout_ms=900_000)


def start_projection(spark, s: Settings):
    """read_input -> (key, value) unchanged -> the sink of `s`, as start_query builds it."""
    return start_sink(read_input(spark, s).select("key", "value"), s)


def start(spark, s: Settings, transform: str):
    return start_query(spark, s) if transform == "agg" else start_projection(spark, s)


def n_rows(p) -> int:
    """A progress's input rows. (Under Spark Connect a progress can lack numInputRows: its
    sources still say theirs.)"""
    v = p["numInputRows"]
    if v is None:
        v = sum((src["numInputRows"] or 0) for src in (p["sources"] or []))
    return int(v)


def wait_consumed(q, total: int, closing_batch: bool, trigger: float, timeout: float) -> None:
    """Until all `total` input rows were read (and, with `closing_batch`, a no-data batch
    ran after that: the one that emits the last windows) and no batch is running."""
    deadline = time.monotonic() + timeout
    idle_limit = max(3.0, 2 * trigger + 1)
    last_id, last_change = None, time.monotonic()
    while time.monotonic() < deadline:
        if not q.isActive:
            raise RuntimeError(f"query {q.name} stopped: {q.exception()}")
        progress = [p for p in q.recentProgress if executed(p)]
        rows = sum(n_rows(p) for p in progress)
        done = rows >= total and (not closing_batch or n_rows(progress[-1]) == 0)
        if done and not q.status.get("isTriggerActive", False):
            return
        current = progress[-1]["batchId"] if progress else None
        if current != last_id:
            last_id, last_change = current, time.monotonic()
        elif rows >= total and time.monotonic() - last_change > idle_limit \
                and not q.status.get("isTriggerActive", False):
            return     # all read, and no closing batch came
        time.sleep(0.1)
    raise TimeoutError(f"query {q.name}: input not consumed within {timeout} s")


def wait_started(q, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not q.isActive:
            raise RuntimeError(f"query {q.name} stopped: {q.exception()}")
        msg = q.status.get("message", "")
        if msg.startswith("Waiting for") or q.lastProgress is not None:
            return
        time.sleep(0.05)
    raise TimeoutError(f"query {q.name} did not start")


def batch_stats(q) -> dict:
    from txnwatch.spark_listener.events import parse_timestamp

    progress = [p for p in q.recentProgress if executed(p)]
    data = [p for p in progress if n_rows(p) > 0]
    t0 = parse_timestamp(progress[0]["timestamp"])
    t1 = parse_timestamp(progress[-1]["timestamp"]) + progress[-1]["batchDuration"] / 1000.0
    # After the first data batch: the one where eos initialises its (per-run, fresh)
    # transactional ids and both sinks open their first connections.
    first = progress.index(data[0]) if data else len(progress)
    later = progress[first + 1:]
    later_rows = sum(n_rows(p) for p in later)
    later_busy = sum(p["batchDuration"] for p in later) / 1000.0
    return {"rows": sum(n_rows(p) for p in progress), "batches": len(progress),
            "first_batch_ms": data[0]["batchDuration"] if data else 0,
            "later_rows_per_s": later_rows / later_busy if later_rows and later_busy else None,
            "data_batches": len(data), "busy_s": sum(p["batchDuration"] for p in progress) / 1000.0,
            "batch_ms": [p["batchDuration"] for p in progress],
            "add_batch_ms": [p["durationMs"].get("addBatch", 0) for p in progress],
            "wall_s": t1 - t0,
            "median_batch_ms": statistics.median(p["batchDuration"] for p in data) if data else 0,
            "median_add_batch_ms": statistics.median(p["durationMs"].get("addBatch", 0) for p in data)
            if data else 0}


def wait_reported(sk, batches: int, timeout: float = 60.0) -> None:
    """Until the stream form's sink has its batches' results (they come with the progress
    events, after the batch)."""
    deadline = time.monotonic() + timeout
    while sk.stats.get("batches", 0) < batches and time.monotonic() < deadline:
        time.sleep(0.1)


def sink_stats(sk) -> dict:
    if sk is None:
        return {}
    return {"sink_task_s": round(sum(sk.task_seconds), 3), "sink_task_writes": len(sk.task_seconds),
            "transactions": sk.stats.get("transactions_committed", 0),
            "writer": getattr(sk, "writer_in_use", None)}


def throughput_run(spark, bootstrap: str, topic: str, total: int, sink: str, transform: str, trigger: float,
                   max_records: int, tmp: Path, tag: str) -> dict:
    s = settings(bootstrap, topic, sink, trigger, max_records, tmp, tag)
    load0 = os.getloadavg()[0]
    q, sk = start(spark, s, transform)
    try:
        wait_consumed(q, total, transform == "agg", trigger, timeout=1800)
        st = batch_stats(q)
    finally:
        q.stop()
    if s.sink_form == "stream":
        wait_reported(sk, st["batches"])
    out = count_topic(bootstrap, s.output_topic)
    return {"phase": "throughput", "transform": transform, "sink": sink, "trigger": trigger,
            "max_records_per_batch": max_records, **st, "output_rows": out,
            "processing_rows_per_s": st["rows"] / st["busy_s"], "wall_rows_per_s": st["rows"] / st["wall_s"],
            **sink_stats(sk), "load1": [round(load0, 2), round(os.getloadavg()[0], 2)]}


def pct(xs: list[float], p: float) -> float:
    """Nearest-rank percentile of a sorted list."""
    if not xs:
        return float("nan")
    k = max(0, min(len(xs) - 1, int(round(p / 100.0 * len(xs) + 0.5)) - 1))
    return xs[k]


def latency_run(spark, bootstrap: str, sink: str, trigger: float, rate: int, seconds: float, keys: int,
                txn_ms: int, tmp: Path, tag: str) -> dict:
    in_topic = f"bench-lat-in-{tag}"
    create_topics(bootstrap, [in_topic], partitions=2)
    s = settings(bootstrap, in_topic, sink, trigger, None, tmp, tag)
    load0 = os.getloadavg()[0]
    rec = VisibleRecorder(bootstrap, s.output_topic)
    rec.start()
    q, sk = start_projection(spark, s)
    prod = None
    try:
        wait_started(q)
        prod = SteadyProducer(bootstrap, in_topic, rate, seconds, keys, txn_ms / 1000.0)
        prod.start()
        prod.join(seconds + 60)
        if prod.error is not None or prod.is_alive():
            raise RuntimeError(f"{tag}: input producer failed: {prod.error!r}")
        deadline = time.monotonic() + 3 * trigger + 60
        while len(rec.got) < prod.sent and time.monotonic() < deadline:
            if not q.isActive:
                raise RuntimeError(f"query {q.name} stopped: {q.exception()}")
            time.sleep(0.05)
        st = batch_stats(q)
    finally:
        q.stop()
        rec.stop.set()
        rec.join(10)
    if s.sink_form == "stream":
        wait_reported(sk, st["batches"])
    warmup = max(3.0, trigger + 0.5)
    since = prod.started + warmup
    seen: dict[int, int] = {}
    total, sink_share, pipe_share = [], [], []
    for recv, value, create_ms in rec.got:
        v = json.loads(value)
        seen[v["seq"]] = seen.get(v["seq"], 0) + 1
        if v["ts"] >= since:
            total.append(recv - v["ts"])
            if create_ms and create_ms > 0:
                sink_share.append(recv - create_ms / 1000.0)
                pipe_share.append(create_ms / 1000.0 - v["ts"])
    for xs in (total, sink_share, pipe_share):
        xs.sort()
    return {"phase": "latency", "transform": "projection", "sink": sink, "trigger": trigger, "rate": rate,
            "seconds": seconds, "input_records": prod.sent, "output_records": len(rec.got),
            "duplicates": sum(n - 1 for n in seen.values() if n > 1),
            "missing": prod.sent - len(seen), "measured": len(total), "warmup_s": warmup,
            "latencies": total, "sink_shares": sink_share, "pipe_shares": pipe_share,
            "p50": pct(total, 50), "p95": pct(total, 95), "p99": pct(total, 99),
            "max": total[-1] if total else float("nan"),
            "sink_p50": pct(sink_share, 50), "sink_p99": pct(sink_share, 99),
            "input_commit_ms_median": 1000 * statistics.median(prod.commit_s) if prod.commit_s else None,
            **st, **sink_stats(sk), "load1": [round(load0, 2), round(os.getloadavg()[0], 2)]}


# --------------------------------------------------------------------------- report

def _med(rs: list[dict], k: str) -> float:
    xs = [r[k] for r in rs if r.get(k) is not None]
    return statistics.median(xs) if xs else float("nan")


def throughput_table(results: list[dict], sinks: list[str]) -> list[str]:
    lines = ["| transform | trigger | max records/batch | sink | processing rows/s | after the first batch "
             "| wall rows/s | output rows | batches (data) | first / median data batch ms | sink task s per run |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for tr in sorted({r["transform"] for r in results}):
        for trig in sorted({r["trigger"] for r in results if r["transform"] == tr}):
            med = {}
            for sink in sinks:
                rs = [r for r in results if r["transform"] == tr and r["trigger"] == trig and r["sink"] == sink]
                if not rs:
                    continue
                med[sink] = {k: _med(rs, k) for k in ("processing_rows_per_s", "later_rows_per_s",
                                                      "wall_rows_per_s", "median_batch_ms", "first_batch_ms")}
                task = f"{_med(rs, 'sink_task_s'):.2f}" if "sink_task_s" in rs[0] else "(JVM)"
                outs = sorted({r["output_rows"] for r in rs})
                lines.append(
                    f"| {tr} | {trig:g} s | {rs[0]['max_records_per_batch']:,} | {sink} "
                    f"| {med[sink]['processing_rows_per_s']:,.0f} | {med[sink]['later_rows_per_s']:,.0f} "
                    f"| {med[sink]['wall_rows_per_s']:,.0f} "
                    f"| {'/'.join(f'{o:,}' for o in outs)} | {rs[0]['batches']} ({rs[0]['data_batches']}) "
                    f"| {med[sink]['first_batch_ms']:,.0f} / {med[sink]['median_batch_ms']:,.0f} | {task} |")
            for eos in (x for x in SINKS if x.startswith("eos") and x in med and "spark-kafka" in med):
                e, k = med[eos], med["spark-kafka"]
                per_rep = []
                for rep in sorted({r["rep"] for r in results}):
                    pair = {r["sink"]: r for r in results if r["transform"] == tr and r["trigger"] == trig
                            and r["rep"] == rep}
                    if eos in pair and "spark-kafka" in pair:
                        per_rep.append(pair[eos]["processing_rows_per_s"]
                                       / pair["spark-kafka"]["processing_rows_per_s"])
                lines.append(
                    f"| {tr} | {trig:g} s | | **{eos} / spark-kafka** "
                    f"| **{e['processing_rows_per_s'] / k['processing_rows_per_s']:.2f}** "
                    f"(per rep {', '.join(f'{x:.2f}' for x in per_rep)}) "
                    f"| **{e['later_rows_per_s'] / k['later_rows_per_s']:.2f}** "
                    f"| **{e['wall_rows_per_s'] / k['wall_rows_per_s']:.2f}** | | | | |")
    return lines


def latency_table(results: list[dict], sinks: list[str]) -> list[str]:
    lines = ["| trigger | input rate | sink | records measured | p50 | p95 | p99 | max "
             "| output CreateTime -> visible p50 / p99 | median batch ms | duplicates / missing |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for trig in sorted({r["trigger"] for r in results}):
        agg = {}
        for sink in sinks:
            rs = [r for r in results if r["trigger"] == trig and r["sink"] == sink]
            if not rs:
                continue
            lat = sorted(x for r in rs for x in r["latencies"])
            sh = sorted(x for r in rs for x in r["sink_shares"])
            agg[sink] = {"p50": pct(lat, 50), "p95": pct(lat, 95), "p99": pct(lat, 99)}
            lines.append(
                f"| {trig:g} s | {rs[0]['rate']:,}/s | {sink} | {len(lat):,} | {pct(lat, 50):.3f} s "
                f"| {pct(lat, 95):.3f} s | {pct(lat, 99):.3f} s | {lat[-1]:.3f} s "
                f"| {1000 * pct(sh, 50):.0f} / {1000 * pct(sh, 99):.0f} ms | {_med(rs, 'median_batch_ms'):,.0f} "
                f"| {sum(r['duplicates'] for r in rs)} / {sum(r['missing'] for r in rs)} |")
        for eos in (x for x in SINKS if x.startswith("eos") and x in agg and "spark-kafka" in agg):
            e, k = agg[eos], agg["spark-kafka"]
            lines.append(f"| {trig:g} s | | **{eos} / spark-kafka** | | **{e['p50'] / k['p50']:.2f}** "
                         f"| **{e['p95'] / k['p95']:.2f}** | **{e['p99'] / k['p99']:.2f}** | | | | |")
            lines.append(f"| {trig:g} s | | {eos} - spark-kafka | | {1000 * (e['p50'] - k['p50']):+.0f} ms "
                         f"| {1000 * (e['p95'] - k['p95']):+.0f} ms | {1000 * (e['p99'] - k['p99']):+.0f} ms "
                         f"| | | | |")
    return lines


def machine() -> str:
    def sh(cmd: str) -> str:
        try:
            return subprocess.run(cmd, shell=True, capture_output=True, text=True, timeout=10).stdout.strip()
        except Exception:  # noqa: BLE001
            return "?"

    import pyspark

    model = sh("lscpu | grep 'Model name' | sed 's/.*: *//'")
    ram = sh("free -g | awk '/Mem:/ {print $2}'")
    return (f"{os.cpu_count()} CPUs ({model}), {ram} GB RAM, {platform.system()} {platform.release()}, "
            f"Python {platform.python_version()}, PySpark {pyspark.__version__}")


# --------------------------------------------------------------------------- main

def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bootstrap", default=None, help="use this broker instead of starting one")
    ap.add_argument("--phases", default="throughput,latency")
    ap.add_argument("--sinks", default="eos,spark-kafka", help=f"from {', '.join(SINKS)}")
    ap.add_argument("--triggers", default="1,10", help="trigger intervals in seconds")
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--keys", type=int, default=5000)
    ap.add_argument("--records", type=int, default=200_000, help="throughput: input records")
    ap.add_argument("--event-rate", type=int, default=20_000,
                    help="throughput: input records per second of event time (1 s windows)")
    ap.add_argument("--records-per-second-of-trigger", type=int, default=10_000,
                    help="throughput: maxOffsetsPerTrigger = this x trigger seconds")
    ap.add_argument("--throughput-transforms", default="agg,projection", help="agg, projection")
    ap.add_argument("--warmup-records", type=int, default=100_000,
                    help="warm-up (discarded): input records each sink and transform reads first, 10,000 a batch")
    ap.add_argument("--rate", type=int, default=1000, help="latency: input records/s")
    ap.add_argument("--latency-seconds", default=None,
                    help="latency: produce for this long per run, one value per trigger or one for all "
                         "(default max(20, 4 x trigger))")
    ap.add_argument("--input-txn-ms", type=int, default=100, help="latency: input transaction length")
    ap.add_argument("--remote", default=None, metavar="URL",
                    help="a Spark Connect session (local[2]: a local Connect server) instead of a classic one; "
                         "the eos sink forwards its metrics nowhere then (metrics=None), and its stats stay "
                         "in the server's copy")
    ap.add_argument("--json-out", default=None)
    a = ap.parse_args()
    phases = a.phases.split(",")
    sinks = a.sinks.split(",")
    for s in sinks:
        if s not in SINKS:
            ap.error(f"unknown sink {s}")
    triggers = [float(x) for x in a.triggers.split(",")]
    if a.latency_seconds is None:
        lat_secs = [max(20.0, 4 * t) for t in triggers]
    else:
        lat_secs = [float(x) for x in a.latency_seconds.split(",")]
        if len(lat_secs) == 1:
            lat_secs *= len(triggers)
        elif len(lat_secs) != len(triggers):
            ap.error("--latency-seconds: one value, or one per trigger")
    transforms = a.throughput_transforms.split(",")
    t_start = time.time()
    broker = None
    bootstrap = a.bootstrap
    if bootstrap is None:
        broker = make_broker().start()
        bootstrap = broker.bootstrap
        print(f"broker: {broker.describe()}", flush=True)
    results: list[dict] = []
    n = 0

    def order(rep: int) -> list[str]:
        return sinks if rep % 2 == 0 else list(reversed(sinks))

    tmp = Path(tempfile.mkdtemp(prefix="bench-sink-"))     # checkpoints
    stamp = int(time.time())                              # unique topic/sink names on a shared broker
    try:
        spark = spark_session("local[2]", "bench-sink", 2, remote=a.remote,
                              **{"spark.ui.showConsoleProgress": "false"})
        print(f"session: {'Spark Connect ' + a.remote if a.remote else 'classic local[2]'}", flush=True)
        # Warm-up (discarded): JVM classes of the Kafka source/sink, Python workers, first
        # connections, and enough batches for the JIT to compile each sink's path: with two
        # batches each, the sink measured first ran 25-30 % slower in its first repetition
        # than in its later ones, so the repetitions' order decided the ratio.
        warm = f"bench-warm-{stamp}"
        create_topics(bootstrap, [warm], partitions=2)
        write_input(bootstrap, warm, a.warmup_records, a.keys, a.event_rate)
        for sink in sinks:
            for tr in (transforms if "throughput" in phases else ["projection"]):
                throughput_run(spark, bootstrap, warm, a.warmup_records // 2 * 2 + 2, sink, tr, 1.0, 10_000, tmp,
                               f"{stamp}-w-{sink}-{tr}")
        print(f"warm-up done at {time.time() - t_start:.0f} s", flush=True)
        if "throughput" in phases:
            topic = f"bench-in-{stamp}"
            create_topics(bootstrap, [topic], partitions=2)
            t = time.perf_counter()
            write_input(bootstrap, topic, a.records, a.keys, a.event_rate)
            total = a.records // 2 * 2 + 2
            print(f"input: {total} records in {time.perf_counter() - t:.1f} s", flush=True)
            for tr in transforms:
                for trig in triggers:
                    max_records = int(trig * a.records_per_second_of_trigger)
                    for rep in range(a.reps):
                        for sink in order(rep):
                            n += 1
                            r = throughput_run(spark, bootstrap, topic, total, sink, tr, trig, max_records, tmp,
                                               f"{stamp}-{n}")
                            r["rep"] = rep
                            results.append(r)
                            print(json.dumps(r), flush=True)
        if "latency" in phases:
            for trig, secs in zip(triggers, lat_secs, strict=True):
                for rep in range(a.reps):
                    for sink in order(rep):
                        n += 1
                        r = latency_run(spark, bootstrap, sink, trig, a.rate, secs, a.keys, a.input_txn_ms, tmp,
                                        f"{stamp}-{n}")
                        r["rep"] = rep
                        results.append(r)
                        print(json.dumps({k: (round(v, 4) if isinstance(v, float) else v) for k, v in r.items()
                                          if k not in ("latencies", "sink_shares", "pipe_shares")}), flush=True)
        spark.stop()
    finally:
        if broker is not None:
            broker.cleanup()
        shutil.rmtree(tmp, ignore_errors=True)
    print()
    print(f"command: .venv/bin/python {' '.join(shlex.quote(x) for x in sys.argv)}")
    print(f"machine: {machine()}")
    print(f"broker: {'Apache Kafka ' + broker.version if broker is not None and hasattr(broker, 'version') else bootstrap}")
    print(f"total time: {time.time() - t_start:.0f} s")
    thr = [r for r in results if r["phase"] == "throughput"]
    lat = [r for r in results if r["phase"] == "latency"]
    if thr:
        print("\nThroughput (backlog):\n")
        print("\n".join(throughput_table(thr, sinks)))
    if lat:
        print("\nLatency, input produce time -> visible to read_committed (steady rate):\n")
        print("\n".join(latency_table(lat, sinks)))
        for trig in sorted({r["trigger"] for r in lat}):
            for sink in sinks:
                rs = sorted((r for r in lat if r["trigger"] == trig and r["sink"] == sink), key=lambda r: r["rep"])
                p50 = ", ".join(f"{r['p50']:.3f}" for r in rs)
                p99 = ", ".join(f"{r['p99']:.3f}" for r in rs)
                print(f"per rep {trig:g} s {sink}: p50 {p50}; p99 {p99}")
    if a.json_out:
        Path(a.json_out).write_text(json.dumps(
            [{k: v for k, v in r.items() if k not in ("latencies", "sink_shares", "pipe_shares")}
             for r in results], indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
