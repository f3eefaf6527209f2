"""The reference pipeline: Kafka -> PySpark -> Kafka, exactly once.

    python -m txnwatch.pipeline --bootstrap H:P --input-topic in --output-topic out \
        --checkpoint /var/lib/txnwatch/ckpt --name orders-agg --trigger-seconds 5

Reads the input topic with Spark's own Kafka source (`format("kafka")`,
`kafka.isolation.level=read_committed`), runs a keyed, stateful aggregation with a
watermark (count and sum of `amount` per key and event-time window), and writes each
closed window once through the exactly-once sink (`--sink eos`, default), or at least
once through Spark's own Kafka sink (`--sink spark-kafka`) or a plain producer
(`--sink at-least-once`). The connector's jars come from `TXNWATCH_SPARK_KAFKA_JARS`
or, on machines with a Maven repository, from `spark.jars.packages` (see
txnwatch.spark_connector).

Input records: JSON values {"key": str, "amount": number, "ts": unix seconds}; the
Kafka key is used when `key` is absent. Output records: key = the key, value = JSON
{"key", "window_start", "window_end" (unix seconds), "count", "sum"}.
Metrics: the txnwatch listener (spark_streaming_*) and the sink's transactions
(kafka_producer_*), served with --metrics-port, forwarded with --forward-url, and/or
written to --metrics-file at exit.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from txnwatch.spark_listener.sink import ProducerFactory

log = logging.getLogger("txnwatch.pipeline")

INPUT_SCHEMA = "key STRING, amount DOUBLE, ts DOUBLE"


@dataclass
class Settings:
    bootstrap: str
    input_topic: str
    output_topic: str
    checkpoint: str
    name: str = "txnwatch-pipeline"
    sink: str = "eos"                 # eos | at-least-once | spark-kafka (Spark's writer, at-least-once)
    num_tasks: int = 2
    sink_partitioning: str = "key"    # eos: key (shuffle on key) | input (the batch's own partitions)
    sink_warm_spares: bool = True     # eos: a connected spare producer per id in each Python worker
    sink_writer: str = "auto"         # eos: auto (the JVM writer where it loads) | jvm | python
    sink_form: str = "foreachBatch"   # eos: foreachBatch(sink) | stream (sink.write_stream: the query's own sink)
    sink_jvm_client_config: tuple = ()   # eos: (key, value) Kafka client settings of the JVM writer, Java's names
    trigger_seconds: float = 1.0
    max_records_per_batch: int | None = 50_000
    starting_offsets: str = "earliest"
    window: str = "10 seconds"
    watermark: str = "10 seconds"
    output_mode: str = "append"
    transaction_timeout_ms: int = 60_000
    broker_max_timeout_ms: int | str | None = "discover"
    progress_topic: str | None = None
    producer_factory: ProducerFactory | None = None   # eos: makes the tasks' producers (None: the sink's own)


def read_input(spark: Any, s: Settings) -> Any:
    """Spark's Kafka source, read_committed: its latest offsets are the partitions' LSOs,
    so a batch never plans past an open transaction and a replay reads the same records."""
    r = (spark.readStream.format("kafka").option("kafka.bootstrap.servers", s.bootstrap)
         .option("subscribe", s.input_topic).option("kafka.isolation.level", "read_committed")
         .option("startingOffsets", s.starting_offsets).option("failOnDataLoss", "true"))
    if s.max_records_per_batch:
        r = r.option("maxOffsetsPerTrigger", s.max_records_per_batch)
    return r.load()


def transform(df: Any, s: Settings) -> Any:
    """Keyed event-time aggregation with a watermark -> (key, value) rows for Kafka."""
    from pyspark.sql import functions as F

    parsed = (df.select(F.from_json(F.col("value").cast("string"), INPUT_SCHEMA).alias("j"),
                        F.col("key").cast("string").alias("kafka_key"))
              .select(F.coalesce(F.col("j.key"), F.col("kafka_key")).alias("key"),
                      F.coalesce(F.col("j.amount"), F.lit(0.0)).alias("amount"),
                      F.col("j.ts").cast("timestamp").alias("event_time"))
              .where(F.col("event_time").isNotNull() & F.col("key").isNotNull()))
    agg = (parsed.withWatermark("event_time", s.watermark)
           .groupBy("key", F.window("event_time", s.window))
           .agg(F.count(F.lit(1)).alias("count"), F.sum("amount").alias("sum")))
    return agg.select(
        F.col("key"),
        F.to_json(F.struct(F.col("key"), F.col("window.start").cast("long").alias("window_start"),
                           F.col("window.end").cast("long").alias("window_end"),
                           F.col("count"), F.col("sum"))).alias("value"))


def make_sink(s: Settings, metrics: Any = None) -> Any:
    from txnwatch.spark_listener.sink import AtLeastOnceKafkaSink, ExactlyOnceKafkaSink, task_producer

    if s.sink == "eos":
        return ExactlyOnceKafkaSink(
            s.name, s.bootstrap, s.output_topic, num_tasks=s.num_tasks, progress_topic=s.progress_topic,
            transaction_timeout_ms=s.transaction_timeout_ms, trigger_interval_seconds=s.trigger_seconds,
            broker_max_timeout_ms=s.broker_max_timeout_ms, metrics=metrics,
            partitioning=s.sink_partitioning, warm_spares=s.sink_warm_spares,
            producer_factory=s.producer_factory or task_producer, writer=s.sink_writer,
            jvm_client_config=dict(s.sink_jvm_client_config) or None)
    if s.sink == "at-least-once":
        return AtLeastOnceKafkaSink(s.name, s.bootstrap, s.output_topic, num_tasks=s.num_tasks)
    raise ValueError(f"unknown sink {s.sink!r} (eos|at-least-once|spark-kafka)")


def start_query(spark: Any, s: Settings, metrics: Any = None) -> tuple[Any, Any]:
    """Start the pipeline's streaming query; returns (query, sink or None)."""
    return start_sink(transform(read_input(spark, s), s), s, metrics)


