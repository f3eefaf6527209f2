"""The exactly-once sink called as foreachBatch would call it, on the session's Kafka broker
and Spark, through each of its writers (Spark's JVM, Python workers) where it matters.

Batches are static DataFrames handed to `sink(df, batch_id)`: replays, layout changes and
zombies can be staged exactly. Output is checked with a read_committed consumer (the
broker hides aborted transactions' records) and, where attempts aborted, with a
read_uncommitted one: the aborted records really were written.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections import Counter

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewPartitions
from prometheus_client.parser import text_string_to_metric_families

from tests.integration.helpers import (
    SINK_FORMS,
    aborted_records,
    assert_exactly_once,
    make_input,
    samples,
    total,
)
from txnwatch.kafka.kip664 import TransactionAPI
from txnwatch.producer import TransactionalProducer, TransactionError
from txnwatch.spark_listener import attach, detach
from txnwatch.spark_listener.sink import (
    TXN_HEADER,
    AtLeastOnceKafkaSink,
    ExactlyOnceKafkaSink,
    SinkLayoutError,
    UnsafeSinkSettings,
    committed_attempts,
)
from txnwatch_dev.net import wait_for
from txnwatch_dev.transactions.workload import create_topics

pytestmark = [pytest.mark.integration, pytest.mark.spark]


def read(bootstrap: str, topic: str, isolation: str = "read_committed") -> list[tuple[str, str | None]]:
    """(value, txnwatch.txn header) of every record of the topic a consumer with this
    isolation level sees."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "verify", "isolation.level": isolation,
                  "enable.partition.eof": True, "enable.auto.commit": False})
    partitions = len(c.list_topics(topic, timeout=10).topics[topic].partitions)
    c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    out, eof = [], set()
    try:
        while len(eof) < partitions:
            m = c.poll(10)
            assert m is not None, f"{isolation} consumer stalled (an open transaction?)"
            if m.error():
                eof.add(m.partition())
            else:
                hdr = dict(m.headers() or []).get(TXN_HEADER)
                out.append((m.value().decode(), hdr.decode() if hdr else None))
    finally:
        c.close()
    return out


def values(bootstrap: str, topic: str, isolation: str = "read_committed") -> Counter:
    return Counter(v for v, _ in read(bootstrap, topic, isolation))


def batch(spark, n: int, offset: int = 0):
    return spark.createDataFrame([(f"k{i % 13}", f"v{i + offset}") for i in range(n)], "key STRING, value STRING")


# The sink's two writers: Spark's JVM (the jar on the session's spark.jars, as
# txnwatch.pipeline.spark_session puts it) and Python workers.
WRITERS = pytest.mark.parametrize("writer", ["jvm", "python"])


def new_sink(broker, name, topic, **kw) -> ExactlyOnceKafkaSink:
    kw.setdefault("num_tasks", 2)
    sink = ExactlyOnceKafkaSink(name, broker.bootstrap, topic, transaction_timeout_ms=20_000,
                                broker_max_timeout_ms=900_000, **kw)
    assert sink.writer_in_use == kw.get("writer", sink.writer_in_use)
    return sink


def dead_attempts(sink) -> dict[int, list[dict]]:
    """Per task, the aborted transactions the last batch's tasks reported."""
    return {r["task"]: [x for x in json.loads(r["records"]) if x["outcome"] == "aborted"]
            for r in sink.last_results}


@pytest.fixture
def out_topic(broker, unique):
    topic = unique("sink-out")
    create_topics(broker.bootstrap, [topic], partitions=2)
    return topic


