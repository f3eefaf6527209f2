"""What `txnwatch abort` prints: the plan (a dry run), then what was done. Text for a person,
JSON (`--output json`) for runbooks and chat-ops; both from the same dict."""

from __future__ import annotations

import json

from .plan import Decision, Pin


def pin_dict(pin: Pin, now_s: float) -> dict:
    return {"topic": pin.topic, "partition": pin.partition, "start_offset": pin.start_offset,
            "last_stable_offset": pin.lso, "high_watermark": pin.hwm, "holds_lso": pin.pins_lso,
            "stalled_seconds": None if pin.stalled_since is None else round(now_s - pin.stalled_since, 1),
            "read_committed_groups": [{"group": g.group, "committed": g.committed, "lag_lso": g.lag_lso,
                                       "lag_hwm": g.lag_hwm} for g in pin.groups],
            "spark_queries": [{"query": q.query, "query_id": q.query_id, "offset": q.offset, "lag_lso": q.lag_lso,
                               "lag_hwm": q.lag_hwm} for q in pin.queries]}


def decision_dict(d: Decision, now_ms: int) -> dict:
    t, c = d.txn, d.txn.coordinator
    return {
        "transactional_id": t.transactional_id, "app": t.app, "producer_id": t.producer_id,
        "producer_epoch": t.producer_epoch,
        "coordinator": None if c is None else {"state": c.state, "producer_id": c.producer_id,
                                               "producer_epoch": c.producer_epoch, "timeout_ms": c.timeout_ms,
                                               "start_ms": c.start_ms},
        "state_unchanged_seconds": t.state_unchanged_seconds,
        "hanging_reason": t.hanging_reason, "age_seconds": None if d.age_seconds is None else round(d.age_seconds, 1),
        "liveness": d.liveness,
        "partitions": [pin_dict(p, now_ms / 1000) for p in t.pins],
        "discards": list(d.discards), "producer_next": d.producer_next,
        "verdict": "abort" if d.will_abort else "refused",
        "risks": [{"kind": r.kind, "accepted_by": r.flag, "words": r.words} for r in d.risks],
        "refused": [{"kind": r.kind, "accepted_by": r.flag, "words": r.words} for r in d.refused],
    }


def render_json(report: dict) -> str:
    return json.dumps(report, indent=2, default=str)


def _s(v: float | None) -> str:
    return "-" if v is None else f"{v:.0f}s"


def render_text(report: dict) -> str:
    out = []
    mode = "DRY RUN (nothing changed)" if report["dry_run"] else "ABORT"
    out.append(f"txnwatch abort: {mode} on cluster {report['cluster']}, as {report['principal'] or 'ANONYMOUS'}")
    out.append(f"target: {report['target']}")
    for note in report.get("notes", ()):
        out.append(f"  {note}")
    txns = report["transactions"]
    if not txns:
        out.append("no open transaction to abort")
    for n, t in enumerate(txns, 1):
        who = f"transactional id {t['transactional_id']} (app {t['app']})" if t["transactional_id"] else \
            "no transactional id"
        out.append(f"\n[{n}/{len(txns)}] {who}: producer id {t['producer_id']}, epoch {t['producer_epoch']}"
                   + (f"; hanging ({t['hanging_reason']})" if t["hanging_reason"] else ""))
        out.append(f"  alive or stuck: {t['liveness']}")
        out.append(f"  open for: {_s(t['age_seconds'])}")
        for p in t["partitions"]:
            held = "holds the LSO" if p["holds_lso"] else f"LSO {p['last_stable_offset']} is held lower by another"
            out.append(f"  {p['topic']}-{p['partition']}: from offset {p['start_offset']}; LSO "
                       f"{p['last_stable_offset']}, HWM {p['high_watermark']} ({held}"
                       + (f", stalled {_s(p['stalled_seconds'])})" if p["stalled_seconds"] is not None else ")"))
            for g in p["read_committed_groups"]:
                out.append(f"    read_committed group {g['group']}: lag {g['lag_lso']} vs LSO, "
                           f"{g['lag_hwm']} vs HWM (committed {g['committed']})")
            for q in p["spark_queries"]:
                out.append(f"    Spark query {q['query'] or q['query_id']}: lag {q['lag_lso']} vs LSO, "
                           f"{q['lag_hwm']} vs HWM (reads from {q['offset']})")
        out.append("  the abort discards: " + "; ".join(t["discards"]))
        out.append(f"  the producer will see: {t['producer_next']}")
        if t["verdict"] == "abort":
            accepted = [r for r in t["risks"] if r["accepted_by"]]
            out.append("  -> will abort" + (" (accepted: " + "; ".join(
                f"{r['accepted_by']}: {r['words']}" for r in accepted) + ")" if accepted else ""))
        else:
            for r in t["refused"]:
                how = f" (accept with {r['accepted_by']})" if r["accepted_by"] else " (no flag overrides this)"
                out.append(f"  -> REFUSED: {r['words']}{how}")
        for res in t.get("results", ()):
            line = f"  {res['topic']}-{res['partition']}: {res['outcome']}"
            if res.get("error"):
                line += f": {res['error']}"
            if res.get("lso_after") is not None:
                line += f"; LSO now {res['lso_after']}"
            if res.get("groups_moving"):
                line += f"; moving again: {', '.join(res['groups_moving'])}"
            if res.get("groups_still"):
                line += f"; not moved yet: {', '.join(res['groups_still'])}"
            out.append(line)
    if report.get("next"):
        out.append(f"\n{report['next']}")
    if report.get("summary"):
        out.append(report["summary"])
    return "\n".join(out)
