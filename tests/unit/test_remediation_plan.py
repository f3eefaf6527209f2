"""`txnwatch abort`'s plan: which transactions it refuses without a flag naming the risk, what it
says each abort discards and what the producer sees next, and the target flags' errors."""

from __future__ import annotations

import pytest

from txnwatch.exporter.model import TWO_PHASE_TIMEOUT_MS
from txnwatch.kafka.answers import TxnDescription
from txnwatch.remediation.plan import (
    ACL,
    FLINK,
    LIVE,
    TWO_PHASE,
    BlockedGroup,
    Flags,
    Pin,
    Transaction,
    acl_command,
    decide,
    groups_moved,
    lso_moved,
    may_write_markers,
)
from txnwatch.remediation.targets import APP, HANGING, PARTITION, TRANSACTIONAL_ID, TargetError, target_of

NOW = 1_800_000_000_000
ACL_LINE = acl_command("b:9092", "User:ops")


def pin(topic="orders", partition=0, start=40, lso=40, hwm=52, last_write=NOW - 120_000, groups=()):
    return Pin(topic, partition, start, 3, last_write, lso, hwm, NOW / 1000 - 125, tuple(groups))


def described(state="Ongoing", pid=1000, timeout_ms=60_000, start_ms=NOW - 30_000, parts=(("orders", 0),)):
    return TxnDescription("orders-tx", state, pid, 4, timeout_ms, start_ms, frozenset(parts))


def txn(coordinator=None, pid=1000, tid="orders-tx", scheme="", reason=None, pins=None):
    return Transaction(pid, 4, tid, "orders", scheme, coordinator, reason, tuple(pins or (pin(),)))


def kinds(decision, attr="refused"):
    return {r.kind for r in getattr(decision, attr)}


def test_a_hanging_transaction_its_coordinator_forgot_is_aborted_without_a_flag():
    d = decide(txn(None, reason="no_coordinator_state"), NOW, Flags(), True, ACL_LINE)
    assert d.will_abort and not d.risks
    assert "holds no open transaction" in d.liveness and "expired" in d.liveness
    assert "last write 120s ago" in d.liveness
    assert d.producer_next.startswith("nothing")
    assert d.discards == ("orders-0: this transaction's records from offset 40 (at most 12 offsets, up to the HWM 52)",)
    assert d.age_seconds == pytest.approx(125)


def test_another_producer_id_on_the_id_or_a_closed_state_is_not_live():
    moved_on = decide(txn(described(pid=2000)), NOW, Flags(), True, ACL_LINE)
    assert moved_on.will_abort and "now has producer id 2000" in moved_on.liveness
    closed = decide(txn(described(state="CompleteCommit")), NOW, Flags(), True, ACL_LINE)
    assert closed.will_abort and "is CompleteCommit" in closed.liveness


def test_a_live_transaction_is_refused_unless_forced():
    live = txn(described())
    d = decide(live, NOW, Flags(), True, ACL_LINE)
    assert not d.will_abort and kinds(d) == {LIVE}
    assert d.refused[0].flag == "--force-live"
    assert "30s left of its 60s timeout" in d.liveness
    assert "atomicity broken" in d.producer_next
    forced = decide(live, NOW, Flags(force_live=True), True, ACL_LINE)
    assert forced.will_abort and kinds(forced, "risks") == {LIVE}


def test_live_ends_exactly_at_the_timeout():
    at = txn(described(start_ms=NOW - 60_000))
    assert kinds(decide(at, NOW, Flags(), True, ACL_LINE)) == set()
    just_before = txn(described(start_ms=NOW - 59_999))
    assert kinds(decide(just_before, NOW, Flags(), True, ACL_LINE)) == {LIVE}


def test_past_its_timeout_the_coordinator_should_have_ended_it():
    d = decide(txn(described(start_ms=NOW - 90_000)), NOW, Flags(), True, ACL_LINE)
    assert d.will_abort
    assert "past its 60s timeout by 30s" in d.liveness
    assert "fenced" in d.producer_next


