"""The reference pipeline, exactly once, on the session's Kafka broker and real Spark:
Spark's own Kafka source (`format("kafka")`, read_committed) into the exactly-once sink.

Input: one committed transaction of JSON events (keys x event times) on a 2-partition
topic; the pipeline aggregates per key and 5-second event-time window with a watermark
and writes each closed window through the exactly-once sink. A read_committed consumer
of the output must see every expected window exactly once after (a) a normal run,
(b) a task that fails mid-transaction after producing (the batch fails, the query is
restarted from its checkpoint), (c) the driver process SIGKILLed with two transactions
open and restarted from its checkpoint. Kafka hides aborted transactions from
read_committed consumers; a read_uncommitted consumer shows that the aborted attempts'
records really were written (their `txnwatch.txn` header names attempts that never
committed).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from confluent_kafka import Consumer, TopicPartition

from tests import compat
from tests.integration.helpers import (
    KEYS,
    SINK_FORMS,
    WINDOW,
    aborted_records,
    assert_exactly_once,
    make_input,
    samples,
    total,
)
from txnwatch.apps import AppResolver
from txnwatch.exporter.tap.source import TransactionLogTap
from txnwatch.kafka.kip664 import TransactionAPI
from txnwatch.pipeline import Settings, run_until_idle, start_query
from txnwatch.spark_listener import attach, detach
from txnwatch.spark_listener.serve import render_text
from txnwatch.spark_listener.sink import committed_attempts
from txnwatch.spark_listener.state import SparkQueryState
from txnwatch_dev.net import wait_for
from txnwatch_dev.spark.sink_faults import SinkFaults
from txnwatch_dev.transactions.scenario import log_counts
from txnwatch_dev.transactions.workload import create_topics

pytestmark = [pytest.mark.integration, pytest.mark.spark]


def settings(bootstrap, tmp_path, name, **kw) -> Settings:
    return Settings(bootstrap=bootstrap, input_topic=f"{name}-in", output_topic=f"{name}-out",
                    checkpoint=str(tmp_path / "ckpt"), name=name, num_tasks=2, trigger_seconds=0.5,
                    max_records_per_batch=200, window=f"{WINDOW} seconds", watermark="5 seconds",
                    transaction_timeout_ms=30_000, broker_max_timeout_ms=900_000, **kw)


def prepare(broker, unique, tmp_path, **kw):
    name = unique("eos").replace("-", "_")
    s = settings(broker.bootstrap, tmp_path, name, **kw)
    create_topics(broker.bootstrap, [s.input_topic, s.output_topic], partitions=2)
    expected = make_input(broker.bootstrap, s.input_topic)
    return s, expected


# ----------------------------------------------------------------------------- tests

def test_normal_run_writes_each_window_once(spark, broker, unique, tmp_path, tap):
    """... and a healthy sink is never fenced: its tasks run on whichever Python worker is
    idle and take their ids over there (InitProducerIds of idle ids), which the coordinator's
    log shows as re-initialisations, not fences (KafkaTransactionFencingPersistent reads none)."""
    s, expected = prepare(broker, unique, tmp_path)
    wait_for(lambda: tap.rebuilt, 30, what="the transaction-log tap following the log")
    state = SparkQueryState(ttl_seconds=None)
    query, sink = start_query(spark, s, metrics=state)
    try:
        assert run_until_idle(query, 3, 180) == "idle", query.exception()
    finally:
        query.stop()
    records = assert_exactly_once(broker.bootstrap, s.output_topic, expected)
    assert aborted_records(broker.bootstrap, s.output_topic, records) == []     # no transaction aborted
    assert len(records) == len(expected) == KEYS * 40 // WINDOW
    committed = sink.stats.get("transactions_committed", 0)
    assert committed >= 4, sink.stats            # output spread over several batches x 2 tasks
    smp = samples(render_text(state))
    assert total(smp, "kafka_producer_transactions_total", app=s.name, outcome="committed") == committed
    assert total(smp, "kafka_producer_transactions_total", outcome="aborted") == 0
    assert total(smp, "kafka_producer_transaction_commit_seconds_count", app=s.name) == committed
    assert total(smp, "kafka_producer_transaction_duration_seconds_count", outcome="committed") == committed
    for task in (0, 1):
        tid = f"txnwatch.{s.name}.{task}"
        assert 0 < total(smp, "kafka_producer_transaction_timeout_headroom_seconds", transactional_id=tid) < 30
    assert not any(n == "kafka_producer_transaction_errors_total" for n, _ in smp)
    inits = sum(log_counts(broker.server_log(), f"txnwatch.{s.name}.{task}")[0] for task in (0, 1))

    def tap_view():
        v = tap.view()
        return v if v.lag_records == 0 and v.transactions.get((s.name, "committed"), 0) == committed else None
    v = wait_for(tap_view, 30, what=f"the tap to count the sink's {committed} commits")
    assert {r: v.fencing.get((s.name, r), 0) for r in ("new_instance", "timeout")} == {"new_instance": 0, "timeout": 0}
    assert v.reinits.get(s.name, 0) == inits, (v.reinits, inits)   # every take-over, as the broker logged it


PARTITIONINGS = pytest.mark.parametrize("partitioning", ["key", "input"])


@PARTITIONINGS
def test_task_failure_mid_transaction_then_restart(spark, broker, unique, tmp_path, partitioning, request):
    """With partitioning="input" the sink writes the aggregation's own shuffle partitions
    (no shuffle of its own): the replay gets the same partitions, so it stays exactly once."""
    s, expected = prepare(broker, unique, tmp_path)
    s.sink_partitioning = partitioning
    flag = tmp_path / "failed-once"
    s.producer_factory = SinkFaults.of(
        {"fail_after_produce": {"batch": 3, "task": 1, "once_file": str(flag), "wait_others": True}})
    state = SparkQueryState(ttl_seconds=None)
    query, _ = start_query(spark, s, metrics=state)
    try:
        assert run_until_idle(query, 3, 180) == "terminated"
    finally:
        query.stop()
    assert flag.exists()
    assert "injected failure in task 1 of batch 3" in str(query.exception())

    s.producer_factory = None
    query, sink = start_query(spark, s, metrics=state)       # same checkpoint: batch 3 replays
    try:
        assert run_until_idle(query, 3, 180) == "idle", query.exception()
    finally:
        query.stop()
    records = assert_exactly_once(broker.bootstrap, s.output_topic, expected)
    # Task 0 had committed batch 3 before task 1 failed: the replay recognised it.
    assert sink.stats.get("tasks_replayed") == 1, sink.stats
    assert sink.partitioning == partitioning and "layout_fallback" not in sink.stats, sink.stats
    # The failed attempt's rows were written (read_uncommitted sees them) and aborted: their
    # header names one attempt that never committed; every visible row's attempt committed.
    attempts = committed_attempts(broker.bootstrap, s.name)
    aborted = aborted_records(broker.bootstrap, s.output_topic, records)
    assert aborted and len({r.attempt for r in aborted}) == 1
    assert not {r.attempt for r in aborted} & set(attempts)
    assert {r.attempt for r in records} <= set(attempts)
    smp = samples(render_text(state))
    tid1 = f"txnwatch.{s.name}.1"
    assert total(smp, "kafka_producer_transactions_total", transactional_id=tid1, outcome="aborted") == 1
    assert total(smp, "kafka_producer_transaction_errors_total", transactional_id=tid1,
                 error="_APPLICATION") == 1
    assert total(smp, "kafka_producer_transaction_errors_total", error="PRODUCER_FENCED") == 0
    import pyspark

    compat.record(request.config, "spark", "classic", "PySpark run", pyspark.__version__)
    compat.record(request.config, "spark", "classic", "Exactly once through a task failure", "yes")
    compat.record(request.config, "spark", "classic", "Sink's kafka_producer_*", "from the driver")


def run_child(s: Settings, tmp_path, tag: str, *extra: str) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "txnwatch_dev.spark.pipeline", "--bootstrap", s.bootstrap,
           "--input-topic", s.input_topic, "--output-topic", s.output_topic, "--checkpoint", s.checkpoint,
           "--name", s.name, "--num-tasks", "2", "--trigger-seconds", "0.5", "--max-records-per-batch", "200",
           "--window", f"{WINDOW} seconds", "--watermark", "5 seconds", "--transaction-timeout-ms", "30000",
           "--broker-max-timeout-ms", "900000", "--metrics-file", str(tmp_path / f"metrics-{tag}.txt"),
           "--exit-when-idle", "3", "--timeout", "180", *extra]
    log = open(tmp_path / f"pipeline-{tag}.log", "w")
    return subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)


@pytest.fixture
def tap(broker):
    """The transaction-log tap (the coordinator's view) on the session broker, in this process."""
    t = TransactionLogTap("test", {"bootstrap.servers": broker.bootstrap}, AppResolver(), 500,
                          metadata_interval=1.0, view_interval=0.1, poll_timeout=0.2)
    t.start()
    yield t
    t.stop()


@PARTITIONINGS
def test_driver_killed_with_two_transactions_open_then_restart(spark, broker, unique, tmp_path, tap, partitioning):
    """Both output tasks of batch 2 stop mid-transaction: task 0 before its commit (its
    progress marker written), task 1 after writing its rows but before its marker reached
    the broker. The driver (a child process) is SIGKILLed; a new one (this process's
    SparkSession) restarts from the checkpoint. The zombies' transactions are aborted
    (fenced by the restarted tasks' init, or by the coordinator's timeout if the restart
    is slower), the output holds every window once, and the sink reports both dead
    attempts, as the coordinator's log shows them."""
    s, expected = prepare(broker, unique, tmp_path)
    wait_for(lambda: tap.rebuilt, 30, what="the transaction-log tap following the log")
    signals = [tmp_path / "paused-0", tmp_path / "paused-1"]
    f0 = {"batch": 2, "task": 0, "signal_file": str(signals[0]), "seconds": 600}
    f1 = {"batch": 2, "task": 1, "signal_file": str(signals[1]), "seconds": 600}
    s.sink_partitioning = partitioning
    child = run_child(s, tmp_path, "killed", "--fault", f"pause_before_commit={json.dumps(f0)}",
                      "--fault", f"pause_before_marker={json.dumps(f1)}", "--sink-partitioning", partitioning)
    tids = [f"txnwatch.{s.name}.0", f"txnwatch.{s.name}.1"]
    try:
        wait_for(lambda: all(f.exists() for f in signals) or child.poll() is not None, 180,
                 what="both tasks of batch 2 paused")
        assert child.poll() is None, (tmp_path / "pipeline-killed.log").read_text()[-3000:]
        api = TransactionAPI({"bootstrap.servers": s.bootstrap}, 10)
        try:
            assert {d.state for d in api.describe_transactions(tids).values()} == {"Ongoing"}
        finally:
            api.close()
        os.killpg(child.pid, signal.SIGKILL)        # driver, executors and Python workers at once
        child.wait(30)
    finally:
        if child.poll() is None:
            os.killpg(child.pid, signal.SIGKILL)
    state = SparkQueryState(ttl_seconds=None)
    listener = attach(spark, state=state)
    try:
        query, sink = start_query(spark, s, metrics=state)      # the new driver, same checkpoint
        try:
            assert run_until_idle(query, 3, 180) == "idle", query.exception()
        finally:
            query.stop()
    finally:
        detach(spark, listener)
    assert sink.partitioning == partitioning and "layout_fallback" not in sink.stats, sink.stats
    records = assert_exactly_once(broker.bootstrap, s.output_topic, expected)
    # Both zombies' rows were written and aborted: read_uncommitted sees two attempts that
    # never committed; read_committed saw only committed attempts.
    attempts = committed_attempts(broker.bootstrap, s.name)
    aborted = aborted_records(broker.bootstrap, s.output_topic, records)
    assert len({r.attempt for r in aborted}) == 2 and not {r.attempt for r in aborted} & set(attempts)
    assert {r.attempt for r in records} <= set(attempts)
    smp = samples(render_text(state))
    for tid in tids:    # the restarted tasks report each dead attempt, marker or not
        assert total(smp, "kafka_producer_transactions_total", transactional_id=tid, outcome="aborted") == 1
        assert total(smp, "kafka_producer_transaction_errors_total", transactional_id=tid,
                     error="PRODUCER_FENCED") == 1
    assert total(smp, "kafka_producer_transactions_total", app=s.name, outcome="committed") >= 4
    assert total(smp, "spark_streaming_batch_id", query=s.name) >= 2
    # The listener's Kafka-source series are the broker's offsets: the restarted query read
    # each input partition to its end (the LSO, here the HWM: every transaction ended).
    c = Consumer({"bootstrap.servers": s.bootstrap, "group.id": "wm", "isolation.level": "read_committed"})
    try:
        ends = {p: c.get_watermark_offsets(TopicPartition(s.input_topic, p), timeout=10)[1] for p in (0, 1)}
    finally:
        c.close()
    for p, end in ends.items():
        labels = {"query": s.name, "topic": s.input_topic, "partition": p}
        assert total(smp, "spark_streaming_source_partition_offset", **labels) == end, (p, end)
        assert total(smp, "spark_streaming_source_partition_behind_latest_offsets", **labels) == 0

    assert total(smp, "kafka_producer_transaction_errors_total", app=s.name) == 2
    # The tap counts what the coordinator did, as its own log tells it: exactly one fence per
    # zombie (the restarted task's InitProducerId aborting its open transaction, or the
    # coordinator's timeout if the restart was slow), and every other InitProducerId of a
    # task's id after the first (a task moving to another Python worker, or taking its id
    # over idle) a re-initialisation, never a fence.
    broker_view = [log_counts(broker.server_log(), tid) for tid in tids]
    inits, timeouts = sum(n for n, _ in broker_view), sum(t for _, t in broker_view)

    def counted() -> dict[str, int] | None:
        v = tap.view()
        if v.lag_records != 0:
            return None
        fenced = {r: v.fencing.get((s.name, r), 0) for r in ("new_instance", "timeout")}
        return {**fenced, "reinit": v.reinits.get(s.name, 0)}
    wait_for(lambda: (c := counted()) is not None and c["new_instance"] + c["timeout"] == 2
             and c["timeout"] == timeouts and c["new_instance"] + c["reinit"] == inits, 30,
             what=f"one fence per zombie and the rest of the {inits} InitProducerIds as re-inits")


def _executors_of(worker_port: int) -> list[int]:
    """The CoarseGrainedExecutorBackend JVMs the Worker on `worker_port` started (no other's)."""
    pids = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                cmd = (d / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if (b"org.apache.spark.executor.CoarseGrainedExecutorBackend" in cmd and b"--worker-url" in cmd
                    and cmd[cmd.index(b"--worker-url") + 1].endswith(f":{worker_port}".encode())):
                pids.append(int(d.name))
    return pids


@SINK_FORMS
def test_jvm_writer_executor_killed_mid_transaction_on_a_standalone_cluster(broker, unique, tmp_path, form):
    """A Spark standalone cluster (a Master and one Worker of the pip-installed PySpark) runs
    the reference pipeline on the JVM writer, in each of the sink's forms. At a moment the
    coordinator shows one of the sink's transactions open with rows on the output that no
    transaction ended yet, the executor is frozen, checked again, and SIGKILLed. Spark starts another executor and
    retries the tasks within the run: the pipeline reaches its idle exit, read_committed
    sees every window once, the killed attempt's rows were written and aborted, and the
    retried task reports each killed transaction (fenced by its init)."""
    import pyspark

    from txnwatch_dev.jvm import LIGHT
    from txnwatch_dev.net import free_port, port_open

    name = unique("execkill").replace("-", "_")
    inp, out = f"{name}-in", f"{name}-out"
    create_topics(broker.bootstrap, [inp, out], partitions=2)
    expected = make_input(broker.bootstrap, inp)
    tids = [f"txnwatch.{name}.0", f"txnwatch.{name}.1"]
    spark_class = str(Path(pyspark.__file__).parent / "bin" / "spark-class")
    master_port, worker_port = free_port(), free_port()
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "SPARK_DAEMON_MEMORY": "256m",
           "SPARK_DAEMON_JAVA_OPTS": " ".join(LIGHT), "SPARK_LOCAL_DIRS": str(tmp_path / "local"),
           "PYSPARK_SUBMIT_ARGS": (f'--driver-java-options "{" ".join(LIGHT)}" --conf spark.executor.memory=512m '
                                   f'--conf "spark.executor.extraJavaOptions={" ".join(LIGHT)}" pyspark-shell')}
    started: list[subprocess.Popen] = []

    def spawn(tag: str, cmd: list[str]) -> subprocess.Popen:
        with open(tmp_path / f"{tag}.log", "w") as log:      # own sessions: each killpg reaches its children
            p = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        started.append(p)
        return p

    api = TransactionAPI({"bootstrap.servers": broker.bootstrap}, 10)
    lso = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "lso", "isolation.level": "read_committed"})
    hwm = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "hwm", "isolation.level": "read_uncommitted"})
    killed: dict[str, frozenset] = {}
    try:
        spawn("master", [spark_class, "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                         "--port", str(master_port), "--webui-port", str(free_port())])
        wait_for(lambda: port_open("127.0.0.1", master_port), 120, what="the Spark Master")
        spawn("worker", [spark_class, "org.apache.spark.deploy.worker.Worker", f"spark://127.0.0.1:{master_port}",
                         "--host", "127.0.0.1", "--port", str(worker_port), "--webui-port", str(free_port()),
                         "--cores", "2", "--memory", "1g", "--work-dir", str(tmp_path / "work")])
        wait_for(lambda: "Successfully registered with master" in (tmp_path / "worker.log").read_text(), 120,
                 what="the Worker registered with the Master")
        child = spawn("pipeline", [
            sys.executable, "-m", "txnwatch_dev.spark.pipeline", "--bootstrap", broker.bootstrap,
            "--input-topic", inp, "--output-topic", out, "--checkpoint", str(tmp_path / "ckpt"), "--name", name,
            "--master", f"spark://127.0.0.1:{master_port}", "--sink-writer", "jvm", "--sink-form", form,
            "--trigger-seconds", "0.5",
            # A request per record, one at a time: a task's rows reach the broker over several
            # round trips before its commit, so the moment this test freezes the executor in (rows
            # past the LSO, the transaction not ended) spans them all, not the last answer alone.
            "--sink-jvm-client-config", "batch.size=1",
            "--sink-jvm-client-config", "max.in.flight.requests.per.connection=1",
            "--max-records-per-batch", "100", "--window", f"{WINDOW} seconds", "--watermark", "5 seconds",
            "--transaction-timeout-ms", "30000", "--broker-max-timeout-ms", "900000",
            "--metrics-file", str(tmp_path / "metrics.txt"), "--exit-when-idle", "3", "--timeout", "240"])

        def end(consumer: Consumer, p: int) -> int:     # the LSO read_committed, the HWM read_uncommitted
            return consumer.get_watermark_offsets(TopicPartition(out, p), timeout=10, cached=False)[1]

        def frozen_mid_transaction() -> list[int]:
            """The executor stopped while a sink transaction is open with rows on the output
            past the last stable offset (written, not yet committed or aborted)."""
            if not any(d.state == "Ongoing" for d in api.describe_transactions(tids).values()):
                return []
            executors = _executors_of(worker_port)
            for pid in executors:
                os.kill(pid, signal.SIGSTOP)       # what the coordinator shows now stays so
            open_ = {t: d.partitions for t, d in api.describe_transactions(tids).items() if d.state == "Ongoing"}
            written = {p for parts in open_.values() for topic, p in parts if topic == out}
            if executors and any(end(lso, p) < end(hwm, p) for p in written):
                killed.update(open_)
                return executors
            for pid in executors:
                os.kill(pid, signal.SIGCONT)       # committed in between, or no row yet: try again
            return []

        executors = wait_for(lambda: child.poll() is not None or frozen_mid_transaction(), 180, interval=0.02,
                             what="a sink transaction open with rows written, on the cluster's executor")
        assert child.poll() is None and killed, (tmp_path / "pipeline.log").read_text()[-3000:]
        for pid in executors:
            os.kill(pid, signal.SIGKILL)
        rc = child.wait(300)
        log = (tmp_path / "pipeline.log").read_text()
        assert rc == 0, log[-3000:]
        assert f"(sink: {form} form, jvm writer)" in log, log[-3000:]
        assert "Lost executor 0" in log, log[-3000:]          # the driver saw the killed executor go
        (app,) = (tmp_path / "work").iterdir()                 # one application, its executors' dirs
        assert len(list(app.iterdir())) >= 2, "Spark did not start another executor"
    finally:
        api.close()
        lso.close()
        hwm.close()
        for p in started:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
            p.wait(30)
        for pid in _executors_of(worker_port):      # none should be left (same process group as the Worker)
            os.kill(pid, signal.SIGKILL)
    records = assert_exactly_once(broker.bootstrap, out, expected)
    attempts = committed_attempts(broker.bootstrap, name)
    assert {r.attempt for r in records} <= set(attempts)
    aborted = aborted_records(broker.bootstrap, out, records)
    assert aborted and not {r.attempt for r in aborted} & set(attempts)      # the killed attempt's rows
    smp = samples((tmp_path / "metrics.txt").read_text())
    for tid in killed:      # reported by the task's next attempt, on the new executor
        assert total(smp, "kafka_producer_transactions_total", transactional_id=tid, outcome="aborted") == 1
        assert total(smp, "kafka_producer_transaction_errors_total", transactional_id=tid,
                     error="PRODUCER_FENCED") == 1
    assert total(smp, "kafka_producer_transactions_total", app=name, outcome="committed") >= 4