def start_sink(out: Any, s: Settings, metrics: Any = None) -> tuple[Any, Any]:
    """Start writing the streaming DataFrame `out` to the sink of `s`; (query, sink or None)."""
    sink = None
    if s.sink == "spark-kafka":
        w = out.writeStream.format("kafka").option("kafka.bootstrap.servers", s.bootstrap).option("topic",
                                                                                                s.output_topic)
    else:
        sink = make_sink(s, metrics)
        w = sink.write_stream(out) if s.sink_form == "stream" else out.writeStream.foreachBatch(sink)
    w = w.queryName(s.name).outputMode(s.output_mode).option("checkpointLocation", s.checkpoint)
    if s.trigger_seconds:
        w = w.trigger(processingTime=f"{int(s.trigger_seconds * 1000)} milliseconds")
    return w.start(), sink


def executed(progress: dict) -> bool:
    return "addBatch" in (progress.get("durationMs") or {})


def _offsets(v: Any) -> Any:
    """A source offset as an object: Spark gives JSON text (3.x), objects (4.1+) or nothing."""
    if isinstance(v, str):
        try:
            return json.loads(v)
        except ValueError:
            return v
    return v


def caught_up(progress: dict) -> bool:
    """Whether the batch of this progress read every source to the latest offset it knew
    (a source that does not say its latest offset counts as caught up)."""
    for src in progress.get("sources") or []:
        latest = _offsets(src.get("latestOffset"))
        if latest is not None and _offsets(src.get("endOffset")) != latest:
            return False
    return True


def run_until_idle(query: Any, idle_seconds: float, timeout: float, poll: float = 0.25) -> str:
    """Wait until the last micro-batch read its sources to their end and none has executed
    for `idle_seconds` since (after at least one), the query stops, or `timeout`. Returns
    idle|terminated|timeout. (A quiet spell alone is not idle: a batch slow to start, on a
    busy machine or a Spark Connect server, would end the run early.)"""
    deadline = time.monotonic() + timeout
    last_id, last_change = None, time.monotonic()
    while time.monotonic() < deadline:
        if not query.isActive:
            return "terminated"
        batches = [p for p in query.recentProgress if executed(p)]
        current = batches[-1].get("batchId") if batches else None
        if current != last_id:
            last_id, last_change = current, time.monotonic()
        elif current is not None and time.monotonic() - last_change >= idle_seconds \
                and caught_up(batches[-1]) and not query.status.get("isTriggerActive", False):
            return "idle"
        time.sleep(poll)
    return "timeout"


