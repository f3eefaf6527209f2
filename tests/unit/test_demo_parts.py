"""The demo's pure parts: payments, the outbox sink's parsing and idempotent apply, the
Streams launcher's output parsing and compile stamp, the fault schedule, the status line,
the page's "blocked by" for consumer groups, and the remediation step's timing, commands and
words."""

from __future__ import annotations

import json
import random
import sqlite3
import subprocess
import time

import pytest

from txnwatch.exporter.model import (
    ClusterSnapshot,
    GroupLag,
    HangingTransaction,
    OpenTransaction,
    PartitionState,
)
from txnwatch.exporter.serve.page import blocked_by, group_rows
from txnwatch_dev.demo.fault_plan import Fault, fault_schedule, next_payment
from txnwatch_dev.demo.outbox import SCHEMA, Alert, apply_alerts, parse_alert
from txnwatch_dev.demo.remediation import (
    HeldFor,
    abort_argv,
    dry_run_lines,
    ended_line,
    exporter_shows,
    failure,
    find_made,
    group_past,
    others_than,
    pages_firing,
    parse_report,
    result_on,
    shown,
)
from txnwatch_dev.demo.status import outbox_status, status_line
from txnwatch_dev.demo.streams_output import process_id_from_output, restores_from_output
from txnwatch_dev.kafka.release import KafkaRelease, source_digest
from txnwatch_dev.observability.scrape import Metrics, parse_metrics

UUID = "0caabf0e-8f20-4d31-8580-ce4c1bedecb5"


# ------------------------------------------------------------------ load
def test_payments_keep_balances_within_bounds_and_open_with_a_deposit():
    rng = random.Random(7)
    opening = next_payment(None, rng)
    assert 300 <= opening <= 700
    balance = opening
    for _ in range(5000):
        balance += next_payment(balance, rng)
        assert -1e-6 <= balance <= 1000 + 1e-6
    above = 0
    for _ in range(2000):   # the walk keeps going above the Streams app's 600 threshold
        balance += next_payment(balance, rng)
        above += balance >= 600
    assert 0 < above < 2000


# ------------------------------------------------------------------ outbox
def test_parse_alert_takes_alert_objects_only():
    a = parse_alert(b'{"alert_id": "account-1:7", "account": "account-1", "balance": 812.5, "kind": "high_balance"}')
    assert a == Alert("account-1:7", "account-1", 812.5, "high_balance")
    for bad in (None, b"", b"not json", b"[1]", b'{"account": "x"}', b'{"alert_id": ""}', b'{"alert_id": 3}',
                b"\xff\xfe"):
        assert parse_alert(bad) is None, bad


def test_apply_alerts_is_idempotent_by_alert_id():
    db = sqlite3.connect(":memory:")
    db.execute(SCHEMA)
    a1, a2 = Alert("account-1:7", "account-1", 812.5, "high_balance"), Alert("account-2:3", "account-2", 640, None)
    assert apply_alerts(db, [(a1, "alert-outbox", 0, 10), (a2, "alert-outbox", 1, 4)]) == (2, 0)
    # a re-read after a crash between the SQLite commit and the offset commit changes nothing
    assert apply_alerts(db, [(a1, "alert-outbox", 0, 10), (a2, "alert-outbox", 1, 4)]) == (0, 2)
    assert db.execute("SELECT alert_id, partition, offset FROM alerts ORDER BY alert_id").fetchall() == [
        ("account-1:7", 0, 10), ("account-2:3", 1, 4)]
    # stamped when applied, once: the re-read did not move the stamp
    [(first, last)] = db.execute("SELECT min(applied_at), max(applied_at) FROM alerts").fetchall()
    assert first == last and abs(first - time.time()) < 60


