"""Findings: what a person should act on, worded, most severe first, from one poll's reading
of a cluster (pure: the derivations' results and the cluster's settings in, Finding values
out), and the `txnwatch abort` command lines they and the page give."""

from __future__ import annotations

import shlex
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from ...kafka.answers import ClusterFacts, PartitionReplicas
from ..model import TP, Finding, GroupLag, HangingTransaction, OpenTransaction, PartitionState
from .derive import txn_log_below_min_isr, txn_log_min_isr, txn_log_partition_of

MAX_NAMED_PARTITIONS = 5                     # partitions (and ids) named in one finding


def abort_command(h: HangingTransaction, bootstrap: str = "<bootstrap>", secured: bool = False) -> str:
    """The command that ends a hanging transaction: `txnwatch abort` on its partition, a dry
    run (what it pins, who waits behind it, what the abort discards) until `--yes` is added.
    On a secured cluster it needs an admin's client settings: a configuration file of its own."""
    return f"txnwatch abort {_abort_where(bootstrap, secured)} --partition {h.topic}:{h.partition}"


def abort_app_command(app: str, bootstrap: str = "<bootstrap>", secured: bool = False) -> str:
    """The dry run of `txnwatch abort` on every open transaction of one app (quoted for a shell:
    app names come from transactional ids, which may hold anything)."""
    return f"txnwatch abort {_abort_where(bootstrap, secured)} --app {shlex.quote(app)}"


def _abort_where(bootstrap: str, secured: bool) -> str:
    return "--config admin.yaml" if secured else f"--bootstrap-servers {bootstrap}"


@dataclass(frozen=True)
class PollReading:
    """One poll's reading of a cluster, as config_findings weighs it: what the brokers said
    (their configs, __transaction_state's replicas, the brokers gone, what could not be
    read), what the poll derived (open and hanging transactions, partition states, the
    read_committed groups behind a stalled LSO) and the cluster's settings that word and
    weigh the findings."""

    facts: ClusterFacts
    stall_warning_seconds: float                   # a stalled LSO is named from this age on
    open_transactions: Sequence[OpenTransaction] | None = None   # None: KIP-664 not observable
    hanging: Sequence[HangingTransaction] = ()
    partitions: Mapping[TP, PartitionState] = field(default_factory=dict)
    blocked_groups: Iterable[GroupLag] = ()
    txn_log: Sequence[PartitionReplicas] = ()      # __transaction_state's partitions
    unavailable: Mapping[TP, str] = field(default_factory=dict)          # partition -> why unread
    missing_brokers: Mapping[int, int] = field(default_factory=dict)     # broker -> partitions it replicates
    groups_unavailable: Mapping[str, str] = field(default_factory=dict)  # group -> why unread
    bootstrap: str = "<bootstrap>"                 # named in the abort command
    secured: bool = False                          # the abort command needs an admin's client settings
    two_phase_max_age_seconds: float = 3600.0


def config_findings(reading: PollReading) -> list[Finding]:
    """Findings a person should act on, most severe first."""
    out = [*_txn_log_findings(reading), *_missing_broker_findings(reading), *_unread_partition_findings(reading),
           *_unread_group_findings(reading), *_hanging_findings(reading), *_stalled_lso_findings(reading),
           *_open_transaction_findings(reading), *_blocked_group_findings(reading)]
    out.sort(key=lambda f: f.severity != "critical")
    return out


def _more(n: int) -> str:
    """What follows the named ones of `n` (partitions, ids, groups)."""
    return f" and {n - MAX_NAMED_PARTITIONS} more" if n > MAX_NAMED_PARTITIONS else ""


def _txn_log_findings(r: PollReading) -> list[Finding]:
    """__transaction_state partitions below their minimum ISR, with the open transactions
    whose coordinator writes there."""
    txn_log = tuple(r.txn_log)
    below = txn_log_below_min_isr(txn_log, txn_log_min_isr(r.facts))
    if not below:
        return []
    blocked_parts = {p.partition for p, _ in below}
    blocked_ids = sorted(t.transactional_id for t in r.open_transactions or ()
                         if txn_log_partition_of(t.transactional_id, len(txn_log)) in blocked_parts)
    named = ", ".join(f"{p.partition} ({'offline' if p.leader < 0 else f'ISR {len(p.isr)} < {need}'})"
                      for p, need in below[:MAX_NAMED_PARTITIONS])
    ids = f"; open transactions affected: {', '.join(blocked_ids[:MAX_NAMED_PARTITIONS])}" if blocked_ids else ""
    return [Finding("critical", "min_isr",
                    f"{len(below)} of {len(txn_log)} __transaction_state partition(s) below their minimum "
                    f"ISR: {named}{_more(len(below))}. InitProducerId and EndTxn block for every transactional id "
                    f"that hashes to them (abs(id.hashCode()) % {len(txn_log)}){ids}")]