def test_an_open_transaction_elsewhere_does_not_make_an_orphan_on_this_partition_live():
    # the coordinator's open transaction of this producer does not include orders-0: what
    # holds orders-0 is left from an earlier transaction of the same producer
    d = decide(txn(described(parts=(("orders", 1),))), NOW, Flags(), True, ACL_LINE)
    assert LIVE not in kinds(d)


def test_a_two_phase_commit_transaction_needs_its_own_flag():
    two_pc = txn(described(timeout_ms=TWO_PHASE_TIMEOUT_MS, start_ms=NOW - 10 * 86_400_000))
    d = decide(two_pc, NOW, Flags(force_live=True), True, ACL_LINE)
    assert kinds(d) == {TWO_PHASE} and d.refused[0].flag == "--force-2pc"
    assert "transaction manager" in d.refused[0].words
    assert decide(two_pc, NOW, Flags(force_2pc=True), True, ACL_LINE).will_abort


def test_a_flink_sink_transaction_needs_accept_data_loss_and_says_why():
    flink = txn(None, tid="orders-sink-0-17", scheme="flink-kafkasink", reason="no_coordinator_state")
    d = decide(flink, NOW, Flags(force_live=True, force_2pc=True), True, ACL_LINE)
    assert kinds(d) == {FLINK}
    assert "pre-commit" in d.refused[0].words and "FLINK-39218" in d.refused[0].words
    assert decide(flink, NOW, Flags(accept_data_loss=True), True, ACL_LINE).will_abort


def test_a_missing_acl_is_refused_and_no_flag_overrides_it():
    everything = Flags(force_live=True, force_2pc=True, accept_data_loss=True)
    d = decide(txn(None), NOW, everything, False, ACL_LINE)
    assert kinds(d) == {ACL} and d.refused[0].flag is None
    assert ("kafka-acls.sh --bootstrap-server b:9092 --command-config admin.properties --add "
            "--allow-principal User:ops --operation Alter --cluster") in d.refused[0].words
    assert decide(txn(None), NOW, Flags(), None, ACL_LINE).will_abort   # unknown: the broker answers


def test_which_operations_allow_markers():
    assert may_write_markers(None) is None
    assert may_write_markers([]) is None           # no Describe on the cluster: nothing is said
    assert may_write_markers(["DESCRIBE", "ALTER"]) is True
    assert may_write_markers(["CLUSTER_ACTION"]) is True
    assert may_write_markers(["DESCRIBE", "DESCRIBE_CONFIGS", "IDEMPOTENT_WRITE"]) is False
    assert "User:<principal>" in acl_command("b:9092", None)
    assert "User:alice" in acl_command("b:9092", "alice")


def test_after_the_abort_the_lso_must_pass_the_first_offset_and_groups_are_told_apart():
    p = pin(start=40)
    assert not lso_moved(p, None) and not lso_moved(p, 40) and lso_moved(p, 41)
    groups = [BlockedGroup("relay", 40, 0, 12), BlockedGroup("audit", 30, 10, 22)]
    assert groups_moved(groups, {"relay": 53}) == (["relay"], ["audit"])


@pytest.mark.parametrize(("flags", "kind", "value"), [
    (dict(hanging=True), HANGING, ""),
    (dict(transactional_id="orders-tx"), TRANSACTIONAL_ID, "orders-tx"),
    (dict(partition="my:topic:7"), PARTITION, "my:topic:7"),
    (dict(app="orders"), APP, "orders"),
])
def test_targets(flags, kind, value):
    args = {"hanging": False, "transactional_id": None, "partition": None, "app": None, **flags}
    t = target_of(**args)
    assert (t.kind, t.value) == (kind, value)
    if kind == PARTITION:
        assert (t.topic, t.partition) == ("my:topic", 7)
        assert t.as_flag() == "--partition my:topic:7"


@pytest.mark.parametrize(("partition", "words"), [
    ("orders", "expected TOPIC:PARTITION"),
    (":3", "expected TOPIC:PARTITION"),
    ("orders:x", "must be a number, got 'x'"),
    ("orders:-1", "0 or more"),
])
def test_bad_partitions_are_named(partition, words):
    with pytest.raises(TargetError, match=words):
        target_of(False, None, partition, None)


def test_no_target_is_an_error():
    with pytest.raises(TargetError, match="--hanging, --transactional-id"):
        target_of(False, None, None, None)
