"""The small human page: clusters, last poll and errors, oldest open transactions,
stalled partitions and findings. Rendered from the same in-memory views as /metrics;
every value is HTML-escaped and no client properties (credentials) are shown."""

from __future__ import annotations

import heapq
import math
import time
from collections.abc import Iterable, Mapping
from html import escape

from ... import __version__
from ...config import IN_PROCESS_POLL_INTERVAL
from ...metrics import ALIVE_WITHIN_SECONDS
from ..model import TP, GroupLag, HangingEnded, HangingTransaction, OpenTransaction, PartitionState
from .app_section import apps_section
from .app_view import with_spark_queries, worst_first

_CSS = """
body{font:14px/1.45 system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:0;color:#1d2330;background:#f5f6f8}
header{background:#1d2330;color:#fff;padding:14px 28px;display:flex;align-items:baseline;gap:16px}
header h1{font-size:20px;margin:0}header span{opacity:.7}
main{padding:18px 28px;max-width:1200px}
section{background:#fff;border:1px solid #dfe2e8;border-radius:6px;margin:0 0 18px;padding:14px 18px}
h2{font-size:16px;margin:0 0 10px}
table{border-collapse:collapse;width:100%}th,td{text-align:left;padding:5px 10px;border-bottom:1px solid #eef0f3}
th{font-weight:600;color:#5a6272;font-size:12px;text-transform:uppercase;letter-spacing:.03em}
td.num{text-align:right;font-variant-numeric:tabular-nums}
.ok{color:#137333;font-weight:600}.bad{color:#c5221f;font-weight:600}.warn{color:#b06000;font-weight:600}
.pill{display:inline-block;border-radius:10px;padding:1px 8px;font-size:12px;background:#eef0f3}
.muted{color:#6b7280}a{color:#1a5fb4}
"""


def _age(seconds: float | None) -> str:
    if seconds is None:
        return "—"
    s = abs(seconds)
    text = f"{s:.0f}s" if s < 120 else f"{s / 60:.1f}m" if s < 7200 else f"{s / 3600:.1f}h"
    return ("-" if seconds < 0 else "") + text


def _when(ts: float | None, now: float) -> str:
    return "never" if not ts else f"{_age(now - ts)} ago"


def blocked_by(g: GroupLag, partition: PartitionState | None, hanging: Mapping[TP, HangingTransaction],
               open_txns: Iterable[OpenTransaction]) -> str:
    """What keeps a read_committed group from reading up to the high watermark of one
    partition (pure): the hanging transaction, or the open transaction(s), holding the
    partition's last stable offset back. "" when nothing past the LSO is waiting."""
    if g.lag_read_uncommitted <= g.lag_read_committed + g.marker_offsets:
        return ""
    tp = (g.topic, g.partition)
    h = hanging.get(tp)
    if h is not None:
        who = f", transactional id {h.transactional_id}" if h.transactional_id else ""
        return (f"hanging transaction at offset {h.start_offset} (producer id {h.producer_id}{who}, "
                f"open {_age(h.age_seconds)})")
    holders = sorted({t.transactional_id for t in open_txns if tp in t.partitions})
    stalled = (f"LSO stalled {_age(partition.stalled_seconds)}"
               if partition is not None and partition.stalled_since is not None else "")
    if holders:
        more = f" and {len(holders) - 3} more" if len(holders) > 3 else ""
        return f"open transaction of {', '.join(holders[:3])}{more}" + (f" ({stalled})" if stalled else "")
    return f"an open transaction ({stalled})" if stalled else "an open transaction"


def liveness_cell(t: OpenTransaction) -> str:
    """An open transaction's producer, alive or not, and the two clocks the words come from."""
    words = t.liveness(_age)
    if not words:
        return "<td class=muted>not known</td>"
    clocks = []
    if t.state_unchanged_seconds is not None:
        clocks.append(f"coordinator state unchanged {_age(t.state_unchanged_seconds)}")
    if t.last_append_age_seconds is not None:
        clocks.append(f"last append {_age(t.last_append_age_seconds)} ago")
    return (f"<td{' class=bad' if words.startswith('no sign') else ''}>{escape(words)}"
            f"<br><span class=muted>{escape('; '.join(clocks))}</span></td>")


