"""The harness's sink faults (txnwatch_dev/spark/sink_faults.py), with a fake confluent-kafka
producer: each fault strikes where the integration tests rely on it (test_sink.py,
test_pipeline.py, test_spark_connect.py), and only for the batch and task it names."""

from __future__ import annotations

import json

import pytest

from txnwatch.spark_listener.sink import SinkConfig
from txnwatch_dev.spark.sink_faults import FaultyProducer, InjectedFailure, SinkFaults

CFG = SinkConfig(name="orders", bootstrap_servers="x:1", topic="out", num_tasks=2,
                 progress_topic="txnwatch-progress.orders", transaction_timeout_ms=30_000)


class FakeClient:
    """confluent_kafka.Producer's transactional calls, recorded."""

    def __init__(self, conf):
        self.conf = conf
        self.calls: list[str] = []
        self.produced: list[tuple[str, bytes]] = []

    def init_transactions(self, timeout):
        self.calls.append("init")

    def begin_transaction(self):
        self.calls.append("begin")

    def produce(self, topic, value=None, key=None, **kw):
        self.produced.append((topic, value))

    def flush(self, timeout):
        self.calls.append("flush")
        return 0

    def send_offsets_to_transaction(self, offsets, group_metadata, timeout):
        self.calls.append("send_offsets")

    def commit_transaction(self, timeout):
        self.calls.append("commit")

    def poll(self, timeout):
        pass


def producer(task: int, faults: dict) -> tuple[FaultyProducer, FakeClient]:
    """Task `task`'s producer under the plan `faults`, and the fake client under it."""
    made: list[FakeClient] = []

    def client(conf: dict) -> FakeClient:
        made.append(FakeClient(conf))
        return made[-1]
    return FaultyProducer(CFG, task, SinkFaults.of(faults), producer_factory=client), made[0]


def attempt(p: FaultyProducer, task: int, batch: int) -> None:
    """The sink's calls up to its commit: begin, marker, rows, flush, offsets."""
    p.begin()
    p.produce(CFG.progress_topic, value=json.dumps({"kind": "begin", "task": task, "batch": batch}).encode(),
              partition=task)
    p.produce(CFG.topic, value=b"row")
    p.flush(1)
    p.send_offsets_to_transaction([], object(), 1)


def test_the_plan_makes_the_sinks_producers_with_the_tasks_settings():
    plan = SinkFaults.of({"pause_before_commit": {"signal_file": "/tmp/x"}})
    assert plan == SinkFaults.of({"pause_before_commit": {"signal_file": "/tmp/x"}}) and hash(plan)
    with pytest.raises(ValueError, match="unknown sink faults"):
        SinkFaults.of({"pause_somewhere": {}})
    p, client = producer(1, {})
    assert client.conf["transactional.id"] == "txnwatch.orders.1"
    attempt(p, 1, 0)
    assert client.produced == [(CFG.progress_topic, client.produced[0][1]), (CFG.topic, b"row")]


def test_pause_before_marker_sends_the_rows_and_never_the_marker(tmp_path):
    signal = tmp_path / "paused"
    fault = {"pause_before_marker": {"batch": 2, "task": 1, "signal_file": str(signal), "seconds": 0}}
    p, client = producer(1, fault)
    attempt(p, 1, 1)                                 # another batch: untouched
    assert [t for t, _ in client.produced] == [CFG.progress_topic, CFG.topic] and not signal.exists()
    client.produced.clear()
    with pytest.raises(InjectedFailure, match="task 1 of batch 2 paused before its marker and was not killed"):
        attempt(p, 1, 2)
    assert client.produced == [(CFG.topic, b"row")] and client.calls[-1] == "flush"
    assert signal.read_text().split()[1:] == ["1", "2"]
    other, other_client = producer(0, fault)          # another task: untouched
    attempt(other, 0, 2)
    assert len(other_client.produced) == 2


def test_fail_after_produce_fails_once_after_the_offsets_and_before_the_commit(tmp_path):
    flag = tmp_path / "failed-once"
    p, client = producer(1, {"fail_after_produce": {"batch": 3, "task": 1, "once_file": str(flag)}})
    with pytest.raises(InjectedFailure, match="injected failure in task 1 of batch 3 after producing"):
        attempt(p, 1, 3)
    assert client.calls[-1] == "send_offsets" and flag.read_text() == "1 3\n"
    attempt(p, 1, 3)                                 # the retry: the flag file says it happened
    p.commit(1)
    assert client.calls[-1] == "commit"


def test_pause_before_commit_pauses_then_lets_the_commit_go(tmp_path):
    signal = tmp_path / "paused"
    p, client = producer(0, {"pause_before_commit": {"batch": 6, "task": 0, "signal_file": str(signal),
                                                      "seconds": 0}})
    attempt(p, 0, 6)
    assert signal.read_text().split()[1:] == ["0", "6"]
    p.commit(1)
    assert client.calls[-2:] == ["send_offsets", "commit"]