def spark_session(master: str, name: str, shuffle_partitions: int, kafka_connector: bool = True,
                  remote: str | None = None, **conf: str) -> Any:
    """A SparkSession for the pipeline, the tests and the benchmarks, with Spark's Kafka
    connector on the class path (`kafka_connector`; see txnwatch.spark_connector).
    `remote`: a Spark Connect session instead (`sc://host:port`, or `local[N]` for a local
    Connect server that PySpark starts with these settings)."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.remote(remote) if remote else SparkSession.builder.master(master)
    builder = (builder.appName(name)
               .config("spark.ui.enabled", "false")
               .config("spark.sql.shuffle.partitions", str(shuffle_partitions)))
    if kafka_connector:
        from txnwatch.spark_connector import connector_source
        from txnwatch.spark_listener.sink.jvm import with_sink_jar

        settings, source = connector_source()
        logging.getLogger(__name__).info("Spark's Kafka connector: %s", source)
        settings = with_sink_jar(settings)      # the exactly-once sink's JVM writer beside it
        for key, value in settings.items():
            builder = builder.config(key, value)
    for key, value in conf.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    if not remote:    # a Connect session has no SparkContext; its server logs as configured
        spark.sparkContext.setLogLevel("ERROR")
    return spark


def _max_timeout(v: str) -> int | str | None:
    if v == "discover":
        return v
    if v in ("none", "unknown"):
        return None
    return int(v)


def _setting(v: str) -> tuple[str, str]:
    key, eq, value = v.partition("=")
    if not eq or not key.strip():
        raise argparse.ArgumentTypeError(f"{v!r} is not KEY=VALUE (for example batch.size=65536)")
    return key.strip(), value


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="txnwatch pipeline", description=__doc__.split("\n\n")[0])
    p.add_argument("--bootstrap", required=True, help="Kafka bootstrap servers")
    p.add_argument("--input-topic", required=True)
    p.add_argument("--output-topic", required=True)
    p.add_argument("--checkpoint", required=True, help="Spark checkpoint directory")
    p.add_argument("--name", default="txnwatch-pipeline",
                   help="query and sink name (transactional ids txnwatch.<name>.<task>)")
    p.add_argument("--sink", choices=["eos", "at-least-once", "spark-kafka"], default="eos",
                   help="eos: txnwatch's exactly-once sink; spark-kafka: Spark's own Kafka sink "
                        "(at least once); at-least-once: a plain producer per task")
    p.add_argument("--num-tasks", type=int, default=2, help="output tasks = transactional ids")
    p.add_argument("--sink-partitioning", choices=["key", "input"], default="key",
                   help="eos: key = shuffle each batch on key into --num-tasks tasks; input = write the "
                        "batch's own partitions (no shuffle; see docs/spark-sink.md)")
    p.add_argument("--sink-writer", choices=["auto", "jvm", "python"], default="auto",
                   help="eos: where batches are written from: Spark's JVM (the jar txnwatch ships) or "
                        "Python workers; auto = the JVM where the jar loads (docs/spark-sink.md)")
    p.add_argument("--sink-form", choices=["foreachBatch", "stream"], default="foreachBatch",
                   help="eos: foreachBatch(sink), or the query's own sink (sink.write_stream: faster, the "
                        "JVM writer only; docs/spark-sink.md)")
    p.add_argument("--sink-jvm-client-config", type=_setting, action="append", default=[], metavar="KEY=VALUE",
                   help="eos: a Kafka client setting of the JVM writer, in the Java client's names (security, "
                        "producer tuning); repeatable")
    p.add_argument("--trigger-seconds", type=float, default=1.0, help="0: as fast as possible")
    p.add_argument("--max-records-per-batch", type=int, default=50_000, help="0: no limit")
    p.add_argument("--starting-offsets", default="earliest")
    p.add_argument("--window", default="10 seconds")
    p.add_argument("--watermark", default="10 seconds")
    p.add_argument("--output-mode", choices=["append", "update"], default="append")
    p.add_argument("--transaction-timeout-ms", type=int, default=60_000)
    p.add_argument("--broker-max-timeout-ms", type=_max_timeout, default="discover",
                   help="the broker's transaction.max.timeout.ms: a number, discover, or none (unknown)")
    p.add_argument("--progress-topic", default=None)
    p.add_argument("--master", default="local[2]")
    p.add_argument("--remote", default=None, metavar="URL",
                   help="run on Spark Connect: sc://host:port, or local[N] for a local Connect server "
                        "(the sink's metrics then need --forward-url: foreachBatch runs in the server)")
    p.add_argument("--shuffle-partitions", type=int, default=2)
    p.add_argument("--metrics-port", type=int, default=None, help="serve /metrics from the driver")
    p.add_argument("--metrics-host", default="0.0.0.0")
    p.add_argument("--forward-url", default=None, help="forward events to the exporter's ingest")
    p.add_argument("--token", default=os.environ.get("TXNWATCH_INGEST_TOKEN"),
                   help="ingest bearer token (default $TXNWATCH_INGEST_TOKEN)")
    p.add_argument("--metrics-file", default=None, help="write the metrics text here at exit")
    p.add_argument("--exit-when-idle", type=float, default=None, metavar="SECONDS",
                   help="stop once no batch ran for this long")
    p.add_argument("--timeout", type=float, default=None, help="stop after this many seconds")
    return p.parse_args(argv)


def settings_from(a: argparse.Namespace) -> Settings:
    return Settings(bootstrap=a.bootstrap, input_topic=a.input_topic, output_topic=a.output_topic,
                    checkpoint=a.checkpoint, name=a.name, sink=a.sink,
                    num_tasks=a.num_tasks, sink_partitioning=a.sink_partitioning, sink_writer=a.sink_writer,
                    sink_form=a.sink_form, sink_jvm_client_config=tuple(a.sink_jvm_client_config),
                    trigger_seconds=a.trigger_seconds,
                    max_records_per_batch=a.max_records_per_batch or None,
                    starting_offsets=a.starting_offsets, window=a.window, watermark=a.watermark,
                    output_mode=a.output_mode, transaction_timeout_ms=a.transaction_timeout_ms,
                    broker_max_timeout_ms=a.broker_max_timeout_ms, progress_topic=a.progress_topic)


def refusal(a: argparse.Namespace, s: Settings) -> str | None:
    """Why the pipeline must not start (unsafe sink settings, Spark Connect without a way for
    the sink's transactions to reach Prometheus), found before a JVM starts; None: it may."""
    from txnwatch.spark_listener.sink import UnsafeSinkSettings, check_settings

    if s.sink == "eos":
        try:
            check_settings(s.transaction_timeout_ms, s.trigger_seconds,
                           s.broker_max_timeout_ms if isinstance(s.broker_max_timeout_ms, int) else None,
                           s.num_tasks)
        except UnsafeSinkSettings as exc:
            return str(exc)
    if a.remote and s.sink == "eos" and not a.forward_url:
        return ("--remote (Spark Connect) runs the sink's foreachBatch in the server's Python process: give "
                "--forward-url (the exporter) so that its transactions reach Prometheus")
    return None


def main(argv: list[str] | None = None) -> int:
    a = parse_args(argv)
    return run(a, settings_from(a))


def run(a: argparse.Namespace, s: Settings) -> int:
    """The pipeline of settings `s`, with the session, metrics and stopping of flags `a`,
    until it stops: its exit status (2: refused before starting, 1: the query failed)."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    refused = refusal(a, s)
    if refused is not None:
        print(f"txnwatch pipeline: {refused}", file=sys.stderr)
        return 2
    from txnwatch.spark_listener.sink import UnsafeSinkSettings

    spark = spark_session(a.master, s.name, a.shuffle_partitions, remote=a.remote)
    from txnwatch.spark_listener import SparkQueryState, attach, detach
    from txnwatch.spark_listener.serve import render_text

    state = SparkQueryState(ttl_seconds=None)
    listener = attach(spark, serve_port=a.metrics_port, forward_url=a.forward_url, token=a.token,
                      host=a.metrics_host, state=state)
    rc = 0
    try:
        try:
            query, sink = start_query(spark, s, metrics=listener)
        except UnsafeSinkSettings as exc:
            print(f"txnwatch pipeline: {exc}", file=sys.stderr)
            return 2
        how_written = "" if sink is None or s.sink != "eos" else \
            f" (sink: {s.sink_form if s.sink_form == 'stream' else 'foreachBatch'} form, {sink.writer_in_use} writer)"
        print(f"started query {s.name} id={query.id}{how_written}", flush=True)
        if a.exit_when_idle is not None:
            how = run_until_idle(query, a.exit_when_idle, a.timeout or float("inf"))
        else:
            query.awaitTermination(a.timeout)
            how = "terminated" if not query.isActive else "timeout"
        exc = query.exception()
        if query.isActive:
            query.stop()
        if exc is not None:
            print(f"query failed: {exc}", file=sys.stderr)
            rc = 1
        print(f"stopped ({how})", flush=True)
    finally:
        if a.metrics_file:
            with open(a.metrics_file, "w") as fh:
                fh.write(render_text(state))
        detach(spark, listener)
        spark.stop()
    return rc


if __name__ == "__main__":
    sys.exit(main())