@WRITERS
def test_replayed_batch_is_not_written_twice(spark, broker, unique, out_topic, writer):
    name = unique("replay")
    sink = new_sink(broker, name, out_topic, writer=writer)
    sink(batch(spark, 200), 0)
    sink(batch(spark, 100, offset=1000), 1)
    assert sink.stats["tasks_committed"] == 4
    sink(batch(spark, 100, offset=1000), 1)             # Spark replays batch 1 after a restart
    again = new_sink(broker, name, out_topic, writer=writer)     # a restarted driver replays it too
    again(batch(spark, 100, offset=1000), 1)
    assert sink.stats["tasks_replayed"] == 2 and again.stats["tasks_replayed"] == 2
    got = values(broker.bootstrap, out_topic)
    assert got == Counter({f"v{i}": 1 for i in [*range(200), *range(1000, 1100)]})
    assert values(broker.bootstrap, out_topic, "read_uncommitted") == got     # nothing aborted
    assert {t: p.batch for t, p in again.progress().items()} == {0: 1, 1: 1}
    # Every output record names its (committed) attempt: 2 batches x 2 tasks.
    attempts = committed_attempts(broker.bootstrap, name)
    assert len(attempts) == 4 and {a for _, a in read(broker.bootstrap, out_topic)} == set(attempts)


def test_each_writer_replays_what_the_other_committed(spark, broker, unique, out_topic):
    """The writers share transactional ids, markers and the progress group: a batch the JVM
    writer committed is skipped when the Python writer replays it, and the other way round;
    each takes the ids over from the other (fencing its idle producers) and continues the
    chain of committed markers."""
    name = unique("both")
    on_jvm, on_python = new_sink(broker, name, out_topic, writer="jvm"), new_sink(broker, name, out_topic,
                                                                                   writer="python")
    on_jvm(batch(spark, 100), 0)
    on_jvm(batch(spark, 100, offset=100), 1)
    on_python(batch(spark, 100, offset=100), 1)         # a replay of the JVM writer's batch
    on_python(batch(spark, 100, offset=200), 2)
    on_jvm(batch(spark, 100, offset=200), 2)            # a replay of the Python writer's batch
    on_jvm(batch(spark, 100, offset=300), 3)
    assert on_jvm.stats["tasks_committed"] == 6 and on_jvm.stats["tasks_replayed"] == 2
    assert on_python.stats["tasks_committed"] == 2 and on_python.stats["tasks_replayed"] == 2
    got = values(broker.bootstrap, out_topic)
    assert got == Counter({f"v{i}": 1 for i in range(400)})
    assert values(broker.bootstrap, out_topic, "read_uncommitted") == got     # nothing aborted
    assert {t: p.batch for t, p in on_python.progress().items()} == {0: 3, 1: 3}
    attempts = committed_attempts(broker.bootstrap, name)      # 4 batches x 2 tasks, one chain
    assert len(attempts) == 8 and {a for _, a in read(broker.bootstrap, out_topic)} == set(attempts)
    assert sorted(m.batch for m in attempts.values()) == [0, 0, 1, 1, 2, 2, 3, 3]


FALLBACK_CHILD = """
import json, sys
from txnwatch.pipeline import spark_session
from txnwatch.spark_listener.sink import ExactlyOnceKafkaSink
bootstrap, name, topic = sys.argv[1:4]
spark = spark_session("local[1]", "no-sink-jar", 1, kafka_connector=False)   # spark.jars without the writer
sink = ExactlyOnceKafkaSink(name, bootstrap, topic, num_tasks=2, transaction_timeout_ms=20_000,
                            broker_max_timeout_ms=900_000)
chosen = sink.writer_in_use
rows = [(f"k{i % 13}", f"v{i}") for i in range(60)]
sink(spark.createDataFrame(rows, "key STRING, value STRING"), 0)
print(json.dumps({"chosen": chosen, "in_use": sink.writer_in_use, "stats": sink.stats}))
"""


