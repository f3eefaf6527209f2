"""Progress recovery, dead-attempt reports and the driver's handling of task results (no I/O)."""

from __future__ import annotations

import json

import pytest
from confluent_kafka import TopicPartition

from txnwatch.kafka.answers import ActiveProducer, TxnDescription
from txnwatch.spark_listener.serve import render_text
from txnwatch.spark_listener.sink import (
    ExactlyOnceKafkaSink,
    PriorTransaction,
    SinkConfig,
    dead_attempt_records,
    fenced_by_init,
    prior_from,
    task_progress,
)
from txnwatch.spark_listener.state import SparkQueryState

CFG = SinkConfig(name="orders", bootstrap_servers="x:1", topic="out", num_tasks=2,
                 progress_topic="txnwatch-progress.orders", transaction_timeout_ms=30_000)


class Msg:
    def __init__(self, offset, value=None, eof=False):
        self._offset, self._value, self._eof = offset, value, eof

    def offset(self):
        return self._offset

    def value(self):
        return self._value

    def error(self):
        if not self._eof:
            return None

        class E:
            def code(self):
                return -191
        return E()


class FakeConsumer:
    """A progress partition: {offset: value dict}; control records are offsets without data."""

    def __init__(self, committed, records, high):
        self._committed, self._records, self._high = committed, records, high
        self._queue = []

    def committed(self, tps, timeout):
        return [TopicPartition(tp.topic, tp.partition, self._committed) for tp in tps]

    def get_watermark_offsets(self, tp, timeout, cached=False):
        return 0, self._high

    def assign(self, tps):
        start = tps[0].offset
        self._queue = [Msg(o, json.dumps(v).encode()) for o, v in sorted(self._records.items()) if o >= start]
        self._queue.append(Msg(self._high, eof=True))

    def poll(self, timeout):
        return self._queue.pop(0) if self._queue else None

    def unassign(self):
        self._queue = []


def marker(batch, attempt, prev=-1, started=1000.0, tasks=2):
    return {"kind": "begin", "batch": batch, "tasks": tasks, "attempt": attempt, "started": started,
            "timeout_ms": 30_000, "prev": prev}


def test_nothing_committed_yet():
    prog = task_progress(FakeConsumer(-1001, {}, 0), CFG, 0)
    assert prog.marker is None and prog.batch is None and prog.aborted == []


def test_last_committed_marker_and_dead_attempts_after_it():
    records = {
        0: marker(3, "a1"),                       # committed (control record at 1)
        2: marker(4, "a2", prev=0),               # committed (control at 3)
        4: marker(5, "z1", prev=2, started=1000.0),   # a zombie, aborted by the coordinator (at 5)
        6: marker(5, "f1", prev=2),               # a failed attempt that left a note
        7: {"kind": "abort", "attempt": "f1", "error": "_APPLICATION", "duration": 1.5},
    }
    prog = task_progress(FakeConsumer(3, records, 9), CFG, 1)
    assert prog.committed_offset == 3 and prog.batch == 4 and prog.marker.attempt == "a2"
    assert [m.attempt for m in prog.aborted] == ["z1", "f1"]
    recs = {r["attempt"]: r for r in dead_attempt_records(CFG, 1, prog, [], now=1012.5)}
    zombie = recs["z1"]
    assert zombie["outcome"] == "aborted" and zombie["error"] == "PRODUCER_FENCED"
    assert zombie["duration_seconds"] == 12.5 and zombie["transactional_id"] == "txnwatch.orders.1"
    assert zombie["batch"] == 5
    failed = recs["f1"]
    assert failed["error"] == "_APPLICATION" and failed["duration_seconds"] == 1.5
    assert failed["timeout_ms"] == 30_000
    # Seen long after its deadline, a transaction nobody saw open was aborted at its timeout
    # at the latest: its duration is bounded by the timeout.
    late = {r["attempt"]: r for r in dead_attempt_records(CFG, 1, prog, [], now=5000.0)}
    assert late["z1"]["duration_seconds"] == 30.0


def prior(open_, offset=None, has_marker=False, start_ms=1_000_000, timeout_ms=30_000, fenced_at=1010.0):
    return PriorTransaction(open=open_, producer_id=7, producer_epoch=3, start_ms=start_ms, timeout_ms=timeout_ms,
                            marker_offset=offset, has_marker=has_marker, fenced_at=fenced_at)


def progress_with(records, committed=3, high=9):
    return task_progress(FakeConsumer(committed, records, high), CFG, 0)


