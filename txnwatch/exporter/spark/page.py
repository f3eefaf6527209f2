"""The page's Spark section: one row per query (batch, duration, rates, offsets behind) and
what each blocked or slow Kafka partition is waiting for."""

from __future__ import annotations

import time
from html import escape

from ...spark_listener.state import QueryCard, SourcePosition
from ...trigger_modes import KNOWN_MODES, LONG_BATCH_MODES
from .blocked import BEHIND, BLOCKED, SparkPartitionStatus

MAX_ROWS = 100


def _n(v: float | None, fmt: str = "{:.0f}") -> str:
    return "" if v is None else fmt.format(v)


def _status(card: QueryCard, statuses: list[SparkPartitionStatus]) -> str:
    mine = [s for s in statuses if s.query_id == card.query_id]
    blocked = [s for s in mine if s.state == BLOCKED]
    behind = [s for s in mine if s.state == BEHIND]
    if not card.active:
        how = card.terminated_with or "none"
        return (f"<span class=bad>terminated ({escape(how)})</span>" if how != "none"
                else "<span class=muted>stopped</span>")
    if blocked:
        parts = []
        for s in blocked[:5]:
            holder = f"; held by {escape(s.holder)}" if s.holder else ""
            parts.append(f"{escape(s.topic)}-{s.partition} on {escape(s.cluster)}: read up to the LSO "
                         f"{s.last_stable_offset}, stalled {s.stalled_seconds:.0f}s, {s.held_back} record(s) "
                         f"held back{holder}")
        more = f" (+{len(blocked) - 5} more)" if len(blocked) > 5 else ""
        return ("<span class=bad>blocked by an open transaction</span>: " + "; ".join(parts) + more
                + " <span class=muted>(it looks caught up: its offsets behind latest are 0, because "
                "read_committed's latest is the LSO)</span>")
    if behind:
        total = sum(s.behind_lso for s in behind)
        return (f"<span class=warn>behind</span>: {total} readable record(s) not read yet on "
                f"{len(behind)} partition(s) (slow, not blocked)")
    if mine:
        return "<span class=ok>caught up</span>"
    # With worker processes a query's topics are matched from the poll after the exporter first
    # saw them; a topic on no watched cluster stays unmatched.
    return ("<span class=muted>no Kafka partition matched on a watched cluster (yet: new topics are "
            "matched at the next poll)</span>")


def _trigger(card: QueryCard) -> str:
    if card.trigger is None:
        return "<span class=muted>not known yet</span>"
    every = "" if card.trigger_interval is None else f" {card.trigger_interval:g}s"
    text = escape(card.trigger) + every
    if card.trigger not in KNOWN_MODES:
        return (f"<span class=warn>{text}: a trigger mode txnwatch does not know; its batch-duration "
                "and stall alerts may not fit it</span>")
    if card.trigger in LONG_BATCH_MODES:
        return (f"{text} <span class=muted>(batches last the whole trigger by design; progress comes once "
                "per batch)</span>")
    return text


def spark_section(cards: list[QueryCard], statuses: list[SparkPartitionStatus],
                  ambiguous: list[SourcePosition], now: float | None = None) -> str:
    now = time.time() if now is None else now
    rows = []
    for c in cards[:MAX_ROWS]:
        age = "" if c.last_progress_ts is None else f"{max(now - c.last_progress_ts, 0):.0f}s ago"
        rows.append(
            f"<tr><td>{escape(c.query)}<br><span class=muted>{escape(c.query_id)}</span></td>"
            f"<td>{_trigger(c)}</td><td class=num>{_n(c.batch_id)}</td><td class=num>{_n(c.last_batch_seconds, '{:.2f}s')}</td>"
            f"<td class=num>{_n(c.input_rate, '{:.1f}')}</td><td class=num>{_n(c.processed_rate, '{:.1f}')}</td>"
            f"<td class=num>{_n(c.offsets_behind)}</td><td>{escape(age)}</td><td>{_status(c, statuses)}</td></tr>")
    note = ""
    if ambiguous:
        topics = sorted({p.topic for p in ambiguous})
        note = (f"<p class=warn>Topic(s) {escape(', '.join(topics[:10]))} exist on several watched clusters: "
                "their queries are not matched to a partition's LSO.</p>")
    more = f"<p class=muted>{len(cards) - MAX_ROWS} more queries not shown.</p>" if len(cards) > MAX_ROWS else ""
    return ("<section><h2>Spark queries (from the listener)</h2><table><tr><th>query</th><th>trigger</th><th>batch</th>"
            "<th>last batch</th><th>input rows/s</th><th>processed rows/s</th><th>offsets behind latest</th>"
            "<th>last progress</th><th>Kafka source</th></tr>" + "".join(rows) + "</table>" + note + more
            + "</section>")
