"""The sink's JVM writer: a batch written from Spark's own JVM by Kafka's Java producer
(jvm/sink, a DataSource V2 write shipped in this package as a jar), instead of crossing
into Python workers through Arrow and librdkafka.

    spark = SparkSession.builder.config("spark.jars", sink_jar()).getOrCreate()

It is a `df.write.format(FORMAT).save()` with the sink's settings as options, so it runs the
same from a classic driver and from a Spark Connect foreachBatch worker (neither needs py4j).
Task i writes as the Python writer's task i does: the same transactional id, progress
marker, progress group and record header, so either writer replays what the other wrote.
Each task's results (the Python writer's RESULT_SCHEMA fields) come back through the write's
session configuration (RESULTS_KEY_PREFIX + name), set by the write's driver side once
every task committed: one configuration read, no Spark job.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .settings import SinkConfig

log = logging.getLogger(__name__)

FORMAT = "txnwatch-kafka-eos"
RESULTS_KEY_PREFIX = "txnwatch.sink.results."
# A streaming write's sink metrics (its query's progress): the sink, its last batch, the results.
METRIC_SINK, METRIC_BATCH, METRIC_RESULTS = "txnwatch.sink", "txnwatch.batch", "txnwatch.results"
JAR = Path(__file__).parent / "jars" / "txnwatch-spark-sink.jar"

# librdkafka settings that mean the same to Kafka's Java clients, passed on as they are.
# Any other setting (security above all: the two clients name TLS and SASL settings
# differently) needs `jvm_client_config` in Java's names, or the Python writer.
SHARED_PRODUCER_KEYS = frozenset({"linger.ms", "batch.size", "compression.type", "client.id"})
# Checked by check_settings and forced by both writers.
FORCED_KEYS = frozenset({"acks", "enable.idempotence"})

# What Spark says when the jar (or Kafka's Java client beside it) is not on its class path.
_MISSING = ("DATA_SOURCE_NOT_FOUND", "Failed to find data source", "Failed to find the data source",
            "needs kafka-clients on the class path", "ClassNotFoundException: io.txnwatch")


@dataclass(frozen=True)
class JvmSettings:
    """What only the JVM writer takes: Kafka client settings in the Java client's names (None:
    the sink's client_config as it is), and how long an executor keeps a producer (and the
    progress consumers) idle before closing it (the next batch of its id then pays an init)."""

    client_config: dict | None = field(default=None, hash=False)
    idle_close_seconds: float = 600.0


class JvmWriterUnavailable(RuntimeError):
    """The JVM writer cannot run in this session; the message says why and what to do."""


def sink_jar() -> str:
    """The writer's jar, for `spark.jars` (of the driver, or of a Spark Connect server)."""
    if not JAR.is_file():
        raise JvmWriterUnavailable(f"the sink's JVM writer is missing ({JAR}): a source checkout builds it with "
                                   "scripts/build-sink-jar.sh (make bootstrap); the wheel ships it")
    return str(JAR)


def with_sink_jar(settings: dict[str, str]) -> dict[str, str]:
    """Spark settings with the writer's jar added to `spark.jars` (unchanged without the jar:
    the sink then writes from Python workers, and says so)."""
    if not JAR.is_file():
        return dict(settings)
    jars = [j for j in settings.get("spark.jars", "").split(",") if j]
    return {**settings, "spark.jars": ",".join([*jars, str(JAR)])}


def unsupported_settings(cfg: SinkConfig, jvm_client_config: dict | None) -> str | None:
    """Why the JVM writer cannot honour these settings (None when it can)."""
    producer = {k for k in dict(cfg.producer_config) if k not in FORCED_KEYS}
    client = set(dict(cfg.client_config)) if jvm_client_config is None else set()
    foreign = sorted((producer | client) - SHARED_PRODUCER_KEYS)
    if foreign:
        return (f"settings {', '.join(foreign)} are librdkafka's; Kafka's Java client names some differently "
                "(give them in Java's names as jvm_client_config, or use writer='python')")
    return None


def options(cfg: SinkConfig, batch_id: int | None, settings: JvmSettings,
            partitioning: str = "key") -> dict[str, str]:
    """The write's options: the sink's settings, as jvm/sink's SinkOptions reads them. A
    foreachBatch write names its batch (laid out already); a streaming write (batch_id None)
    takes each batch's id from Spark and is laid out by `partitioning`."""
    opts = {"name": cfg.name, "bootstrap.servers": cfg.bootstrap_servers, "topic": cfg.topic,
            "progress.topic": cfg.progress_topic, "num.tasks": str(cfg.num_tasks),
            "transaction.timeout.ms": str(cfg.transaction_timeout_ms),
            "commit.timeout.seconds": str(cfg.commit_timeout_seconds),
            "idle.close.seconds": str(settings.idle_close_seconds)}
    if batch_id is None:
        opts["partitioning"] = partitioning
    else:
        opts["batch.id"] = str(int(batch_id))
    client = settings.client_config if settings.client_config is not None else dict(cfg.client_config)
    for k, v in client.items():
        opts[f"client.{k}"] = str(v)
    for k, v in dict(cfg.producer_config).items():
        if k not in FORCED_KEYS:
            opts[f"producer.{k}"] = str(v)
    return opts


def stream_results(sink_metrics: dict | None, name: str) -> tuple[int, list[dict]] | None:
    """A streaming write's last batch and its task results, from a progress's sink metrics
    (what the jar's table reports), or None when they are not this sink's."""
    if not sink_metrics or sink_metrics.get(METRIC_SINK) != name:
        return None
    try:
        got = json.loads(sink_metrics[METRIC_RESULTS])
        return int(sink_metrics[METRIC_BATCH]), list(got.get("results") or [])
    except (KeyError, ValueError, TypeError, AttributeError):
        log.warning("sink %s: unreadable results in the query's sink metrics; this batch is not reported", name)
        return None


def is_missing(exc: BaseException) -> bool:
    """True when a write failed because the session's Spark cannot load the writer (before
    any task ran: nothing was written)."""
    text = str(exc)
    return FORMAT in text and any(m in text for m in _MISSING) or "needs kafka-clients on the class path" in text


def write(prepared: Any, cfg: SinkConfig, batch_id: int, settings: JvmSettings) -> list[dict]:
    """Write one laid-out batch through the JVM writer; the tasks' results."""
    (prepared.write.format(FORMAT).mode("append").options(**options(cfg, batch_id, settings)).save())
    raw = prepared.sparkSession.conf.get(RESULTS_KEY_PREFIX + cfg.name, None)
    if not raw:
        log.warning("sink %s: batch %s committed, but its results did not come back from the JVM writer; its "
                    "transactions are not reported", cfg.name, batch_id)
        return []
    got = json.loads(raw)
    if int(got.get("batch", -1)) != int(batch_id):
        log.warning("sink %s: the JVM writer's results are batch %s's, not batch %s's; not reported", cfg.name,
                    got.get("batch"), batch_id)
        return []
    return list(got.get("results") or [])
