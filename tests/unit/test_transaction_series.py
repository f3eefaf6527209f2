"""Which open transactions keep per-transactional-id series (exporter/transaction_series.py),
and the poller's and the tap's renders under that budget: a young, healthy transaction is its
app's "__other__", one that matters has its id, and a min or max by app reads the same at
every granularity."""

from __future__ import annotations

from types import MappingProxyType

from txnwatch.apps import AppResolver
from txnwatch.exporter.model import ClusterSnapshot
from txnwatch.exporter.poll import derive
from txnwatch.exporter.poll.granularity import linger
from txnwatch.exporter.poll.render import RenderCache, render_snapshot
from txnwatch.exporter.tap.render import render_tap
from txnwatch.exporter.tap.state import ONGOING, OpenTxn, TapView
from txnwatch.exporter.transaction_series import (
    NEAR_TIMEOUT_SECONDS,
    OTHER_IDS,
    TWO_PHASE_SECONDS,
    OpenSeen,
    TransactionSeries,
    budgeted,
    carries_signal,
)
from txnwatch.kafka.answers import ClusterFacts, TxnDescription
from txnwatch.metrics import FamilyWriter
from txnwatch_dev.observability.scrape import Metrics, parse_metrics

NONE = frozenset()
TWO_PHASE_TIMEOUT = 2**31 - 1      # KIP-939: Integer.MAX_VALUE


def seen(tid="flink-0-7", age=1.0, timeout_ms=60_000, app="flink", two_phase=False) -> OpenSeen:
    return OpenSeen(app, tid, age, timeout_ms, two_phase)


def test_a_young_transaction_far_from_its_timeout_carries_no_signal():
    assert not carries_signal(seen(age=1.0), NONE)
    assert not carries_signal(seen(age=29.9), NONE)
    assert not carries_signal(seen(age=None), NONE)


def test_half_the_timeout_used_or_little_left_is_a_signal():
    assert carries_signal(seen(age=30.0), NONE)                        # half of 60 s
    assert carries_signal(seen(age=61.0), NONE)                        # past it: the hanging alert's case
    # Kafka Streams' 10 s default: at most NEAR_TIMEOUT_SECONDS left from its start
    assert carries_signal(seen(age=0.1, timeout_ms=10_000), NONE)
    assert not carries_signal(seen(age=0.1, timeout_ms=int((NEAR_TIMEOUT_SECONDS + 1) * 1000)), NONE)


def test_a_timeout_above_the_brokers_cap_and_a_named_app_are_signals():
    assert carries_signal(seen(age=1.0, timeout_ms=1_800_000), NONE, max_timeout_ms=900_000)
    assert not carries_signal(seen(age=1.0, timeout_ms=900_000), NONE, max_timeout_ms=900_000)
    assert carries_signal(seen(age=1.0), frozenset({"flink"}))


def test_a_two_phase_transaction_is_a_signal_once_open_a_minute():
    assert not carries_signal(seen(age=TWO_PHASE_SECONDS - 1, timeout_ms=TWO_PHASE_TIMEOUT, two_phase=True), NONE,
                              max_timeout_ms=900_000)
    assert carries_signal(seen(age=TWO_PHASE_SECONDS, timeout_ms=TWO_PHASE_TIMEOUT, two_phase=True), NONE)


def test_an_id_keeps_its_series_for_the_linger_after_its_last_signal():
    assert linger({"a": 100.0, "b": 10.0}, ["c"], 200.0, 150.0) == {"a": 100.0, "c": 200.0}
    series = TransactionSeries(linger_seconds=60.0)
    assert series.update([seen("s-1", age=40.0)], 1000.0) == {"s-1"}
    # its next transaction, young: still its own series within the linger, not after
    assert series.update([seen("s-1", age=1.0), seen("s-2", age=1.0)], 1030.0) == {"s-1"}
    assert series.update([seen("s-1", age=1.0)], 1060.0) == frozenset()


def test_budgeted_merges_the_rest_per_app_and_counts_only_the_caps_folds():
    values = [("flink", "f-1", 50.0), ("flink", "f-2", 40.0), ("flink", "f-3", 45.0), ("etl", "e-1", 5.0),
              ("etl", "e-2", None)]
    series, folded = budgeted(values, frozenset({"e-1"}), cap=10)
    assert sorted(series) == [("etl", "e-1", 5.0), ("flink", OTHER_IDS, 40.0)] and folded == 0
    series, folded = budgeted(values, frozenset({"e-1"}), cap=10, highest=True)
    assert sorted(series) == [("etl", "e-1", 5.0), ("flink", OTHER_IDS, 50.0)]
    # every id its own (granularity partition), under a cap of 2: the lowest two kept
    series, folded = budgeted(values, None, cap=2)
    assert sorted(series) == [("etl", "e-1", 5.0), ("flink", OTHER_IDS, 45.0), ("flink", "f-2", 40.0)]
    assert folded == 2


