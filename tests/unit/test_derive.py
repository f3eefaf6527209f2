import pytest

from txnwatch.apps import AppResolver
from txnwatch.exporter.model import GroupLag, HangingTransaction, PartitionState
from txnwatch.exporter.poll import derive
from txnwatch.exporter.poll import findings as rules
from txnwatch.kafka.answers import (
    ActiveProducer,
    ClusterFacts,
    PartitionOffsets,
    PartitionReplicas,
    TxnDescription,
)


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


def test_a_poll_holds_only_the_partitions_it_read_and_reuses_what_did_not_move():
    s1 = derive.partition_states([po("a", 0, 10, 10), po("a", 1, 10, 10), po("b", 0, 5, 5)], {}, now=100.0)
    s2 = derive.partition_states((o for o in [po("a", 0, 10, 10), po("a", 1, 11, 11)]), s1, now=110.0)
    assert set(s2) == {("a", 0), ("a", 1)} and set(s1) == {("a", 0), ("a", 1), ("b", 0)}   # s1 untouched
    assert s2[("a", 0)] is s1[("a", 0)] and s2[("a", 1)].high_watermark == 11
    # the unchanged partition keeps its key object too: no new object for it at all
    key_of = {k: k for k in s1}
    assert next(k for k in s2 if k == ("a", 0)) is key_of[("a", 0)]


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


def test_group_lags_of_unchanged_groups_are_last_polls():
    """With the poller's cache: a group's topic whose committed offsets and partition states
    are the last poll's keeps its GroupLag objects; a moved LSO or a new commit gives new
    lags; rows of one group's topic apart from each other, and groups gone, are still right."""
    parts = derive.partition_states([po("t", 0, 100, 60), po("t", 1, 50, 50), po("u", 0, 9, 9)], {}, now=1.0)
    committed = [("g", "t", 0, 50), ("g", "t", 1, 40), ("g", "u", 0, 9), ("h", "t", 0, 60)]
    cache: dict = {}
    first = derive.group_lags(committed, parts, cache)
    assert first == derive.group_lags(committed, parts)
    again = derive.group_lags(list(committed), parts, cache)
    assert all(a is b for a, b in zip(again, first, strict=True))

    moved = derive.partition_states([po("t", 0, 100, 70), po("t", 1, 50, 50), po("u", 0, 9, 9)], parts, now=2.0)
    lags = derive.group_lags(committed[:3] + [("h", "t", 0, 65)], moved, cache)
    assert [(g.group, g.topic, g.partition, g.lag_read_committed, g.lag_read_uncommitted) for g in lags] == [
        ("g", "t", 0, 20, 50), ("g", "t", 1, 10, 10), ("g", "u", 0, 0, 0), ("h", "t", 0, 5, 35)]
    assert lags[2] is first[2] and lags[0] is not first[0]

    apart = [committed[0], committed[2], committed[1]]        # g's rows of t not together
    assert derive.group_lags(apart, moved, cache) == derive.group_lags(apart, moved)
    derive.group_lags([("h", "t", 0, 65)], moved, cache)
    assert set(cache) == {("h", "t")}


def ps(t, p, hwm, lso):
    return PartitionState(t, p, hwm, lso)


def test_only_small_gaps_that_did_not_move_are_read_for_markers():
    before = {("t", 0): ps("t", 0, 10, 10), ("t", 1): ps("t", 1, 20, 20), ("u", 0): ps("u", 0, 7, 7)}
    now = {("t", 0): ps("t", 0, 10, 10), ("t", 1): ps("t", 1, 21, 21), ("u", 0): ps("u", 0, 7, 7)}
    previous = derive.group_lags([("steady", "t", 0, 9), ("widest", "t", 0, 5), ("wide", "t", 0, 4),
                                  ("moved", "t", 0, 8), ("lso-moved", "t", 1, 19), ("done", "u", 0, 7)], before)
    groups = derive.group_lags([("steady", "t", 0, 9), ("widest", "t", 0, 5), ("wide", "t", 0, 4),
                                ("moved", "t", 0, 9), ("lso-moved", "t", 1, 19), ("done", "u", 0, 7),
                                ("new", "u", 0, 6)], now)
    # "wide" is 6 offsets below the LSO, "moved" committed since, "lso-moved" has a new LSO,
    # "done" is at the LSO and "new" was not seen at the last poll
    assert derive.steady_marker_gaps(groups, now, previous, before) == {("t", 0, 9, 10), ("t", 0, 5, 10)}
    assert derive.steady_marker_gaps(groups, now, [], {}) == set()
    assert derive.MARKER_GAP_MAX_OFFSETS == 5