def test_an_open_transaction_fenced_by_the_init_is_matched_to_its_marker():
    prog = progress_with({2: marker(4, "a2"), 4: marker(5, "z1", prev=2, started=1001.0)}, high=5)
    own = fenced_by_init(prog, prior(True, offset=4, has_marker=True))
    assert own == [{"attempt": "z1", "batch": 5, "started": 1001.0, "fenced_at": 1010.0, "timeout_ms": 30_000}]
    (rec,) = dead_attempt_records(CFG, 0, prog, own, now=2000.0)
    assert (rec["attempt"], rec["error"], rec["duration_seconds"]) == ("z1", "PRODUCER_FENCED", 9.0)


def test_an_open_transaction_whose_marker_never_arrived_is_still_reported():
    prog = progress_with({2: marker(4, "a2")}, high=4)
    own = fenced_by_init(prog, prior(True, start_ms=1_000_500))
    (rec,) = dead_attempt_records(CFG, 0, prog, own, now=2000.0)
    assert rec["attempt"] == "txn-7.3@1000500" and rec["batch"] is None
    assert rec["error"] == "PRODUCER_FENCED" and rec["duration_seconds"] == 9.5
    assert rec["timeout_ms"] == 30_000


def test_an_open_zombie_that_committed_before_the_init_is_no_fence():
    # DescribeProducers saw its marker at 2 open; by the init it had committed (offset 3).
    prog = progress_with({2: marker(4, "a2")}, high=4)
    assert fenced_by_init(prog, prior(True, offset=2, has_marker=True)) == []


def test_an_aborted_transaction_without_marker_is_reported_with_its_timeout():
    prog = progress_with({2: marker(4, "a2")}, high=4)
    own = fenced_by_init(prog, prior(False, start_ms=1_000_000, timeout_ms=5_000, fenced_at=1100.0))
    (rec,) = dead_attempt_records(CFG, 0, prog, own, now=1100.0)
    assert rec["attempt"] == "txn-7.3@1000000" and rec["duration_seconds"] == 5.0
    # With a marker, the marker reports it (no second record).
    prog = progress_with({2: marker(4, "a2"), 4: marker(5, "z", prev=2, started=1000.0)}, high=6)
    own = fenced_by_init(prog, prior(False, has_marker=True, timeout_ms=5_000, fenced_at=1100.0))
    assert own == []
    assert [r["attempt"] for r in dead_attempt_records(CFG, 0, prog, own, now=1100.0)] == ["z"]


def test_a_fence_written_by_an_attempt_that_died_too_is_reported_by_the_next():
    # y fenced z1 (with a marker) and a marker-less transaction, wrote both into its own
    # marker, then died with its transaction open; this init fences y.
    fenced = [{"attempt": "z1", "batch": 5, "started": 1000.0, "fenced_at": 1004.0, "timeout_ms": 30_000},
              {"attempt": "txn-5.1@1000200", "batch": None, "started": 1000.2, "fenced_at": 1004.0,
               "timeout_ms": 30_000}]
    records = {2: marker(4, "a2"), 4: marker(5, "z1", prev=2, started=1000.0),
               6: {**marker(5, "y", prev=2, started=1005.0), "fenced": fenced}}
    prog = progress_with(records, high=7)
    own = fenced_by_init(prog, prior(True, offset=6, has_marker=True, fenced_at=1020.0))
    recs = {r["attempt"]: r for r in dead_attempt_records(CFG, 0, prog, own, now=1020.0)}
    assert set(recs) == {"z1", "txn-5.1@1000200", "y"}
    assert recs["z1"]["duration_seconds"] == 4.0
    assert recs["txn-5.1@1000200"]["duration_seconds"] == pytest.approx(3.8)
    assert recs["y"]["duration_seconds"] == 15.0
    assert all(r["error"] == "PRODUCER_FENCED" and r["outcome"] == "aborted" for r in recs.values())


def test_a_missing_committed_marker_is_an_error_not_a_guess():
    with pytest.raises(RuntimeError, match="refusing to guess"):
        task_progress(FakeConsumer(3, {0: marker(1, "a")}, 4), CFG, 0)


def result(task, status, rows, records, attempt=""):
    return {"task": task, "status": status, "rows": rows, "records": json.dumps(records), "attempt": attempt}


def rec(tid, outcome, attempt, error=None, duration=1.0):
    return {"transactional_id": tid, "outcome": outcome, "duration_seconds": duration,
            "commit_seconds": 0.01 if outcome == "committed" else None, "timeout_ms": 30000,
            "error": error, "attempt": attempt, "batch": 5}


