"""Alive or stuck: the time since an open transaction's coordinator state last changed (the
tap from the log's last update, the poller from what its polls saw), its producer's last
append (DescribeProducers), and the words the page, `txnwatch check` and the alert make of
them. Pure histories with explicit clocks."""

from __future__ import annotations

from types import MappingProxyType

import pytest

from txnwatch.alerts.config import AlertConfig
from txnwatch.alerts.rules import rule_groups
from txnwatch.apps import AppResolver, fold_ids
from txnwatch.check import format_text, summarize
from txnwatch.exporter.model import ClusterSnapshot, PartitionState, sign_of_life
from txnwatch.exporter.poll import derive
from txnwatch.exporter.poll.render import render_snapshot
from txnwatch.exporter.runtime.published import digest_of
from txnwatch.exporter.serve.collector import ExporterCollector
from txnwatch.exporter.serve.page import liveness_cell
from txnwatch.exporter.tap.decoder import TxnLogValue, TxnStatus
from txnwatch.exporter.tap.render import render_tap
from txnwatch.exporter.tap.state import TapView, TxnLogState
from txnwatch.kafka.answers import ActiveProducer, TxnDescription
from txnwatch.metrics import ALIVE_WITHIN_SECONDS
from txnwatch_dev.observability.scrape import Metrics, parse_metrics

E, ON, PC, CC = 0, 1, 2, 4
T0 = 1_700_000_000_000  # ms
UNCHANGED = "kafka_transaction_state_unchanged_seconds"
APPENDED = "kafka_transaction_last_append_age_seconds"


def scrape(render) -> Metrics:
    return Metrics(parse_metrics(ExporterCollector([("s", render)]).exposition(openmetrics=False).decode()))


# ---------------------------------------------------------------- the tap: the log's last update
def value(status, *, start=-1, last, parts=(("orders", (0,)),), pid=1000, epoch=0):
    return TxnLogValue(0, pid, epoch, 600_000, TxnStatus(status), parts if status in (ON, PC) else None,
                       last, start)


def test_the_tap_keeps_the_coordinators_last_change_of_each_open_transaction():
    st = TxnLogState(AppResolver())
    history = [value(E, last=T0 - 100),
               value(ON, start=T0, last=T0),
               value(ON, start=T0, last=T0 + 5_000, parts=(("orders", (0, 1)),))]   # a partition added
    for v in history:
        st.apply("orders-1", v, v.last_update_ms, v.last_update_ms, counting=True)
    (t,) = st.open_transactions()
    assert (t.start_ms, t.last_update_ms) == (T0, T0 + 5_000)
    # records appended to orders-0 and orders-1 change nothing in the log: the clock runs on
    m = scrape(lambda w: render_tap(w, "c1", st.view(), now=(T0 + 65_000) / 1000))
    assert m.get_value(UNCHANGED, app="orders", transactional_id="orders-1") == 60.0
    v = value(PC, start=T0, last=T0 + 70_000, parts=(("orders", (0, 1)),))
    st.apply("orders-1", v, v.last_update_ms, v.last_update_ms, counting=True)
    m = scrape(lambda w: render_tap(w, "c1", st.view(), now=(T0 + 71_000) / 1000))
    assert m.get_value(UNCHANGED, transactional_id="orders-1") == 1.0
    v = value(CC, start=T0, last=T0 + 70_050)
    st.apply("orders-1", v, v.last_update_ms, v.last_update_ms, counting=True)
    assert st.open_transactions() == ()
    assert scrape(lambda w: render_tap(w, "c1", st.view(), now=(T0 + 72_000) / 1000)).select(UNCHANGED) == []


def test_the_taps_series_keep_the_longest_unchanged_under_the_id_cap():
    st = TxnLogState(AppResolver())
    for i, last in enumerate((T0, T0 + 10_000, T0 + 20_000)):
        st.apply(f"orders-{i}", value(ON, start=T0, last=last), last, last, counting=True)
    w_folded = {}

    def render(w):
        w_folded.update(render_tap(w, "c1", st.view(), now=(T0 + 60_000) / 1000, cap=1))
    m = scrape(render)
    assert {lbl["transactional_id"]: v for lbl, v in m.select(UNCHANGED)} == {"orders-0": 60.0, "__other__": 50.0}
    assert w_folded[UNCHANGED] == 2


def test_fold_ids_keeps_the_highest_when_asked():
    kept, n = fold_ids([("a", "1", 5.0), ("a", "2", 1.0), ("b", "3", 3.0), ("b", "4", 4.0)], cap=1, highest=True)
    assert n == 3 and kept == [("a", "1", 5.0), ("b", "__other__", 4.0), ("a", "__other__", 1.0)]