# ------------------------------------------------------------------ Streams launcher
def test_process_id_from_the_apps_running_line():
    out = ("state REBALANCING from CREATED\nstate RUNNING from REBALANCING\n"
           f"running thread=balance-app-{UUID}-StreamThread-1 producers=[balance-app-{UUID}-StreamThread-1-producer]\n")
    assert process_id_from_output(out, "balance-app") == (UUID, 1)
    assert process_id_from_output("state REBALANCING from CREATED\n", "balance-app") is None
    # a client.id that is not <application.id>-<uuid> (set by hand) gives no process id
    assert process_id_from_output("running thread=my-client-StreamThread-1 producers=[]\n", "balance-app") is None
    # the last instance wins (the log file is appended across restarts)
    other = UUID.replace("0caabf0e", "11111111")
    assert process_id_from_output(out + f"running thread=balance-app-{other}-StreamThread-2 x\n",
                                  "balance-app") == (other, 2)


def test_compile_stamp_changes_with_source_release_and_compiler():
    rel = KafkaRelease("4.4.0", "/usr/bin/java")
    d = source_digest("class A {}", rel, "/usr/bin/javac")
    assert d == source_digest("class A {}", rel, "/usr/bin/javac")
    assert d != source_digest("class B {}", rel, "/usr/bin/javac")
    assert d != source_digest("class A {}", KafkaRelease("3.9.2", "/usr/bin/java"), "/usr/bin/javac")
    assert d != source_digest("class A {}", rel, "/opt/jdk/bin/javac")


# ------------------------------------------------------------------ faults
def test_fault_schedule_cycles_and_runs_once_faults_once():
    f = [Fault("hanging", lambda: "", once=True), Fault("fence", lambda: ""), Fault("aborts", lambda: "")]
    got = []
    for fault in fault_schedule(f):
        got.append(fault.name)
        if len(got) == 7:
            break
    assert got == ["hanging", "fence", "aborts", "fence", "aborts", "fence", "aborts"]
    assert [x.name for x in fault_schedule([Fault("only", lambda: "", once=True)])] == ["only"]


# ------------------------------------------------------------------ status line
METRICS = """
# TYPE txnwatch_up gauge
txnwatch_up{kafka_cluster="demo",source="poller"} 1
txnwatch_up{kafka_cluster="demo",source="tap"} 1
# TYPE kafka_transaction_hanging gauge
kafka_transaction_hanging{kafka_cluster="demo",topic="alert-outbox",partition="0"} 1
kafka_transaction_hanging{kafka_cluster="demo",topic="alert-outbox",partition="1"} 0
# TYPE kafka_transaction_timeout_headroom_seconds gauge
kafka_transaction_timeout_headroom_seconds{kafka_cluster="demo",app="settlement-batch",transactional_id="settlement-batch-0"} 4.2
kafka_transaction_timeout_headroom_seconds{kafka_cluster="demo",app="balance-app",transactional_id="balance-app-x-1"} 9.9
# TYPE kafka_transactions counter
kafka_transactions_total{kafka_cluster="demo",app="balance-app",outcome="committed"} 120
kafka_transactions_total{kafka_cluster="demo",app="refunds-writer",outcome="committed"} 2
kafka_transactions_total{kafka_cluster="demo",app="balance-app",outcome="aborted"} 1
kafka_transactions_total{kafka_cluster="demo",app="invoice-writer",outcome="aborted"} 2
# TYPE kafka_transaction_fencing_events counter
kafka_transaction_fencing_events_total{kafka_cluster="demo",app="refunds-writer",reason="new_instance"} 1
kafka_transaction_fencing_events_total{kafka_cluster="demo",app="balance-app",reason="timeout"} 1
kafka_transaction_fencing_events_total{kafka_cluster="demo",app="invoice-writer",reason="timeout"} 2
# TYPE kafka_transactional_id_reinitializations counter
kafka_transactional_id_reinitializations_total{kafka_cluster="demo",app="balance-app"} 4
# TYPE kafka_transaction_timeouts counter
kafka_transaction_timeouts_total{kafka_cluster="demo",app="invoice-writer"} 2
kafka_transaction_timeouts_total{kafka_cluster="demo",app="balance-app"} 1
# TYPE kafka_producer_transaction_errors counter
kafka_producer_transaction_errors_total{app="refunds-writer",error="_FENCED"} 1
kafka_producer_transaction_errors_total{app="payments-retrier",error="_APPLICATION"} 20
# TYPE kafka_producer_transactions counter
kafka_producer_transactions_total{app="payments-retrier",outcome="aborted"} 20
# TYPE kafka_consumergroup_read_committed_lag_offsets gauge
kafka_consumergroup_read_committed_lag_offsets{kafka_cluster="demo",group="alert-outbox-sink",topic="alert-outbox",partition="0"} 0
kafka_consumergroup_read_committed_lag_offsets{kafka_cluster="demo",group="alert-outbox-sink",topic="alert-outbox",partition="1"} 1
# TYPE kafka_consumergroup_read_uncommitted_lag_offsets gauge
kafka_consumergroup_read_uncommitted_lag_offsets{kafka_cluster="demo",group="alert-outbox-sink",topic="alert-outbox",partition="0"} 57
kafka_consumergroup_read_uncommitted_lag_offsets{kafka_cluster="demo",group="alert-outbox-sink",topic="alert-outbox",partition="1"} 1
# TYPE spark_streaming_batch_id gauge
spark_streaming_batch_id{query="orders-totals",query_id="q"} 7
# TYPE txnwatch_canary_rounds_total counter
txnwatch_canary_rounds_total{kafka_cluster="demo",outcome="committed"} 12
txnwatch_canary_rounds_total{kafka_cluster="demo",outcome="aborted"} 2
# TYPE txnwatch_canary_failures_total counter
txnwatch_canary_failures_total{kafka_cluster="demo",stage="init",error="COORDINATOR_NOT_AVAILABLE"} 1
# TYPE txnwatch_canary_visibility_violations_total counter
txnwatch_canary_visibility_violations_total{kafka_cluster="demo"} 0
"""


