"""The page's view per app (pure): for each app -- a transactional-id prefix, a Streams
application.id, a Flink or Spark sink, and the read_committed groups and Spark queries that
read behind them -- its transactions from the tap's counters, the partitions its open and
hanging transactions pin and who waits behind them, what pins the partitions it reads, and
the `txnwatch abort` dry run when a transaction of it is stuck.

A worker builds it from its snapshot and tap view (bounded: the apps in most trouble first,
a few rows each) into the published digest; the serving process joins the Spark queries,
which only it knows. No I/O: time is always an argument."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import NamedTuple

from ...apps import fallback_app
from ...metrics import ALIVE_WITHIN_SECONDS, CATALOG
from ..spark.blocked import BLOCKED

# The buckets of the tap's completion latency (PrepareCommit -> CompleteCommit).
COMPLETION_BOUNDS: tuple[float, ...] = tuple(CATALOG["kafka_transaction_completion_seconds"].buckets)
# A commit rate is the change of the tap's counters over a window at least this long: shorter
# ones (a page rendered twice in a second) would say more than the counters know.
RATE_WINDOW_SECONDS = 30.0
MAX_APPS = 30            # sections on the page, and per cluster in a digest
MAX_ROWS = 5             # pinned partitions, readers waiting, holders named per app

PRODUCER, GROUP, SPARK_QUERY = "producer", "group", "Spark query"
HANGING = "hanging"


# ------------------------------------------------------------------ the tap's counters, windowed
class AppCounters(NamedTuple):
    """One app's counters in the tap's view (monotonic while the tap runs)."""

    committed: int = 0
    aborted: int = 0
    fences: tuple[tuple[str, int], ...] = ()     # (reason, count), by reason
    timeouts: int = 0
    reinits: int = 0
    completion: tuple[int, ...] = ()             # committed completion latency per bucket (+Inf last)
    completion_sum: float = 0.0

    @property
    def fenced(self) -> int:
        return sum(n for _, n in self.fences)

    def minus(self, before: AppCounters | None) -> AppCounters:
        """What happened since `before` (the same app's counters, earlier)."""
        if before is None:
            return self
        was = dict(before.fences)
        fences = tuple((r, n - was.get(r, 0)) for r, n in self.fences if n > was.get(r, 0))
        completion = tuple(n - (before.completion[i] if i < len(before.completion) else 0)
                           for i, n in enumerate(self.completion))
        return AppCounters(self.committed - before.committed, self.aborted - before.aborted, fences,
                           self.timeouts - before.timeouts, self.reinits - before.reinits, completion,
                           self.completion_sum - before.completion_sum)


def tap_counters(view) -> dict[str, AppCounters]:
    """Per app, the counters of a TapView (transactions by outcome, committed completion
    latency, fences by reason, timeouts, re-initialisations)."""
    fences: dict[str, list[tuple[str, int]]] = {}
    for (app, reason), n in view.fencing.items():
        fences.setdefault(app, []).append((reason, n))
    apps = {a for a, _ in view.transactions} | set(fences) | set(view.timeouts) | set(view.reinits)
    out = {}
    for app in apps:
        h = view.completion.get((app, "committed"))
        out[app] = AppCounters(view.transactions.get((app, "committed"), 0), view.transactions.get((app, "aborted"), 0),
                               tuple(sorted(fences.get(app, ()))), view.timeouts.get(app, 0),
                               view.reinits.get(app, 0), tuple(h.counts) if h is not None else (),
                               h.sum if h is not None else 0.0)
    return out


class CounterWindow(NamedTuple):
    """The tap's counters at three moments: when this process first read them (totals count
    from `since`), the start of the last complete rate window, and now."""

    since: float
    first: Mapping[str, AppCounters]
    start: float                                  # the window being filled began here
    at_start: Mapping[str, AppCounters]
    at: float
    latest: Mapping[str, AppCounters]
    # the last complete window: (from, counters then, to, counters then); None until one is
    last: tuple[float, Mapping[str, AppCounters], float, Mapping[str, AppCounters]] | None = None


def advance(window: CounterWindow | None, counters: Mapping[str, AppCounters], now: float,
            min_seconds: float = RATE_WINDOW_SECONDS) -> CounterWindow:
    """The window after reading the counters again at `now`. A window closes once it is
    `min_seconds` long; counters that went back (another tap's) start afresh."""
    if window is None or _went_back(window.latest, counters) or now < window.at:
        return CounterWindow(now, counters, now, counters, now, counters)
    if now - window.start >= min_seconds:
        return window._replace(start=now, at_start=counters, at=now, latest=counters,
                               last=(window.start, window.at_start, now, counters))
    return window._replace(at=now, latest=counters)


def _went_back(before: Mapping[str, AppCounters], now: Mapping[str, AppCounters]) -> bool:
    for app, b in before.items():
        n = now.get(app)
        if n is None or n.committed < b.committed or n.aborted < b.aborted or n.timeouts < b.timeouts:
            return True
    return False


class Latency(NamedTuple):
    """Committed transactions' completion latency from the histogram's buckets: p50 and p99 as
    the upper bound of the bucket they fall in (inf: above the last bound), and the exact mean."""

    p50: float
    p99: float
    mean: float
    count: int
    window: bool          # over the last rate window (else since the totals' start)


def latency_of(counts: Sequence[int], total_seconds: float, window: bool,
               bounds: Sequence[float] = COMPLETION_BOUNDS) -> Latency | None:
    n = sum(counts)
    if n <= 0:
        return None

    def bound(q: float) -> float:
        need, seen = q * n, 0
        for i, c in enumerate(counts):
            seen += c
            if seen >= need:
                return bounds[i] if i < len(bounds) else float("inf")
        return float("inf")

    return Latency(bound(0.5), bound(0.99), max(total_seconds, 0.0) / n, n, window)


class Transactions(NamedTuple):
    """An app's transactions as the tap counted them."""

    since: float                      # the totals count from here
    totals: AppCounters
    rate_from: float | None           # the last complete window (None: none yet)
    rate_to: float | None
    committed_per_second: float | None
    aborted_per_second: float | None
    latency: Latency | None
    recent_trouble: int               # aborts, fences and timeouts since the last window began


def transactions_of(app: str, window: CounterWindow) -> Transactions:
    latest = window.latest.get(app, AppCounters())
    totals = latest.minus(window.first.get(app))
    rate_from = rate_to = per_commit = per_abort = None
    latency = None
    recent_base = window.first
    if window.last is not None:
        rate_from, before, rate_to, after = window.last
        recent_base = before
        done = after.get(app, AppCounters()).minus(before.get(app))
        span = rate_to - rate_from
        per_commit, per_abort = done.committed / span, done.aborted / span
        latency = latency_of(done.completion, done.completion_sum, window=True)
    if latency is None:
        latency = latency_of(totals.completion, totals.completion_sum, window=False)
    recent = latest.minus(recent_base.get(app))
    return Transactions(window.since, totals, rate_from, rate_to, per_commit, per_abort, latency,
                        recent.aborted + recent.fenced + recent.timeouts)


# ------------------------------------------------------------------ who pins, who waits
class Pin(NamedTuple):
    """A partition an app's open or hanging transaction holds the last stable offset of."""

    topic: str
    partition: int
    transactional_id: str | None
    state: str                  # HANGING, or the coordinator's state of the open transaction
    age_seconds: float | None
    held: int | None            # records above the LSO, which read_committed readers wait for (None: not polled)


class Waiter(NamedTuple):
    """A read_committed reader at a pinned partition, with records it cannot read yet."""

    kind: str                   # GROUP | SPARK_QUERY
    name: str
    topic: str
    partition: int
    held: int


class Holder(NamedTuple):
    """What pins a partition a consuming app reads."""

    topic: str
    partition: int
    app: str | None             # None: no transaction of a known app (the LSO stalled, no id known)
    transactional_id: str | None
    state: str                  # HANGING, an open state, or what is known of it
    age_seconds: float | None


class Stuck(NamedTuple):
    """A transaction of the app that will not end by itself soon: hanging, or open while its
    producer showed no sign of life for more than ALIVE_WITHIN_SECONDS."""

    transactional_id: str | None
    hanging: bool
    topic: str | None           # where it hangs
    partition: int | None
    seconds: float | None       # hanging: its age; else: since its last sign of life


@dataclass(frozen=True)
class AppView:
    cluster: str
    app: str
    kinds: tuple[str, ...] = ()                 # PRODUCER, GROUP, SPARK_QUERY
    open_transactions: int = 0
    oldest_open_seconds: float | None = None
    stuck: tuple[Stuck, ...] = ()
    pins: tuple[Pin, ...] = ()                  # hanging first, then the oldest
    pins_total: int = 0
    waiters: tuple[Waiter, ...] = ()            # most held back first
    waiters_total: int = 0
    holders: tuple[Holder, ...] = ()            # hanging first, then the oldest
    holders_total: int = 0
    transactions: Transactions | None = None    # None: no tap, or none counted for it
    abort_command: str | None = None            # only while a transaction of it is stuck

    @property
    def trouble(self) -> int:
        """0 stuck, 1 blocking readers or blocked, 2 aborts, fences or timeouts lately,
        3 transactions open now, 4 quiet."""
        if self.stuck:
            return 0
        if self.waiters_total or self.holders_total:
            return 1
        if self.transactions is not None and self.transactions.recent_trouble:
            return 2
        return 3 if self.open_transactions else 4


def trouble_order(v: AppView) -> tuple:
    return (v.trouble, -(v.waiters_total + v.holders_total), -len(v.stuck), -(v.oldest_open_seconds or 0.0),
            -(v.transactions.recent_trouble if v.transactions else 0), v.app, v.cluster)


def _waiter_order(w: Waiter) -> tuple:
    return (-w.held, w.kind, w.name, w.topic, w.partition)


def _pin_order(p: Pin | Holder) -> tuple:
    return (p.state != HANGING, -(p.age_seconds or 0.0), p.topic, p.partition)


def blocked_readers(groups: Iterable) -> dict[tuple[str, int], list[Waiter]]:
    """The read_committed groups with records above the LSO at each partition (the page's
    "blocked": more to read against the HWM than against the LSO, markers aside)."""
    out: dict[tuple[str, int], list[Waiter]] = {}
    for g in groups:
        held = g.lag_read_uncommitted - g.lag_read_committed - g.marker_offsets
        if held > 0:
            out.setdefault((g.topic, g.partition), []).append(Waiter(GROUP, g.group, g.topic, g.partition, held))
    return out


def app_views(snap, cluster: str, open_transactions: Sequence | None = None, counters: CounterWindow | None = None,
              app_of: Callable[[str], str] | None = None, abort_command: Callable[[str], str] | None = None,
              limit: int = MAX_APPS) -> tuple[tuple[AppView, ...], int]:
    """The apps of one cluster's snapshot, the most troubled first, at most `limit`; and how
    many more there are. `open_transactions`: the snapshot's with the tap's clock (default:
    the snapshot's); `counters`: the tap's, windowed (None: no tap); `app_of`: the app of a
    transactional id (the poller's resolver); `abort_command`: the dry run for an app."""
    txns = tuple(snap.open_transactions or ()) if open_transactions is None else tuple(open_transactions)
    app_by_id = {t.transactional_id: t.app for t in txns}

    def app_named(tid: str | None) -> str | None:
        if not tid:
            return None
        return app_by_id.get(tid) or (app_of(tid) if app_of is not None else fallback_app(tid))

    parts = snap.partitions

    def lso_lag(tp: tuple[str, int]) -> int | None:      # of the few partitions pinned, not of every one
        p = parts.get(tp)
        return None if p is None else p.lso_lag
    pins: dict[str, dict[tuple, Pin]] = {}
    stuck: dict[str, list[Stuck]] = {}
    holders_at: dict[tuple[str, int], list[Holder]] = {}
    for h in snap.hanging:
        tp = (h.topic, h.partition)
        app = app_named(h.transactional_id)
        holders_at.setdefault(tp, []).append(Holder(h.topic, h.partition, app, h.transactional_id, HANGING,
                                                    h.age_seconds))
        if app is None:
            continue
        pins.setdefault(app, {})[(tp, h.transactional_id)] = Pin(h.topic, h.partition, h.transactional_id, HANGING,
                                                                 h.age_seconds, lso_lag(tp))
        stuck.setdefault(app, []).append(Stuck(h.transactional_id, True, h.topic, h.partition, h.age_seconds))
    opened: dict[str, list] = {}
    hanging_tps = set(holders_at)
    for t in txns:
        opened.setdefault(t.app, []).append(t)
        mine = pins.setdefault(t.app, {})
        for tp in t.partitions:
            mine.setdefault((tp, t.transactional_id), Pin(tp[0], tp[1], t.transactional_id, t.state,
                                                          t.age_seconds, lso_lag(tp)))
            if tp not in hanging_tps:    # a hanging transaction holds the LSO below any open one
                holders_at.setdefault(tp, []).append(Holder(tp[0], tp[1], t.app, t.transactional_id, t.state,
                                                            t.age_seconds))
        silent = t.last_sign_of_life_seconds
        if silent is not None and silent > ALIVE_WITHIN_SECONDS and \
                not any(s.transactional_id == t.transactional_id for s in stuck.get(t.app, ())):
            stuck.setdefault(t.app, []).append(Stuck(t.transactional_id, False, None, None, silent))

    readers = blocked_readers(snap.groups)
    waiting_groups: dict[str, list[Holder]] = {}
    for tp, waiters in readers.items():
        held_by = holders_at.get(tp)
        if held_by is None:
            p = parts.get(tp)
            stalled = p.stalled_seconds if p is not None and p.stalled_since is not None else None
            held_by = [Holder(tp[0], tp[1], None, None, "an open transaction", stalled)]
        for w in waiters:
            waiting_groups.setdefault(w.name, []).extend(held_by)

    counted = counters.latest if counters is not None else {}
    names = set(pins) | set(counted) | set(waiting_groups)
    views = []
    for app in names:
        mine = sorted(pins.get(app, {}).values(), key=_pin_order)
        waiters = sorted({w for p in mine for w in readers.get((p.topic, p.partition), ())}, key=_waiter_order)
        held_by = sorted(set(waiting_groups.get(app, ())), key=_pin_order)
        ts = opened.get(app, ())
        kinds = ((PRODUCER,) if app in pins or app in counted else ()) + ((GROUP,) if app in waiting_groups else ())
        its_stuck = tuple(stuck.get(app, ()))
        views.append(AppView(
            cluster, app, kinds, len(ts), max((t.age_seconds or 0.0 for t in ts), default=None),
            its_stuck[:MAX_ROWS], tuple(mine[:MAX_ROWS]), len(mine), tuple(waiters[:MAX_ROWS]), len(waiters),
            tuple(held_by[:MAX_ROWS]), len(held_by),
            transactions_of(app, counters) if app in counted else None,
            abort_command(app) if its_stuck and abort_command is not None else None))
    views.sort(key=trouble_order)
    return tuple(views[:limit]), max(len(views) - limit, 0)


# ------------------------------------------------------------------ the Spark queries (serving process)
def with_spark_queries(views: Iterable[AppView], statuses: Iterable) -> list[AppView]:
    """The apps with the Spark queries blocked behind their pins (`statuses`: the serving
    process's SparkPartitionStatus rows): each blocked query a consuming app of its own (or
    joined to the app of its name), held by the apps pinning the partition it waits at."""
    views = list(views)
    blocked = [s for s in statuses if s.state == BLOCKED]
    if not blocked:
        return views
    by_key = {(v.cluster, v.app): v for v in views}
    pinning: dict[tuple[str, str, int], list[tuple[str, Pin]]] = {}
    for v in views:
        for p in v.pins:
            pinning.setdefault((v.cluster, p.topic, p.partition), []).append((v.app, p))
    waiters: dict[tuple[str, str], set[Waiter]] = {}
    held: dict[tuple[str, str], set[Holder]] = {}
    for s in blocked:
        found = pinning.get((s.cluster, s.topic, s.partition), ())
        query = (s.cluster, s.query)
        for app, p in found:
            waiters.setdefault((s.cluster, app), set()).add(Waiter(SPARK_QUERY, s.query, s.topic, s.partition,
                                                                   s.held_back))
            held.setdefault(query, set()).add(Holder(s.topic, s.partition, app, p.transactional_id, p.state,
                                                     p.age_seconds))
        if not found:
            held.setdefault(query, set()).add(Holder(s.topic, s.partition, None, None,
                                                     s.holder or "an open transaction", s.stalled_seconds))
    for key, ws in waiters.items():
        v = by_key[key]
        all_waiters = sorted(set(v.waiters) | ws, key=_waiter_order)
        by_key[key] = replace(v, waiters=tuple(all_waiters[:MAX_ROWS]),
                              waiters_total=v.waiters_total - len(v.waiters) + len(all_waiters))
    for key, hs in held.items():
        v = by_key.get(key) or AppView(key[0], key[1])
        all_held = sorted(set(v.holders) | hs, key=_pin_order)
        kinds = v.kinds if SPARK_QUERY in v.kinds else v.kinds + (SPARK_QUERY,)
        by_key[key] = replace(v, kinds=kinds, holders=tuple(all_held[:MAX_ROWS]),
                              holders_total=v.holders_total - len(v.holders) + len(all_held))
    return list(by_key.values())


def worst_first(views: Iterable[AppView], limit: int = MAX_APPS) -> tuple[list[AppView], int]:
    """The `limit` apps in most trouble, and how many more there are."""
    ordered = sorted(views, key=trouble_order)
    return ordered[:limit], max(len(ordered) - limit, 0)