def group_rows(snap, limit: int = 20) -> tuple[list[tuple[GroupLag, str]], int]:
    """(group lag, blocked by) for partitions where a group has records it cannot or did not
    read yet, blocked ones first, then by lag against the HWM; and how many are caught up."""
    hanging = {(h.topic, h.partition): h for h in snap.hanging}
    txns = snap.open_transactions or ()
    rows = [(g, blocked_by(g, snap.partitions.get((g.topic, g.partition)), hanging, txns))
            for g in snap.groups if g.lag_read_uncommitted > 0]
    # sorted(rows)[:limit], without sorting every lagging row of a big estate at each poll
    top = heapq.nsmallest(limit, rows, key=lambda r: (r[1] == "", -r[0].lag_read_uncommitted, r[0].group,
                                                      r[0].topic, r[0].partition))
    return top, len(snap.groups) - len(rows)


def group_note(g: GroupLag, blocked: str) -> str:
    """The last column of a group's row: what blocks it, and why its lag vs LSO is 0."""
    return "; ".join(x for x in (blocked or "not blocked", g.lag_note) if x)


def _groups_section(digests: list[tuple[str, object]]) -> str:
    rows, caught_up = [], 0
    for name, d in digests:
        rows += [(name, g, why) for g, why in d.group_rows]
        caught_up += d.groups_caught_up
    rows.sort(key=lambda r: (r[2] == "", -r[1].lag_read_uncommitted, r[0], r[1].group, r[1].topic,
                             r[1].partition))
    rows = rows[:20]
    if not rows:
        body = ("<p class=ok>Every consumer group is at the high watermark.</p>" if caught_up else
                "<p class=muted>No consumer group has committed offsets on the watched topics.</p>")
    else:
        body = ("<table><tr><th>cluster</th><th>group</th><th>partition</th><th>committed</th>"
                "<th>lag vs LSO</th><th>lag vs HWM</th><th>blocked by</th></tr>" + "".join(
                    f"<tr><td>{escape(c)}</td><td>{escape(g.group)}</td>"
                    f"<td>{escape(g.topic)}-{g.partition}</td>"
                    f"<td class=num>{g.committed}</td><td class=num>{g.lag_read_committed}</td>"
                    f"<td class=num>{g.lag_read_uncommitted}</td>"
                    f"<td class={'bad' if why.startswith('hanging') else 'warn' if why else 'muted'}>"
                    f"{escape(group_note(g, why))}</td></tr>" for c, g, why in rows) + "</table>"
                + (f"<p class=muted>{caught_up} other group partition(s) are at the high watermark.</p>"
                   if caught_up else ""))
    return ("<section><h2>Consumer groups (read_committed readers stop at the LSO)</h2>" + body
            + "</section>")


def _cadence(seconds: float) -> str:
    """A learnt scrape period to two significant figures: it is a mean of arrival times that
    carry the network's and the scheduler's jitter, and scrape intervals are configured round
    (a Prometheus at 2 s reads "2 s", not "1.99 s")."""
    if seconds <= 0:
        return f"{seconds:g} s"
    return f"{round(seconds, 1 - math.floor(math.log10(seconds))):g} s"


def _ms(seconds: float | None) -> str:
    return "" if seconds is None else f"{seconds * 1000:.0f} ms"


def tap_section(taps: list[tuple[str, object, object]]) -> str:
    """The transaction-log tap's row per cluster: (cluster, tap summary, tap health)."""

    def found(v, h) -> str:
        if v.topic_found:
            return "yes"
        if h.up or not h.last_error:   # the broker answered: no transactional producer ran yet
            return "<span class=warn>waiting for __transaction_state</span>"
        return f"<span class=bad>cannot read it: {escape(h.last_error)}</span>"

    rows = "".join(
        f"<tr><td>{escape(n)}</td><td>{found(v, h)}</td>"
        f"<td>{'yes' if v.rebuilt else 'rebuilding'}</td>"
        f"<td class=num>{'' if v.lag_records is None else v.lag_records}</td>"
        f"<td class=num>{v.applied}</td><td class=num>{v.ids}</td></tr>"
        for n, v, h in taps)
    return ("<section><h2>Transaction-log tap</h2><table><tr><th>cluster</th><th>topic found</th>"
            "<th>rebuilt</th><th>lag (records)</th><th>applied</th><th>transactional ids</th></tr>"
            + rows + "</table></section>")


