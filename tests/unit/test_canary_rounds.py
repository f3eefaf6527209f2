"""The canary's bookkeeping: visibility, violations, timeouts, payloads (no broker)."""

import pytest

from txnwatch.canary.rounds import (
    CanaryRecord,
    PayloadError,
    RoundBook,
    TimedOut,
    Violation,
    Visible,
    charged_partitions,
    decode,
    is_abort_round,
    step_deadline,
)

ME = "txnwatch-canary-prod-a"


def rec(round_, partition, committed=True, at=100.0, instance=ME):
    return CanaryRecord(instance, round_, committed, at, partition)


def test_payload_round_trip_and_errors_that_say_what_is_wrong():
    r = rec(7, 2, committed=False, at=1_700_000_000.123456)
    assert decode(r.encode()) == r
    with pytest.raises(PayloadError, match="empty"):
        decode(b"")
    with pytest.raises(PayloadError, match="not JSON"):
        decode(b"\xff\x00")
    with pytest.raises(PayloadError, match="unknown canary payload version 9"):
        decode(b'{"v": 9}')
    with pytest.raises(PayloadError, match="neither commit nor abort"):
        decode(b'{"v": 1, "i": "x", "r": 1, "o": "maybe", "t": 1, "p": 0}')
    with pytest.raises(PayloadError, match="without a valid"):
        decode(b'{"v": 1, "i": "x", "o": "commit", "t": 1, "p": 0}')


def test_committed_round_becomes_visible_per_partition_with_its_latency():
    book = RoundBook(ME)
    book.wrote(1, [0, 1, 2], committed=True, produced_at=100.0, deadline=110.0)
    assert book.seen(rec(1, 1), now=100.25) == Visible(1, 0.25)
    assert book.seen(rec(1, 1), now=100.5) is None and book.stale == 1     # a duplicate read
    assert book.seen(rec(1, 0), now=100.3) == Visible(0, pytest.approx(0.3))
    assert book.expire(now=111.0) == [TimedOut(2, 1)]                     # partition 2 never showed
    assert book.rounds == {}


def test_an_aborted_record_returned_is_a_violation_even_after_the_round_is_forgotten():
    book = RoundBook(ME)
    book.wrote(9, [0, 1], committed=False, produced_at=100.0, deadline=110.0)
    assert book.seen(rec(9, 0, committed=False), now=100.2) == Violation(0, 9)
    assert book.expire(now=111.0) == []                                   # nothing was expected
    assert book.seen(rec(9, 1, committed=False), now=200.0) == Violation(1, 9)


def test_records_of_another_instance_or_a_failed_round_are_stale():
    book = RoundBook(ME)
    assert book.seen(rec(1, 0, instance="txnwatch-canary-prod-b"), now=1.0) is None
    book.wrote(3, [0], committed=True, produced_at=1.0, deadline=5.0)
    book.failed(3)
    assert book.seen(rec(3, 0), now=2.0) is None
    assert book.stale == 2 and book.expire(now=10.0) == []


def test_abort_rounds_and_step_deadlines():
    assert [r for r in range(1, 31) if is_abort_round(r, 10)] == [10, 20, 30]
    assert [r for r in range(1, 7) if is_abort_round(r, 2)] == [2, 4, 6]     # never the first round
    assert not any(is_abort_round(r, 0) for r in range(30))
    assert step_deadline(10.0, 2.5) == 7.5
    assert step_deadline(10.0, 12.0) == 0.5


def test_a_produce_step_out_of_time_charges_the_partitions_left_behind_not_all_of_them():
    assert charged_partitions([0, 1, 2], {0, 2}) == [1]          # one leader slow: that partition
    assert charged_partitions([0, 1, 2], {0}) == [1, 2]
    # nothing written: the transaction could not take a partition in (the coordinator's log
    # stalled, a previous transaction's markers pending): no one partition is to blame
    assert charged_partitions([0, 1, 2], set()) == []
    assert charged_partitions([0], set()) == []
    assert charged_partitions([0, 1], {0, 1}) == []


def test_the_consumers_fetch_wait_is_half_the_interval_within_half_a_second_and_five():
    from txnwatch.canary.probe import fetch_wait_ms

    assert [fetch_wait_ms(s) for s in (0.5, 1, 2, 10, 60)] == [500, 500, 1000, 5000, 5000]


def test_a_round_whose_consumer_is_not_reading_its_partitions_is_a_counted_failure():
    # no broker needed: the round stops before any client is made, waiting for the consumer
    from txnwatch.canary.probe import CanaryProbe, StepFailed
    from txnwatch.config import CanaryConfig

    probe = CanaryProbe("c", {"bootstrap.servers": "127.0.0.1:1"}, CanaryConfig(enabled=True), "i",
                        clock=lambda: 50.0)
    try:
        probe._wait_watched([0, 1], timeout=0.05)
    except StepFailed as exc:
        assert (exc.stage, exc.error) == ("produce", "CONSUMER_NOT_READY") and "[0, 1]" in exc.message
    else:
        raise AssertionError("no failure")
    v = probe.view()
    assert dict(v.failures) == {("produce", "CONSUMER_NOT_READY"): 1} and v.last_failure_at == 50.0


def test_an_init_that_timed_out_or_met_a_loading_coordinator_is_resumed_not_replaced():
    from confluent_kafka import KafkaError, KafkaException

    from txnwatch.canary.probe import init_resumable

    assert init_resumable(KafkaException(KafkaError(KafkaError._TIMED_OUT, "init timed out")))
    assert init_resumable(KafkaException(KafkaError(KafkaError.COORDINATOR_LOAD_IN_PROGRESS, retriable=True)))
    assert not init_resumable(KafkaException(KafkaError(KafkaError.INVALID_TRANSACTION_TIMEOUT)))
    assert not init_resumable(KafkaException(KafkaError(KafkaError._FENCED, fatal=True)))
    assert not init_resumable(RuntimeError("not a Kafka error"))