# ---------------------------------------------------------------- the poller: what its polls saw
def desc(state="Ongoing", *, start=T0, parts=(("t", 0),), pid=7, epoch=0, tid="orders-1"):
    return TxnDescription(tid, state, pid, epoch, 600_000, start, frozenset(parts))


def test_a_transaction_first_seen_counts_from_its_start_then_from_each_change_a_poll_sees():
    seen = derive.state_since({}, [desc()], T0 + 30_000)
    assert seen["orders-1"].since_ms == T0                       # first sight: its start
    seen = derive.state_since(seen, [desc()], T0 + 60_000)
    assert seen["orders-1"].since_ms == T0                       # unchanged
    seen = derive.state_since(seen, [desc(parts=(("t", 0), ("t", 1)))], T0 + 90_000)
    assert seen["orders-1"].since_ms == T0 + 90_000              # a partition added: seen now
    seen = derive.state_since(seen, [desc("PrepareCommit", parts=(("t", 0), ("t", 1)))], T0 + 120_000)
    assert seen["orders-1"].since_ms == T0 + 120_000             # preparing
    seen = derive.state_since(seen, [desc("PrepareCommit", parts=(("t", 0), ("t", 1)), epoch=1)], T0 + 150_000)
    assert seen["orders-1"].since_ms == T0 + 150_000             # the epoch moved


def test_the_poller_forgets_ids_no_longer_open_and_a_new_transaction_counts_from_its_start():
    seen = derive.state_since({}, [desc(), desc(tid="orders-2")], T0 + 30_000)
    seen = derive.state_since(seen, [desc("CompleteCommit"), desc(tid="orders-2")], T0 + 60_000)
    assert set(seen) == {"orders-2"}
    # orders-2 committed and began again between two polls: its new start, not this poll
    seen = derive.state_since(seen, [desc(tid="orders-2", start=T0 + 70_000)], T0 + 90_000)
    assert seen["orders-2"].since_ms == T0 + 70_000


@pytest.mark.parametrize("start", [-1, T0 + 10_000])
def test_an_unknown_start_or_one_ahead_of_the_pollers_clock_counts_from_now(start):
    assert derive.state_since({}, [desc(start=start)], T0)["orders-1"].since_ms == T0


def prod(topic, partition, pid, last_ms, txn_start_offset=5):
    return ActiveProducer(topic, partition, pid, 0, last_ms, 0, txn_start_offset)


def test_the_last_append_is_the_newest_of_the_producer_on_the_transactions_partitions():
    producers = [prod("t", 0, 7, T0 + 1_000), prod("t", 1, 7, T0 + 9_000),
                 prod("t", 2, 7, T0 + 20_000),                      # not in its transaction
                 prod("t", 0, 8, T0 + 30_000),                      # another producer
                 prod("t", 1, 7, T0 + 40_000, txn_start_offset=-1)]  # no transaction of it open there
    assert derive.last_appends([desc(parts=(("t", 0), ("t", 1)))], producers) == {"orders-1": T0 + 9_000}
    assert derive.last_appends([desc(parts=(("u", 0),))], producers) == {}
    assert derive.last_appends([desc("CompleteCommit")], producers) == {}


def test_open_transactions_carry_both_clocks():
    d = [desc(parts=(("t", 0),)), desc(tid="orders-2", pid=8, parts=(("t", 1),))]
    now = T0 + 600_000
    seen = derive.state_since({}, d, now)
    appended = derive.last_appends(d, [prod("t", 0, 7, now - 2_000), prod("t", 1, 8, now - 300_000)])
    by_id = {t.transactional_id: t for t in derive.open_transactions(d, AppResolver(), now, seen, appended)}
    streaming, silent = by_id["orders-1"], by_id["orders-2"]
    assert (streaming.state_unchanged_seconds, streaming.last_append_age_seconds) == (600.0, 2.0)
    assert streaming.last_sign_of_life_seconds == 2.0
    assert streaming.liveness() == "alive, slow (last sign of life 2s ago)"
    assert silent.last_sign_of_life_seconds == 300.0
    assert silent.liveness() == "no sign of life for 300s"
    # without either clock nothing is said
    (bare,) = derive.open_transactions(d[:1], AppResolver(), now)
    assert bare.last_sign_of_life_seconds is None and bare.liveness() == ""


