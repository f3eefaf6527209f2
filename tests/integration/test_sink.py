"""The exactly-once sink called as foreachBatch would call it, on Tansu and the session's Spark.

Batches are static DataFrames handed to `sink(df, batch_id)`: replays, layout changes and
zombies can be staged exactly.
"""

from __future__ import annotations

import urllib.request
from collections import Counter

import pytest
from confluent_kafka import Consumer, TopicPartition
from prometheus_client.parser import text_string_to_metric_families

from txnwatch.devtools.workload import create_topics
from txnwatch.producer import TransactionalProducer, TransactionError
from txnwatch.spark_listener import attach, detach
from txnwatch.spark_listener.sink import (
    AtLeastOnceKafkaSink,
    ExactlyOnceKafkaSink,
    SinkLayoutError,
    UnsafeSinkSettings,
    committed_attempts,
)

pytestmark = [pytest.mark.integration, pytest.mark.spark]


def values(bootstrap: str, topic: str, partitions: int = 2) -> Counter:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "verify", "isolation.level": "read_committed",
                  "enable.partition.eof": True, "enable.auto.commit": False})
    c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    out, eof = Counter(), set()
    try:
        while len(eof) < partitions:
            m = c.poll(10)
            assert m is not None, "read_committed consumer stalled"
            if m.error():
                eof.add(m.partition())
            else:
                out[m.value().decode()] += 1
    finally:
        c.close()
    return out


def batch(spark, n: int, offset: int = 0):
    return spark.createDataFrame([(f"k{i % 13}", f"v{i + offset}") for i in range(n)], "key STRING, value STRING")


def new_sink(broker, name, topic, **kw) -> ExactlyOnceKafkaSink:
    kw.setdefault("num_tasks", 2)
    return ExactlyOnceKafkaSink(name, broker.bootstrap, topic, transaction_timeout_ms=20_000,
                                broker_max_timeout_ms=900_000, **kw)


@pytest.fixture
def out_topic(broker, unique):
    topic = unique("sink-out")
    create_topics(broker.bootstrap, [topic], partitions=2)
    return topic


def test_replayed_batch_is_not_written_twice(spark, broker, unique, out_topic):
    name = unique("replay")
    sink = new_sink(broker, name, out_topic)
    sink(batch(spark, 200), 0)
    sink(batch(spark, 100, offset=1000), 1)
    assert sink.stats["tasks_committed"] == 4
    sink(batch(spark, 100, offset=1000), 1)             # Spark replays batch 1 after a restart
    again = new_sink(broker, name, out_topic)           # a restarted driver replays it too
    again(batch(spark, 100, offset=1000), 1)
    assert sink.stats["tasks_replayed"] == 2 and again.stats["tasks_replayed"] == 2
    got = values(broker.bootstrap, out_topic)
    assert got == Counter({f"v{i}": 1 for i in [*range(200), *range(1000, 1100)]})
    assert {t: p.batch for t, p in again.progress().items()} == {0: 1, 1: 1}
    assert len(committed_attempts(broker.bootstrap, name)) == 4


def test_at_least_once_sink_duplicates_a_replayed_batch(spark, broker, unique, out_topic):
    sink = AtLeastOnceKafkaSink(unique("alo"), broker.bootstrap, out_topic)
    sink(batch(spark, 50), 0)
    sink(batch(spark, 50), 0)
    got = values(broker.bootstrap, out_topic)
    assert set(got.values()) == {2} and len(got) == 50     # what the EOS sink prevents


def test_changing_the_number_of_tasks_mid_replay_is_refused(spark, broker, unique, out_topic):
    name = unique("layout")
    new_sink(broker, name, out_topic, num_tasks=2)(batch(spark, 60), 4)
    fewer = new_sink(broker, name, out_topic, num_tasks=1)
    with pytest.raises(SinkLayoutError, match="batch 4 was written by task .* of 2 tasks"):
        fewer(batch(spark, 60), 4)                      # a replay of batch 4 with another layout
    assert "tasks_committed" not in fewer.stats
    # Past the last batch written with the old layout, the change is safe.
    later = new_sink(broker, name, out_topic, num_tasks=1)
    later(batch(spark, 30, offset=500), 5)
    assert later.stats["tasks_committed"] == 1
    got = values(broker.bootstrap, out_topic)
    assert got == Counter({f"v{i}": 1 for i in [*range(60), *range(500, 530)]})


def test_progress_topic_too_small_is_rejected(broker, unique, out_topic):
    name = unique("small")
    create_topics(broker.bootstrap, [f"txnwatch-progress.{name}"], partitions=1)
    with pytest.raises(UnsafeSinkSettings, match="has 1 partitions but num_tasks=2"):
        new_sink(broker, name, out_topic)