def canary_section(canaries: list[tuple[str, object]], now: float) -> str:
    """The transactional canary per cluster (`canaries`: (cluster, CanarySummary))."""
    if not canaries:
        return ""
    rows = []
    for name, c in canaries:
        if c.failing:
            state = "<span class=bad>failing</span>"
        elif c.last_success is None:
            state = "<span class=warn>no round yet</span>"
        else:
            state = "<span class=ok>ok</span>"
        last = ""
        if c.last_failure is not None:
            stage, error, message = c.last_failure
            last = (f"{escape(stage)}: {escape(error)} ({_when(c.last_failure_at, now)})"
                    + (f"<br><span class=muted>{escape(message[:300])}</span>" if message else ""))
        rows.append(
            f"<tr><td>{escape(name)}</td><td>{state}</td><td>{_when(c.last_success, now)}</td>"
            f"<td class=num>{c.committed}</td><td class=num>{c.aborted}</td>"
            f"<td class=num>{_ms(c.commit_mean_seconds)}</td><td class=num>{_ms(c.visibility_mean_seconds)}</td>"
            f"<td class=num>{c.failures}</td><td class=num>{c.visibility_timeouts}</td>"
            f"<td class='num {'bad' if c.violations else ''}'>{c.violations}</td><td>{last}</td></tr>")
    return ("<section><h2>Transactional canary</h2><table><tr><th>cluster</th><th>state</th>"
            "<th>last success</th><th>committed</th><th>aborted</th><th>commit (mean)</th>"
            "<th>visible after (mean)</th><th>failures</th><th>not visible in time</th>"
            "<th>aborted records seen</th><th>last failure</th></tr>" + "".join(rows)
            + "</table><p class=muted>Aborted records seen by the read_committed consumer must stay 0.</p>"
            "</section>")


def poll_schedule_note(view, clusters: list[tuple[str, str, float, float]]) -> str:
    """One line on when polls happen (pure): `view` is the scrape clock's ScrapeView, and
    `clusters` (name, poll_schedule, poll_interval_seconds, poll_idle_interval_seconds)."""
    timed = [c for c in clusters if c[1] == "scrapes"]
    parts = []
    if timed:
        names = ", ".join(escape(c[0]) for c in timed)
        if view.settling:
            parts.append(f"{names}: polls back to back while {view.settling} scraper(s) settle into a cadence")
        elif view.cadences:
            every = ", ".join(_cadence(c.period) for c in view.cadences)
            parts.append(f"{names}: each poll timed to be done just before the next scrape of "
                         f"{len(view.cadences)} scraper(s) (every {every})")
        else:
            idle = ", ".join(sorted({f"{c[3]:g} s" for c in timed}))
            parts.append(f"{names}: nobody scraping, one poll per {idle}")
    parts += [f"{escape(name)}: polls back to back, at most one start per {interval:g} s"
              for name, schedule, interval, _idle in clusters if schedule != "scrapes"]
    return "Polls: " + "; ".join(parts) + "." if parts else ""