def _missing_broker_findings(r: PollReading) -> list[Finding]:
    missing = r.missing_brokers
    if not missing:
        return []
    return [Finding("critical", "broker_missing",
                    f"broker(s) {', '.join(str(b) for b in sorted(missing))} absent from the cluster metadata "
                    f"while replicas of {sum(missing.values())} partition(s): down or fenced")]


def _unread_partition_findings(r: PollReading) -> list[Finding]:
    """One finding per cause of the partitions this poll could not read."""
    by_cause: dict[str, list[str]] = {}
    for (t, p), cause in sorted(r.unavailable.items()):
        by_cause.setdefault(cause, []).append(f"{t}-{p}")
    out = []
    for cause, tps in sorted(by_cause.items()):
        what = "offline (no leader)" if cause == "offline" else f"unread ({cause} from its leader)"
        out.append(Finding("critical" if cause == "offline" else "warning", "partition_unavailable",
                           f"{len(tps)} partition(s) {what}: {', '.join(tps[:MAX_NAMED_PARTITIONS])}"
                           f"{_more(len(tps))}; their series keep the last values read, the others are current"))
    return out


def _unread_group_findings(r: PollReading) -> list[Finding]:
    if not r.groups_unavailable:
        return []
    names = sorted(r.groups_unavailable)
    causes = ", ".join(sorted(set(r.groups_unavailable.values())))
    return [Finding("warning", "group_unavailable",
                    f"{len(names)} consumer group(s) not read ({causes}: their coordinator did not answer): "
                    f"{', '.join(names[:MAX_NAMED_PARTITIONS])}{_more(len(names))}; their lags are as last read")]


def _hanging_findings(r: PollReading) -> list[Finding]:
    """Each hanging transaction, with the command that aborts it."""
    out = []
    for h in r.hanging:
        age = f"{h.age_seconds:.0f}s" if h.age_seconds is not None else "unknown age"
        who = f" transactional id {h.transactional_id}" if h.transactional_id else ""
        out.append(Finding("critical", "hanging",
                           f"hanging transaction on {h.topic}-{h.partition} at offset {h.start_offset} "
                           f"({age}, {h.reason}){who}: read_committed consumers are blocked; once sure no "
                           f"producer will end it, abort it (a dry run until --yes is added): "
                           f"{abort_command(h, r.bootstrap, r.secured)}"))
    return out


def _stalled(r: PollReading) -> list[PartitionState]:
    """Partitions whose LSO has stalled for stall_warning_seconds or longer."""
    return [p for p in r.partitions.values()
            if p.stalled_since is not None and p.stalled_seconds >= r.stall_warning_seconds]


def _stalled_lso_findings(r: PollReading) -> list[Finding]:
    """Stalled LSOs not already named by a hanging transaction."""
    hanging_tps = {(h.topic, h.partition) for h in r.hanging}
    return [Finding("warning", "lso_stalled",
                    f"LSO of {p.topic}-{p.partition} stalled {p.stalled_seconds:.0f}s at "
                    f"{p.last_stable_offset} ({p.lso_lag} offsets below the HWM)")
            for p in _stalled(r) if (p.topic, p.partition) not in hanging_tps]


def _open_transaction_findings(r: PollReading) -> list[Finding]:
    """Open transactions past their timeout or with a timeout the broker refuses, and
    two-phase-commit ones open too long (the broker never times those out)."""
    out = []
    max_ms = r.facts.transaction_max_timeout_ms
    for t in r.open_transactions or ():
        if t.two_phase:
            if t.age_seconds is not None and t.age_seconds > r.two_phase_max_age_seconds:
                out.append(Finding("warning", "two_phase_open_too_long",
                                   f"{t.transactional_id}: two-phase-commit transaction (KIP-939) open "
                                   f"{t.age_seconds:.0f}s, above {r.two_phase_max_age_seconds:.0f}s: its "
                                   "transaction manager has not decided it; read_committed consumers wait "
                                   "behind it"))
            continue   # the broker never times it out: no cap, no headroom
        if max_ms is not None and t.timeout_ms > max_ms:
            out.append(Finding("warning", "timeout_above_cap",
                               f"{t.transactional_id}: transaction.timeout.ms={t.timeout_ms} > broker "
                               f"transaction.max.timeout.ms={max_ms}"))
        if t.headroom_seconds is not None and t.headroom_seconds < 0:
            out.append(Finding("critical", "past_timeout",
                               f"{t.transactional_id}: open {t.age_seconds:.0f}s, "
                               f"{-t.headroom_seconds:.0f}s past its {t.timeout_ms} ms timeout"))
    return out


def _blocked_group_findings(r: PollReading) -> list[Finding]:
    """read_committed groups behind a stalled LSO."""
    stalled = {(p.topic, p.partition) for p in _stalled(r)}
    return [Finding("warning", "group_blocked",
                    f"read_committed group {g.group} on {g.topic}-{g.partition} is behind a "
                    f"stalled LSO (lag {g.lag_read_committed} vs LSO, {g.lag_read_uncommitted} vs HWM)")
            for g in r.blocked_groups if (g.topic, g.partition) in stalled]