def test_status_line_shows_the_coordinators_view_and_the_blocked_outbox():
    line = status_line(Metrics(parse_metrics(METRICS)), "KafkaTransactionHanging", "alert-outbox-sink")
    assert line == (
        "poller up | hanging 1 | open txns 2 (min headroom 4s) | tap: commits 122 aborts 3 fences new_instance 1 "
        "timeout 3 re-inits 4 coordinator timeouts 3 | client: aborts 20 fenced 1 | canary: committed 12 aborted 2 failures 1 "
        "aborted seen 0 | outbox alert-outbox-sink: lag 1 vs LSO, "
        "58 vs HWM, blocked by a hanging transaction on alert-outbox-0 | spark batch 7 | "
        "alerts firing: KafkaTransactionHanging")


def test_outbox_status_without_offsets_or_hanging():
    assert outbox_status(Metrics(), "g") == "outbox g: no committed offsets yet"
    text = METRICS.replace('partition="0"} 1\n', 'partition="0"} 0\n')
    assert outbox_status(Metrics(parse_metrics(text)), "alert-outbox-sink").endswith(
        "behind an open transaction on alert-outbox-0")


def test_status_line_without_tap_falls_back_to_lso_stall():
    m = Metrics(parse_metrics('# TYPE kafka_partition_lso_stalled_seconds gauge\n'
                              'kafka_partition_lso_stalled_seconds{kafka_cluster="demo",topic="t",partition="0"} 33\n'))
    line = status_line(m)
    assert "poller DOWN" in line and "max LSO stall 33s" in line and "tap:" not in line and "outbox" not in line


# ------------------------------------------------------------------ page: blocked by
def _txn(tid: str, *tps) -> OpenTransaction:
    return OpenTransaction(tid, "app", 1, 0, "Ongoing", 0, 10_000, tuple(tps), 3.0, 7.0)