def render_page(exporter) -> str:
    now = time.time()
    path = exporter.config.http.telemetry_path
    out = [f"<!doctype html><html><head><meta charset=utf-8><title>txnwatch</title>"
           f"<meta name=viewport content='width=device-width'><style>{_CSS}</style></head><body>"
           f"<header><h1>txnwatch</h1><span>exactly-once Kafka pipelines · v{escape(__version__)}</span>"
           f"<span style='margin-left:auto'><a style='color:#9ecbff' href='{escape(path)}'>{escape(path)}</a> · "
           f"<a style='color:#9ecbff' href='/readyz'>/readyz</a></span></header><main>"]
    # clusters: (name, its sources' health, its digest) from the exporter, in- or out-of-process
    views = exporter.page_views()
    rows = []
    for name, sources, _digest in views:
        for h in sources:
            state = "<span class=ok>up</span>" if h.up else "<span class=bad>down</span>"
            err = escape(h.last_error or "") if not h.up else ""
            stale = ""
            if not h.up and h.last_success:
                since = time.strftime("%H:%M:%S UTC", time.gmtime(h.last_success))
                stale = f"<br><span class=warn>data stale since {since} ({_when(h.last_success, now)})</span>"
            rows.append(f"<tr><td>{escape(name)}</td><td>{escape(h.source)}</td><td>{state}</td>"
                        f"<td>{_when(h.last_success, now)}</td><td class=num>"
                        f"{'' if h.last_duration is None else f'{h.last_duration * 1000:.0f} ms'}</td>"
                        f"<td class=num>{sum(h.errors.values())}</td><td>{err}{stale}</td></tr>")
    out.append("<section><h2>Clusters</h2><table><tr><th>cluster</th><th>source</th><th>state</th>"
               "<th>last success</th><th>last poll</th><th>errors</th><th>last error</th></tr>"
               + "".join(rows) + "</table>" + _logins_paragraph(views, now) + _schedule_paragraph(exporter)
               + "</section>")

    findings, txns, stalled, notes, digests = [], [], [], [], []
    unobservable = False   # a cluster without KIP-664: its open transactions cannot be listed
    for name, _sources, d in views:
        if d.kip664_error:
            notes.append(f"{escape(name)}: KIP-664 poll failed: {escape(d.kip664_error)}")
        for group_type, n, names in d.other_groups:
            why = ("share groups (KIP-932): no committed offsets, so no lag series" if group_type == "share" else
                   f"{group_type} groups: offsets and lag are read for classic and consumer groups only")
            notes.append(f"{escape(name)}: {n} {escape(why)} (kafka_cluster_groups counts them): "
                         f"{escape(', '.join(names))}{' ...' if n > len(names) else ''}")
        if d.taken_at is None:
            continue
        digests.append((name, d))
        findings += [(name, f) for f in d.findings]
        if d.open_transactions is not None:
            txns += [(name, t) for t in d.open_transactions]
        else:
            unobservable = True
        stalled += [(name, p) for p in d.stalled]
        if d.hanging_method == "lso_stall":
            notes.append(f"{escape(name)}: the broker lacks the KIP-664 transaction APIs "
                         "(ListTransactions, DescribeTransactions, DescribeProducers); hanging transactions "
                         "are detected from stalled last stable offsets instead.")
    sev = {"critical": "bad", "warning": "warn"}
    out.append("<section><h2>Findings</h2>" + (
        "<table><tr><th>cluster</th><th>severity</th><th>finding</th></tr>" + "".join(
            f"<tr><td>{escape(c)}</td><td class={sev.get(f.severity, '')}>{escape(f.severity)}</td>"
            f"<td>{escape(f.message)}</td></tr>" for c, f in findings[:50]) + "</table>"
        if findings else "<p class=ok>No findings: no hanging transactions, stalled LSOs or config risks.</p>")
        + "</section>")
    out.append(_apps(exporter, digests, len(views)))
    txns.sort(key=lambda ct: -(ct[1].age_seconds or 0))
    out.append("<section><h2>Oldest open transactions</h2>" + (
        "<table><tr><th>cluster</th><th>app</th><th>transactional id</th><th>state</th><th>age</th>"
        "<th>timeout</th><th>headroom</th><th>producer</th></tr>" + "".join(
            f"<tr><td>{escape(c)}</td><td>{escape(t.app)}</td><td>{escape(t.transactional_id)}</td>"
            f"<td>{escape(t.state)}</td><td class=num>{_age(t.age_seconds)}</td>"
            f"<td class=num>{'none (two-phase commit)' if t.two_phase else f'{t.timeout_ms / 1000:.0f}s'}</td>"
            f"<td class='num "
            f"{'bad' if (t.headroom_seconds or 0) < 0 else ''}'>{_age(t.headroom_seconds)}</td>"
            f"{liveness_cell(t)}</tr>"
            for c, t in txns[:20]) + "</table>"
        + "<p class=muted>Producer: alive while its last sign of life, the later of the coordinator's last "
          "change and its last append on a partition of the transaction, is at most "
          f"{ALIVE_WITHIN_SECONDS:.0f}s old.</p>"
        if txns else "<p class=muted>" + ("None open, or not observable on this broker (see notes)."
                                           if unobservable else "None open at the last poll.") + "</p>")
        + "</section>")
    out.append(hanging_ended_section([(name, e) for name, d in digests for e in d.hanging_ended], now))
    stalled.sort(key=lambda cp: -cp[1].stalled_seconds)
    out.append("<section><h2>Stalled partitions (LSO below HWM)</h2>" + (
        "<table><tr><th>cluster</th><th>partition</th><th>LSO</th><th>HWM</th><th>LSO lag</th>"
        "<th>stalled for</th></tr>" + "".join(
            f"<tr><td>{escape(c)}</td><td>{escape(p.topic)}-{p.partition}</td>"
            f"<td class=num>{p.last_stable_offset}</td><td class=num>{p.high_watermark}</td>"
            f"<td class=num>{p.lso_lag}</td><td class=num>{_age(p.stalled_seconds)}</td></tr>"
            for c, p in stalled[:20]) + "</table>"
        if stalled else "<p class=ok>Every partition's LSO is at its high watermark.</p>") + "</section>")
    out.append(_groups_section(digests))
    extra = getattr(exporter, "page_sections", None)
    if extra:
        out.extend(extra())
    if notes:
        out.append("<section><h2>Notes</h2><ul>" + "".join(f"<li>{n}</li>" for n in notes) + "</ul></section>")
    out.append(f"<p class=muted>Rendered {time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime(now))}. "
               "Scrapes never talk to Kafka: values are from each source's last poll.</p></main></body></html>")
    return "".join(out)


