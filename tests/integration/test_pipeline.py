"""The reference pipeline, exactly once, on the real Tansu broker and real Spark.

Input: one committed transaction of JSON events (keys x event times) on a 2-partition
topic; the pipeline aggregates per key and 5-second event-time window with a watermark
and writes each closed window through the exactly-once sink. A read_committed consumer
of the output must see every expected window exactly once after (a) a normal run,
(b) a task that fails mid-transaction after producing (the batch fails, the query is
restarted from its checkpoint), (c) the driver process SIGKILLed mid-transaction and
restarted from its checkpoint.

Tansu does not filter aborted records for read_committed consumers (checked: both
librdkafka and kafka-python see an aborted transaction's records). On such a broker the
raw read_committed view of (b) and (c) contains the aborted attempts' records; the
tests show that those records are exactly the aborted attempts' (by the sink's
`txnwatch.txn` header) and that the view without them - what a Kafka broker's
read_committed returns - holds every expected window exactly once.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections import Counter

import pytest
from confluent_kafka import Consumer, TopicPartition
from prometheus_client.parser import text_string_to_metric_families

from txnwatch.devtools.net import wait_for
from txnwatch.devtools.workload import create_topics
from txnwatch.pipeline import Settings, run_until_idle, start_query
from txnwatch.producer import TransactionalProducer
from txnwatch.spark_listener.serve import render_text
from txnwatch.spark_listener.sink import TXN_HEADER, committed_attempts
from txnwatch.spark_listener.state import SparkQueryState

pytestmark = [pytest.mark.integration, pytest.mark.spark]

BASE = 1_700_000_000          # a multiple of the window
KEYS = 20
PER_PARTITION = 400           # 40 s of event time per partition, 0.1 s apart
WINDOW = 5


def make_input(bootstrap: str, topic: str) -> dict[tuple[str, int], tuple[int, float]]:
    """Write the input in one committed transaction; return the expected windows."""
    p = TransactionalProducer({"bootstrap.servers": bootstrap, "transactional.id": f"input-{topic}"})
    p.init_transactions()
    expected: dict[tuple[str, int], list] = {}
    p.begin()
    for part in (0, 1):
        for j in range(PER_PARTITION):
            key = f"k{(j * 2 + part) % KEYS}"
            ts = BASE + j * 0.1
            amount = j % 7 + part
            p.produce(topic, value=json.dumps({"key": key, "amount": amount, "ts": ts}).encode(),
                      key=key.encode(), partition=part)
            w = int(ts // WINDOW * WINDOW)
            c = expected.setdefault((key, w), [0, 0.0])
            c[0] += 1
            c[1] += amount
        # closes every window (same position in both partitions: read in the same batch)
        p.produce(topic, value=json.dumps({"key": "__flush__", "amount": 0, "ts": BASE + 3600}).encode(),
                  partition=part)
    p.commit()
    return {k: (v[0], v[1]) for k, v in expected.items()}


def read_all(bootstrap: str, topic: str, partitions: int = 2) -> list[tuple[dict, str | None]]:
    """Everything a read_committed consumer sees on `topic`: (value, txnwatch.txn header)."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "verify", "isolation.level": "read_committed",
                  "enable.partition.eof": True, "enable.auto.commit": False})
    c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    out, eof = [], set()
    try:
        while len(eof) < partitions:
            m = c.poll(10)
            assert m is not None, "read_committed consumer stalled (open transaction?)"
            if m.error():
                eof.add(m.partition())
                continue
            hdr = dict(m.headers() or []).get(TXN_HEADER)
            out.append((json.loads(m.value()), hdr.decode() if hdr else None))
    finally:
        c.close()
    return out


def windows(records) -> Counter:
    return Counter((v["key"], v["window_start"], v["count"], v["sum"]) for v, _ in records)


def expected_counter(expected) -> Counter:
    return Counter((k, w, c, s) for (k, w), (c, s) in expected.items())


