from txnwatch.apps import AppResolver
from txnwatch.exporter.model import (
    ActiveProducer,
    ClusterFacts,
    GroupLag,
    HangingTransaction,
    PartitionOffsets,
    PartitionState,
    TxnDescription,
)
from txnwatch.exporter.poll import derive


def po(t, p, hwm, lso):
    return PartitionOffsets(t, p, hwm, lso)


def test_stall_clock_starts_keeps_and_resets():
    s1 = derive.partition_states([po("a", 0, 10, 10), po("a", 1, 10, 4)], {}, now=100.0)
    assert s1[("a", 0)].stalled_since is None and s1[("a", 0)].lso_lag == 0
    assert s1[("a", 1)].stalled_since == 100.0 and s1[("a", 1)].lso_lag == 6
    s2 = derive.partition_states([po("a", 0, 12, 12), po("a", 1, 15, 4)], s1, now=130.0)
    assert s2[("a", 1)].stalled_since == 100.0 and s2[("a", 1)].stalled_seconds == 30.0
    # The LSO moved but another transaction is open: the clock restarts.
    s3 = derive.partition_states([po("a", 1, 15, 9)], s2, now=140.0)
    assert s3[("a", 1)].stalled_since == 140.0 and s3[("a", 1)].stalled_seconds == 0
    # Caught up: no stall.
    s4 = derive.partition_states([po("a", 1, 15, 15)], s3, now=150.0)
    assert s4[("a", 1)].stalled_since is None and s4[("a", 1)].stalled_seconds == 0


def test_stall_clock_uses_the_record_timestamp_at_the_lso():
    ts = {("a", 1, 4): 40.0}
    s = derive.partition_states([po("a", 1, 10, 4)], {}, now=100.0, lso_record_ts=ts)
    assert s[("a", 1)].stalled_since == 40.0 and s[("a", 1)].stalled_seconds == 60.0
    future = {("a", 1, 4): 500.0}  # a producer clock ahead of ours is ignored
    assert derive.partition_states([po("a", 1, 10, 4)], {}, now=100.0, lso_record_ts=future)[("a", 1)].stalled_since == 100.0
    stalled = derive.stalled_lsos([po("a", 1, 10, 4), po("a", 2, 5, 5)])
    assert stalled == {("a", 1, 4)}
    assert derive.lso_timestamps_needed(stalled, {}) == [("a", 1, 4)]
    assert derive.lso_timestamps_needed(stalled, ts) == []


def test_group_lag_against_lso_and_hwm():
    parts = derive.partition_states([po("t", 0, 100, 60)], {}, now=1.0)
    lags = derive.group_lags([("g", "t", 0, 50), ("g", "t", 0, 80), ("g", "t", 1, 5), ("g", "t", 0, -1)], parts)
    assert [(g.committed, g.lag_read_committed, g.lag_read_uncommitted) for g in lags] == [(50, 10, 50), (80, 0, 20)]
    assert derive.blocked_groups(lags, parts) == lags


def desc(tid, state="Ongoing", pid=1, epoch=0, timeout=60000, start=1_000, parts=(("t", 0),)):
    return TxnDescription(tid, state, pid, epoch, timeout, start, frozenset(parts))


def test_open_transactions_age_and_headroom():
    txns = derive.open_transactions([desc("b", start=50_000), desc("a", start=10_000), desc("c", state="Empty"),
                                     desc("d", start=-1)], AppResolver(), now_ms=100_000)
    assert [t.transactional_id for t in txns] == ["a", "b", "d"]
    a = txns[0]
    assert a.age_seconds == 90 and a.headroom_seconds == -30  # 10 s + 60 s timeout, now at 100 s
    assert txns[1].headroom_seconds == 10
    assert txns[2].age_seconds is None and txns[2].headroom_seconds is None


def prod(t, p, pid, last_ts, start_offset=5, epoch=0):
    return ActiveProducer(t, p, pid, epoch, last_ts, 0, start_offset)


def test_find_hanging_follows_the_kafka_tool():
    now = 2_000_000
    producers = [prod("t", 0, 1, 0), prod("t", 1, 2, 0), prod("t", 2, 3, 0), prod("t", 3, 4, 0),
                 prod("t", 4, 5, 0), prod("t", 5, 6, now - 1000), prod("t", 6, 7, 0, start_offset=-1),
                 prod("t", 7, 8, 0)]
    cands = derive.hanging_candidates(producers, max_timeout_ms=900_000, now_ms=now)
    assert {c.producer_id for c in cands} == {1, 2, 3, 4, 5, 8}  # 6 is recent, 7 has no open txn
    pid_map = {2: "no-desc", 3: "other-pid", 4: "done", 5: "elsewhere", 8: "fine"}
    descs = {"other-pid": desc("other-pid", pid=99, parts=[("t", 2)]),
             "done": desc("done", state="CompleteCommit", pid=4, parts=[("t", 3)]),
             "elsewhere": desc("elsewhere", pid=5, parts=[("x", 0)]),
             "fine": desc("fine", pid=8, parts=[("t", 7)])}
    hanging = {h.producer_id: h.reason for h in derive.find_hanging(cands, pid_map, descs, now)}
    assert hanging == {1: "no_transactional_id", 2: "no_coordinator_state", 3: "producer_id_mismatch",
                       4: "coordinator_not_open", 5: "partition_not_in_transaction"}