HOW_ENDED = {
    "markers": "abort markers written straight to its partition: an operator's abort (txnwatch abort, "
               "kafka-transactions.sh abort)",
    "producer": "its producer's next transaction ended, and its markers closed this partition too",
    "coordinator": "its coordinator aborted its producer's next transaction at its timeout, closing this partition too",
    "unknown": "its LSO moved (found by a stalled LSO: no producer to ask about)",
}


def hanging_ended_section(ended: list[tuple[str, HangingEnded]], now: float) -> str:
    """The hanging transactions seen to end lately, and how: nothing when none did."""
    if not ended:
        return ""
    ended = sorted(ended, key=lambda ce: -ce[1].at)[:20]
    return ("<section><h2>Hanging transactions that ended</h2><table><tr><th>cluster</th><th>when</th>"
            "<th>partition</th><th>from offset</th><th>transactional id</th><th>app</th><th>ended by</th></tr>"
            + "".join(f"<tr><td>{escape(c)}</td><td class=num>{_age(now - e.at)} ago</td>"
                      f"<td>{escape(e.hanging.topic)}-{e.hanging.partition}</td>"
                      f"<td class=num>{e.hanging.start_offset}</td>"
                      f"<td>{escape(e.hanging.transactional_id or '-')}</td><td>{escape(e.app)}</td>"
                      f"<td>{escape(HOW_ENDED.get(e.how, e.how))}</td></tr>" for c, e in ended)
            + "</table></section>")


def _apps(exporter, digests: list[tuple[str, object]], clusters: int) -> str:
    """The apps of every cluster's digest, with the Spark queries blocked behind them (only
    this process knows the queries), the most troubled first."""
    views = [v for _name, d in digests for v in getattr(d, "apps", ())]
    left_out = sum(getattr(d, "apps_more", 0) for _name, d in digests)
    spark = getattr(exporter, "spark_partitions", None)
    if spark is not None:
        views = with_spark_queries(views, spark()[0])
    shown, more = worst_first(views)
    since = [(name, d.apps_counted_since) for name, d in digests
             if getattr(d, "apps_counted_since", None) is not None]
    return apps_section(shown, left_out + more, _age, since, clusters)


def _logins_paragraph(views, now: float) -> str:
    """How each cluster's clients log in: mechanism and source, principal, the token's time left,
    and while the credentials cannot be had, why."""
    lines = []
    for name, _sources, digest in views:
        login = getattr(digest, "login", None)
        if login is None:
            continue
        line = f"{escape(name)}: {escape(login.describe)}"
        if login.principal:
            line += f"; principal {escape(login.principal)}"
        if login.expires_at is not None:
            left = login.expires_at - now
            line += f"; token valid {_age(left)} more" if left > 0 else "; <span class=bad>token expired</span>"
        if login.failure:
            line += f"<br><span class=bad>login failing: {escape(login.failure)}</span>"
        lines.append(line)
    return "<p>Logins: " + "<br>".join(lines) + "</p>" if lines else ""


def _schedule_paragraph(exporter) -> str:
    view_of = getattr(exporter, "scrape_view", None)
    if view_of is None:
        return ""
    note = poll_schedule_note(view_of(), [(c.name, c.poll_schedule, c.poll_interval_seconds or IN_PROCESS_POLL_INTERVAL,
                                           c.poll_idle_interval_seconds)
                                          for c in exporter.config.clusters if c.name in exporter.clusters])
    return f"<p class=muted>{note}</p>" if note else ""
