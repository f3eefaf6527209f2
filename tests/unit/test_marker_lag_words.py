"""A read_committed lag taken to 0 because only transaction markers lie below the LSO, as the
page and `txnwatch check` tell it (pure: snapshots in, text out)."""

from txnwatch.check import format_text, summarize
from txnwatch.exporter.model import ClusterSnapshot, GroupLag, OpenTransaction, PartitionState
from txnwatch.exporter.serve.page import blocked_by, group_note
from txnwatch_dev.demo.status import outbox_status
from txnwatch_dev.observability.scrape import Metrics, parse_metrics

NOTE = "lag 0: only transaction markers between the committed offset and the LSO"


def test_a_gap_of_markers_is_not_blocked_and_says_why():
    g = GroupLag("reader", "t", 0, 9, 0, 1, marker_offsets=1)
    p = PartitionState("t", 0, 10, 10)
    assert blocked_by(g, p, {}, ()) == ""
    assert group_note(g, "") == f"not blocked; {NOTE}"
    assert group_note(GroupLag("other", "t", 0, 8, 2, 2), "") == "not blocked"


def test_markers_below_an_open_transaction_are_still_blocked_by_it():
    g = GroupLag("reader", "t", 0, 2, 0, 4, marker_offsets=1)          # LSO 3, HWM 6
    p = PartitionState("t", 0, 6, 3, 1000.0, 12.0)
    txn = OpenTransaction("writer-0", "writer", 5, 0, "Ongoing", 1, 60_000, (("t", 0),), 12.0, 48.0)
    why = blocked_by(g, p, {}, [txn])
    assert why == "open transaction of writer-0 (LSO stalled 12s)"
    assert group_note(g, why) == f"open transaction of writer-0 (LSO stalled 12s); {NOTE}"


def test_check_names_each_group_partition_whose_lag_is_markers_only():
    snap = ClusterSnapshot("c", 0.0, 0.1, partitions={("t", 0): PartitionState("t", 0, 10, 10)}, groups=(
        GroupLag("reader", "t", 0, 9, 0, 1, marker_offsets=1), GroupLag("late", "t", 0, 9, 1, 1)))
    result = summarize(snap)
    assert result["marker_lags"] == [{"group": "reader", "topic": "t", "partition": 0, "committed": 9,
                                      "lso": 10, "note": NOTE}]
    assert result["status"] == "ok"
    assert f"  reader on t-0 (committed 9, LSO 10): {NOTE}" in format_text([{**result, "login": None}])



def lags_text(rc: int, ru: int, lso_lag: int) -> str:
    at = 'kafka_cluster="demo",topic="t",partition="0"'
    return (f"# TYPE kafka_consumergroup_read_committed_lag_offsets gauge\n"
            f'kafka_consumergroup_read_committed_lag_offsets{{group="g",{at}}} {rc}\n'
            f"# TYPE kafka_consumergroup_read_uncommitted_lag_offsets gauge\n"
            f'kafka_consumergroup_read_uncommitted_lag_offsets{{group="g",{at}}} {ru}\n'
            f"# TYPE kafka_partition_lso_lag_offsets gauge\n"
            f"kafka_partition_lso_lag_offsets{{{at}}} {lso_lag}\n")


def test_the_demo_status_does_not_take_markers_for_an_open_transaction():
    def status(rc: int, ru: int, lso_lag: int) -> str:
        return outbox_status(Metrics(parse_metrics(lags_text(rc, ru, lso_lag))), "g")
    assert status(0, 1, 0) == "outbox g: lag 0 vs LSO, 1 vs HWM, not blocked"
    assert status(0, 3, 3) == "outbox g: lag 0 vs LSO, 3 vs HWM, behind an open transaction on t-0"