def assert_exactly_once(bootstrap: str, topic: str, name: str, expected) -> tuple[list, list]:
    """Returns (records of committed attempts, records of aborted attempts)."""
    records = read_all(bootstrap, topic)
    committed = committed_attempts(bootstrap, name)
    good = [r for r in records if r[1] in committed]
    bad = [r for r in records if r[1] not in committed]
    got = windows(good)
    want = expected_counter(expected)
    dups = {k: n for k, n in got.items() if n > 1}
    assert not dups, f"windows written more than once: {list(dups)[:5]}"
    assert got == want, (f"missing {list((want - got).elements())[:5]}, "
                         f"unexpected {list((got - want).elements())[:5]}")
    return good, bad


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


def samples(text: str) -> dict[tuple, float]:
    out = {}
    for fam in text_string_to_metric_families(text):
        for smp in fam.samples:
            out[(smp.name, tuple(sorted(smp.labels.items())))] = smp.value
    return out


def total(smp: dict, name: str, **labels) -> float:
    want = {(k, str(v)) for k, v in labels.items()}
    return sum(v for (n, lb), v in smp.items() if n == name and want <= set(lb))


# ----------------------------------------------------------------------------- tests

def test_normal_run_writes_each_window_once(spark, broker, unique, tmp_path):
    s, expected = prepare(broker, unique, tmp_path)
    state = SparkQueryState(ttl_seconds=None)
    query, sink = start_query(spark, s, metrics=state)
    try:
        assert run_until_idle(query, 3, 180) == "idle", query.exception()
    finally:
        query.stop()
    good, bad = assert_exactly_once(broker.bootstrap, s.output_topic, s.name, expected)
    assert not bad, "no transaction aborted, so nothing outside committed attempts"
    assert len(good) == len(expected) == KEYS * 40 // WINDOW
    committed = sink.stats.get("transactions_committed", 0)
    assert committed >= 4, sink.stats            # output spread over several batches x 2 tasks
    smp = samples(render_text(state))
    assert total(smp, "kafka_producer_transactions_total", app=s.name, outcome="committed") == committed
    assert total(smp, "kafka_producer_transactions_total", outcome="aborted") == 0
    assert total(smp, "kafka_producer_transaction_commit_seconds_count", app=s.name) == committed
    assert total(smp, "kafka_producer_transaction_duration_seconds_count", outcome="committed") == committed
    for task in (0, 1):
        tid = f"txnwatch.{s.name}.{task}"
        assert 0 < total(smp, "kafka_producer_transaction_timeout_headroom_seconds",
                         transactional_id=tid, stat="min") < 30
    assert not any(n == "kafka_producer_transaction_errors_total" for n, _ in smp)


def test_task_failure_mid_transaction_then_restart(spark, broker, unique, tmp_path):
    s, expected = prepare(broker, unique, tmp_path)
    flag = tmp_path / "failed-once"
    s.faults = {"fail_after_produce": {"batch": 3, "task": 1, "once_file": str(flag), "wait_others": True}}
    state = SparkQueryState(ttl_seconds=None)
    query, _ = start_query(spark, s, metrics=state)
    try:
        assert run_until_idle(query, 3, 180) == "terminated"
    finally:
        query.stop()
    assert flag.exists()
    assert "injected failure in task 1 of batch 3" in str(query.exception())

    s.faults = {}
    query, sink = start_query(spark, s, metrics=state)       # same checkpoint: batch 3 replays
    try:
        assert run_until_idle(query, 3, 180) == "idle", query.exception()
    finally:
        query.stop()
    good, bad = assert_exactly_once(broker.bootstrap, s.output_topic, s.name, expected)
    # Task 0 had committed batch 3 before task 1 failed: the replay recognised it.
    assert sink.stats.get("tasks_replayed") == 1, sink.stats
    # Only the failed attempt's records are outside the committed attempts (Tansu shows them).
    assert len({a for _, a in bad}) <= 1
    smp = samples(render_text(state))
    tid1 = f"txnwatch.{s.name}.1"
    assert total(smp, "kafka_producer_transactions_total", transactional_id=tid1, outcome="aborted") == 1
    assert total(smp, "kafka_producer_transaction_errors_total", transactional_id=tid1,
                 error="_APPLICATION") == 1
    assert total(smp, "kafka_producer_transaction_errors_total", error="PRODUCER_FENCED") == 0