@pytest.mark.parametrize(("lag_rc", "lag_ru", "hanging", "txns", "stalled", "want"), [
    (0, 0, False, [], False, ""),                      # caught up
    (3, 3, False, [], False, ""),                      # behind, but all of it readable (LSO = HWM)
    (0, 57, True, [_txn("x", ("t", 0))], True,
     "hanging transaction at offset 40 (producer id 9, transactional id late-0, open 2.0m)"),
    (0, 5, False, [_txn("b", ("t", 0)), _txn("a", ("t", 0)), _txn("c", ("t", 1))], True,
     "open transaction of a, b (LSO stalled 12s)"),
    (0, 5, False, [], True, "an open transaction (LSO stalled 12s)"),
    (0, 5, False, [], False, "an open transaction"),
])
def test_blocked_by_names_what_holds_the_lso(lag_rc, lag_ru, hanging, txns, stalled, want):
    g = GroupLag("sink", "t", 0, 100, lag_rc, lag_ru)
    p = PartitionState("t", 0, 157, 100, 1000.0 if stalled else None, 12.0 if stalled else 0.0)
    h = {("t", 0): HangingTransaction("t", 0, 9, 0, 40, 120.0, "late-0", "coordinator_not_open")} if hanging else {}
    assert blocked_by(g, p, h, txns) == want


def test_group_rows_puts_blocked_groups_first_and_counts_the_caught_up():
    parts = {("t", 0): PartitionState("t", 0, 157, 100, 1000.0, 30.0), ("t", 1): PartitionState("t", 1, 90, 90)}
    snap = ClusterSnapshot("demo", 0.0, 0.1, partitions=parts, groups=(
        GroupLag("big", "t", 1, 10, 80, 80), GroupLag("sink", "t", 0, 100, 0, 57), GroupLag("done", "t", 1, 90, 0, 0)),
        hanging=(HangingTransaction("t", 0, 9, 0, 100, 30.0, None, "no_transactional_id"),))
    rows, caught_up = group_rows(snap)
    assert [(g.group, why.split(" (")[0]) for g, why in rows] == [
        ("sink", "hanging transaction at offset 100"), ("big", "")]
    assert caught_up == 1


def test_status_line_names_spark_offsets_behind_and_a_blocked_partition():
    text = METRICS + (
        '# TYPE spark_streaming_source_partition_behind_latest_offsets gauge\n'
        'spark_streaming_source_partition_behind_latest_offsets{query="orders-totals",query_id="q",source="s",'
        'topic="demo.orders",partition="0"} 40\n'
        'spark_streaming_source_partition_behind_latest_offsets{query="orders-totals",query_id="q",source="s",'
        'topic="demo.orders",partition="1"} 2\n'
        '# TYPE spark_streaming_source_blocked_seconds gauge\n'
        'spark_streaming_source_blocked_seconds{kafka_cluster="demo",query="orders-totals",query_id="q",'
        'topic="demo.orders",partition="1"} 95\n')
    line = status_line(Metrics(parse_metrics(text)))
    assert "| spark batch 7, 42 offsets behind, BLOCKED by an open transaction on demo.orders-1 |" in line


def test_restores_from_the_apps_output():
    out = ("restore balances balance-app-balances-changelog-0 from 1201 to 1202\n"
           "restore balances balance-app-balances-changelog-1 from 0 to 1142\n"
           "restored balances balance-app-balances-changelog-0 records=0\n")
    assert restores_from_output(out) == [("balance-app-balances-changelog-0", 1, 0),
                                         ("balance-app-balances-changelog-1", 1142, -1)]
    assert restores_from_output("state RUNNING from REBALANCING\n") == []


# ------------------------------------------------------------------ remediation
def test_held_for_counts_from_the_first_sight_and_restarts_after_a_break():
    held = HeldFor()
    assert held.update(False, 100.0) == 0
    assert held.update(True, 102.0) == 0
    assert held.update(True, 131.5) == 29.5
    assert held.update(False, 133.0) == 0          # a break: counted again from the next sight
    assert held.update(True, 140.0) == 0 and held.update(True, 150.0) == 10


def _alert(name: str, state: str = "firing", **labels: str) -> dict:
    return {"labels": {"alertname": name, **labels}, "state": state}


