"""The page's section per app: one table row each (the most troubled first), with the dry run
of `txnwatch abort` under an app with a stuck transaction. Renders app_view's AppViews; every
value is HTML-escaped (app names, ids and topics are user data)."""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from html import escape

from ...metrics import ALIVE_WITHIN_SECONDS
from .app_view import (
    COMPLETION_BOUNDS,
    HANGING,
    MAX_APPS,
    PRODUCER,
    RATE_WINDOW_SECONDS,
    AppView,
    Holder,
    Latency,
    Pin,
    Transactions,
    Waiter,
)


def _clock(ts: float) -> str:
    return time.strftime("%H:%M:%S UTC", time.gmtime(ts))


def _seconds(s: float) -> str:
    return f"{s * 1000:.3g} ms" if s < 1 else f"{s:.3g} s"


def _rate(per_second: float) -> str:
    return f"{per_second:.2f}/s" if per_second < 10 else f"{per_second:.0f}/s"


def _state(v: AppView, age: Callable[[float | None], str]) -> str:
    if v.stuck:
        lines = []
        for s in v.stuck:
            who = escape(s.transactional_id or "producer id unknown")
            if s.hanging:
                lines.append(f"hanging transaction of {who} on {escape(s.topic or '')}-{s.partition} "
                             f"(open {age(s.seconds)})")
            else:
                lines.append(f"{who}: open, no sign of life for {age(s.seconds)}")
        return "<td class=bad>stuck: " + "<br>".join(lines) + "</td>"
    opened = (f"{v.open_transactions} open (oldest {age(v.oldest_open_seconds)})"
              if v.open_transactions else "")
    if v.holders_total:
        return f"<td class=warn>blocked{'; ' + opened if opened else ''}</td>"
    if opened:
        return f"<td>{opened}</td>"
    return "<td class=muted>nothing open</td>"


def _committed(v: AppView, t: Transactions | None) -> str:
    if t is None:
        return ("<td class=muted>not counted (no tap, or it is rebuilding)</td>" if PRODUCER in v.kinds
                else "<td class=muted>—</td>")
    rate = (f"{_rate(t.committed_per_second)} over the {t.rate_to - t.rate_from:.0f} s to {_clock(t.rate_to)}"
            if t.committed_per_second is not None and t.rate_from is not None and t.rate_to is not None else
            f"<span class=muted>a rate once {RATE_WINDOW_SECONDS:.0f} s are counted</span>")
    return (f"<td class=num>{t.totals.committed}<br>{rate}<br>"
            f"<span class=muted>since {_clock(t.since)}</span></td>")


def _latency(lat: Latency | None, since: float) -> str:
    if lat is None:
        return "<td class=muted>—</td>"
    over = "last rate window" if lat.window else f"since {_clock(since)}"

    def bound(q: float) -> str:
        return f"&gt; {_seconds(COMPLETION_BOUNDS[-1])}" if math.isinf(q) else f"≤ {_seconds(q)}"

    return (f"<td class=num>p50 {bound(lat.p50)}<br>p99 {bound(lat.p99)}<br>mean {_seconds(lat.mean)}"
            f"<br><span class=muted>bucket bounds, {lat.count} commit(s), {over}</span></td>")


def _transactions(v: AppView, t: Transactions | None) -> str:
    """The three columns of the tap's counts; one for an app that only reads."""
    if t is None and PRODUCER not in v.kinds:
        return "<td colspan=3 class=muted>reads only: no transactions of its own seen</td>"
    return _committed(v, t) + (_latency(t.latency, t.since) if t is not None else "<td class=muted>—</td>") + _troubles(t)


def _troubles(t: Transactions | None) -> str:
    if t is None:
        return "<td class=muted>—</td>"
    c = t.totals
    parts = [f"{c.aborted} aborted"]
    if c.fences:
        parts.append(f"<span class=warn>{c.fenced} fenced</span> ("
                     + ", ".join(f"{escape(r)} {n}" for r, n in c.fences) + ")")
    if c.timeouts:
        parts.append(f"<span class=warn>{c.timeouts} timed out</span>")
    if c.reinits:
        parts.append(f"{c.reinits} re-initialised")
    return f"<td>{'<br>'.join(parts)}</td>"


def _more(shown: int, total: int) -> str:
    return f" <span class=muted>(+{total - shown} more)</span>" if total > shown else ""


