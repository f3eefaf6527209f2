"""The instrumented transactional producer wrapper, with a fake confluent-kafka producer."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import KafkaError, KafkaException
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from txnwatch.producer import (
    ProducerMetricsCollector,
    TransactionalProducer,
    TransactionError,
    error_name,
    is_fencing,
    make_record,
)


class Clock:
    def __init__(self):
        self.t = 100.0

    def __call__(self):
        return self.t


class FakeProducer:
    """Stands in for confluent_kafka.Producer; `raises={op: [exc, ...]}` makes an operation
    (begin, produce, flush, send_offsets, abort) raise once per listed error."""

    def __init__(self, conf, clock=None, commit_errors=(), init_error=None, buffer_errors=0, raises=None):
        self.conf = conf
        self.clock = clock
        self.calls = []
        self.commit_errors = list(commit_errors)
        self.init_error = init_error
        self.buffer_errors = buffer_errors
        self.raises = {k: list(v) for k, v in (raises or {}).items()}
        self.produced = []

    def _maybe_raise(self, op):
        if self.raises.get(op):
            raise self.raises[op].pop(0)

    def init_transactions(self, timeout):
        self.calls.append("init")
        if self.init_error:
            raise self.init_error

    def begin_transaction(self):
        self.calls.append("begin")
        self._maybe_raise("begin")

    def send_offsets_to_transaction(self, offsets, group_metadata, timeout):
        self.calls.append("send_offsets")
        self._maybe_raise("send_offsets")

    def produce(self, topic, value=None, key=None, **kw):
        self._maybe_raise("produce")
        if self.buffer_errors:
            self.buffer_errors -= 1
            raise BufferError("queue full")
        self.produced.append((topic, key, value, kw))

    def poll(self, timeout):
        self.calls.append("poll")

    def flush(self, timeout):
        self._maybe_raise("flush")
        return 0

    def commit_transaction(self, timeout):
        self.calls.append("commit")
        if self.clock is not None:
            self.clock.t += 0.25
        if self.commit_errors:
            raise self.commit_errors.pop(0)

    def abort_transaction(self, timeout):
        self.calls.append("abort")
        self._maybe_raise("abort")


def make(clock=None, conf=None, **fake):
    clock = clock or Clock()
    holder = {}

    def factory(c):
        holder["p"] = FakeProducer(c, clock=clock, **fake)
        return holder["p"]

    records = []
    p = TransactionalProducer({"bootstrap.servers": "x", "transactional.id": "txnwatch.orders.3",
                               "transaction.timeout.ms": 30000, **(conf or {})},
                              on_record=records.append, producer_factory=factory, clock=clock)
    return p, holder["p"], clock, records


def kerr(code, **flags):
    return KafkaException(KafkaError(code, "test", **flags))


def test_committed_transaction_record():
    p, fake, clock, records = make()
    p.init_transactions()
    p.begin()
    clock.t += 2.0
    p.produce("out", value=b"v", key=b"k")
    rec = p.commit()
    assert rec == {"transactional_id": "txnwatch.orders.3", "outcome": "committed", "duration_seconds": 2.25,
                   "commit_seconds": 0.25, "timeout_ms": 30000.0, "error": None}
    assert records == [rec] and p.drain_records() == [rec] and p.drain_records() == []
    assert fake.calls == ["init", "begin", "commit"]
    assert not p.in_transaction


def test_message_timeout_follows_the_transaction_timeout():
    _, fake, _, _ = make()
    assert fake.conf["message.timeout.ms"] == 30000
    _, fake, _, _ = make(conf={"message.timeout.ms": 5000})
    assert fake.conf["message.timeout.ms"] == 5000


def test_headroom_and_elapsed():
    p, _, clock, _ = make()
    assert p.headroom_seconds() is None
    p.begin()
    clock.t += 12
    assert p.elapsed() == 12 and p.headroom_seconds() == 18


def test_context_manager_aborts_with_application_error():
    p, fake, _, records = make()
    with pytest.raises(ZeroDivisionError):
        with p.transaction():
            p.produce("out", value=b"v")
            1 / 0  # noqa: B018
    assert fake.calls[-1] == "abort"
    assert records[-1]["outcome"] == "aborted" and records[-1]["error"] == "_APPLICATION"
    assert records[-1]["commit_seconds"] is None


def test_fenced_commit_is_fatal_and_not_aborted():
    p, fake, _, records = make(commit_errors=[kerr(KafkaError.PRODUCER_FENCED, txn_requires_abort=True)])
    p.begin()
    with pytest.raises(TransactionError) as ei:
        p.commit()
    assert ei.value.fenced and ei.value.fatal and ei.value.error == "PRODUCER_FENCED"
    assert p.broken == "PRODUCER_FENCED"
    assert "abort" not in fake.calls
    assert records[-1]["outcome"] == "aborted" and records[-1]["error"] == "PRODUCER_FENCED"


def test_abortable_commit_error_aborts_and_keeps_the_producer():
    err = kerr(KafkaError.TOPIC_AUTHORIZATION_FAILED, txn_requires_abort=True)
    p, fake, _, records = make(commit_errors=[err])
    p.begin()
    with pytest.raises(TransactionError) as ei:
        p.commit()
    assert not ei.value.fatal and not ei.value.fenced
    assert fake.calls[-1] == "abort" and p.broken is None
    assert records[-1]["error"] == "TOPIC_AUTHORIZATION_FAILED"


def test_retriable_commit_error_is_retried():
    p, fake, _, records = make(commit_errors=[kerr(KafkaError._TIMED_OUT, retriable=True)])
    p.begin()
    assert p.commit()["outcome"] == "committed"
    assert fake.calls.count("commit") == 2 and records[-1]["error"] is None


def test_produce_waits_for_queue_space():
    p, fake, _, _ = make(buffer_errors=2)
    p.begin()
    p.produce("out", value=b"v", partition=1, headers=[("h", b"1")])
    assert fake.produced == [("out", None, b"v", {"partition": 1, "headers": [("h", b"1")]})]
    assert fake.calls.count("poll") == 2


def test_init_with_a_timeout_over_the_broker_cap_explains():
    p, _, _, _ = make(init_error=kerr(KafkaError.INVALID_TRANSACTION_TIMEOUT))
    with pytest.raises(ValueError, match="transaction.max.timeout.ms"):
        p.init_transactions()


def test_configuration_is_checked():
    with pytest.raises(ValueError, match="transactional.id"):
        TransactionalProducer({"bootstrap.servers": "x"}, producer_factory=FakeProducer)
    with pytest.raises(ValueError, match="idempotence"):
        TransactionalProducer({"transactional.id": "a", "enable.idempotence": False},
                              producer_factory=FakeProducer)


def test_error_names_and_fencing():
    assert error_name(kerr(KafkaError.INVALID_PRODUCER_EPOCH)) == "INVALID_PRODUCER_EPOCH"
    assert error_name(kerr(KafkaError._FENCED)) == "_FENCED"
    assert error_name(RuntimeError("x")) == "_APPLICATION"
    assert error_name(None) is None
    for name in ("PRODUCER_FENCED", "INVALID_PRODUCER_EPOCH", "_FENCED"):
        assert is_fencing(name)
    for name in ("_TIMED_OUT", "INVALID_PRODUCER_ID_MAPPING", None, ""):
        assert not is_fencing(name)


def test_make_record_validates():
    with pytest.raises(ValueError):
        make_record("a", "maybe", 1.0)
    assert make_record("a", "aborted", -1.0)["duration_seconds"] == 0.0


def test_collector_renders_the_catalogue_series():
    collector = ProducerMetricsCollector()
    p, _, clock, _ = make()
    p._on_record = collector.record
    for _ in range(3):
        p.begin()
        clock.t += 1
        p.commit()
    p.begin()
    clock.t += 5
    p.abort(error="PRODUCER_FENCED")
    reg = CollectorRegistry()
    reg.register(collector)
    smp = {(s.name, tuple(sorted(s.labels.items()))): s.value
           for f in text_string_to_metric_families(generate_latest(reg).decode()) for s in f.samples}
    tid = ("transactional_id", "txnwatch.orders.3")
    app = ("app", "orders")        # the built-in rule for txnwatch.<sink>.<task>
    assert smp[("kafka_producer_transactions_total", (app, ("outcome", "committed"), tid))] == 3
    assert smp[("kafka_producer_transactions_total", (app, ("outcome", "aborted"), tid))] == 1
    assert smp[("kafka_producer_transaction_errors_total", (app, ("error", "PRODUCER_FENCED"), tid))] == 1
    assert smp[("kafka_producer_transaction_commit_seconds_count", (app,))] == 3
    assert smp[("kafka_producer_transaction_duration_seconds_count", (app, ("outcome", "committed")))] == 3
    assert smp[("kafka_producer_transaction_timeout_headroom_seconds", (app, tid))] == 25


FENCED = dict(fatal=True)


@pytest.mark.parametrize("op", ["produce", "flush", "send_offsets"])
def test_a_fence_surfacing_mid_transaction_is_recorded_once(op):
    """The fence of issue 12: a second instance fenced the first, whose next produce/flush/
    send_offsets raises _FENCED. It is recorded there, once; the later commit and abort add
    nothing and the producer is broken."""
    p, fake, _, records = make(raises={op: [kerr(KafkaError._FENCED, **FENCED)]})
    p.begin()
    with pytest.raises(KafkaException):
        if op == "produce":
            p.produce("out", value=b"v")
        elif op == "flush":
            p.flush(1)
        else:
            p.send_offsets_to_transaction([], object(), 1)
    assert records == [{"transactional_id": "txnwatch.orders.3", "outcome": "aborted", "duration_seconds": 0.0,
                        "commit_seconds": None, "timeout_ms": 30000.0, "error": "_FENCED"}]
    assert p.broken == "_FENCED" and not p.in_transaction
    with pytest.raises(TransactionError) as ei:
        p.commit()
    assert ei.value.fenced and ei.value.record is None
    assert p.abort(error="_FENCED") is None
    assert len(records) == 1 and "commit" not in fake.calls


def test_an_abortable_error_in_produce_is_the_transaction_error_recorded_by_the_abort():
    err = kerr(KafkaError.TOPIC_AUTHORIZATION_FAILED, txn_requires_abort=True)
    p, fake, _, records = make(raises={"produce": [err]})
    with pytest.raises(KafkaException):
        with p.transaction():
            p.produce("forbidden", value=b"v")
    assert [r["error"] for r in records] == ["TOPIC_AUTHORIZATION_FAILED"]
    assert records[0]["outcome"] == "aborted" and fake.calls[-1] == "abort" and p.broken is None


def test_the_first_kafka_error_of_a_transaction_is_its_cause():
    """An abortable error swallowed by the application, then a commit failure: the record
    names the first error (the cause), once."""
    first = kerr(KafkaError.TOPIC_AUTHORIZATION_FAILED, txn_requires_abort=True)
    p, _, _, records = make(raises={"produce": [first]},
                            commit_errors=[kerr(KafkaError.INVALID_TXN_STATE, txn_requires_abort=True)])
    p.begin()
    with pytest.raises(KafkaException):
        p.produce("forbidden", value=b"v")
    with pytest.raises(TransactionError) as ei:
        p.commit()
    assert ei.value.error == "TOPIC_AUTHORIZATION_FAILED"
    assert [r["error"] for r in records] == ["TOPIC_AUTHORIZATION_FAILED"]


def test_a_fatal_error_outside_a_transaction_is_an_error_without_an_outcome():
    p, _, _, records = make(raises={"begin": [kerr(KafkaError._FENCED, **FENCED)] * 2})
    for _ in range(2):
        with pytest.raises(KafkaException):
            p.begin()
    assert records == [{"transactional_id": "txnwatch.orders.3", "outcome": None, "duration_seconds": 0.0,
                        "commit_seconds": None, "timeout_ms": 30000.0, "error": "_FENCED"}]
    assert p.broken == "_FENCED"


def test_a_failing_abort_is_recorded_with_its_error_and_breaks_the_producer():
    p, _, _, records = make(raises={"abort": [kerr(KafkaError._FENCED, **FENCED)]})
    p.begin()
    rec = p.abort()
    assert rec["outcome"] == "aborted" and rec["error"] == "_FENCED" and p.broken == "_FENCED"
    assert len(records) == 1


def test_errors_outside_transactions_are_counted_but_not_as_transactions():
    collector = ProducerMetricsCollector()
    collector.record(make_record("txnwatch.orders.3", None, 0.0, error="_FENCED"))
    reg = CollectorRegistry()
    reg.register(collector)
    names = {(s.name, s.labels.get("error"), s.value)
             for f in text_string_to_metric_families(generate_latest(reg).decode()) for s in f.samples}
    assert ("kafka_producer_transaction_errors_total", "_FENCED", 1.0) in names
    assert not any(n == "kafka_producer_transactions_total" for n, _, _ in names)
    with pytest.raises(ValueError, match="error"):
        make_record("a", None, 0.0)


def test_a_bare_fatal_error_is_named_by_its_cause_from_error_cb():
    """librdkafka fails calls on a fatal producer with a bare _FATAL; confluent-kafka hands
    error_cb the underlying error (here a fence by a newer instance, surfaced asynchronously
    while adding a partition). The producer is broken *by the fence*, so a caller that
    re-initialises fenced producers (the Spark sink's cached ones) recognises it."""
    seen = []
    p, fake, _, records = make(conf={"error_cb": seen.append},
                               raises={"produce": [kerr(KafkaError._FATAL, fatal=True)]})

    def poll(timeout):   # what confluent-kafka serves from poll(): the queued error_cb
        fake.calls.append("poll")
        fake.conf["error_cb"](KafkaError(KafkaError._FENCED, "fenced by a newer instance", fatal=True))
    fake.poll = poll
    p.begin()
    with pytest.raises(KafkaException):
        p.produce("out", value=b"v")
    assert p.broken == "_FENCED" and is_fencing(p.broken)
    assert records[-1]["outcome"] == "aborted" and records[-1]["error"] == "_FENCED"
    assert [e.code() for e in seen] == [KafkaError._FENCED]      # the caller's own error_cb still called


def test_a_fatal_error_whose_cause_is_queued_a_moment_late_is_still_named_by_it():
    """librdkafka marks the producer fatal before it queues the cause for error_cb: a call can
    fail with _FATAL while the first poll finds nothing yet. The cause is waited for, so a
    fence is still a fence (the Spark sink's cached producer is then re-initialised, not
    failed)."""
    p, fake, _, records = make(raises={"produce": [kerr(KafkaError._FATAL, fatal=True)]})
    polls = []

    def poll(timeout):   # the cause reaches the queue only by the third poll
        polls.append(timeout)
        if len(polls) == 3:
            fake.conf["error_cb"](KafkaError(KafkaError._FENCED, "fenced by a newer instance", fatal=True))
    fake.poll = poll
    p.begin()
    with pytest.raises(KafkaException):
        p.produce("out", value=b"v")
    assert p.broken == "_FENCED" and len(polls) == 3
    assert records[-1]["error"] == "_FENCED"


def test_a_fatal_error_without_a_cause_gives_up_waiting():
    p, fake, _, _ = make(raises={"produce": [kerr(KafkaError._FATAL, fatal=True)]})
    fake.poll = lambda timeout: time.sleep(timeout)
    p.begin()
    with pytest.raises(KafkaException):
        p.produce("out", value=b"v")
    assert p.broken == "_FATAL"