def run_child(s: Settings, tmp_path, tag: str, *extra: str) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "txnwatch.pipeline", "--bootstrap", s.bootstrap,
           "--input-topic", s.input_topic, "--output-topic", s.output_topic, "--checkpoint", s.checkpoint,
           "--name", s.name, "--num-tasks", "2", "--trigger-seconds", "0.5", "--max-records-per-batch", "200",
           "--window", f"{WINDOW} seconds", "--watermark", "5 seconds", "--transaction-timeout-ms", "30000",
           "--broker-max-timeout-ms", "900000", "--metrics-file", str(tmp_path / f"metrics-{tag}.txt"),
           "--exit-when-idle", "3", "--timeout", "180", *extra]
    log = open(tmp_path / f"pipeline-{tag}.log", "w")
    return subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)


def test_driver_killed_mid_transaction_then_restart(broker, unique, tmp_path):
    s, expected = prepare(broker, unique, tmp_path)
    signal_file = tmp_path / "paused"
    fault = {"batch": 2, "task": 0, "signal_file": str(signal_file), "seconds": 600}
    child = run_child(s, tmp_path, "killed", "--fault", f"pause_before_commit={json.dumps(fault)}")
    try:
        wait_for(lambda: signal_file.exists() or child.poll() is not None, 180, what="the paused task")
        assert child.poll() is None, (tmp_path / "pipeline-killed.log").read_text()[-3000:]
        os.killpg(child.pid, signal.SIGKILL)        # driver, executors and Python workers at once
        child.wait(30)
    finally:
        if child.poll() is None:
            os.killpg(child.pid, signal.SIGKILL)
    restarted = run_child(s, tmp_path, "restarted")
    try:
        rc = restarted.wait(240)
    finally:
        if restarted.poll() is None:
            os.killpg(restarted.pid, signal.SIGKILL)
    assert rc == 0, (tmp_path / "pipeline-restarted.log").read_text()[-3000:]
    good, bad = assert_exactly_once(broker.bootstrap, s.output_topic, s.name, expected)
    # Records of uncommitted attempts (visible on Tansu only): the paused zombie of task 0 and,
    # depending on timing, task 1's transaction still open when the driver died: at most one
    # open attempt per output task (transactional id).
    assert 1 <= len({a for _, a in bad}) <= 2
    smp = samples((tmp_path / "metrics-restarted.txt").read_text())
    tid0 = f"txnwatch.{s.name}.0"
    # The restarted task 0 fenced the zombie that was left open and reported it.
    assert total(smp, "kafka_producer_transaction_errors_total", transactional_id=tid0,
                 error="PRODUCER_FENCED") == 1
    assert total(smp, "kafka_producer_transactions_total", transactional_id=tid0, outcome="aborted") == 1
    assert total(smp, "kafka_producer_transactions_total", app=s.name, outcome="committed") >= 4
    assert total(smp, "spark_streaming_batch_id", query=s.name) >= 2


def test_jvm_kafka_source_flag_uses_format_kafka(spark, broker, unique, tmp_path):
    """`--source kafka` builds the query on Spark's JVM connector; where it is not installed
    (here: no Maven access) starting fails with Spark's own error naming the kafka source."""
    s = settings(broker.bootstrap, tmp_path, unique("jvm").replace("-", "_"), source="kafka")
    with pytest.raises(Exception, match="(?i)kafka"):
        q, _ = start_query(spark, s)
        q.stop()
