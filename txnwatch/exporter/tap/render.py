"""Render a transaction-log tap view into a FamilyWriter (pure: no I/O, no locks).

The exporter's Collector calls `render_tap` at scrape time with the tap's last view;
headrooms and ages are computed against `now` (the scrape's wall clock) from the
absolute timestamps held in the view, so they are exact at scrape time.
"""

from __future__ import annotations

import time

from ...apps import OTHER_IDS
from ...metrics import FamilyWriter
from ..model import is_two_phase
from ..transaction_series import OpenSeen, TransactionSeries, budgeted
from .state import ABORTED, COMMITTED, NEW_INSTANCE, OPERATOR, STARTUP_ABORT, TIMEOUT, TapView

# an app whose sink names an id per checkpoint (Flink's KafkaSink): its newest idle id's figure
NEWEST = "__newest__"


def render_tap(writer: FamilyWriter, cluster: str, view: TapView, now: float | None = None,
               cap: int | None = None, health=None, series: TransactionSeries | None = None,
               max_timeout_ms: int | None = None) -> dict[str, int]:
    """Write every series of the tap for `cluster` into `writer`.

    `now` is unix seconds (default: the wall clock); `cap` overrides the per-id series
    cap of the view; `health` (a SourceHealth) is rendered as txnwatch_up & co. when
    given (leave it None when the caller renders source health itself); `series` says which
    open transactions keep per-id series of their own (None: every one, granularity partition),
    with the broker's transaction.max.timeout.ms when known.
    Returns {metric name: ids folded into transactional_id="__other__"} so the caller
    can count folds (e.g. in txnwatch_series_dropped_total) once per view.
    """
    now_ms = (time.time() if now is None else now) * 1000.0
    cap = view.cap if cap is None else cap
    c = {"cluster": cluster}
    folded: dict[str, int] = {}
    apps = set(view.ids_per_app)

    for app, n in view.ids_per_app.items():
        writer.add("kafka_transactional_ids", {**c, "app": app}, n)

    # open transactions: count, oldest age, timeout headroom and state unchanged per id (capped)
    # (two-phase-commit transactions, KIP-939, never time out: no headroom, ages of their own)
    open_count: dict[str, int] = dict.fromkeys(apps, 0)
    two_phase_count: dict[str, int] = {}
    oldest_start: dict[str, int] = {}
    two_phase_oldest: dict[str, int] = {}
    headrooms = []
    unchanged = []
    seen = []
    for t in view.open_txns:
        open_count[t.app] = open_count.get(t.app, 0) + 1
        unchanged.append((t.app, t.transactional_id, max(0.0, (now_ms - t.last_update_ms) / 1000.0)))
        two_phase = is_two_phase(t.timeout_ms)
        seen.append(OpenSeen(t.app, t.transactional_id, (now_ms - t.start_ms) / 1000.0 if t.start_ms >= 0 else None,
                             t.timeout_ms, two_phase))
        if two_phase:
            two_phase_count[t.app] = two_phase_count.get(t.app, 0) + 1
        if t.start_ms >= 0:
            oldest = two_phase_oldest if two_phase else oldest_start
            if t.app not in oldest or t.start_ms < oldest[t.app]:
                oldest[t.app] = t.start_ms
            if not two_phase:
                headrooms.append((t.app, t.transactional_id, (t.start_ms + t.timeout_ms - now_ms) / 1000.0))
    for app, n in open_count.items():
        writer.add("kafka_transaction_open", {**c, "app": app}, n)
        start = oldest_start.get(app)
        writer.add("kafka_transaction_oldest_open_age_seconds", {**c, "app": app},
                   0.0 if start is None else max(0.0, (now_ms - start) / 1000.0))
    for app, n in two_phase_count.items():
        writer.add("kafka_transaction_two_phase_open", {**c, "app": app}, n)
        start = two_phase_oldest.get(app)
        writer.add("kafka_transaction_two_phase_oldest_age_seconds", {**c, "app": app},
                   None if start is None else max(0.0, (now_ms - start) / 1000.0))
    own = None if series is None else series.update(seen, now_ms / 1000.0, max_timeout_ms)
    # the lowest headrooms and the longest unchanged matter most: kept under the cap, the rest
    # fold into their app's "__other__"
    for name, values, highest in (("kafka_transaction_timeout_headroom_seconds", headrooms, False),
                                  ("kafka_transaction_state_unchanged_seconds", unchanged, True)):
        kept, folded[name] = budgeted(values, own, cap, highest=highest)
        for app, tid, v in kept:
            writer.add(name, {**c, "app": app, "transactional_id": tid}, v)

    # completions, durations, completion latencies
    for app in apps:
        for outcome in (COMMITTED, ABORTED):
            if (app, outcome) not in view.transactions:
                writer.add("kafka_transactions", {**c, "app": app, "outcome": outcome}, 0)
    for (app, outcome), n in view.transactions.items():
        writer.add("kafka_transactions", {**c, "app": app, "outcome": outcome}, n)
    for name, hists in (("kafka_transaction_duration_seconds", view.duration),
                        ("kafka_transaction_completion_seconds", view.completion)):
        for (app, outcome), h in hists.items():
            writer.histogram(name, {**c, "app": app, "outcome": outcome}, h.counts, h.sum)

    # fencing, re-initialisations, timeouts, expirations (zeros for every app with ids, so
    # increase() sees the first)
    for app in apps:
        reasons = (TIMEOUT, NEW_INSTANCE, OPERATOR, STARTUP_ABORT) if app in view.reinit_apps else \
            (TIMEOUT, NEW_INSTANCE, OPERATOR)
        for reason in reasons:
            if (app, reason) not in view.fencing:
                writer.add("kafka_transaction_fencing_events", {**c, "app": app, "reason": reason}, 0)
    for (app, reason), n in view.fencing.items():
        writer.add("kafka_transaction_fencing_events", {**c, "app": app, "reason": reason}, n)
    for name, counts in (("kafka_transaction_timeouts", view.timeouts),
                         ("kafka_transactional_id_expirations", view.expirations),
                         ("kafka_transactional_id_reinitializations", view.reinits)):
        for app in apps.difference(counts):
            writer.add(name, {**c, "app": app}, 0)
        for app, n in counts.items():
            writer.add(name, {**c, "app": app}, n)

    # idle ids against transactional.id.expiration.ms
    exp = view.expiration_ms
    idle = view.idle
    for tid, app, last in idle.kept:
        writer.add("kafka_transactional_id_expiration_headroom_seconds",
                   {**c, "app": app, "transactional_id": tid}, (exp - (now_ms - last)) / 1000.0)
    for app, last in idle.folded_min.items():
        writer.add("kafka_transactional_id_expiration_headroom_seconds",
                   {**c, "app": app, "transactional_id": OTHER_IDS}, (exp - (now_ms - last)) / 1000.0)
    for app, last in idle.newest.items():
        writer.add("kafka_transactional_id_expiration_headroom_seconds",
                   {**c, "app": app, "transactional_id": NEWEST}, (exp - (now_ms - last)) / 1000.0)
    folded["kafka_transactional_id_expiration_headroom_seconds"] = idle.folded

    # the tap's own position
    writer.add("txnwatch_tap_records_applied", c, view.applied)
    for reason, n in view.skipped.items():
        writer.add("txnwatch_tap_records_skipped", {**c, "reason": reason}, n)
    writer.add("txnwatch_tap_lag_records", c, view.lag_records)
    writer.add("txnwatch_tap_partitions", c, view.partitions)
    writer.add("txnwatch_tap_rebuilt", c, 1 if view.rebuilt else 0)
    if view.last_record_timestamp_ms is not None:
        writer.add("txnwatch_tap_last_record_timestamp_seconds", c, view.last_record_timestamp_ms / 1000.0)

    if health is not None:
        lbl = {**c, "source": health.source}
        writer.add("txnwatch_up", lbl, 1 if health.up else 0)
        writer.add("txnwatch_poll_duration_seconds", lbl, health.last_duration)
        writer.add("txnwatch_last_success_timestamp_seconds", lbl, health.last_success)
        for cause, n in health.errors.items():
            writer.add("txnwatch_poll_errors", {**lbl, "cause": cause}, n)
    return folded