def poll_snapshot(at_ms: int) -> ClusterSnapshot:
    """Flink's sink with a young transaction per subtask, a Streams thread (10 s timeout) and
    a transaction past its timeout."""
    descs = [TxnDescription(f"flink-sink-{i}-42", "Ongoing", 10 + i, 0, 900_000, at_ms - 3_000, frozenset())
             for i in range(4)]
    descs.append(TxnDescription("orders-streams-0_0", "Ongoing", 20, 0, 10_000, at_ms - 200, frozenset()))
    descs.append(TxnDescription("billing-writer", "Ongoing", 30, 3, 60_000, at_ms - 75_000, frozenset()))
    txns = derive.open_transactions(descs, AppResolver(), now_ms=at_ms)
    return ClusterSnapshot("c1", at_ms / 1000.0, 0.1, MappingProxyType({}), (),
                           ClusterFacts(brokers=1, transaction_max_timeout_ms=900_000), tuple(txns))


def scraped(render) -> Metrics:
    w = FamilyWriter()
    render(w)
    return Metrics(parse_metrics("".join(c.body.decode() for c in w.chunks().values())))


def per_id(m: Metrics, family: str) -> dict[tuple[str, str], float]:
    return {(lb["app"], lb["transactional_id"]): v for lb, v in m.select(family)}


def test_the_poller_exports_young_healthy_transactions_as_their_apps_other():
    snap = poll_snapshot(1_000_000)
    at_signal = scraped(lambda w: render_snapshot(w, snap, "signal", 500, cache=RenderCache()))
    every = scraped(lambda w: render_snapshot(w, snap, "partition", 500, cache=RenderCache()))
    headroom = per_id(at_signal, "kafka_transaction_timeout_headroom_seconds")
    flink_app = next(app for app, _ in headroom if app != "billing-writer" and "streams" not in app)
    assert {tid for _, tid in headroom} == {OTHER_IDS, "orders-streams-0_0", "billing-writer"}
    assert headroom[(flink_app, OTHER_IDS)] == 897.0
    assert headroom[("billing-writer", "billing-writer")] == -15.0
    assert len(per_id(every, "kafka_transaction_timeout_headroom_seconds")) == 6
    # the lowest headroom and the highest ages per app are the same either way
    for family, pick in (("kafka_transaction_timeout_headroom_seconds", min),
                         ("kafka_transaction_state_unchanged_seconds", max),
                         ("kafka_transaction_last_append_age_seconds", max)):
        assert by_app(at_signal, family, pick) == by_app(every, family, pick), family


def by_app(m: Metrics, family: str, pick) -> dict[str, float]:
    out: dict[str, list[float]] = {}
    for (app, _), v in per_id(m, family).items():
        out.setdefault(app, []).append(v)
    return {app: pick(vs) for app, vs in out.items()}


def test_an_id_that_got_its_series_keeps_it_across_its_next_young_transactions():
    cache = RenderCache()
    first = poll_snapshot(1_000_000)
    scraped(lambda w: render_snapshot(w, first, "signal", 500, cache=cache))
    # 40 s on, billing-writer's next transaction has just begun: its id keeps its series
    descs = [TxnDescription("billing-writer", "Ongoing", 30, 4, 60_000, 1_039_000, frozenset())]
    later = ClusterSnapshot("c1", 1040.0, 0.1, MappingProxyType({}), (), ClusterFacts(brokers=1),
                            tuple(derive.open_transactions(descs, AppResolver(), now_ms=1_040_000)))
    m = scraped(lambda w: render_snapshot(w, later, "signal", 500, cache=cache))
    assert per_id(m, "kafka_transaction_timeout_headroom_seconds") == {("billing-writer", "billing-writer"): 59.0}


def tap_view(now_ms: int) -> TapView:
    young = [OpenTxn(f"flink-sink-{i}-42", "flink-sink", ONGOING, now_ms - 2_000, 900_000, 10 + i, 0,
                     now_ms - 2_000) for i in range(3)]
    old = OpenTxn("billing-writer", "billing-writer", ONGOING, now_ms - 70_000, 60_000, 30, 3,
                  now_ms - 70_000)
    return TapView(ids_per_app={"flink-sink": 3, "billing-writer": 1}, open_txns=(*young, old))


def test_the_tap_renders_under_the_same_budget():
    now_ms = 2_000_000
    view = tap_view(now_ms)
    m = scraped(lambda w: render_tap(w, "c1", view, now=now_ms / 1000.0, series=TransactionSeries(3600.0),
                                     max_timeout_ms=900_000))
    assert per_id(m, "kafka_transaction_timeout_headroom_seconds") == {("flink-sink", OTHER_IDS): 898.0,
                                                                       ("billing-writer", "billing-writer"): -10.0}
    assert per_id(m, "kafka_transaction_state_unchanged_seconds") == {("flink-sink", OTHER_IDS): 2.0,
                                                                      ("billing-writer", "billing-writer"): 70.0}
    every = scraped(lambda w: render_tap(w, "c1", view, now=now_ms / 1000.0))
    assert len(per_id(every, "kafka_transaction_timeout_headroom_seconds")) == 4
