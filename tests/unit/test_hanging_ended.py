"""How a hanging transaction ended, from what its id's coordinator held before and after: markers
written straight to the partition (an operator's abort) change nothing at the coordinator; a
later transaction of the same producer that ended closed the partition too."""

from __future__ import annotations

from txnwatch.exporter.model import HangingEnded, HangingTransaction, PartitionState
from txnwatch.exporter.poll import derive
from txnwatch.exporter.serve.page import hanging_ended_section
from txnwatch.kafka.answers import TxnDescription

NOW_MS = 1_800_000_000_000
H = HangingTransaction("orders", 1, 7, 0, 40, 900.0, "orders.writer", "partition_not_in_transaction")


def described(state="CompleteCommit", pid=7, epoch=0, start=NOW_MS - 3_600_000, timeout=60_000):
    return TxnDescription("orders.writer", state, pid, epoch, timeout, start, frozenset())


BEFORE = described()


def seen(before=BEFORE, h=H):
    return derive.HangingSeen(h, before)


def part(lso, hwm=60):
    return PartitionState("orders", 1, hwm, lso)


def test_gone_only_when_the_partition_was_read_and_its_lso_passed_the_first_offset():
    previous = {derive.hanging_key(H): seen()}
    assert derive.hanging_gone(previous, [H], {("orders", 1): part(61)}, {}) == []           # still hanging
    assert derive.hanging_gone(previous, [], {("orders", 1): part(40)}, {}) == []            # LSO still there
    assert derive.hanging_gone(previous, [], {("orders", 1): part(61)}, {("orders", 1): "timeout"}) == []
    assert derive.hanging_gone(previous, [], {}, {}) == []                                   # not read at all
    assert derive.hanging_gone(previous, [], {("orders", 1): part(41)}, {}) == [previous[derive.hanging_key(H)]]


def test_markers_when_the_coordinator_did_nothing_for_that_producer():
    assert derive.how_hanging_ended(seen(), described(), NOW_MS) == derive.ENDED_BY_MARKERS
    assert derive.how_hanging_ended(seen(), None, NOW_MS) == derive.ENDED_BY_MARKERS         # id expired since
    assert derive.how_hanging_ended(seen(), described(pid=8, state="Ongoing"), NOW_MS) == derive.ENDED_BY_MARKERS
    no_state = seen(before=None)
    assert derive.how_hanging_ended(no_state, None, NOW_MS) == derive.ENDED_BY_MARKERS


def test_a_later_transaction_of_the_producer_ended_it():
    later = described(state="CompleteCommit", epoch=0, start=NOW_MS - 2_000)
    assert derive.how_hanging_ended(seen(), later, NOW_MS) == derive.ENDED_BY_PRODUCER
    bumped = described(state="CompleteAbort", epoch=1, start=NOW_MS - 2_000)       # a client's own abort
    assert derive.how_hanging_ended(seen(), bumped, NOW_MS) == derive.ENDED_BY_PRODUCER
    timed_out = described(state="CompleteAbort", epoch=1, start=NOW_MS - 61_000)
    assert derive.how_hanging_ended(seen(), timed_out, NOW_MS) == derive.ENDED_BY_COORDINATOR
    at_the_timeout = described(state="CompleteAbort", epoch=1, start=NOW_MS - 60_000)
    assert derive.how_hanging_ended(seen(), at_the_timeout, NOW_MS) == derive.ENDED_BY_PRODUCER


def test_found_by_a_stalled_lso_it_is_unknown():
    stalled = HangingTransaction("orders", 1, -1, -1, 40, 900.0, None, "lso_stalled")
    assert derive.how_hanging_ended(seen(None, stalled), None, NOW_MS) == derive.ENDED_UNKNOWN


def test_the_page_says_how_each_ended_and_escapes_ids():
    evil = HangingTransaction("orders", 1, 7, 0, 40, 900.0, "<script>", "no_coordinator_state")
    html = hanging_ended_section([("prod", HangingEnded(evil, "a&b", "markers", 1000.0))], now=1060.0)
    assert "Hanging transactions that ended" in html and "orders-1" in html and "60s ago" in html
    assert "an operator&#x27;s abort" in html and "&lt;script&gt;" in html and "a&amp;b" in html
    assert hanging_ended_section([], 0.0) == ""