def test_lso_fallback_and_threshold():
    parts = {("t", 0): PartitionState("t", 0, 10, 4, 0.0, 1300.0), ("t", 1): PartitionState("t", 1, 10, 4, 0.0, 10.0),
             ("t", 2): PartitionState("t", 2, 10, 10)}
    assert [(h.topic, h.partition) for h in derive.lso_hanging(parts, 1200)] == [("t", 0)]
    assert derive.hanging_threshold_seconds(ClusterFacts(), None, 900_000) == 1200
    assert derive.hanging_threshold_seconds(ClusterFacts(transaction_max_timeout_ms=60_000), None, 900_000) == 360
    assert derive.hanging_threshold_seconds(ClusterFacts(), 5, 900_000) == 5


def test_epoch_bumps():
    prev = {"a": (1, 3), "b": (2, 0), "c": (3, 5)}
    cur = [desc("a", pid=1, epoch=4), desc("b", pid=9, epoch=0), desc("c", pid=3, epoch=5), desc("new", pid=4)]
    assert sorted(derive.epoch_bumps(prev, cur)) == ["a", "b"]


def test_config_findings():
    facts = ClusterFacts(brokers=1, transaction_state_log_min_isr=2, transaction_max_timeout_ms=60_000)
    parts = {("t", 0): PartitionState("t", 0, 10, 4, 0.0, 100.0)}
    txns = derive.open_transactions([desc("slow", timeout=120_000, start=0)], AppResolver(), now_ms=200_000)
    groups = [GroupLag("g", "t", 0, 4, 0, 6)]
    findings = derive.config_findings(facts, txns, [], parts, groups, stall_warning_seconds=60)
    kinds = [(f.severity, f.kind) for f in findings]
    assert kinds[0][0] == "critical"
    assert set(kinds) == {("critical", "min_isr"), ("critical", "past_timeout"), ("warning", "timeout_above_cap"),
                          ("warning", "lso_stalled"), ("warning", "group_blocked")}


def test_ended_since_names_ids_that_closed():
    assert derive.ended_since({"a", "b", "c"}, now_open={"a"}) == {"b", "c"}
    assert derive.ended_since(set(), now_open={"a"}) == set()


def test_remember_epochs_keeps_the_most_recently_described():
    def d(tid, pid, epoch):
        return derive.TxnDescription(tid, "Ongoing", pid, epoch, 60000, 0, frozenset())

    epochs: dict = {}
    derive.remember_epochs(epochs, [d("a", 1, 0), d("b", 2, 0), d("c", 3, 0)], limit=3)
    derive.remember_epochs(epochs, [d("a", 1, 1)], limit=3)     # a: described again, now newest
    derive.remember_epochs(epochs, [d("d", 4, 0)], limit=3)     # b, the least recent, goes
    assert epochs == {"c": (3, 0), "a": (1, 1), "d": (4, 0)}
    assert list(epochs) == ["c", "a", "d"]
    assert derive.epoch_bumps({"a": (1, 0)}, [d("a", 1, 1), d("b", 2, 0)]) == ["a"]


def test_a_hanging_finding_gives_the_abort_command():
    h = HangingTransaction("orders", 3, 7, 0, 1234, 950.0, "billing-1", "partition_not_in_transaction")
    f = derive.config_findings(ClusterFacts(), [], [h], {}, [], stall_warning_seconds=60, bootstrap="k1:9092")
    assert f[0].kind == "hanging" and f[0].severity == "critical"
    assert f[0].message.endswith("kafka-transactions.sh --bootstrap-server k1:9092 abort --topic orders "
                                 "--partition 3 --start-offset 1234")


def test_the_abort_command_on_a_secured_cluster_names_the_admin_settings():
    h = HangingTransaction("orders", 0, 7, 0, 5, 950.0, None, "no_transactional_id")
    assert derive.abort_command(h, "k1:9093", secured=True) == (
        "kafka-transactions.sh --bootstrap-server k1:9093 --command-config admin.properties abort "
        "--topic orders --partition 0 --start-offset 5")


def test_two_phase_commit_transactions_have_no_headroom_and_their_own_finding():
    """KIP-939: timeout Integer.MAX_VALUE, never aborted by the coordinator: no headroom, no
    timeout-above-cap or past-timeout finding; a finding once open beyond the max age."""
    two_pc = desc("xa-1", timeout=2_147_483_647, start=0)
    txns = derive.open_transactions([two_pc, desc("std", start=90_000)], AppResolver(), now_ms=100_000)
    xa = next(t for t in txns if t.transactional_id == "xa-1")
    assert xa.two_phase and xa.headroom_seconds is None and xa.age_seconds == 100
    assert not next(t for t in txns if t.transactional_id == "std").two_phase
    facts = ClusterFacts(transaction_max_timeout_ms=900_000)
    young = derive.config_findings(facts, txns, [], {}, [], stall_warning_seconds=60, two_phase_max_age_seconds=3600)
    assert [f.kind for f in young] == []
    old = derive.config_findings(facts, txns, [], {}, [], stall_warning_seconds=60, two_phase_max_age_seconds=60)
    assert [(f.severity, f.kind) for f in old] == [("warning", "two_phase_open_too_long")]
    assert "xa-1" in old[0].message and "KIP-939" in old[0].message
