"""ProducerTransactions: transactional producers' records in, kafka_producer_* series out.

Every finished transaction is one record (txnwatch/producer.py writes them; the Spark
sink's tasks and the exporter's ingest carry them as `producer_transactions` events). Per
app this keeps the commit-latency and duration histograms, transactions by id and outcome,
errors by id and name, and each id's last timeout headroom. Transactional ids past
`max_transactional_ids` fold into `__other__`; apps past `max_apps` are dropped.

Not locked: its owner applies, expires and renders under its own lock (SparkQueryState in
the driver and the exporter, ProducerMetricsCollector in any other service). Nothing in a
record makes `apply` raise: odd values are skipped and counted through `on_dropped`."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from txnwatch.metrics import CATALOG, FamilyWriter, Histogram
from txnwatch.metrics.values import label_value, num

OTHER_ID = "__other__"
OUTCOMES = ("committed", "aborted", None)   # None: an error outside any transaction
_B_COMMIT = CATALOG["kafka_producer_transaction_commit_seconds"].buckets
_B_DURATION = CATALOG["kafka_producer_transaction_duration_seconds"].buckets


@dataclass
class _App:
    app: str
    last_seen: float
    commit: Histogram = field(default_factory=lambda: Histogram(_B_COMMIT))
    durations: dict[str, Histogram] = field(default_factory=dict)
    totals: dict[tuple[str, str], int] = field(default_factory=dict)
    errors: dict[tuple[str, str], int] = field(default_factory=dict)
    headroom: dict[str, float] = field(default_factory=dict)   # id -> its last transaction's headroom


def _valid(r: Mapping[str, Any]) -> bool:
    """A record with an outcome and an id (an error outside a transaction names its error)."""
    outcome, tid, err = r.get("outcome"), r.get("transactional_id"), r.get("error")
    return (outcome in OUTCOMES and isinstance(tid, str) and bool(tid)
            and (outcome is not None or (isinstance(err, str) and bool(err))))


class ProducerTransactions:
    """The kafka_producer_* state of every app whose records arrived (see the module)."""

    def __init__(self, max_apps: int = 200, max_transactional_ids: int = 500,
                 on_dropped: Callable[[str], None] = lambda reason: None) -> None:
        self.max_apps = max_apps
        self.max_transactional_ids = max_transactional_ids
        self._on_dropped = on_dropped
        self._apps: dict[str, _App] = {}
        self._ids: set[tuple[str, str]] = set()

    def apply(self, app_name: Any, records: Any, now: float) -> bool:
        """One app's records (a `producer_transactions` event's `app` and `records`);
        False when none could be taken (no app, not a list, past max_apps)."""
        if not isinstance(app_name, str) or not app_name or not isinstance(records, list):
            self._on_dropped("bad_producer_event")
            return False
        app = self._apps.get(app_name)
        if app is None:
            if len(self._apps) >= self.max_apps:
                self._on_dropped("app_limit")
                return False
            app = self._apps[app_name] = _App(app=label_value(app_name), last_seen=now)
        app.last_seen = now
        for r in records:
            if not isinstance(r, Mapping):
                continue
            if not _valid(r):
                self._on_dropped("bad_record")
                continue
            self._apply_record(app, self._capped_id(app_name, r["transactional_id"]), r)
        return True

    @staticmethod
    def _apply_record(app: _App, tid: str, r: Mapping[str, Any]) -> None:
        outcome, err = r.get("outcome"), r.get("error")
        if isinstance(err, str) and err:
            key = (tid, label_value(err))
            app.errors[key] = app.errors.get(key, 0) + 1
        if outcome is None:   # an error outside any transaction: counted as an error only
            return
        app.totals[(tid, outcome)] = app.totals.get((tid, outcome), 0) + 1
        duration = num(r.get("duration_seconds"))
        if duration is not None and duration >= 0:
            h = app.durations.get(outcome)
            if h is None:
                h = app.durations[outcome] = Histogram(_B_DURATION)
            h.observe(duration)
        commit = num(r.get("commit_seconds"))
        if commit is not None and commit >= 0:
            app.commit.observe(commit)
        timeout_ms = num(r.get("timeout_ms"))
        if timeout_ms is not None and duration is not None:
            app.headroom[tid] = timeout_ms / 1000.0 - duration

    def _capped_id(self, app: str, tid: str) -> str:
        key = (app, tid)
        if key in self._ids:
            return label_value(tid)
        if len(self._ids) >= self.max_transactional_ids:
            return OTHER_ID
        self._ids.add(key)
        return label_value(tid)

    def expire(self, cutoff: float) -> None:
        """Forget the apps with no record since `cutoff` (unix time), and their ids."""
        gone = {name for name, a in self._apps.items() if a.last_seen < cutoff}
        for name in gone:
            del self._apps[name]
        if gone:
            self._ids = {k for k in self._ids if k[0] not in gone}

    def render(self, w: FamilyWriter) -> None:
        for a in sorted(self._apps.values(), key=lambda a: a.app):
            lb = {"app": a.app}
            if a.commit.count:
                w.histogram("kafka_producer_transaction_commit_seconds", lb, a.commit.counts, a.commit.sum)
            for outcome, h in sorted(a.durations.items()):
                w.histogram("kafka_producer_transaction_duration_seconds", {**lb, "outcome": outcome},
                            h.counts, h.sum)
            for (tid, outcome), n in sorted(a.totals.items()):
                w.add("kafka_producer_transactions", {**lb, "transactional_id": tid, "outcome": outcome}, n)
            for (tid, err), n in sorted(a.errors.items()):
                w.add("kafka_producer_transaction_errors", {**lb, "transactional_id": tid, "error": err}, n)
            for tid, last in sorted(a.headroom.items()):
                w.add("kafka_producer_transaction_timeout_headroom_seconds",
                      {**lb, "transactional_id": tid}, last)