def test_the_default_writer_falls_back_to_python_where_the_jar_does_not_load(broker, unique, out_topic):
    """A session whose Spark lacks the jar (here: no spark.jars at all): the sink chooses the
    JVM writer, Spark cannot find it, and the batch is written by Python workers instead,
    once, with a warning that says how to get the JVM writer."""
    name = unique("fallback")
    out = subprocess.run([sys.executable, "-c", FALLBACK_CHILD, broker.bootstrap, name, out_topic],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["chosen"] == "jvm" and result["in_use"] == "python", result
    assert result["stats"]["tasks_committed"] == 2, result
    assert "cannot load the JVM writer" in out.stderr and "spark.jars" in out.stderr
    assert values(broker.bootstrap, out_topic) == Counter({f"v{i}": 1 for i in range(60)})


@WRITERS
def test_a_task_failing_mid_transaction_is_aborted_and_reported_by_the_next(spark, broker, unique, out_topic,
                                                                           writer):
    """A row larger than the producer may send fails its task inside the transaction (the
    task's marker was sent): the task leaves a note and aborts, and the batch fails. Its
    replay (here without that row) writes the rows once and reports the failed attempt, with
    the error's librdkafka name, whichever writer ran it."""
    name = unique("failing")
    sink = new_sink(broker, name, out_topic, num_tasks=1, writer=writer)
    rows = [(f"k{i % 13}", f"v{i}") for i in range(50)] + [("k-big", "x" * 2_000_000)]
    with pytest.raises(Exception, match="(?i)too large|larger than"):
        sink(spark.createDataFrame(rows, "key STRING, value STRING"), 0)
    sink(batch(spark, 50), 0)
    assert values(broker.bootstrap, out_topic) == Counter({f"v{i}": 1 for i in range(50)})
    (failed,) = dead_attempts(sink)[0]
    assert (failed["batch"], failed["error"]) == (0, "MSG_SIZE_TOO_LARGE"), failed
    assert sink.stats["transactions_aborted"] == 1 and sink.stats["transactions_committed"] == 1
    assert failed["attempt"] not in committed_attempts(broker.bootstrap, name)


def test_at_least_once_sink_duplicates_a_replayed_batch(spark, broker, unique, out_topic):
    sink = AtLeastOnceKafkaSink(unique("alo"), broker.bootstrap, out_topic)
    sink(batch(spark, 50), 0)
    sink(batch(spark, 50), 0)
    got = values(broker.bootstrap, out_topic)
    assert set(got.values()) == {2} and len(got) == 50     # what the EOS sink prevents


def test_growing_the_number_of_tasks(spark, broker, unique, out_topic):
    """2 -> 3 output tasks: refused while the progress topic is too small, refused for a
    replay of a batch written with 2 tasks, then, with a partition added, written by 3."""
    name = unique("layout")
    new_sink(broker, name, out_topic, num_tasks=2)(batch(spark, 60), 4)
    progress = f"txnwatch-progress.{name}"
    with pytest.raises(UnsafeSinkSettings, match=f"{progress} has 2 partitions but num_tasks=3"):
        new_sink(broker, name, out_topic, num_tasks=3)
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_partitions([NewPartitions(progress, 3)])[progress].result(30)     # what the error says
    wait_for(lambda: len(admin.list_topics(progress, timeout=5).topics[progress].partitions) == 3, 30,
             what="the third progress partition")
    more = new_sink(broker, name, out_topic, num_tasks=3)
    with pytest.raises(SinkLayoutError, match="batch 4 was written by task .* of 2 tasks"):
        more(batch(spark, 60), 4)                       # a replay of batch 4 with another layout
    assert "tasks_committed" not in more.stats
    # Past the last batch written with the old layout, the change is safe.
    later = new_sink(broker, name, out_topic, num_tasks=3)
    later(batch(spark, 90, offset=500), 5)
    assert later.stats["tasks_committed"] == 3
    assert {t: p.batch for t, p in later.progress().items()} == {0: 5, 1: 5, 2: 5}
    got = values(broker.bootstrap, out_topic)
    assert got == Counter({f"v{i}": 1 for i in [*range(60), *range(500, 590)]})


def start_zombie(broker, name: str, task: int, topic: str, rows: list[str], *, marker: dict | None = None,
                 timeout_ms: int = 60_000) -> TransactionalProducer:
    """An earlier attempt of task `task` left running with its transaction open: its rows
    written, and its progress marker (written as the sink writes it) if `marker`."""
    z = TransactionalProducer({"bootstrap.servers": broker.bootstrap, "transactional.id": f"txnwatch.{name}.{task}",
                               "transaction.timeout.ms": timeout_ms})
    z.init_transactions()
    z.begin()
    attempt = (marker or {}).get("attempt", "marker-less")
    if marker is not None:
        z.produce(f"txnwatch-progress.{name}", value=json.dumps(marker).encode(),
                  key=f"txnwatch.{name}.{task}".encode(), partition=task)
    for v in rows:
        z.produce(topic, value=v.encode(), partition=task, headers=[(TXN_HEADER, attempt.encode())])
    assert z.flush(30) == 0
    return z


def zombie_marker(attempt: str, batch_id: int, timeout_ms: int) -> dict:
    return {"kind": "begin", "batch": batch_id, "tasks": 2, "attempt": attempt, "started": time.time(),
            "timeout_ms": timeout_ms, "prev": 0}


def describe(broker, tids: list[str]) -> dict:
    api = TransactionAPI({"bootstrap.servers": broker.bootstrap}, 10)
    try:
        return api.describe_transactions(tids)
    finally:
        api.close()


@WRITERS
def test_zombies_are_fenced_by_the_next_batch_and_reported(spark, broker, unique, out_topic, writer):
    """Two zombies with transactions open when the next batch starts: task 0's with its
    progress marker, task 1's whose marker never reached the broker. Each task's init
    fences its zombie, and the sink reports both fences (the coordinator showed them open).
    (The writer's own producers of batch 0 were fenced by the zombies' inits too: it notices
    when their next marker is refused, and starts over with new ones.)"""
    name = unique("zombie")
    events = []
    sink = new_sink(broker, name, out_topic, metrics=events.append, writer=writer)
    sink(batch(spark, 10), 0)
    with_marker = start_zombie(broker, name, 0, out_topic, ["zombie-0"],
                               marker=zombie_marker("zombie-a", 1, 60_000))
    without = start_zombie(broker, name, 1, out_topic, ["zombie-1"])
    tids = [f"txnwatch.{name}.0", f"txnwatch.{name}.1"]
    assert {d.state for d in describe(broker, tids).values()} == {"Ongoing"}
    sink(batch(spark, 10, offset=100), 1)
    for z in (with_marker, without):
        with pytest.raises(TransactionError) as ei:
            z.produce(out_topic, value=b"zombie-late", partition=0)
            z.commit()
        assert ei.value.fenced and ei.value.error in ("PRODUCER_FENCED", "INVALID_PRODUCER_EPOCH", "_FENCED")
        z.close()
    got = values(broker.bootstrap, out_topic)
    assert got == Counter({f"v{i}": 1 for i in [*range(10), *range(100, 110)]})
    assert {"zombie-0", "zombie-1"} <= set(values(broker.bootstrap, out_topic, "read_uncommitted"))
    dead = dead_attempts(sink)
    assert [(r["attempt"], r["batch"], r["error"]) for r in dead[0]] == [("zombie-a", 1, "PRODUCER_FENCED")]
    (marker_less,) = dead[1]
    assert marker_less["attempt"].startswith("txn-") and marker_less["batch"] is None
    assert marker_less["error"] == "PRODUCER_FENCED" and marker_less["duration_seconds"] > 0
    assert sink.stats["transactions_aborted"] == 2 and sink.stats["error_PRODUCER_FENCED"] == 2
    reported = [r for e in events for r in e["records"] if r["outcome"] == "aborted"]
    assert sorted(r["transactional_id"] for r in reported) == tids


@WRITERS
def test_zombies_timed_out_by_the_coordinator_are_reported(spark, broker, unique, out_topic, writer):
    """The same two zombies with a 1 s transaction timeout: the coordinator aborts both
    before the next batch. The sink still reports both, with the timeout as duration."""
    name = unique("timedout")
    sink = new_sink(broker, name, out_topic, writer=writer)
    sink(batch(spark, 10), 0)
    zombies = [start_zombie(broker, name, 0, out_topic, ["zombie-0"], marker=zombie_marker("zombie-a", 1, 1000),
                            timeout_ms=1000),
               start_zombie(broker, name, 1, out_topic, ["zombie-1"], timeout_ms=1000)]
    tids = [f"txnwatch.{name}.0", f"txnwatch.{name}.1"]
    wait_for(lambda: {d.state for d in describe(broker, tids).values()} == {"CompleteAbort"}, 30,
             what="the coordinator aborting both timed-out transactions")
    sink(batch(spark, 10, offset=100), 1)
    for z in zombies:
        z.close()
    assert values(broker.bootstrap, out_topic) == Counter({f"v{i}": 1 for i in [*range(10), *range(100, 110)]})
    dead = dead_attempts(sink)
    assert [(r["attempt"], r["batch"], r["duration_seconds"]) for r in dead[0]] == [("zombie-a", 1, 1.0)]
    (marker_less,) = dead[1]
    assert marker_less["attempt"].startswith("txn-") and marker_less["duration_seconds"] == pytest.approx(1.0)
    assert all(r["error"] == "PRODUCER_FENCED" and r["timeout_ms"] == 1000 for r in dead[0] + dead[1])


@WRITERS
def test_transactions_reach_prometheus_through_the_listener(spark, broker, unique, out_topic, writer):
    name = unique("metrics")
    listener = attach(spark, serve_port=0, host="127.0.0.1")
    try:
        sink = new_sink(broker, name, out_topic, metrics=listener, writer=writer)
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
        assert 0 < smp[("kafka_producer_transaction_timeout_headroom_seconds", (app, tid))] < 20
    assert smp[("kafka_producer_transaction_commit_seconds_count", (app,))] == 6
    assert smp[("kafka_producer_transaction_duration_seconds_count", (app, ("outcome", "committed")))] == 6


def test_spark_task_retry_within_the_batch(broker, unique, tmp_path):
    """Real Spark task retries: the pipeline in a child process with master local[2,4]
    (4 attempts per task), its sink's tasks faulted (txnwatch_dev.spark.pipeline). Task 1 of
    batch 2 raises after producing on its first attempt; Spark retries the task inside the
    same batch, which aborted the first attempt's transaction, reports it, and writes the
    rows once."""
    name = unique("retry").replace("-", "_")
    inp, out = f"{name}-in", f"{name}-out"
    create_topics(broker.bootstrap, [inp, out], partitions=2)
    expected = make_input(broker.bootstrap, inp)
    flag = tmp_path / "failed-once"
    fault = {"batch": 2, "task": 1, "once_file": str(flag)}
    metrics = tmp_path / "metrics.txt"
    cmd = [sys.executable, "-m", "txnwatch_dev.spark.pipeline", "--bootstrap", broker.bootstrap, "--input-topic", inp,
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
    committed = assert_exactly_once(broker.bootstrap, out, expected)    # ...and the output is exact
    aborted = aborted_records(broker.bootstrap, out, committed)
    assert aborted and len({r.attempt for r in aborted}) == 1           # the failed attempt's rows
    smp = samples(metrics.read_text())
    tid1 = f"txnwatch.{name}.1"
    assert total(smp, "kafka_producer_transactions_total", transactional_id=tid1, outcome="aborted") == 1
    assert total(smp, "kafka_producer_transaction_errors_total", transactional_id=tid1,
                 error="_APPLICATION") == 1
    assert total(smp, "kafka_producer_transactions_total", app=name, outcome="committed") >= 4


@SINK_FORMS
def test_jvm_writer_driver_killed_mid_transaction_then_restart(broker, unique, tmp_path, form):
    """The reference pipeline on the JVM writer, in a child process (driver and executors in
    one JVM), frozen at a moment the coordinator shows one of its transactions open, and
    SIGKILLed there; then restarted from its checkpoint; in both of the sink's forms. The
    output holds every window once for read_committed consumers, every record it shows belongs
    to a committed attempt, and the restarted tasks report each killed transaction (fenced by
    their init)."""
    name = unique("jvmkill").replace("-", "_")
    inp, out = f"{name}-in", f"{name}-out"
    create_topics(broker.bootstrap, [inp, out], partitions=2)
    expected = make_input(broker.bootstrap, inp)
    tids = [f"txnwatch.{name}.0", f"txnwatch.{name}.1"]

    def cmd(metrics: str, *extra: str) -> list[str]:
        return [sys.executable, "-m", "txnwatch_dev.spark.pipeline", "--bootstrap", broker.bootstrap,
                "--input-topic", inp, "--output-topic", out, "--checkpoint", str(tmp_path / "ckpt"), "--name", name,
                "--sink-writer", "jvm", "--trigger-seconds", "0.5", "--max-records-per-batch", "100",
                "--window", "5 seconds", "--watermark", "5 seconds", "--transaction-timeout-ms", "30000",
                "--broker-max-timeout-ms", "900000", "--sink-form", form, "--metrics-file", str(tmp_path / metrics),
                *extra]

    with open(tmp_path / "killed.log", "w") as log:
        child = subprocess.Popen(cmd("killed.txt", "--timeout", "180"), stdout=log, stderr=subprocess.STDOUT,
                                 start_new_session=True)
    api = TransactionAPI({"bootstrap.servers": broker.bootstrap}, 10)
    killed: set[str] = set()

    def frozen_with_a_transaction_open() -> bool:
        if not any(d.state == "Ongoing" for d in api.describe_transactions(tids).values()):
            return False
        os.killpg(child.pid, signal.SIGSTOP)       # what the coordinator shows now stays so
        killed.update(t for t, d in api.describe_transactions(tids).items() if d.state == "Ongoing")
        if not killed:
            os.killpg(child.pid, signal.SIGCONT)   # it committed in between: try again
        return bool(killed)

    try:
        wait_for(lambda: child.poll() is not None or frozen_with_a_transaction_open(), 180, interval=0.01,
                 what="a transaction of the pipeline open")
        assert child.poll() is None and killed, (tmp_path / "killed.log").read_text()[-3000:]
        os.killpg(child.pid, signal.SIGKILL)
        child.wait(30)
    finally:
        api.close()
        if child.poll() is None:
            os.killpg(child.pid, signal.SIGKILL)
    with open(tmp_path / "restarted.log", "w") as log:
        rc = subprocess.run(cmd("restarted.txt", "--exit-when-idle", "3", "--timeout", "180"), stdout=log,
                            stderr=subprocess.STDOUT, timeout=300).returncode
    restarted = (tmp_path / "restarted.log").read_text()
    assert rc == 0, restarted[-3000:]
    assert f"(sink: {form} form, jvm writer)" in restarted, restarted[-3000:]
    records = assert_exactly_once(broker.bootstrap, out, expected)
    assert {r.attempt for r in records} <= set(committed_attempts(broker.bootstrap, name))
    smp = samples((tmp_path / "restarted.txt").read_text())
    for tid in killed:
        assert total(smp, "kafka_producer_transactions_total", transactional_id=tid, outcome="aborted") == 1
        assert total(smp, "kafka_producer_transaction_errors_total", transactional_id=tid,
                     error="PRODUCER_FENCED") == 1
    assert total(smp, "kafka_producer_transactions_total", app=name, outcome="committed") >= 1


def producer_threads(spark, name: str) -> set[str]:
    """The sender threads of this sink's Java producers in the driver's JVM (under local[N],
    also the executor's): `producer-<transactional id>`."""
    threads = spark._jvm.java.lang.Thread.getAllStackTraces().keySet().toArray()
    return {t.getName() for t in threads if f"producer-txnwatch.{name}." in t.getName()}


def sink_clients(spark, name: str) -> set[str]:
    """The client ids of this sink's admin clients and progress consumers alive in the driver's
    JVM (under local[N], also the executor's), from their JMX app-info beans:
    `txnwatch-sink-<name>-<n>` and `consumer-txnwatch.<name>-<n>`."""
    jvm, gateway = spark._jvm, spark.sparkContext._gateway
    server = jvm.java.lang.management.ManagementFactory.getPlatformMBeanServer()
    # Through the interface: py4j looks methods up on the server's class, which the JDK's
    # modules do not export.
    types = gateway.new_array(jvm.java.lang.Class, 2)
    types[0] = jvm.java.lang.Class.forName("javax.management.ObjectName")
    types[1] = jvm.java.lang.Class.forName("javax.management.QueryExp")
    query_names = jvm.java.lang.Class.forName("javax.management.MBeanServer").getMethod("queryNames", types)
    ids = set()
    for kind in ("kafka.admin.client", "kafka.consumer"):
        args = gateway.new_array(jvm.java.lang.Object, 2)
        args[0] = jvm.javax.management.ObjectName(f"{kind}:type=app-info,*")
        ids |= {b.getKeyProperty("id") or "" for b in query_names.invoke(server, args).toArray()}
    return {i for i in ids if i.startswith((f"txnwatch-sink-{name}-", f"consumer-txnwatch.{name}-"))}


def test_jvm_writer_closes_producers_left_idle(spark, broker, unique, out_topic):
    """An executor keeps each id's producer between batches, and the admin clients and
    progress consumers its starts used, and closes them once they have been idle
    jvm_idle_close_seconds; the next batch of the id initialises a new one."""
    name = unique("idle")
    sink = new_sink(broker, name, out_topic, writer="jvm", jvm_idle_close_seconds=5)
    sink(batch(spark, 50), 0)
    assert len(producer_threads(spark, name)) == 2                 # kept for the next batch
    kinds = {i.split("-")[0] for i in sink_clients(spark, name)}
    assert kinds == {"txnwatch", "consumer"}, sink_clients(spark, name)
    wait_for(lambda: not producer_threads(spark, name), 60, what="the idle producers closed")
    wait_for(lambda: not sink_clients(spark, name), 30, what="the idle admin clients and consumers closed")
    sink(batch(spark, 50, offset=100), 1)
    assert sink.stats["tasks_committed"] == 4
    assert values(broker.bootstrap, out_topic) == Counter({f"v{i}": 1 for i in [*range(50), *range(100, 150)]})
    assert len(producer_threads(spark, name)) == 2


def test_jvm_writer_task_without_rows_keeps_the_producer_it_started(spark, broker, unique, out_topic):
    """A task's producer is started when Spark makes the task, not at its first row, so a
    task that gets no rows has one too: it keeps it for the id's next task, and reports what
    its init found, here a zombie's open transaction that the init fenced."""
    name = unique("norows")
    sink = new_sink(broker, name, out_topic, writer="jvm")
    zombies = [start_zombie(broker, name, task, out_topic, [f"zombie-{task}"]) for task in (0, 1)]
    one_key = spark.createDataFrame([("k", f"v{i}") for i in range(20)], "key STRING, value STRING")
    sink(one_key, 0)
    status = {r["task"]: r["status"] for r in sink.last_results}
    assert sorted(status.values()) == ["committed", "empty"]
    assert len(producer_threads(spark, name)) == 2                 # the empty task's kept too
    for task, dead in dead_attempts(sink).items():
        (fenced,) = dead
        assert fenced["attempt"].startswith("txn-") and fenced["error"] == "PRODUCER_FENCED", (status[task], dead)
    for z in zombies:
        z.close()
    sink(batch(spark, 40, offset=100), 1)
    assert sorted(r["status"] for r in sink.last_results) == ["committed", "committed"]
    assert len(producer_threads(spark, name)) == 2
    assert values(broker.bootstrap, out_topic) == Counter({f"v{i}": 1 for i in [*range(20), *range(100, 140)]})