def _pin(p: Pin, age: Callable[[float | None], str]) -> str:
    what = "hanging" if p.state == HANGING else f"{escape(p.state)} {age(p.age_seconds)}"
    held = "" if p.held is None else f", {p.held} held"
    return f"{escape(p.topic)}-{p.partition} ({what}{held})"


def _waiter(w: Waiter) -> str:
    return f"{escape(w.kind)} {escape(w.name)} on {escape(w.topic)}-{w.partition} ({w.held} record(s))"


def _holder(h: Holder, me: str, age: Callable[[float | None], str]) -> str:
    at = f"{escape(h.topic)}-{h.partition}"
    if h.app is None:
        return f"{at}: {escape(h.state)}" + (f" (LSO stalled {age(h.age_seconds)})" if h.age_seconds else "")
    what = "hanging transaction" if h.state == HANGING else f"open transaction ({escape(h.state)})"
    tid = f" {escape(h.transactional_id)}" if h.transactional_id else ""
    whose = "this app" if h.app == me else f"app {escape(h.app)}"
    return f"{at}: {what}{tid} of {whose}, open {age(h.age_seconds)}"


def _relations(v: AppView, age: Callable[[float | None], str]) -> str:
    lines = []
    if v.pins:
        lines.append("pins " + ", ".join(_pin(p, age) for p in v.pins) + _more(len(v.pins), v.pins_total))
    if v.waiters:
        lines.append("<span class=bad>waiting behind it</span>: " + "; ".join(_waiter(w) for w in v.waiters)
                     + _more(len(v.waiters), v.waiters_total))
    if v.holders:
        lines.append("<span class=warn>waits at</span> " + "; ".join(_holder(h, v.app, age) for h in v.holders)
                     + _more(len(v.holders), v.holders_total))
    return f"<td>{'<br>'.join(lines)}</td>" if lines else "<td class=muted>—</td>"


def apps_section(views: Sequence[AppView], more: int, age: Callable[[float | None], str],
                 counted_since: Sequence[tuple[str, float]] = (), clusters: int = 1) -> str:
    """The section: `views` already ordered and capped (app_view.worst_first), `more` the apps
    left out, `age` the page's duration words, `counted_since` per cluster when the tap's
    counts start, `clusters` how many are watched (names shown beside the apps when several)."""
    counting = "; ".join(f"{escape(name) + ' ' if clusters > 1 else ''}from {_clock(at)}"
                         for name, at in counted_since)
    counting = f"The tap counts {counting}. " if counting else "No tap counts (yet). "
    if not views:
        return ("<section><h2>Apps</h2><p class=muted>No transactional app, blocked group or blocked Spark "
                f"query seen yet. {counting}</p></section>")
    stuck = sum(1 for v in views if v.stuck)
    blocking = sum(1 for v in views if v.waiters_total)
    head = (f"<p>{'<span class=bad>' if stuck else ''}{stuck} app(s) with a stuck transaction"
            f"{'</span>' if stuck else ''}, {blocking} holding read_committed readers back.</p>")
    rows = []
    for v in views:
        where = f" · {escape(v.cluster)}" if clusters > 1 else ""
        t = v.transactions
        rows.append(f"<tr><td><b>{escape(v.app)}</b><br><span class=muted>{escape(' · '.join(v.kinds))}{where}"
                    f"</span></td>{_state(v, age)}{_transactions(v, t)}{_relations(v, age)}</tr>")
        if v.abort_command:
            rows.append(f"<tr><td></td><td colspan=5>abort its stuck transactions (a dry run: it shows what "
                        f"would be aborted and who waits; add --yes to act): <code>{escape(v.abort_command)}</code>"
                        "</td></tr>")
    note = (f"<p class=muted>{more} more app(s) not shown (less trouble; every app is on the metrics). "
            if more else "<p class=muted>")
    return ("<section><h2>Apps (most trouble first)</h2>" + head
            + "<table><tr><th>app</th><th>now</th><th>committed</th><th>commit latency</th>"
              "<th>aborted · fenced · timed out</th><th>pins, and who waits</th></tr>" + "".join(rows) + "</table>"
            + note + counting + "Counts are the transaction-log tap's since the time shown; a rate is the change "
              f"over a window of at least {RATE_WINDOW_SECONDS:.0f} s. Commit latency is PrepareCommit to "
              f"CompleteCommit. Stuck: hanging, or open with no sign of life for over {ALIVE_WITHIN_SECONDS:.0f} s "
              f"(at most {MAX_APPS} apps shown).</p></section>")