def test_gaps_without_a_verdict_are_read_from_a_bounded_number_of_partitions():
    steady = {("t", 0, 9, 10), ("t", 0, 8, 10), ("t", 1, 3, 4), ("t", 2, 1, 2), ("a", 0, 5, 6)}
    assert derive.marker_gaps_to_read(steady, {}, 100) == sorted(steady)
    # both gaps of t-0 come from one read, so they count as one partition
    assert derive.marker_gaps_to_read(steady, {}, 2) == [("a", 0, 5, 6), ("t", 0, 8, 10), ("t", 0, 9, 10)]
    known = {("a", 0, 5, 6): True, ("t", 0, 8, 10): False}
    assert derive.marker_gaps_to_read(steady, known, 2) == [("t", 0, 9, 10), ("t", 1, 3, 4)]


def test_a_gap_of_markers_is_a_read_committed_lag_of_zero_with_its_reason():
    parts = {("t", 0): ps("t", 0, 12, 10)}
    groups = derive.group_lags([("markers", "t", 0, 9), ("record", "t", 0, 8), ("unread", "t", 0, 5)], parts)
    verdicts = {("t", 0, 9, 10): True, ("t", 0, 8, 10): False}
    markers, record, unread = derive.with_marker_gaps(groups, verdicts)
    assert markers == GroupLag("markers", "t", 0, 9, 0, 3, marker_offsets=1)
    assert markers.lag_note == "lag 0: only transaction markers between the committed offset and the LSO"
    assert (record, unread) == (groups[1], groups[2])
    assert record.lag_note == "" and record.marker_offsets == 0
    assert derive.with_marker_gaps(groups, {("t", 0, 8, 10): False}) is groups


