"""The exactly-once sink as a streaming query's own sink (`sink.write_stream(df)`: the JVM
writer inside each micro-batch's job, no foreachBatch), on the session's broker and Spark:
real queries from Spark's Kafka source, a batch that Spark itself replays after a restart,
the layout Spark makes for it, its transactions reaching Prometheus through the query's
progress events, and a clear error where its layout cannot hold."""

from __future__ import annotations

import json
import urllib.request
from collections import Counter
from pathlib import Path

import pytest

from tests.integration.helpers import samples
from tests.integration.test_sink import read, values
from txnwatch.producer import TransactionalProducer
from txnwatch.spark_listener import attach, detach
from txnwatch.spark_listener.sink import ExactlyOnceKafkaSink, committed_attempts
from txnwatch_dev.net import wait_for
from txnwatch_dev.transactions.workload import create_topics

pytestmark = [pytest.mark.integration, pytest.mark.spark]

KEYS = 13


def produce(bootstrap: str, topic: str, start: int, n: int, partitions: int = 2) -> None:
    """Records v<start>..v<start+n-1> (key k<i % KEYS>) in one committed transaction."""
    p = TransactionalProducer({"bootstrap.servers": bootstrap, "transactional.id": f"input-{topic}-{start}"})
    p.init_transactions()
    p.begin()
    for i in range(start, start + n):
        p.produce(topic, value=f"v{i}".encode(), key=f"k{i % KEYS}".encode(), partition=i % partitions)
    p.commit()
    p.close()


def source(spark, bootstrap: str, topic: str):
    return (spark.readStream.format("kafka").option("kafka.bootstrap.servers", bootstrap).option("subscribe", topic)
            .option("kafka.isolation.level", "read_committed").option("startingOffsets", "earliest")
            .option("maxOffsetsPerTrigger", 200).load()
            .selectExpr("CAST(key AS STRING) AS key", "CAST(value AS STRING) AS value"))


def run_available(spark, sink: ExactlyOnceKafkaSink, bootstrap: str, topic: str, checkpoint: str) -> dict[int, int]:
    """One run of the query over everything in the input (availableNow), to its end: its
    batches' input rows, by batch id."""
    q = sink.write_stream(source(spark, bootstrap, topic)).option("checkpointLocation", checkpoint) \
        .trigger(availableNow=True).start()
    q.awaitTermination(180)
    assert not q.isActive and q.exception() is None, q.exception()
    return {p["batchId"]: p["numInputRows"] for p in q.recentProgress}


def forget_after(checkpoint: Path, batch: int) -> None:
    """The checkpoint of a driver that died right after the sink wrote `batch`: its offsets
    logged, its commit not."""
    for log, first in (("commits", batch), ("offsets", batch + 1)):
        for f in (checkpoint / log).iterdir():
            number = f.name.removeprefix(".").removesuffix(".crc")     # a log file, or its checksum
            if number.isdigit() and int(number) >= first:
                f.unlink()


def new_sink(broker, name: str, topic: str, **kw) -> ExactlyOnceKafkaSink:
    sink = ExactlyOnceKafkaSink(name, broker.bootstrap, topic, num_tasks=2, transaction_timeout_ms=20_000,
                                broker_max_timeout_ms=900_000, **kw)
    assert sink.writer_in_use == "jvm"
    return sink


