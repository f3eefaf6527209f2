"""An exactly-once Kafka sink for PySpark foreachBatch, instrumented.

    sink = ExactlyOnceKafkaSink("orders-agg", "broker:9092", "orders-agg-out", num_tasks=4,
                                trigger_interval_seconds=5, metrics=listener)
    (df.select(key_col.alias("key"), value_col.alias("value"))
       .writeStream.foreachBatch(sink).trigger(processingTime="5 seconds")
       .option("checkpointLocation", ...).start())

How it stays exactly once (see docs/spark-sink.md):
- Each micro-batch is hash-partitioned on `key` into exactly `num_tasks` output tasks.
  Task i writes through a transactional producer with the id `txnwatch.<name>.<i>`,
  the same for every batch and every restart, so a retried or replayed task fences
  the zombie of its previous attempt (init_transactions aborts what it left open).
- The batch's progress is committed in the same transaction: a marker record
  (batch id, layout, attempt id) in partition i of the progress topic, and the group
  `txnwatch.<name>` committing offset (marker offset + 1) for that partition via
  sendOffsetsToTransaction. The coordinator applies that offset only if the
  transaction commits, so after init_transactions the committed offset names the
  last committed marker: a task whose marker already holds this batch id skips it.
  One OffsetFetch finds it, without scanning the progress partition.
- Every output record carries the header `txnwatch.txn` = attempt id, and every
  marker the offset of the previous committed marker, so an output record can be
  traced to its attempt and batch (`committed_attempts()` lists the committed ones).

Executors are other processes: each task returns a small result row (status, rows,
transaction records as JSON) that foreachBatch collects; the driver emits them as a
`producer_transactions` event into the listener's state or forwarder (`metrics=`).
A transaction whose attempt died (a fenced zombie, or a task that failed and aborted)
is reported by the next attempt of the same task: before its init_transactions it
asks the coordinator (KIP-664 DescribeTransactions) whether a transaction of its id
is open, which its init then fences - with or without a marker on the broker - and
it finds the markers of dead attempts after the committed one.

Where a batch is written from: by default Spark's own JVM, with Kafka's Java producer (jvm.py:
a DataSource V2 write from the jar this package ships, jvm/sink in the source tree), which
writes the same transactions, markers and progress as the Python writer below; the Python
workers where the jar does not load, or for settings only the Python writer honours.

The package, cut at its seams: settings.py (names, checks, the config shipped to tasks,
with the factory of the tasks' producers), progress.py (markers and dead attempts, read
from the broker), executor.py (the Python writer's task side), jvm.py (the JVM writer),
driver.py (the foreachBatch callables) and metrics.py (where their transaction records go,
in classic PySpark and under Spark Connect).
"""

from __future__ import annotations

from . import jvm
from .driver import AtLeastOnceKafkaSink, ExactlyOnceKafkaSink, ensure_progress_topic
from .executor import prior_from, write_partition
from .jvm import JvmWriterUnavailable, sink_jar
from .metrics import ForwardTo, SinkMetrics, SinkNotPortable
from .progress import (
    Marker,
    PriorTransaction,
    TaskProgress,
    committed_attempts,
    dead_attempt_records,
    fenced_by_init,
    task_progress,
)
from .settings import (
    TXN_HEADER,
    ProducerFactory,
    SinkConfig,
    SinkLayoutError,
    UnsafeSinkSettings,
    check_settings,
    default_progress_topic,
    discover_broker_max_timeout_ms,
    input_partitions,
    progress_group,
    task_producer,
    transactional_id,
)

__all__ = ["TXN_HEADER", "AtLeastOnceKafkaSink", "ExactlyOnceKafkaSink", "ForwardTo", "JvmWriterUnavailable",
           "Marker", "PriorTransaction",
           "ProducerFactory", "SinkConfig", "SinkLayoutError", "SinkMetrics", "SinkNotPortable", "TaskProgress",
           "UnsafeSinkSettings", "check_settings", "committed_attempts", "dead_attempt_records",
           "default_progress_topic", "discover_broker_max_timeout_ms", "ensure_progress_topic",
           "fenced_by_init", "input_partitions", "jvm", "prior_from", "progress_group", "sink_jar",
           "task_producer", "task_progress", "transactional_id", "write_partition"]
