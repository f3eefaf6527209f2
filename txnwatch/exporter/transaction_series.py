"""Which open transactions keep per-transactional-id series of their own.

The per-id families (timeout headroom, state unchanged, last append) had a series per open
transaction's id, gone when it committed; a Flink sink names a new id per checkpoint, so each
checkpoint made new series and Prometheus's head block churned with healthy work. At
granularity signal and topic an open transaction keeps series of its own only while it
carries a signal, and its id for `linger` seconds after; the rest of an app's open
transactions are one series, transactional_id="__other__", holding their lowest headroom and
highest ages, so a `min by (app)` or `max by (app)` reads the same at every granularity.

A transaction carries a signal when:
- it has used half its transaction.timeout.ms, or has at most NEAR_TIMEOUT_SECONDS left: the
  headroom alert (5 s by default) and the hanging alert's past-timeout signal read these, and
  a transaction past its timeout is the hanging one `txnwatch abort` is about;
- its timeout is above the broker's transaction.max.timeout.ms (the cap alert reads the
  highest headroom of each id, which "__other__", the lowest, would hide);
- it is a two-phase-commit transaction open TWO_PHASE_SECONDS or more (it never times out);
- its app is named in `series_apps`.
The rule and the linger are pure (the transactions and the time in); TransactionSeries holds
what one renderer remembers between renders."""

from __future__ import annotations

import threading
from collections.abc import Iterable
from typing import NamedTuple

from ..apps import OTHER_IDS, fold_ids
from .poll.granularity import linger

NEAR_TIMEOUT_SECONDS = 10.0      # twice the headroom alert's default threshold
TWO_PHASE_SECONDS = 60.0


class OpenSeen(NamedTuple):
    """What the rule reads of an open transaction, from the poller's snapshot or the tap's view."""
    app: str
    transactional_id: str
    age_seconds: float | None        # None: its start is not known
    timeout_ms: int
    two_phase: bool


def carries_signal(t: OpenSeen, apps: frozenset[str], max_timeout_ms: int | None = None) -> bool:
    if t.app in apps or (max_timeout_ms is not None and not t.two_phase and t.timeout_ms > max_timeout_ms):
        return True
    if t.age_seconds is None:
        return False
    if t.two_phase:
        return t.age_seconds >= TWO_PHASE_SECONDS
    headroom = t.timeout_ms / 1000.0 - t.age_seconds
    return headroom <= NEAR_TIMEOUT_SECONDS or t.age_seconds >= t.timeout_ms / 2000.0


class TransactionSeries:
    """The per-id budget's memory between renders (one per cluster and renderer: the poller's
    and the tap's each hold one). `update` is called from whichever thread renders."""

    def __init__(self, linger_seconds: float, apps: Iterable[str] = ()) -> None:
        self.linger_seconds = linger_seconds
        self.apps = frozenset(apps)
        self._last_signal: dict[str, float] = {}
        self._lock = threading.Lock()

    def update(self, open_transactions: Iterable[OpenSeen], now: float,
               max_timeout_ms: int | None = None) -> frozenset[str]:
        """The ids that keep series of their own after this render (`max_timeout_ms`: the
        broker's transaction.max.timeout.ms, when known)."""
        now_signalled = [t.transactional_id for t in open_transactions
                         if carries_signal(t, self.apps, max_timeout_ms)]
        with self._lock:
            self._last_signal = linger(self._last_signal, now_signalled, now, self.linger_seconds)
            return frozenset(self._last_signal)


def series_id(transactional_id: str, own: frozenset[str] | None) -> str:
    """The transactional_id label of a transaction's series; `own` None: every id its own."""
    return transactional_id if own is None or transactional_id in own else OTHER_IDS


def budgeted(values: Iterable[tuple[str, str, float | None]], own: frozenset[str] | None, cap: int,
             highest: bool = False) -> tuple[list[tuple[str, str, float]], int]:
    """(app, transactional id, value)s as series: the ids outside `own` as their app's
    "__other__", the others under the per-id cap (apps.fold_ids), one value per series: the
    lowest (with `highest`, the highest). Returns (series, ids folded by the cap)."""
    worst = max if highest else min
    merged: dict[tuple[str, str], float] = {}
    for app, tid, v in values:
        if v is not None:
            key = (app, series_id(tid, own))
            merged[key] = worst(v, merged.get(key, v))
    kept, folded = fold_ids([(app, tid, v) for (app, tid), v in merged.items() if tid != OTHER_IDS], cap,
                            highest=highest)
    out = {(app, tid): v for (app, tid), v in merged.items() if tid == OTHER_IDS}
    for app, tid, v in kept:
        out[(app, tid)] = worst(v, out.get((app, tid), v))
    return [(app, tid, v) for (app, tid), v in out.items()], folded
