"""`txnwatch check`: a one-shot diagnosis for a person at a terminal.

Exit status: 0 healthy, 1 warnings, 2 critical findings or a cluster that cannot be reached."""

from __future__ import annotations

import json
import socket
import time
from dataclasses import asdict

from .canary.probe import CanaryProbe
from .config import CanaryConfig, Config
from .exporter.model import ClusterSnapshot
from .exporter.poll.poller import ClusterPoller
from .kafka.errors import classify, one_line
from .kafka.kip664 import API_KEYS
from .kafka.login import explain as explain_failure
from .kafka.login import status_of as login_status

EXIT = {"ok": 0, "warning": 1, "critical": 2}


def check_cluster(cfg, sample_seconds: float) -> dict:
    poller = ClusterPoller(cfg)
    props = cfg.client_properties()
    try:
        poller.poll_once()
        time.sleep(sample_seconds)  # a second sample shows whether stalled LSOs move
        snap = poller.poll_once()
    except Exception as exc:  # noqa: BLE001 - reported, exit 2
        exc = poller.io.named_failure(exc)
        cause, message = explain_failure(props, classify(exc), one_line(exc))
        return {"cluster": cfg.name, "status": "critical", "reachable": False, "login": login_summary(props),
                "error": f"{cause}: {message}",
                "findings": [{"severity": "critical", "kind": "unreachable",
                              "message": f"cannot reach {cfg.bootstrap_servers}: {message}"}]}
    finally:
        poller.io.close()
        poller.txn_api.close()
    return {**summarize(snap), "login": login_summary(props)}


def login_summary(props) -> dict | None:
    """Which login the check used: mechanism and source, principal, the token's time left, and
    why it failed if it did (never a secret)."""
    status = login_status(props)
    if status is None:
        return None
    left = None if status.expires_at is None else round(status.expires_at - time.time(), 1)
    return {"login": status.describe, "principal": status.principal, "token_expires_in_seconds": left,
            "failure": status.failure}


def _login_line(login: dict | None) -> str | None:
    if not login:
        return None
    line = f"   login: {login['login']}"
    if login["principal"]:
        line += f"; principal {login['principal']}"
    if login["token_expires_in_seconds"] is not None:
        line += f"; token valid {_fmt_s(login['token_expires_in_seconds'])} more"
    if login["failure"]:
        line += f"\n   login FAILING: {login['failure']}"
    return line


def summarize(snap: ClusterSnapshot) -> dict:
    stalled = sorted((p for p in snap.partitions.values() if p.stalled_since is not None),
                     key=lambda p: -p.stalled_seconds)
    groups_on: dict = {}
    for g in snap.groups:
        groups_on.setdefault((g.topic, g.partition), []).append(g)
    findings = [asdict(f) for f in snap.findings]
    status = "critical" if any(f["severity"] == "critical" for f in findings) else \
        "warning" if findings else "ok"
    return {
        "cluster": snap.cluster, "status": status, "reachable": True,
        "brokers": snap.facts.brokers,
        # brokers the metadata lacks although partitions list them (down), and partitions whose
        # offsets this check could not read: the rest of the cluster was read
        "missing_brokers": {str(b): n for b, n in sorted(snap.missing_brokers.items())},
        "unavailable_partitions": [{"topic": t, "partition": p, "cause": c}
                                   for (t, p), c in sorted(snap.unavailable.items())],
        "kip664": bool(kip664_caps := {k: v for k, v in snap.capabilities.items() if k in API_KEYS})
                  and all(kip664_caps.values()),
        "hanging_detection": snap.hanging_method,
        "configs": {k: v for k, v in asdict(snap.facts).items() if k not in ("topic_retention_ms",)},
        "open_transactions": None if snap.open_transactions is None else [
            {"transactional_id": t.transactional_id, "app": t.app, "state": t.state,
             "age_seconds": t.age_seconds, "timeout_ms": t.timeout_ms, "headroom_seconds": t.headroom_seconds,
             "two_phase_commit": t.two_phase, "state_unchanged_seconds": t.state_unchanged_seconds,
             "last_append_age_seconds": t.last_append_age_seconds, "producer": t.liveness()}
            for t in sorted(snap.open_transactions, key=lambda t: -(t.age_seconds or 0))],
        "hanging": [asdict(h) for h in snap.hanging],
        "stalled_partitions": [
            {"topic": p.topic, "partition": p.partition, "lso": p.last_stable_offset,
             "hwm": p.high_watermark, "lso_lag": p.lso_lag, "stalled_seconds": round(p.stalled_seconds, 1),
             "groups_behind": [{"group": g.group, "committed": g.committed,
                                "lag_read_committed": g.lag_read_committed,
                                "lag_read_uncommitted": g.lag_read_uncommitted}
                               for g in groups_on.get((p.topic, p.partition), [])]}
            for p in stalled],
        # read_committed lags read as 0: the committed offset is below the LSO by markers only
        "marker_lags": [{"group": g.group, "topic": g.topic, "partition": g.partition, "committed": g.committed,
                         "lso": g.committed + g.marker_offsets, "note": g.lag_note}
                        for g in snap.groups if g.marker_offsets],
        "findings": findings,
    }


def _table(headers: list[str], rows: list[list[object]]) -> str:
    cells = [[str(c) for c in r] for r in rows]
    widths = [max([len(h)] + [len(r[i]) for r in cells]) for i, h in enumerate(headers)]
    line = lambda r: "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip()  # noqa: E731
    return "\n".join([line(headers), line(["-" * w for w in widths])] + [line(r) for r in cells])