def test_driver_records_task_results_once_into_the_listener_state():
    state = SparkQueryState(ttl_seconds=None)
    sink = ExactlyOnceKafkaSink("orders", "x:1", "out", num_tasks=2, broker_max_timeout_ms=None,
                                create_progress_topic=False, metrics=state)
    t0, t1 = "txnwatch.orders.0", "txnwatch.orders.1"
    zombie = rec(t1, "aborted", "z1", "PRODUCER_FENCED", 12.0)
    sink._handle(5, [result(0, "committed", 10, [rec(t0, "committed", "c0")], "c0"),
                     result(1, "committed", 7, [zombie, rec(t1, "committed", "c1")], "c1")])
    # The same dead attempt reported again (a later replay): counted once.
    sink._handle(5, [result(0, "replayed", 0, []), result(1, "replayed", 0, [zombie])])
    assert sink.stats["rows"] == 17 and sink.stats["tasks_replayed"] == 2
    assert sink.stats["transactions_committed"] == 2 and sink.stats["transactions_aborted"] == 1
    assert sink.stats["error_PRODUCER_FENCED"] == 1
    text = render_text(state)
    assert ('kafka_producer_transaction_errors_total{app="orders",error="PRODUCER_FENCED",'
            'transactional_id="txnwatch.orders.1"} 1.0') in text
    assert ('kafka_producer_transactions_total{app="orders",outcome="committed",'
            'transactional_id="txnwatch.orders.0"} 1.0') in text
    assert 'kafka_producer_transaction_commit_seconds_count{app="orders"} 2.0' in text


def test_missing_task_results_are_counted():
    events = []
    sink = ExactlyOnceKafkaSink("orders", "x:1", "out", num_tasks=3, broker_max_timeout_ms=None,
                                create_progress_topic=False, metrics=events.append)
    sink._handle(1, [result(0, "empty", 0, []), result(2, "empty", 0, [])])
    assert sink.stats["layout_mismatch"] == 1
    assert events == []      # nothing to record: no transaction ran


def test_known_marker_skips_the_fetch_only_when_nothing_followed_it():
    from txnwatch.spark_listener.sink import Marker

    known = Marker(offset=2, batch=4, tasks=2, attempt="a2", started=1.0, timeout_ms=30_000, prev=0)

    class NoFetch(FakeConsumer):
        def assign(self, tps):
            raise AssertionError("fetched")

    prog = task_progress(NoFetch(3, {}, 4), CFG, 0, known=known)
    assert prog.marker is known and prog.aborted == []
    # A dead attempt after it: fetch and report it.
    records = {2: marker(4, "a2", prev=0), 4: marker(5, "z", prev=2)}
    prog = task_progress(FakeConsumer(3, records, 6), CFG, 0, known=known)
    assert [m.attempt for m in prog.aborted] == ["z"]


PROGRESS = ("txnwatch-progress.orders", 0)


def describe(state, epoch=4, partitions=()):
    return TxnDescription("txnwatch.orders.0", state, 7, epoch, 30_000, 1_000_000, frozenset(partitions))


def active(pid=7, epoch=4, start=-1):
    return ActiveProducer(*PROGRESS, pid, epoch, 0, 0, start)


def test_prior_transaction_from_the_coordinator_and_the_partition_leader():
    # Committed, empty or unknown: nothing to report.
    for state in ("Empty", "CompleteCommit", "PrepareCommit"):
        assert prior_from(describe(state), [active()], PROGRESS) is None
    assert prior_from(None, [], PROGRESS) is None
    # Open: its marker is where its transaction starts in the progress partition.
    p = prior_from(describe("Ongoing", partitions=[PROGRESS, ("out", 1)]),
                   [active(pid=3, start=9), active(start=12)], PROGRESS)
    assert p.open and p.marker_offset == 12 and p.has_marker and p.attempt == "txn-7.4@1000000"
    # Open with rows only (the marker never reached the broker).
    p = prior_from(describe("Ongoing", partitions=[("out", 1)]), [active(epoch=3)], PROGRESS)
    assert p.open and p.marker_offset is None and not p.has_marker
    # Aborted by the coordinator (epoch bumped to 5): the abort marker in the progress
    # partition carries epoch 5 when the transaction wrote there ...
    assert prior_from(describe("CompleteAbort", epoch=5), [active(epoch=5)], PROGRESS).has_marker
    # ... and the partition still has the producer at its old epoch when it did not.
    p = prior_from(describe("CompleteAbort", epoch=5), [active(epoch=4)], PROGRESS)
    assert not p.open and not p.has_marker
    # While the abort is being written, the coordinator still lists the partition.
    assert prior_from(describe("PrepareAbort", epoch=5, partitions=[PROGRESS]), [], PROGRESS).has_marker