def test_pages_firing_needs_both_pages_on_the_outbox_partition():
    hanging = _alert("KafkaTransactionHanging", topic="alert-outbox", partition="1", signal="hanging")
    blocked = _alert("KafkaReadCommittedConsumerBlocked", group="alert-outbox-sink", topic="alert-outbox",
                     partition="1")
    assert pages_firing([hanging, blocked], "alert-outbox", 1, "alert-outbox-sink")
    assert not pages_firing([hanging], "alert-outbox", 1, "alert-outbox-sink")
    assert pages_firing([hanging], "alert-outbox", 1, None)            # no group reads it: one page
    assert not pages_firing([hanging, blocked], "alert-outbox", 0, "alert-outbox-sink")
    assert not pages_firing([{**hanging, "state": "pending"}, blocked], "alert-outbox", 1, "alert-outbox-sink")
    other_app = _alert("KafkaTransactionHanging", app="invoice-writer", signal="past_timeout")
    assert not pages_firing([other_app, blocked], "alert-outbox", 1, "alert-outbox-sink")


def test_exporter_shows_the_hanging_transaction_and_the_group_behind_it():
    m = Metrics(parse_metrics(METRICS))
    assert exporter_shows(m, "alert-outbox", 0, "alert-outbox-sink")
    assert exporter_shows(m, "alert-outbox", 0, None)
    assert not exporter_shows(m, "alert-outbox", 1, None)              # not hanging there
    assert not exporter_shows(m, "alert-outbox", 0, "another-group")   # no such group on it
    caught_up = METRICS.replace('partition="0"} 57', 'partition="0"} 0')
    assert not exporter_shows(Metrics(parse_metrics(caught_up)), "alert-outbox", 0, "alert-outbox-sink")


def test_group_past_reads_the_committed_offset():
    m = Metrics(parse_metrics('# TYPE kafka_consumergroup_committed_offset gauge\n'
                              'kafka_consumergroup_committed_offset{kafka_cluster="demo",group="g",topic="t",'
                              'partition="1"} 41\n'))
    assert group_past(m, "g", "t", 1, 40) and not group_past(m, "g", "t", 1, 41)
    assert not group_past(m, "g", "t", 0, 0) and not group_past(m, "h", "t", 1, 0)


def test_abort_argv_is_the_dry_run_then_the_same_with_yes():
    dry = abort_argv("/v/bin/txnwatch", "b:9092", ["--hanging"])
    assert dry == ["/v/bin/txnwatch", "abort", "--bootstrap-servers", "b:9092", "--hanging", "--output", "json"]
    act = abort_argv("/v/bin/txnwatch", "b:9092", ["--hanging"], audit_log="/s/abort-audit.jsonl")
    assert act == dry[:-2] + ["--yes", "--audit-log", "/s/abort-audit.jsonl", "--output", "json"]
    assert shown(act) == "/v/bin/txnwatch abort --bootstrap-servers b:9092 --hanging --yes --audit-log " \
                         "/s/abort-audit.jsonl"
    assert abort_argv("t", "b", ["--transactional-id", "x"], audit_log="a", wait_seconds=5)[-4:] == [
        "--wait-seconds", "5", "--output", "json"]


# `txnwatch abort --hanging --output json` as a real run printed it (Kafka 4.4), plus one more
def _report(results: list[dict] | None = None, other: bool = False) -> dict:
    demo = {
        "transactional_id": "outbox-late-writer-0", "app": "outbox-late-writer", "producer_id": 7,
        "producer_epoch": 0, "hanging_reason": "coordinator_not_open", "age_seconds": 95.2,
        "liveness": "its coordinator holds no open transaction for it (outbox-late-writer-0 is Empty); its last "
                    "write 95s ago",
        "partitions": [{"topic": "alert-outbox", "partition": 1, "start_offset": 40, "last_stable_offset": 40,
                        "high_watermark": 97, "holds_lso": True, "stalled_seconds": 95.2,
                        "read_committed_groups": [{"group": "alert-outbox-sink", "committed": 40, "lag_lso": 0,
                                                   "lag_hwm": 57}]}],
        "discards": ["alert-outbox-1: this transaction's records from offset 40 (at most 57 offsets, up to the "
                     "HWM 97)"],
        "producer_next": "nothing: the producer that opened it is gone", "verdict": "abort", "risks": [],
        "refused": []}
    if results is not None:
        demo["results"] = results
    txns = [demo]
    if other:
        txns.insert(0, {**demo, "transactional_id": "someone-else", "producer_id": 3,
                        "partitions": [{**demo["partitions"][0], "topic": "orders"}]})
    return {"cluster": "default", "dry_run": results is None, "transactions": txns}


