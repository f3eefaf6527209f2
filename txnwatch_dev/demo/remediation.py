"""The demo's remediation step: once the outbox's pages have been out a while, the demo ends
its hanging transaction with `txnwatch abort`, run as a user runs it (a dry run, then the
same with --yes and an audit log), and says what the command found, what it discarded and
that the outbox group moved.

When: both pages for the hanging transaction (KafkaTransactionHanging on its partition and,
where a group reads it, KafkaReadCommittedConsumerBlocked for that group) have been firing
in Prometheus for `after` seconds without a break; without Prometheus, the exporter has
shown the transaction hanging (and the group blocked behind it) that long.

Only what the demo made is aborted: the dry run is `--hanging`, as an operator's would be,
but where it finds hanging transactions the demo did not make, or the cluster is a user's,
the abort names the demo's transactional id instead (`--transactional-id`)."""

from __future__ import annotations

import json

from ..observability.scrape import Metrics

HANGING_ALERT, BLOCKED_ALERT = "KafkaTransactionHanging", "KafkaReadCommittedConsumerBlocked"
COMMAND_TIMEOUT = 120      # a dry run is one poll; --yes waits up to 30 s for the LSO and the groups


# ------------------------------------------------------------------ when (pure)
class HeldFor:
    """How long a condition has held without a break (0 while it does not)."""

    def __init__(self) -> None:
        self.since: float | None = None

    def update(self, holds: bool, now: float) -> float:
        if not holds:
            self.since = None
            return 0.0
        if self.since is None:
            self.since = now
        return now - self.since


def _firing(alerts: list[dict], name: str, **labels: str) -> bool:
    return any(a.get("state") == "firing" and a["labels"].get("alertname") == name
               and all(a["labels"].get(k) == v for k, v in labels.items()) for a in alerts)


def pages_firing(alerts: list[dict], topic: str, partition: int, group: str | None) -> bool:
    """Prometheus fires KafkaTransactionHanging on the partition and, with a group reading it,
    KafkaReadCommittedConsumerBlocked for that group there (`alerts`: /api/v1/alerts)."""
    where = {"topic": topic, "partition": str(partition)}
    return _firing(alerts, HANGING_ALERT, **where) and (group is None or _firing(alerts, BLOCKED_ALERT, group=group,
                                                                                   **where))


def exporter_shows(m: Metrics, topic: str, partition: int, group: str | None) -> bool:
    """The exporter shows a hanging transaction on the partition and, with a group, that group
    held behind it (its lag against the HWM above its lag against the LSO)."""
    if not (m.get_value("kafka_transaction_hanging", topic=topic, partition=partition) or 0) > 0:
        return False
    if group is None:
        return True
    lag = {iso: m.get_value(f"kafka_consumergroup_{iso}_lag_offsets", group=group, topic=topic, partition=partition)
           for iso in ("read_committed", "read_uncommitted")}
    return None not in lag.values() and lag["read_uncommitted"] > lag["read_committed"]


def group_past(m: Metrics, group: str, topic: str, partition: int, offset: int) -> bool:
    """The group's committed offset on the partition has passed `offset` (the exporter's view)."""
    committed = m.get_value("kafka_consumergroup_committed_offset", group=group, topic=topic, partition=partition)
    return committed is not None and committed > offset


# ------------------------------------------------------------------ the command (pure)
def abort_argv(txnwatch: str, bootstrap: str, target: list[str], audit_log: str | None = None,
               wait_seconds: float | None = None) -> list[str]:
    """`txnwatch abort` as a user types it, JSON out; with `audit_log`, the acting run (--yes)."""
    argv = [txnwatch, "abort", "--bootstrap-servers", bootstrap, *target]
    if audit_log is not None:
        argv += ["--yes", "--audit-log", audit_log]
        if wait_seconds is not None:
            argv += ["--wait-seconds", f"{wait_seconds:g}"]
    return argv + ["--output", "json"]


def shown(argv: list[str]) -> str:
    """The command line as the demo prints it (without the --output json it reads itself)."""
    return " ".join(argv[:-2] if argv[-2:] == ["--output", "json"] else argv)


def find_made(report: dict, producer_id: int, topic: str, partition: int) -> dict | None:
    """The report's transaction the demo made: its producer id, on its partition."""
    for t in report.get("transactions", ()):
        if t["producer_id"] == producer_id and any((p["topic"], p["partition"]) == (topic, partition)
                                                   for p in t["partitions"]):
            return t
    return None


def dry_run_lines(report: dict, txn: dict) -> list[str]:
    """The dry run's key lines: what it found, who waits, what the abort discards, its verdict."""
    who = f"transactional id {txn['transactional_id']} (app {txn['app']})" if txn["transactional_id"] else \
        "a producer with no transactional id"
    lines = [f"the dry run found {len(report['transactions'])} hanging transaction(s); the demo's: {who}, producer "
             f"id {txn['producer_id']}, epoch {txn['producer_epoch']}"
             + (f", hanging ({txn['hanging_reason']})" if txn["hanging_reason"] else "")
             + f"; {txn['liveness']}"]
    for p in txn["partitions"]:
        stalled = "" if p["stalled_seconds"] is None else f", stalled {p['stalled_seconds']:.0f}s"
        lines.append(f"it holds {p['topic']}-{p['partition']} from offset {p['start_offset']}: LSO "
                     f"{p['last_stable_offset']}, HWM {p['high_watermark']}{stalled}")
        waiting = [f"read_committed group {g['group']} at offset {g['committed']} (lag {g['lag_lso']} vs LSO, "
                   f"{g['lag_hwm']} vs HWM)" for g in p["read_committed_groups"]]
        lines.append("who waits: " + ("; ".join(waiting) if waiting else "no read_committed group"))
    lines.append("the abort discards: " + "; ".join(txn["discards"]))
    if txn["verdict"] == "abort":
        lines.append("verdict: will abort")
    else:
        lines.append("verdict: REFUSED: " + "; ".join(r["words"] for r in txn["refused"]))
    return lines


def others_than(report: dict, txn: dict) -> list[str]:
    """The report's other transactions, by id (what the demo must leave alone)."""
    return [t["transactional_id"] or f"producer id {t['producer_id']}" for t in report.get("transactions", ())
            if t is not txn]


def result_on(txn: dict | None, topic: str, partition: int) -> dict | None:
    """The acting run's result on one partition."""
    for r in (txn or {}).get("results", ()):
        if (r["topic"], r["partition"]) == (topic, partition):
            return r
    return None


def ended_line(topic: str, partition: int, offset: int, lso_after: int | None, group: str | None,
               group_moving: bool) -> str:
    """What the demo says once the abort is done."""
    line = (f"txnwatch abort ended the hanging transaction on {topic}-{partition} at offset {offset}: LSO now "
            f"{'-' if lso_after is None else lso_after}")
    if group is not None:
        line += f"; outbox group {group} " + ("moving again" if group_moving else "has not moved yet")
    return line


def parse_report(out) -> dict | None:
    """The command's JSON report from its CompletedProcess (None: it printed none, e.g. a
    cluster it could not read)."""
    if not out.stdout.lstrip().startswith("{"):
        return None
    try:
        return json.loads(out.stdout)
    except ValueError:
        return None


def failure(out) -> str:
    """Why a run gave no report, in the command's own last words."""
    said = [x for x in (out.stderr or "").splitlines() if x.strip() and not x.startswith("audit: ")]
    return f"exit {out.returncode}" + (f": {said[-1][:300]}" if said else "")