def test_a_gap_is_read_once_and_again_only_after_an_offset_moved():
    """The poller's use of the three: verdicts are kept while the gap stays, one read each."""
    reads = []
    verdicts: dict = {}
    previous_groups, previous_parts = [], {}
    for committed, lso in [(9, 10), (9, 10), (9, 10), (9, 11), (9, 11), (11, 11)]:
        parts = {("t", 0): ps("t", 0, lso, lso)}
        groups = derive.group_lags([("g", "t", 0, committed)], parts)
        steady = derive.steady_marker_gaps(groups, parts, previous_groups, previous_parts)
        verdicts = {k: v for k, v in verdicts.items() if k in steady}
        wanted = derive.marker_gaps_to_read(steady, verdicts, 100)
        reads.append(wanted)
        verdicts.update(dict.fromkeys(wanted, True))
        previous_groups, previous_parts = derive.with_marker_gaps(groups, verdicts), parts
    assert reads == [[], [("t", 0, 9, 10)], [], [], [("t", 0, 9, 11)], []]
    assert previous_groups[0].lag_read_committed == 0 and previous_groups[0].marker_offsets == 0


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
    findings = rules.config_findings(rules.PollReading(facts, stall_warning_seconds=60, open_transactions=txns,
                                                         partitions=parts, blocked_groups=groups))
    kinds = [(f.severity, f.kind) for f in findings]
    assert kinds[0][0] == "critical"
    # one live broker below transaction.state.log.min.isr is no finding by itself: what blocks
    # the coordinator is a __transaction_state partition below its own minimum ISR
    assert set(kinds) == {("critical", "past_timeout"), ("warning", "timeout_above_cap"),
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
    f = rules.config_findings(rules.PollReading(ClusterFacts(), stall_warning_seconds=60, open_transactions=[],
                                                  hanging=[h], bootstrap="k1:9092"))
    assert f[0].kind == "hanging" and f[0].severity == "critical"
    assert f[0].message.endswith("abort it (a dry run until --yes is added): "
                                 "txnwatch abort --bootstrap-servers k1:9092 --partition orders:3")


def test_the_abort_command_on_a_secured_cluster_names_the_admin_settings():
    h = HangingTransaction("orders", 0, 7, 0, 5, 950.0, None, "no_transactional_id")
    assert rules.abort_command(h, "k1:9093", secured=True) == "txnwatch abort --config admin.yaml --partition orders:0"


def test_two_phase_commit_transactions_have_no_headroom_and_their_own_finding():
    """KIP-939: timeout Integer.MAX_VALUE, never aborted by the coordinator: no headroom, no
    timeout-above-cap or past-timeout finding; a finding once open beyond the max age."""
    two_pc = desc("xa-1", timeout=2_147_483_647, start=0)
    txns = derive.open_transactions([two_pc, desc("std", start=90_000)], AppResolver(), now_ms=100_000)
    xa = next(t for t in txns if t.transactional_id == "xa-1")
    assert xa.two_phase and xa.headroom_seconds is None and xa.age_seconds == 100
    assert not next(t for t in txns if t.transactional_id == "std").two_phase
    facts = ClusterFacts(transaction_max_timeout_ms=900_000)
    young = rules.config_findings(rules.PollReading(facts, stall_warning_seconds=60, open_transactions=txns,
                                                      two_phase_max_age_seconds=3600))
    assert [f.kind for f in young] == []
    old = rules.config_findings(rules.PollReading(facts, stall_warning_seconds=60, open_transactions=txns,
                                                    two_phase_max_age_seconds=60))
    assert [(f.severity, f.kind) for f in old] == [("warning", "two_phase_open_too_long")]
    assert "xa-1" in old[0].message and "KIP-939" in old[0].message


# ------------------------------------------------------------------ the transaction log's ISR
def log(partition, replicas=(1,), isr=None, leader=None):
    isr = replicas if isr is None else isr
    return PartitionReplicas("__transaction_state", partition, replicas[0] if leader is None else leader,
                             tuple(replicas), tuple(isr))


def test_the_minimum_isr_is_capped_at_the_replica_count():
    """A single node: RF 1, min.insync.replicas 2; transactions commit (no finding)."""
    assert derive.effective_min_isr(2, 1) == 1
    assert derive.effective_min_isr(2, 3) == 2
    assert derive.txn_log_below_min_isr([log(0)], 2) == []
    assert derive.txn_log_below_min_isr([log(0, replicas=(1, 2, 3), isr=(1,))], 2) == \
        [(log(0, replicas=(1, 2, 3), isr=(1,)), 2)]


@pytest.mark.parametrize("isr, below", [((1, 2), False), ((1,), True)])
def test_below_min_isr_boundary(isr, below):
    """An ISR of exactly the minimum takes writes; one fewer does not."""
    p = log(7, replicas=(1, 2, 3), isr=isr)
    assert derive.txn_log_below_min_isr([p], 2) == ([(p, 2)] if below else [])


def test_an_offline_log_partition_is_below_whatever_its_isr_says():
    p = log(3, replicas=(2,), isr=(2,), leader=-1)
    assert derive.txn_log_below_min_isr([p], 1) == [(p, 1)]


def test_the_topics_own_min_isr_wins_over_the_broker_default():
    assert derive.txn_log_min_isr(ClusterFacts(transaction_state_log_min_isr=2)) == 2
    assert derive.txn_log_min_isr(ClusterFacts(transaction_state_log_min_isr=2,
                                               transaction_state_min_insync_replicas=3)) == 3
    assert derive.txn_log_min_isr(ClusterFacts()) is None


def test_min_isr_finding_names_the_partitions_and_the_open_ids_that_hash_to_them():
    n = 5
    blocked = derive.txn_log_partition_of("orders-1", n)
    txn_log = [log(p, replicas=(1, 2, 3), isr=(1,) if p == blocked else (1, 2, 3)) for p in range(n)]
    other = next(f"x-{i}" for i in range(100) if derive.txn_log_partition_of(f"x-{i}", n) != blocked)
    txns = derive.open_transactions([desc("orders-1"), desc(other)], AppResolver(), now_ms=2_000)
    facts = ClusterFacts(brokers=1, transaction_state_min_insync_replicas=2)
    reading = rules.PollReading(facts, stall_warning_seconds=60, open_transactions=txns, txn_log=txn_log)
    (f,) = [f for f in rules.config_findings(reading) if f.kind == "min_isr"]
    assert f.severity == "critical"
    assert f"1 of 5 __transaction_state partition(s) below their minimum ISR: {blocked} (ISR 1 < 2)" in f.message
    assert "orders-1" in f.message and other not in f.message
    healthy = [log(p, replicas=(1, 2, 3)) for p in range(n)]
    reading = rules.PollReading(facts, stall_warning_seconds=60, open_transactions=txns, txn_log=healthy)
    assert not [f for f in rules.config_findings(reading) if f.kind == "min_isr"]


def test_java_string_hash_and_the_coordinator_partition():
    assert derive.java_string_hash("") == 0
    assert derive.java_string_hash("a") == 97
    assert derive.java_string_hash("hello") == 99162322
    assert derive.java_string_hash("polygenelubricants") == -2147483648      # Integer.MIN_VALUE
    assert derive.java_string_hash("\u00e9t\u00e9") == 233 * 31 * 31 + 116 * 31 + 233        # UTF-16 units
    assert derive.java_string_hash("\U0001F600") == 0xD83D * 31 + 0xDE00                   # a surrogate pair
    assert derive.txn_log_partition_of("polygenelubricants", 50) == 0        # Utils.abs(MIN_VALUE) is 0
    assert derive.txn_log_partition_of("hello", 50) == 99162322 % 50


# ------------------------------------------------------------------ degraded partitions and brokers
def test_missing_brokers_are_the_replicas_absent_from_the_metadata():
    parts = [PartitionReplicas("t", 0, -1, (2,), ()), PartitionReplicas("t", 1, 1, (1, 2, 3), (1, 3)),
             log(4, replicas=(2, 3, 1), isr=(3, 1), leader=3)]
    assert derive.missing_brokers(parts, live=[1, 3]) == {2: 3}
    assert derive.missing_brokers(parts, live=[1, 2, 3]) == {}


def test_unavailable_partitions_keep_their_last_state_and_the_rest_is_current():
    prev = {("t", 0): PartitionState("t", 0, 10, 10, 0.0, None), ("t", 1): PartitionState("t", 1, 5, 5, 0.0, None)}
    now = {("t", 1): PartitionState("t", 1, 7, 7, 0.0, None)}
    got = derive.with_unavailable(now, prev, [("t", 0), ("t", 9)])
    assert got == {("t", 0): prev[("t", 0)], ("t", 1): now[("t", 1)]}


def test_unavailable_partitions_and_missing_brokers_are_named_in_findings():
    findings = rules.config_findings(rules.PollReading(
        ClusterFacts(), stall_warning_seconds=60, unavailable={("t", 0): "offline", ("t", 2): "offline", ("u", 1): "timeout"},
        missing_brokers={2: 3}))
    got = {(f.severity, f.kind): f.message for f in findings}
    assert got[("critical", "broker_missing")].startswith("broker(s) 2 absent from the cluster metadata")
    offline = [f.message for f in findings if f.kind == "partition_unavailable" and f.severity == "critical"]
    assert offline == ["2 partition(s) offline (no leader): t-0, t-2; their series keep the last values read, "
                       "the others are current"]
    assert any(f.severity == "warning" and "u-1" in f.message and "timeout" in f.message for f in findings)


@pytest.mark.parametrize("start, past", [(140_000, False), (139_999, True)])
def test_past_timeout_boundary_is_a_negative_headroom(start, past):
    """Headroom exactly 0 is not yet past the timeout; a millisecond less is."""
    txns = derive.open_transactions([desc("t", timeout=60_000, start=start)], AppResolver(), now_ms=200_000)
    reading = rules.PollReading(ClusterFacts(), stall_warning_seconds=60, open_transactions=txns)
    kinds = [f.kind for f in rules.config_findings(reading)]
    assert ("past_timeout" in kinds) is past


def test_groups_whose_coordinator_did_not_answer_keep_their_last_lags_and_are_named():
    prev = [GroupLag("g1", "t", 0, 5, 1, 1), GroupLag("g2", "t", 0, 3, 3, 3)]
    now = [GroupLag("g1", "t", 0, 6, 0, 0)]
    assert derive.with_groups_unavailable(now, prev, {}) == now
    assert derive.with_groups_unavailable(now, prev, {"g2": "timeout"}) == now + [prev[1]]
    reading = rules.PollReading(ClusterFacts(), stall_warning_seconds=60, groups_unavailable={"g2": "timeout"})
    (f,) = [f for f in rules.config_findings(reading) if f.kind == "group_unavailable"]
    assert f.message == ("1 consumer group(s) not read (timeout: their coordinator did not answer): g2; "
                         "their lags are as last read")


# ------------------------------------------------------------------ every condition and boundary, pinned
# (scripts/mutate_rules.py: each test fails when the condition it names is deleted or its boundary moved)
def test_a_caught_up_partition_reports_this_polls_offsets():
    """The LSO is read apart from the HWM, so a write between the two reads shows an LSO past
    the HWM: still caught up, and each poll reports the offsets it read."""
    s1 = derive.partition_states([po("a", 0, 10, 10)], {}, now=100.0)
    s2 = derive.partition_states([po("a", 0, 10, 11)], s1, now=110.0)
    assert (s2[("a", 0)].high_watermark, s2[("a", 0)].last_stable_offset) == (10, 11)
    s3 = derive.partition_states([po("a", 0, 11, 11)], s2, now=120.0)
    assert (s3[("a", 0)].high_watermark, s3[("a", 0)].last_stable_offset) == (11, 11)
    assert s3[("a", 0)].stalled_since is None


def test_the_stall_clock_starts_when_a_caught_up_partition_falls_behind():
    s1 = derive.partition_states([po("a", 0, 10, 10)], {}, now=100.0)
    s2 = derive.partition_states([po("a", 0, 12, 10)], s1, now=130.0)
    assert s2[("a", 0)].stalled_since == 130.0 and s2[("a", 0)].stalled_seconds == 0.0


@pytest.mark.parametrize("ts", [0.0, -0.001])
def test_a_record_timestamp_not_after_the_epoch_is_unknown(ts):
    """Kafka's "no timestamp" is -1 ms: the clock starts at the poll instead."""
    s = derive.partition_states([po("a", 1, 10, 4)], {}, now=100.0, lso_record_ts={("a", 1, 4): ts})
    assert s[("a", 1)].stalled_since == 100.0


def test_the_stall_clock_never_moves_forward():
    """A record timestamp later than the stall already seen (a producer's clock ahead) keeps it."""
    s1 = derive.partition_states([po("a", 1, 10, 4)], {}, now=100.0)
    s2 = derive.partition_states([po("a", 1, 12, 4)], s1, now=130.0, lso_record_ts={("a", 1, 4): 120.0})
    assert s2[("a", 1)].stalled_since == 100.0 and s2[("a", 1)].stalled_seconds == 30.0


def test_group_lag_at_offset_zero_and_past_the_hwm():
    """A committed offset of 0 is a real position; one past the HWM (a truncated log) lags by 0."""
    parts = derive.partition_states([po("t", 0, 100, 60)], {}, now=1.0)
    lags = derive.group_lags([("g", "t", 0, 0), ("h", "t", 0, 120)], parts)
    assert [(g.group, g.lag_read_committed, g.lag_read_uncommitted) for g in lags] == [("g", 60, 100), ("h", 0, 0)]


def test_a_group_is_blocked_only_behind_a_stall_at_least_as_old_as_asked():
    parts = {("t", 0): PartitionState("t", 0, 10, 4, 70.0, 30.0), ("t", 1): PartitionState("t", 1, 10, 10)}
    groups = [GroupLag("g", "t", 0, 4, 0, 6), GroupLag("g", "t", 1, 10, 0, 0), GroupLag("g", "t", 9, 1, 0, 0)]
    assert derive.blocked_groups(groups, parts) == groups[:1]      # t-1 caught up, t-9 unknown
    assert derive.blocked_groups(groups, parts, min_stall_seconds=30.0) == groups[:1]
    assert derive.blocked_groups(groups, parts, min_stall_seconds=30.5) == []


@pytest.mark.parametrize("idle_ms, candidate", [(900_000, False), (900_001, True)])
def test_a_hanging_candidate_is_idle_strictly_longer_than_the_max_timeout(idle_ms, candidate):
    now = 2_000_000
    cands = derive.hanging_candidates([prod("t", 0, 1, now - idle_ms)], max_timeout_ms=900_000, now_ms=now)
    assert bool(cands) is candidate


def test_a_transaction_starting_at_offset_zero_can_hang():
    cands = derive.hanging_candidates([prod("t", 0, 1, 0, start_offset=0)], max_timeout_ms=900_000, now_ms=2_000_000)
    assert [c.txn_start_offset for c in cands] == [0]


def test_the_lso_fallback_names_stalls_from_the_threshold_on_and_only_stalls():
    parts = {("t", 0): PartitionState("t", 0, 10, 4, 0.0, 1200.0), ("t", 1): PartitionState("t", 1, 10, 10)}
    assert [(h.topic, h.partition) for h in derive.lso_hanging(parts, 1200)] == [("t", 0)]
    assert [(h.topic, h.partition) for h in derive.lso_hanging(parts, 0)] == [("t", 0)]


def test_a_configured_hanging_threshold_of_zero_is_used():
    assert derive.hanging_threshold_seconds(ClusterFacts(transaction_max_timeout_ms=60_000), 0, 900_000) == 0


def test_remember_epochs_below_the_limit_forgets_nothing():
    epochs: dict = {}
    derive.remember_epochs(epochs, [desc("a", pid=1), desc("b", pid=2)], limit=10)
    assert epochs == {"a": (1, 0), "b": (2, 0)}


def test_a_partition_without_listed_replicas_needs_the_configured_minimum():
    assert derive.effective_min_isr(2, 0) == 2


def test_this_polls_read_wins_over_the_last_known_state():
    prev = {("t", 0): PartitionState("t", 0, 10, 10)}
    now = {("t", 0): PartitionState("t", 0, 12, 12)}
    assert derive.with_unavailable(now, prev, [("t", 0)]) == now


@pytest.mark.parametrize("n, more", [(5, ""), (6, " and 1 more")])
def test_findings_name_five_and_count_the_rest(n, more):
    reading = rules.PollReading(ClusterFacts(), stall_warning_seconds=60,
                                 unavailable={("t", p): "offline" for p in range(n)})
    (f,) = rules.config_findings(reading)
    named = ", ".join(f"t-{p}" for p in range(5))
    assert f.message.startswith(f"{n} partition(s) offline (no leader): {named}{more};")


@pytest.mark.parametrize("stalled_seconds, named", [(60.0, True), (59.9, False)])
def test_a_stalled_lso_and_its_blocked_groups_are_named_from_the_warning_age_on(stalled_seconds, named):
    parts = {("t", 0): PartitionState("t", 0, 10, 4, 0.0, stalled_seconds)}
    reading = rules.PollReading(ClusterFacts(), stall_warning_seconds=60, partitions=parts,
                                 blocked_groups=[GroupLag("g", "t", 0, 4, 0, 6)])
    kinds = {f.kind for f in rules.config_findings(reading)}
    assert kinds == ({"lso_stalled", "group_blocked"} if named else set())


def test_without_a_warning_age_only_stalled_partitions_are_named():
    parts = {("t", 0): PartitionState("t", 0, 10, 10), ("t", 1): PartitionState("t", 1, 10, 4, 5.0, 0.0)}
    reading = rules.PollReading(ClusterFacts(), stall_warning_seconds=0, partitions=parts)
    assert [f.message.split(" stalled")[0] for f in rules.config_findings(reading)] == ["LSO of t-1"]


def test_a_hanging_transactions_partition_is_not_named_again_as_a_stalled_lso():
    parts = {("t", 0): PartitionState("t", 0, 10, 4, 0.0, 1300.0)}
    hanging = derive.lso_hanging(parts, 1200)
    reading = rules.PollReading(ClusterFacts(), stall_warning_seconds=60, partitions=parts, hanging=hanging)
    assert [f.kind for f in rules.config_findings(reading)] == ["hanging"]


@pytest.mark.parametrize("start, named", [(40_000, False), (39_999, True)])
def test_a_two_phase_transaction_is_named_once_older_than_the_max_age(start, named):
    txns = derive.open_transactions([desc("xa-1", timeout=2_147_483_647, start=start)], AppResolver(), now_ms=100_000)
    reading = rules.PollReading(ClusterFacts(), stall_warning_seconds=60, open_transactions=txns,
                                 two_phase_max_age_seconds=60)
    assert [f.kind for f in rules.config_findings(reading)] == (["two_phase_open_too_long"] if named else [])


def test_open_transactions_of_unknown_start_raise_no_finding():
    txns = derive.open_transactions([desc("xa-1", timeout=2_147_483_647, start=-1), desc("std", start=-1)],
                                    AppResolver(), now_ms=100_000)
    reading = rules.PollReading(ClusterFacts(transaction_max_timeout_ms=900_000), stall_warning_seconds=60,
                                 open_transactions=txns, two_phase_max_age_seconds=0)
    assert rules.config_findings(reading) == []


@pytest.mark.parametrize("timeout, above", [(900_000, False), (900_001, True)])
def test_a_timeout_above_the_cap_is_strictly_above(timeout, above):
    txns = derive.open_transactions([desc("t", timeout=timeout, start=90_000)], AppResolver(), now_ms=100_000)
    reading = rules.PollReading(ClusterFacts(transaction_max_timeout_ms=900_000), stall_warning_seconds=60,
                                 open_transactions=txns)
    assert [f.kind for f in rules.config_findings(reading)] == (["timeout_above_cap"] if above else [])


def test_only_stalled_partitions_whose_leader_answered_are_asked_for_hanging_producers():
    parts = {("t", 1): PartitionState("t", 1, 10, 4, 0.0, 5.0), ("t", 0): PartitionState("t", 0, 10, 4, 0.0, 5.0),
             ("t", 2): PartitionState("t", 2, 10, 10), ("t", 3): PartitionState("t", 3, 10, 4, 0.0, 5.0)}
    assert derive.hanging_may_hold(parts, {("t", 3): "timeout"}) == [("t", 0), ("t", 1)]


def test_an_unknown_minimum_isr_asks_only_for_a_leader():
    """Neither the topic's nor the broker's min ISR reported: one replica in sync (the leader)
    takes the coordinator's writes as far as we can tell."""
    p = log(0, replicas=(1, 2, 3), isr=(1,))
    assert derive.txn_log_below_min_isr([p], None) == []
