"""The page's view per app (pure): transactions from the tap's counters, what an app pins and
who waits behind it, what pins a group's or a Spark query's partitions, the abort dry run for
stuck apps only, the cap; and its section's HTML."""

from __future__ import annotations

from types import MappingProxyType

import pytest

from txnwatch.exporter.model import (
    ClusterSnapshot,
    GroupLag,
    HangingTransaction,
    OpenTransaction,
    PartitionState,
)
from txnwatch.exporter.poll.findings import abort_app_command
from txnwatch.exporter.runtime.published import digest_of
from txnwatch.exporter.serve.app_section import apps_section
from txnwatch.exporter.serve.app_view import (
    COMPLETION_BOUNDS,
    GROUP,
    HANGING,
    PRODUCER,
    SPARK_QUERY,
    AppCounters,
    advance,
    app_views,
    tap_counters,
    transactions_of,
    with_spark_queries,
    worst_first,
)
from txnwatch.exporter.serve.page import _age
from txnwatch.exporter.spark.blocked import BLOCKED, CAUGHT_UP, SparkPartitionStatus
from txnwatch.exporter.tap.state import TapView
from txnwatch.metrics import Histogram


def tap_view(committed: int, aborted: int = 0, fences: dict | None = None, timeouts: int = 0,
             latencies: tuple[float, ...] = ()) -> TapView:
    h = Histogram(COMPLETION_BOUNDS)
    for s in latencies:
        h.observe(s)
    return TapView(transactions=MappingProxyType({("orders", "committed"): committed, ("orders", "aborted"): aborted,
                                                  ("quiet", "committed"): 5}),
                   completion=MappingProxyType({("orders", "committed"): h}),
                   fencing=MappingProxyType({("orders", r): n for r, n in (fences or {}).items()}),
                   timeouts=MappingProxyType({"orders": timeouts} if timeouts else {}), rebuilt=True)


def txn(tid: str, app: str, tps, age: float = 10.0, silent: float | None = 1.0, state: str = "Ongoing"):
    return OpenTransaction(tid, app, 7, 0, state, 0, 60_000, tuple(tps), age, 60.0 - age,
                           state_unchanged_seconds=silent)


def snapshot(txns=(), hanging=(), groups=(), parts=None) -> ClusterSnapshot:
    parts = parts or {("orders", 0): PartitionState("orders", 0, 120, 100, 1.0, 300.0),
                      ("orders", 1): PartitionState("orders", 1, 50, 50),
                      ("events", 1): PartitionState("events", 1, 80, 70, 2.0, 90.0)}
    return ClusterSnapshot("c", 1000.0, 0.1, partitions=MappingProxyType(parts), groups=tuple(groups),
                           open_transactions=tuple(txns), hanging=tuple(hanging))


def by_app(views):
    return {v.app: v for v in views}


# ------------------------------------------------------------------ transactions from the tap
def test_commits_aborts_and_fences_count_from_the_first_reading_and_rates_need_a_whole_window():
    w = advance(None, tap_counters(tap_view(100, 3, {"timeout": 1}, timeouts=1)), 1000.0)
    t = transactions_of("orders", w)
    assert (t.since, t.totals.committed, t.totals.aborted, t.totals.fences) == (1000.0, 0, 0, ())
    assert t.committed_per_second is None and t.latency is None        # no fake rate before a window

    w = advance(w, tap_counters(tap_view(110, 4, {"timeout": 1}, timeouts=1, latencies=(0.004,) * 10)), 1010.0)
    t = transactions_of("orders", w)
    assert t.totals.committed == 10 and t.totals.aborted == 1 and t.committed_per_second is None
    assert t.latency is not None and not t.latency.window and t.latency.count == 10   # since the start
    assert t.recent_trouble == 1

    w = advance(w, tap_counters(tap_view(160, 6, {"timeout": 2, "new_instance": 1}, timeouts=2,
                                         latencies=(0.004,) * 58 + (0.3, 90.0))), 1040.0)
    t = transactions_of("orders", w)
    assert (t.rate_from, t.rate_to) == (1000.0, 1040.0)
    assert t.committed_per_second == pytest.approx(60 / 40) and t.aborted_per_second == pytest.approx(3 / 40)
    assert t.totals.fences == (("new_instance", 1), ("timeout", 1)) and t.totals.timeouts == 1
    lat = t.latency
    assert lat.window and lat.count == 60
    assert lat.p50 == min(b for b in COMPLETION_BOUNDS if b >= 0.004)        # the bucket's upper bound
    assert lat.p99 == float("inf")                                            # above the last bound
    assert lat.mean == pytest.approx((58 * 0.004 + 0.3 + 90.0) / 60)

    # the next window starts where the last closed: the rate stays that window's until it closes
    later = advance(w, tap_counters(tap_view(200, 6, {"timeout": 2, "new_instance": 1}, timeouts=2)), 1050.0)
    assert transactions_of("orders", later).committed_per_second == pytest.approx(60 / 40)
    assert transactions_of("quiet", later).committed_per_second == 0.0