def test_write_stream_exactly_once_through_a_batch_spark_replays(spark, broker, unique, tmp_path):
    """Three batches, then a restart that finds the last batch written but not in Spark's
    commit log (a driver that died between the two): Spark runs that batch again from its
    offset log, the tasks skip it, and the next batch follows. read_committed sees every input
    record once; each key went to the task that `repartition(num_tasks, key)` (the foreachBatch
    form's layout) gives it; every committed transaction reached Prometheus, from the query's
    progress events."""
    name, inp, out = unique("stream"), unique("stream-in"), unique("stream-out")
    create_topics(broker.bootstrap, [inp, out], partitions=2)
    checkpoint = str(tmp_path / "ckpt")
    produce(broker.bootstrap, inp, 0, 600)
    listener = attach(spark, serve_port=0, host="127.0.0.1")
    try:
        first = new_sink(broker, name, out, metrics=listener)
        batches = run_available(spark, first, broker.bootstrap, inp, checkpoint)
        assert [batches[b] for b in range(3)] == [200, 200, 200]
        wait_for(lambda: first.stats.get("batches") == len(batches), 30, what="every batch reported")
        assert first.stats["tasks_committed"] == 6 and first.stats["rows"] == 600

        forget_after(Path(checkpoint), 2)
        produce(broker.bootstrap, inp, 600, 200)
        again = new_sink(broker, name, out, metrics=listener)            # the restarted driver's sink
        batches = run_available(spark, again, broker.bootstrap, inp, checkpoint)
        assert batches[2] == 200 and sum(batches.values()) == 400, batches    # batch 2 again, then the rest
        wait_for(lambda: again.stats.get("batches") == len(batches), 30, what="every batch reported")
        assert again.stats["tasks_replayed"] == 2 and again.stats["rows"] == 200, again.stats
        with urllib.request.urlopen(f"http://127.0.0.1:{listener.server.port}/metrics", timeout=5) as r:
            smp = samples(r.read().decode())
    finally:
        detach(spark, listener)

    got = values(broker.bootstrap, out)
    assert got == Counter({f"v{i}": 1 for i in range(800)})
    assert values(broker.bootstrap, out, "read_uncommitted") == got          # nothing aborted
    attempts = committed_attempts(broker.bootstrap, name)
    assert len(attempts) == first.stats["tasks_committed"] + again.stats["tasks_committed"]
    assert [m.batch for m in attempts.values()].count(2) == 2                     # batch 2 committed once

    # The layout: every record's task (its attempt's marker says it) is the one Spark's hash
    # of its key gives, as in the foreachBatch form.
    from pyspark.sql import functions as F

    keys = spark.createDataFrame([(f"k{i}",) for i in range(KEYS)], "key STRING")
    want = {r.key: r.task for r in keys.repartition(2, "key").select("key", F.spark_partition_id().alias("task"))
            .collect()}
    assert set(want.values()) == {0, 1}
    task_of = {m["attempt"]: m["task"] for m in (json.loads(v) for v, _ in read(broker.bootstrap, first.progress_topic))
               if m.get("kind") == "begin"}
    tasks_of_key: dict[str, set[int]] = {}
    for value, attempt in read(broker.bootstrap, out):
        tasks_of_key.setdefault(f"k{int(value[1:]) % KEYS}", set()).add(task_of[attempt])
    assert tasks_of_key == {k: {t} for k, t in want.items()}

    # Every committed transaction, once, by the id that committed it.
    app = ("app", name)
    for task in (0, 1):
        tid = ("transactional_id", f"txnwatch.{name}.{task}")
        want_committed = sum(1 for a in attempts if task_of[a] == task)
        assert smp[("kafka_producer_transactions_total", (app, ("outcome", "committed"), tid))] == want_committed


def test_write_stream_with_the_input_layout(spark, broker, unique, tmp_path):
    """partitioning="input": each input partition's rows written as they are by one task (no
    shuffle; Spark's Kafka source orders the batch's partitions itself); an input with more partitions than num_tasks stops the query with
    an error that says so and what to do, before anything is written."""
    name, inp, out = unique("stream-input"), unique("stream-input-in"), unique("stream-input-out")
    create_topics(broker.bootstrap, [inp, out], partitions=2)
    produce(broker.bootstrap, inp, 0, 300)
    sink = new_sink(broker, name, out, partitioning="input")
    run_available(spark, sink, broker.bootstrap, inp, str(tmp_path / "ckpt"))
    assert values(broker.bootstrap, out) == Counter({f"v{i}": 1 for i in range(300)})
    task_of = {m["attempt"]: m["task"] for m in (json.loads(v) for v, _ in read(broker.bootstrap, sink.progress_topic))
               if m.get("kind") == "begin"}
    pairs = {(int(v[1:]) % 2, task_of[a]) for v, a in read(broker.bootstrap, out)}     # (input partition, task)
    assert len(pairs) == 2 and {p for p, _ in pairs} == {0, 1} and {t for _, t in pairs} == {0, 1}

    wide, wide_out = unique("stream-input-wide"), unique("stream-input-wide-out")
    create_topics(broker.bootstrap, [wide, wide_out], partitions=3)
    produce(broker.bootstrap, wide, 0, 30, partitions=3)
    too_few = new_sink(broker, unique("stream-input-few"), wide_out, partitioning="input")
    q = too_few.write_stream(source(spark, broker.bootstrap, wide)) \
        .option("checkpointLocation", str(tmp_path / "wide")).trigger(availableNow=True).start()
    with pytest.raises(Exception, match="3 partitions, more than num_tasks=2"):
        q.awaitTermination(120)
    assert values(broker.bootstrap, wide_out) == Counter()