def test_a_zombie_is_fenced_by_the_next_batch(spark, broker, unique, out_topic):
    name = unique("zombie")
    sink = new_sink(broker, name, out_topic, num_tasks=1)
    sink(batch(spark, 10), 0)
    # A zombie of task 0 (an earlier attempt still running) with a transaction open.
    zombie = TransactionalProducer({"bootstrap.servers": broker.bootstrap,
                                    "transactional.id": f"txnwatch.{name}.0"})
    zombie.init_transactions()
    zombie.begin()
    zombie.produce(out_topic, value=b"zombie", partition=0)
    zombie.flush()
    sink(batch(spark, 10, offset=100), 1)                  # task 0 re-initialises: fences it
    with pytest.raises(TransactionError) as ei:
        zombie.produce(out_topic, value=b"zombie-2", partition=0)
        zombie.commit()
    assert ei.value.fenced and ei.value.error in ("PRODUCER_FENCED", "INVALID_PRODUCER_EPOCH", "_FENCED")
    zombie.close()
    got = values(broker.bootstrap, out_topic)
    assert got.get("zombie-2") is None
    assert {f"v{i}" for i in [*range(10), *range(100, 110)]} <= set(got)
    assert all(n == 1 for v, n in got.items() if v.startswith("v"))


def test_transactions_reach_prometheus_through_the_listener(spark, broker, unique, out_topic):
    name = unique("metrics")
    listener = attach(spark, serve_port=0, host="127.0.0.1")
    try:
        sink = new_sink(broker, name, out_topic, metrics=listener)
        for b in range(3):
            sink(batch(spark, 40, offset=b * 100), b)
        with urllib.request.urlopen(f"http://127.0.0.1:{listener.server.port}/metrics", timeout=5) as r:
            text = r.read().decode()
    finally:
        detach(spark, listener)
    smp = {(s.name, tuple(sorted(s.labels.items()))): s.value
           for f in text_string_to_metric_families(text) for s in f.samples}
    app = ("app", name)
    for task in (0, 1):
        tid = ("transactional_id", f"txnwatch.{name}.{task}")
        assert smp[("kafka_producer_transactions_total", (app, ("outcome", "committed"), tid))] == 3
        assert 0 < smp[("kafka_producer_transaction_timeout_headroom_seconds", (app, ("stat", "min"), tid))] < 20
    assert smp[("kafka_producer_transaction_commit_seconds_count", (app,))] == 6
    assert smp[("kafka_producer_transaction_duration_seconds_count", (app, ("outcome", "committed")))] == 6


def test_spark_task_retry_within_the_batch(broker, unique, tmp_path):
    """Real Spark task retries: the pipeline in a child process with master local[2,4]
    (4 attempts per task). Task 1 of batch 2 raises after producing on its first attempt;
    Spark retries the task inside the same batch, which aborted the first attempt's
    transaction, reports it, and writes the rows once."""
    import json
    import subprocess
    import sys

    from tests.integration.test_pipeline import assert_exactly_once, make_input, samples, total

    name = unique("retry").replace("-", "_")
    inp, out = f"{name}-in", f"{name}-out"
    create_topics(broker.bootstrap, [inp, out], partitions=2)
    expected = make_input(broker.bootstrap, inp)
    flag = tmp_path / "failed-once"
    fault = {"batch": 2, "task": 1, "once_file": str(flag)}
    metrics = tmp_path / "metrics.txt"
    cmd = [sys.executable, "-m", "txnwatch.pipeline", "--bootstrap", broker.bootstrap, "--input-topic", inp,
           "--output-topic", out, "--checkpoint", str(tmp_path / "ckpt"), "--name", name,
           "--master", "local[2,4]", "--trigger-seconds", "0.5", "--max-records-per-batch", "200",
           "--window", "5 seconds", "--watermark", "5 seconds", "--transaction-timeout-ms", "30000",
           "--broker-max-timeout-ms", "900000", "--metrics-file", str(metrics), "--exit-when-idle", "3",
           "--timeout", "180", "--fault", f"fail_after_produce={json.dumps(fault)}"]
    with open(tmp_path / "pipeline.log", "w") as log:
        rc = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, timeout=300).returncode
    assert rc == 0, (tmp_path / "pipeline.log").read_text()[-3000:]
    assert flag.exists()                                   # the failure happened...
    assert "injected failure in task 1 of batch 2" in (tmp_path / "pipeline.log").read_text()
    assert_exactly_once(broker.bootstrap, out, name, expected)   # ...and the output is exact
    smp = samples(metrics.read_text())
    tid1 = f"txnwatch.{name}.1"
    assert total(smp, "kafka_producer_transactions_total", transactional_id=tid1, outcome="aborted") == 1
    assert total(smp, "kafka_producer_transaction_errors_total", transactional_id=tid1,
                 error="_APPLICATION") == 1
    assert total(smp, "kafka_producer_transactions_total", app=name, outcome="committed") >= 4