def test_counters_that_went_back_start_the_totals_afresh():
    w = advance(None, tap_counters(tap_view(100)), 1000.0)
    w = advance(w, tap_counters(tap_view(5)), 1040.0)      # another tap's counters
    assert (w.since, w.last) == (1040.0, None)
    assert transactions_of("orders", w).totals.committed == 0


def test_counters_minus_keep_only_what_happened():
    before = AppCounters(1, 2, (("timeout", 1),), 1, 0, (1, 0), 0.1)
    after = AppCounters(4, 2, (("new_instance", 2), ("timeout", 1)), 1, 3, (1, 2, 1), 0.5)
    assert after.minus(before) == AppCounters(3, 0, (("new_instance", 2),), 0, 3, (0, 2, 1), pytest.approx(0.4))


# ------------------------------------------------------------------ who pins, who waits
def test_an_app_with_a_hanging_transaction_blocks_a_group_and_gets_the_abort_line():
    hanging = HangingTransaction("orders", 0, 9, 0, 100, 400.0, "orders-writer.0", "producer_state")
    groups = [GroupLag("relay", "orders", 0, 100, 0, 20), GroupLag("caught-up", "orders", 1, 50, 0, 0)]
    views, more = app_views(snapshot(hanging=[hanging], groups=groups), "c",
                            app_of=lambda tid: tid.rsplit(".", 1)[0],
                            abort_command=lambda app: abort_app_command(app, "k:9092"))
    apps = by_app(views)
    assert set(apps) == {"orders-writer", "relay"} and more == 0
    w = apps["orders-writer"]
    assert w.kinds == (PRODUCER,) and w.trouble == 0 and views[0] is w
    assert [(s.transactional_id, s.hanging, s.topic, s.partition) for s in w.stuck] == \
        [("orders-writer.0", True, "orders", 0)]
    assert [(p.topic, p.partition, p.state, p.held) for p in w.pins] == [("orders", 0, HANGING, 20)]
    assert [(x.kind, x.name, x.held) for x in w.waiters] == [(GROUP, "relay", 20)]
    assert w.abort_command == "txnwatch abort --bootstrap-servers k:9092 --app orders-writer"
    g = apps["relay"]
    assert g.kinds == (GROUP,) and g.trouble == 1 and g.abort_command is None
    assert [(h.app, h.transactional_id, h.state) for h in g.holders] == [("orders-writer", "orders-writer.0", HANGING)]


def test_the_abort_line_only_for_hanging_or_silent_transactions():
    txns = [txn("alive.0", "alive", [("orders", 1)], age=300.0, silent=5.0),           # slow, but alive
            txn("silent.0", "silent", [("orders", 1)], age=300.0, silent=240.0),       # no sign of life
            txn("unknown.0", "unknown", [("orders", 1)], silent=None)]                 # nothing tells
    views, _ = app_views(snapshot(txns), "c", abort_command=lambda app: f"abort --app {app}")
    apps = by_app(views)
    assert apps["silent"].abort_command == "abort --app silent" and apps["silent"].stuck[0].seconds == 240.0
    assert apps["alive"].abort_command is None and apps["unknown"].abort_command is None
    assert views[0].app == "silent"


def test_a_group_named_as_an_app_is_one_section_with_both_sides():
    # a Streams app: its transactions pin a repartition topic it reads itself
    txns = [txn("streams-app-0_1", "streams-app", [("orders", 0)], age=30.0)]
    groups = [GroupLag("streams-app", "orders", 0, 100, 0, 20)]
    [v], _ = app_views(snapshot(txns, groups=groups), "c")
    assert v.kinds == (PRODUCER, GROUP) and v.holders[0].app == "streams-app" and v.waiters[0].name == "streams-app"
    html = apps_section([v], 0, _age)
    assert "open transaction (Ongoing) streams-app-0_1 of this app" in html


def test_a_spark_query_blocked_by_another_apps_transaction():
    txns = [txn("payments.0", "payments", [("events", 1)], age=90.0)]
    views, _ = app_views(snapshot(txns), "c")
    statuses = [SparkPartitionStatus("c", "enrich", "q-1", "events", 1, 70, 70, 80, BLOCKED, 90.0, "open transaction"),
                SparkPartitionStatus("c", "other", "q-2", "orders", 1, 50, 50, 50, CAUGHT_UP, 0.0, None),
                SparkPartitionStatus("c", "lost", "q-3", "events", 2, 5, 5, 9, BLOCKED, 60.0, "an open transaction")]
    apps = by_app(with_spark_queries(views, statuses))
    assert set(apps) == {"payments", "enrich", "lost"}          # a query caught up is no app of trouble
    q = apps["enrich"]
    assert q.kinds == (SPARK_QUERY,) and q.trouble == 1
    assert [(h.app, h.transactional_id, h.topic, h.partition) for h in q.holders] == [("payments", "payments.0",
                                                                                      "events", 1)]
    assert [(w.kind, w.name, w.held) for w in apps["payments"].waiters] == [(SPARK_QUERY, "enrich", 10)]
    assert [(h.app, h.state) for h in apps["lost"].holders] == [(None, "an open transaction")]   # no pin found