def test_the_words_and_their_threshold():
    assert sign_of_life(ALIVE_WITHIN_SECONDS, 600.0) == f"alive, slow (last sign of life {ALIVE_WITHIN_SECONDS:.0f}s ago)"
    assert sign_of_life(ALIVE_WITHIN_SECONDS + 1, 600.0) == f"no sign of life for {ALIVE_WITHIN_SECONDS + 1:.0f}s"
    assert sign_of_life(3.0, 10.0) == "alive (last sign of life 3s ago)"       # young: not slow yet
    assert sign_of_life(None, 600.0) == ""


def snapshot_with(now_ms: int) -> ClusterSnapshot:
    d = [desc(parts=(("t", 0),)), desc(tid="orders-2", pid=8, parts=(("t", 1),))]
    seen = derive.state_since({}, d, now_ms)
    appended = derive.last_appends(d, [prod("t", 0, 7, now_ms - 2_000)])
    txns = derive.open_transactions(d, AppResolver(), now_ms, seen, appended)
    parts = {("t", 0): PartitionState("t", 0, 10, 4, 0.0, 50.0), ("t", 1): PartitionState("t", 1, 10, 4, 0.0, 50.0)}
    return ClusterSnapshot("c1", now_ms / 1000, 0.1, MappingProxyType(parts), open_transactions=tuple(txns))


def test_the_poller_renders_both_clocks_and_the_last_append_also_beside_the_tap():
    snap = snapshot_with(T0 + 600_000)
    m = scrape(lambda w: render_snapshot(w, snap, "partition", 500))
    assert m.get_value(UNCHANGED, transactional_id="orders-1") == 600.0
    assert m.get_value(APPENDED, transactional_id="orders-1") == 2.0
    assert m.get_value(APPENDED, transactional_id="orders-2") is None     # no leader described it
    # with the tap on, the tap renders the coordinator's clock; the appends only the poller knows
    m = scrape(lambda w: render_snapshot(w, snap, "partition", 500, render_open_transactions=False))
    assert m.select(UNCHANGED) == [] and m.get_value(APPENDED, transactional_id="orders-1") == 2.0
    folded = []
    m = scrape(lambda w: folded.append(render_snapshot(w, snap, "partition", 1)))
    assert {lbl["transactional_id"] for lbl, _ in m.select(UNCHANGED)} == {"orders-1", "__other__"}
    assert folded[0][UNCHANGED] == 1 and folded[0][APPENDED] == 0


def test_the_page_takes_the_taps_clock_when_the_tap_runs():
    now_ms = T0 + 600_000
    snap = snapshot_with(now_ms)
    st = TxnLogState(AppResolver())
    st.apply("orders-2", value(ON, start=T0, last=now_ms - 10_000, pid=8), now_ms, now_ms, counting=True)
    tap = TapView(open_txns=st.open_transactions(), rebuilt=True)
    by_id = {t.transactional_id: t for t in digest_of(snap, "c1", None, tap).open_transactions}
    assert by_id["orders-2"].state_unchanged_seconds == 10.0       # the log's last update
    assert by_id["orders-1"].state_unchanged_seconds == 600.0      # the tap does not have it open
    rebuilding = TapView(open_txns=st.open_transactions(), rebuilt=False)
    assert {t.state_unchanged_seconds for t in digest_of(snap, "c1", None, rebuilding).open_transactions} == {600.0}


def test_the_page_and_check_say_alive_or_no_sign_of_life():
    snap = snapshot_with(T0 + 600_000)
    by_id = {t.transactional_id: t for t in snap.open_transactions}
    alive, silent = liveness_cell(by_id["orders-1"]), liveness_cell(by_id["orders-2"])
    assert "alive, slow (last sign of life 2s ago)" in alive and "class=bad" not in alive
    assert "last append 2s ago" in alive and "coordinator state unchanged 10.0m" in alive
    assert "no sign of life for 10.0m" in silent and "class=bad" in silent
    text = format_text([{**summarize(snap), "login": None}])
    assert "alive, slow (last sign of life 2s ago)" in text and "no sign of life for 600s" in text


def test_the_alerts_query_names_the_exposed_cluster_label():
    def description(cfg):
        return next(r["annotations"]["description"] for g in rule_groups(cfg) for r in g["rules"]
                    if r.get("alert") == "KafkaTransactionHanging")
    text = description(AlertConfig(cluster_label="kc"))
    assert ',kc=%q,app=%q,transactional_id=%q})` $labels.kc $labels.app $labels.transactional_id' in text
    assert f"if le $s {ALIVE_WITHIN_SECONDS:.1f}" in text