def _fmt_s(v: float | None) -> str:
    return "-" if v is None else f"{v:.0f}s"


def format_text(results: list[dict]) -> str:
    out = []
    for r in results:
        out.append(f"== cluster {r['cluster']}: {r['status'].upper()}")
        login = _login_line(r.get("login"))
        if login:
            out.append(login)
        if not r["reachable"]:
            out.append(f"   cannot reach the cluster: {r['error']}")
            continue
        out.append(f"   brokers: {r['brokers']}   KIP-664 transaction APIs: "
                   f"{'yes' if r['kip664'] else 'no (hanging detection from stalled LSOs)'}")
        if r.get("missing_brokers"):
            out.append("   missing brokers (replicas of partitions, absent from the metadata): "
                       + ", ".join(f"{b} ({n} partitions)" for b, n in r["missing_brokers"].items()))
        if r.get("unavailable_partitions"):
            out.append("   partitions not read: " + ", ".join(
                f"{u['topic']}-{u['partition']} ({u['cause']})" for u in r["unavailable_partitions"][:20]))
        if r["open_transactions"]:
            out.append("\nOpen transactions (oldest first)")
            out.append(_table(["transactional id", "app", "state", "age", "timeout", "headroom", "producer"], [
                [t["transactional_id"], t["app"], t["state"], _fmt_s(t["age_seconds"]),
                 "none (2PC)" if t.get("two_phase_commit") else f"{t['timeout_ms'] / 1000:.0f}s",
                 _fmt_s(t["headroom_seconds"]), t.get("producer") or "-"]
                for t in r["open_transactions"][:50]]))
        if r["hanging"]:
            out.append("\nHanging transactions")
            out.append(_table(["partition", "start offset", "age", "transactional id", "reason"], [
                [f"{h['topic']}-{h['partition']}", h["start_offset"], _fmt_s(h["age_seconds"]),
                 h["transactional_id"] or "-", h["reason"]] for h in r["hanging"][:50]]))
        if r["stalled_partitions"]:
            out.append("\nPartitions with the LSO below the HWM")
            rows = []
            for p in r["stalled_partitions"][:50]:
                groups = ", ".join(f"{g['group']} (lag {g['lag_read_committed']} vs LSO, "
                                   f"{g['lag_read_uncommitted']} vs HWM)" for g in p["groups_behind"]) or "-"
                rows.append([f"{p['topic']}-{p['partition']}", p["lso"], p["hwm"], p["lso_lag"],
                             _fmt_s(p["stalled_seconds"]), groups])
            out.append(_table(["partition", "LSO", "HWM", "LSO lag", "stalled", "read_committed groups"], rows))
        if r.get("marker_lags"):
            out.append("\nread_committed lags of 0 below the LSO")
            out += [f"  {m['group']} on {m['topic']}-{m['partition']} (committed {m['committed']}, LSO {m['lso']}): "
                    f"{m['note']}" for m in r["marker_lags"][:50]]
            if len(r["marker_lags"]) > 50:
                out.append(f"  ... and {len(r['marker_lags']) - 50} more")
        if r.get("canary"):
            c = r["canary"]
            vis = ", ".join(f"p{p} {v * 1000:.0f} ms" for p, v in c["visibility_seconds"].items()) or "-"
            init = "-" if c["init_seconds"] is None else f"{c['init_seconds'] * 1000:.0f} ms"
            commit = "-" if c["commit_seconds"] is None else f"{c['commit_seconds'] * 1000:.0f} ms"
            out.append(f"\nCanary ({c['transactional_id']} on {c['topic']}): {'ok' if c['ok'] else 'FAILED'}; "
                       f"InitProducerId {init}, commit {commit}, visible: {vis}")
        if r["findings"]:
            out.append("\nFindings")
            out += [f"  [{f['severity'].upper()}] {f['message']}" for f in r["findings"]]
        else:
            out.append("   no findings")
        out.append("")
    return "\n".join(out)


def canary_check(cfg) -> dict:
    """One canary round on the cluster (a transaction written, committed and read back)."""
    canary = cfg.canary if cfg.canary.enabled else CanaryConfig(enabled=True)
    return CanaryProbe(cfg.name, cfg.client_properties(), canary, f"check-{socket.gethostname()}").check_once()


def add_canary(result: dict, canary: dict) -> dict:
    """The canary's outcome in a cluster's result: a failed round is a critical finding."""
    result["canary"] = canary
    if not canary["ok"]:
        f = canary["failure"] or {"stage": "visibility_timeout", "error": "timed_out", "message": ""}
        where = f" (partitions {canary['not_visible']} not visible)" if canary["not_visible"] else ""
        result.setdefault("findings", []).append({
            "severity": "critical", "kind": "canary",
            "message": f"canary transaction failed at stage {f['stage']} ({f['error']}){where}: {f['message']}"})
        result["status"] = "critical"
    return result


def run_check(config: Config, as_json: bool, sample_seconds: float = 1.0,
              canary: bool = False) -> tuple[str, int]:
    results = [check_cluster(c, sample_seconds) for c in config.clusters]
    if canary:
        results = [add_canary(r, canary_check(c)) if r["reachable"] else r
                   for r, c in zip(results, config.clusters, strict=True)]
    worst = max((EXIT[r["status"]] for r in results), default=0)
    text = json.dumps({"status": [k for k, v in EXIT.items() if v == worst][0], "clusters": results},
                      indent=2, default=str) if as_json else format_text(results)
    return text, worst