def test_the_cap_keeps_the_most_troubled_first():
    txns = [txn(f"app{i:02}.0", f"app{i:02}", [("orders", 1)], age=float(i)) for i in range(40)]
    txns.append(txn("zz-stuck.0", "zz-stuck", [("orders", 1)], silent=600.0))
    counts = advance(None, {f"quiet{i:02}": AppCounters(committed=1) for i in range(10)}, 1000.0)
    views, more = app_views(snapshot(txns), "c", counters=counts, limit=30)
    assert len(views) == 30 and more == 21
    assert views[0].app == "zz-stuck" and views[1].app == "app39"          # then the oldest open
    assert not any(v.app.startswith("quiet") for v in views)
    shown, left = worst_first([*views, *views[:3]], limit=5)
    assert len(shown) == 5 and left == 28 and shown[0].app == "zz-stuck"


def test_the_digest_carries_the_apps_with_the_taps_clock():
    # the tap saw the coordinator change the transaction 2 s before the poll: alive after all
    from txnwatch.exporter.tap.state import OpenTxn

    silent = txn("orders.0", "orders", [("orders", 0)], silent=500.0)
    view = TapView(open_txns=(OpenTxn("orders.0", "orders", 1, 0, 60_000, 7, 0, last_update_ms=998_000),),
                   rebuilt=True)
    d = digest_of(snapshot([silent]), "c", None, tap_view=view, abort_app=lambda app: f"abort {app}")
    [v] = d.apps
    assert v.stuck == () and v.abort_command is None and d.apps_more == 0
    d = digest_of(snapshot([silent]), "c", None, abort_app=lambda app: f"abort {app}")
    assert d.apps[0].abort_command == "abort orders"


# ------------------------------------------------------------------ the HTML
def test_the_section_escapes_user_data_and_shows_the_abort_line_under_stuck_apps():
    name = "<script>alert(1)</script>"
    hanging = HangingTransaction("orders", 0, 9, 0, 100, 400.0, f"{name}.0", "producer_state")
    groups = [GroupLag("<b>relay</b>", "orders", 0, 100, 0, 20)]
    counts = advance(None, {name: AppCounters(committed=3)}, 1000.0)
    counts = advance(counts, {name: AppCounters(committed=9, aborted=1, fences=(("new_instance", 1),))}, 1040.0)
    views, _ = app_views(snapshot(hanging=[hanging], groups=groups), "c", counters=counts,
                         app_of=lambda tid: tid[:-2], abort_command=lambda app: abort_app_command(app, "k:9092"))
    html = apps_section(list(views), 0, _age, [("c", 1000.0)])
    assert "The tap counts from 00:16:40 UTC." in html
    assert "<script>" not in html and "<b>relay" not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html and "&lt;b&gt;relay&lt;/b&gt;" in html
    assert "stuck: hanging transaction of" in html and "0.15/s over the 40 s to" in html
    assert "1 fenced</span> (new_instance 1)" in html
    # the command, shell-quoted, then HTML-escaped
    assert "--app &#x27;&lt;script&gt;alert(1)&lt;/script&gt;&#x27;</code>" in html
    assert html.count("txnwatch abort") == 1                          # the group has none


def test_no_apps_says_so():
    assert "No transactional app" in apps_section([], 0, _age)


def test_abort_app_command_on_a_secured_cluster_takes_a_settings_file():
    assert abort_app_command("billing eu", "k:9092", secured=True) == \
        "txnwatch abort --config admin.yaml --app 'billing eu'"


def test_the_page_shows_the_apps_after_the_findings_with_the_spark_queries_joined():
    from types import SimpleNamespace

    from txnwatch.exporter.health import SourceHealth
    from txnwatch.exporter.serve.page import render_page

    txns = [txn("payments.0", "payments", [("events", 1)], age=90.0, silent=300.0)]
    d = digest_of(snapshot(txns), "c", None, abort_app=lambda app: abort_app_command(app, "k:9092"))
    blocked = SparkPartitionStatus("c", "enrich", "q-1", "events", 1, 70, 70, 80, BLOCKED, 90.0, "open transaction")
    exporter = SimpleNamespace(config=SimpleNamespace(http=SimpleNamespace(telemetry_path="/metrics")),
                               page_views=lambda: [("c", [SourceHealth("poller", True)], d)],
                               spark_partitions=lambda: ([blocked], []))
    html = render_page(exporter)
    assert html.index("<h2>Findings") < html.index("<h2>Apps") < html.index("<h2>Oldest open transactions")
    apps = html[html.index("<h2>Apps"):html.index("<h2>Oldest open")]
    assert "Spark query enrich on events-1 (10 record(s))" in apps
    assert "txnwatch abort --bootstrap-servers k:9092 --app payments" in apps