def test_find_made_picks_the_demos_transaction_by_producer_id_and_partition():
    report = _report(other=True)
    assert find_made(report, 7, "alert-outbox", 1) is report["transactions"][1]
    assert find_made(report, 7, "alert-outbox", 0) is None and find_made(report, 8, "alert-outbox", 1) is None
    assert others_than(report, report["transactions"][1]) == ["someone-else"]
    alone = _report()
    assert others_than(alone, alone["transactions"][0]) == []


def test_dry_run_lines_say_what_it_found_who_waits_and_what_it_discards():
    report = _report()
    assert dry_run_lines(report, report["transactions"][0]) == [
        "the dry run found 1 hanging transaction(s); the demo's: transactional id outbox-late-writer-0 (app "
        "outbox-late-writer), producer id 7, epoch 0, hanging (coordinator_not_open); its coordinator holds no open "
        "transaction for it (outbox-late-writer-0 is Empty); its last write 95s ago",
        "it holds alert-outbox-1 from offset 40: LSO 40, HWM 97, stalled 95s",
        "who waits: read_committed group alert-outbox-sink at offset 40 (lag 0 vs LSO, 57 vs HWM)",
        "the abort discards: alert-outbox-1: this transaction's records from offset 40 (at most 57 offsets, up to "
        "the HWM 97)",
        "verdict: will abort"]
    refused = {**report["transactions"][0], "verdict": "refused", "refused": [{"words": "a live transaction"}],
               "partitions": [{**report["transactions"][0]["partitions"][0], "read_committed_groups": [],
                               "stalled_seconds": None}]}
    lines = dry_run_lines(report, refused)
    assert lines[1] == "it holds alert-outbox-1 from offset 40: LSO 40, HWM 97"
    assert lines[2] == "who waits: no read_committed group" and lines[-1] == "verdict: REFUSED: a live transaction"


def test_the_acting_runs_result_and_the_line_the_demo_says():
    result = {"topic": "alert-outbox", "partition": 1, "outcome": "aborted", "error": None, "lso_after": 98,
              "groups_moving": ["alert-outbox-sink"], "groups_still": []}
    txn = find_made(_report([result]), 7, "alert-outbox", 1)
    assert result_on(txn, "alert-outbox", 1) == result
    assert result_on(txn, "alert-outbox", 0) is None and result_on(None, "alert-outbox", 1) is None
    assert ended_line("alert-outbox", 1, 40, 98, "alert-outbox-sink", True) == (
        "txnwatch abort ended the hanging transaction on alert-outbox-1 at offset 40: LSO now 98; outbox group "
        "alert-outbox-sink moving again")
    assert ended_line("alert-outbox", 1, 40, None, "alert-outbox-sink", False).endswith(
        "LSO now -; outbox group alert-outbox-sink has not moved yet")
    assert ended_line("demo.settlements", 0, 5, 9, None, False).endswith("at offset 5: LSO now 9")


def test_parse_report_and_the_commands_last_words():
    ok = subprocess.CompletedProcess([], 0, json.dumps(_report()), "audit: {}\n")
    assert parse_report(ok) == _report()
    bad = subprocess.CompletedProcess([], 2, "", "txnwatch abort: cannot read cluster default (unreachable): "
                                                 "no broker\naudit: {}\n")
    assert parse_report(bad) is None
    assert failure(bad) == "exit 2: txnwatch abort: cannot read cluster default (unreachable): no broker"
    assert failure(subprocess.CompletedProcess([], -15, "{not json", "")) == "exit -15"
    assert parse_report(subprocess.CompletedProcess([], -15, "{not json", "")) is None
