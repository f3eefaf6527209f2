"""`txnwatch abort`: survey, plan, show; with `--yes`, abort what the plan allows, partition by
partition, each recorded before and after; then wait for the LSOs to move and say which
read_committed groups started to move.

Exit status: 0 the plan shown (dry run) or every abort done; 1 something refused, failed or
interrupted (the report says which partitions were aborted and which were not: a re-run
finishes the rest, never aborting one twice); 2 a target that names nothing, bad flags, or a
cluster that cannot be read."""

from __future__ import annotations

import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

from ..config import ClusterConfig, Config
from ..kafka.abort_markers import MarkerWriter
from ..kafka.errors import PollError, classify, one_line
from ..kafka.login import explain as explain_failure
from .audit import AuditTrail, actor, default_path
from .exporter_view import ExporterUnreadable, parse, read_metrics, with_view
from .plan import ACL, Decision, Flags, Pin, Risk, acl_command, decide, groups_moved, lso_moved
from .report import decision_dict, render_json, render_text
from .survey import Survey, Surveyor
from .targets import Target, TargetError

WAIT_STEP_SECONDS = 0.5


@dataclass(frozen=True)
class AbortOptions:
    target: Target
    cluster: str | None = None
    yes: bool = False
    flags: Flags = Flags()
    output: str = "text"
    audit_log: Path | None = None
    wait_seconds: float = 30.0
    command: str = "txnwatch abort"     # how the person called it (the next command repeats it)
    exporter_url: str | None = None     # where the Spark queries' read positions are read
    exporter_token: str | None = field(default=None, repr=False)


@dataclass
class PartitionResult:
    topic: str
    partition: int
    outcome: str                 # aborted | failed | already_ended | interrupted | refused
    error: str | None = None
    lso_after: int | None = None
    groups_moving: list[str] = field(default_factory=list)
    groups_still: list[str] = field(default_factory=list)


def pick_cluster(config: Config, name: str | None) -> ClusterConfig:
    names = [c.name for c in config.clusters]
    if name is None:
        if len(config.clusters) == 1:
            return config.clusters[0]
        raise TargetError(f"the configuration has {len(names)} clusters ({', '.join(names)}): name one with --cluster")
    for c in config.clusters:
        if c.name == name:
            return c
    raise TargetError(f"--cluster {name!r}: no such cluster in the configuration (clusters: {', '.join(names)})")


def run_abort(config: Config, options: AbortOptions) -> tuple[str, int]:
    try:
        cfg = pick_cluster(config, options.cluster)
    except TargetError as exc:
        return f"txnwatch abort: {exc}", 2
    surveyor = Surveyor(cfg)
    try:
        return _run(cfg, surveyor, options)
    except KeyboardInterrupt:
        return ("txnwatch abort: interrupted; the audit log says what was done. Run the same command again: "
                "what was aborted is left alone, the rest is finished"), 1
    finally:
        surveyor.close()


def _run(cfg: ClusterConfig, surveyor: Surveyor, options: AbortOptions) -> tuple[str, int]:
    try:
        survey = surveyor.survey(options.target)
    except TargetError as exc:
        return f"txnwatch abort: {exc}", 2
    except Exception as exc:  # noqa: BLE001 - reported, exit 2
        cause, message = explain_failure(cfg.client_properties(), classify(exc), one_line(exc))
        return f"txnwatch abort: cannot read cluster {cfg.name} ({cause}): {message}", 2
    survey = with_exporter_view(survey, options)
    acl = acl_command(cfg.bootstrap_servers, survey.principal)
    decisions = [decide(t, survey.taken_at_ms, options.flags, survey.may_write_markers, acl)
                 for t in survey.transactions]
    report = _report(survey, decisions, options)
    code = 0
    if options.yes and decisions:
        decisions, results = act(cfg, surveyor, decisions, survey, options)
        report["transactions"] = [decision_dict(d, survey.taken_at_ms) for d in decisions]
        for entry, rs in zip(report["transactions"], results, strict=True):
            entry["results"] = [vars(r) for r in rs]
        done = [r for rs in results for r in rs]
        code = 0 if all(r.outcome in ("aborted", "already_ended") for r in done) else 1
        report["summary"] = _summary(done)
        report["next"] = None
    return (render_json(report) if options.output == "json" else render_text(report)), code


def with_exporter_view(survey: Survey, options: AbortOptions) -> Survey:
    """The survey with what the exporter knows (exporter_view): the Spark queries reading each
    pinned partition, how long each transaction's coordinator state has been unchanged. Without
    an exporter (or one that cannot be read) a note says so and the plan goes on."""
    if not survey.transactions:
        return survey
    if options.exporter_url is None:
        return replace(survey, notes=survey.notes + (
            "Spark queries: not shown (Spark's Kafka source commits no group offsets): --exporter URL reads "
            "them from the exporter their txnwatch listener reports to",))
    try:
        view = parse(read_metrics(options.exporter_url, options.exporter_token))
    except ExporterUnreadable as exc:
        return replace(survey, notes=survey.notes + (f"Spark queries: not shown, the exporter could not be read: "
                                                     f"{exc}",))
    return replace(survey, transactions=tuple(with_view(t, view) for t in survey.transactions))


def _report(survey: Survey, decisions: list[Decision], options: AbortOptions) -> dict:
    flags = " ".join(f for f, on in (("--force-live", options.flags.force_live),
                                     ("--force-2pc", options.flags.force_2pc),
                                     ("--accept-data-loss", options.flags.accept_data_loss)) if on)
    allowed = [d for d in decisions if d.will_abort]
    nxt = None
    if not options.yes and allowed:
        nxt = (f"to abort {len(allowed)} of {len(decisions)}: {options.command} {options.target.as_flag()}"
               f"{' ' + flags if flags else ''} --yes")
    return {"cluster": survey.cluster, "dry_run": not options.yes, "target": options.target.describe(),
            "principal": survey.principal, "may_write_markers": survey.may_write_markers,
            "notes": list(survey.notes) + ([] if survey.may_write_markers is not None or not decisions else [
                "whether this principal may write the markers is unknown (it may not Describe the cluster): "
                "they need Alter on the cluster, and the broker will say"]),
            "transactions": [decision_dict(d, survey.taken_at_ms) for d in decisions], "next": nxt}


def _summary(results: list[PartitionResult]) -> str:
    by: dict[str, list[str]] = {}
    for r in results:
        by.setdefault(r.outcome, []).append(f"{r.topic}-{r.partition}")
    parts = [f"{k}: {', '.join(v)}" for k, v in sorted(by.items())]
    tail = "" if set(by) <= {"aborted", "already_ended"} else \
        " -- run the same command again to finish the rest (partitions already aborted are left alone)"
    return "done. " + "; ".join(parts) + tail


# ------------------------------------------------------------------ acting
def act(cfg: ClusterConfig, surveyor: Surveyor, decisions: list[Decision], survey: Survey,
        options: AbortOptions) -> tuple[list[Decision], list[list[PartitionResult]]]:
    """Abort what the plan allows, recording each step; SIGTERM is taken as an interrupt so
    the partition in flight is recorded too. Returns the decisions as they turned out (the
    broker's refusal for want of the ACL is one) and each one's results."""
    trail = AuditTrail(options.audit_log or default_path(), actor(survey.principal), cfg.name)
    writer = MarkerWriter(cfg.client_properties(), cfg.poll_timeout_seconds)
    previous = signal.signal(signal.SIGTERM, _interrupt) if _main_thread() else None
    refused = (Risk(ACL, None, _ACL_WORDS + acl_command(cfg.bootstrap_servers, survey.principal)),)
    final: list[Decision] = []
    results: list[list[PartitionResult]] = []
    try:
        for d in decisions:
            if any(_refused_by_acl(rs) for rs in results):
                # the broker refused the markers for want of the ACL: every other would be too
                d = replace(d, refused=refused)
            rs = _act_on(d, surveyor, writer, trail)
            final.append(replace(d, refused=refused) if _refused_by_acl(rs) and d.will_abort else d)
            results.append(rs)
        aborted = [(d, r) for d, rs in zip(final, results, strict=True) for r in rs if r.outcome == "aborted"]
        _verify(aborted, surveyor, trail, options.wait_seconds, time.monotonic)
    finally:
        writer.close()
        trail.close()
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
    return final, results


_ACL_WORDS = ("the broker refused the markers: WriteTxnMarkers needs Alter (or ClusterAction) on the cluster. "
              "Grant it with: ")


def _refused_by_acl(results: list[PartitionResult]) -> bool:
    return any(r.outcome == "refused" and (r.error or "").startswith("acl:") for r in results)


def _main_thread() -> bool:
    import threading

    return threading.current_thread() is threading.main_thread()


def _interrupt(signum, frame) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def _target_fields(d: Decision, pin: Pin) -> dict:
    t = d.txn
    return {"transactional_id": t.transactional_id, "app": t.app, "producer_id": t.producer_id,
            "producer_epoch": t.producer_epoch, "topic": pin.topic, "partition": pin.partition,
            "start_offset": pin.start_offset}


def _act_on(d: Decision, surveyor: Surveyor, writer: MarkerWriter, trail: AuditTrail) -> list[PartitionResult]:
    out = []
    if not d.will_abort:
        for pin in d.txn.pins:
            trail.write("outcome", "abort", target=_target_fields(d, pin), outcome="refused",
                        why=[r.words for r in d.refused])
            out.append(PartitionResult(pin.topic, pin.partition, "refused", "; ".join(r.kind for r in d.refused)))
        return out
    for pin in d.txn.pins:
        if _refused_by_acl(out):
            trail.write("outcome", "abort", target=_target_fields(d, pin), outcome="refused", why=[out[-1].error])
            out.append(PartitionResult(pin.topic, pin.partition, "refused", out[-1].error))
            continue
        out.append(_abort_pin(d, pin, surveyor, writer, trail))
    return out


def _abort_pin(d: Decision, pin: Pin, surveyor: Surveyor, writer: MarkerWriter,
               trail: AuditTrail) -> PartitionResult:
    target = _target_fields(d, pin)
    before = {"last_stable_offset": pin.lso, "high_watermark": pin.hwm}
    try:
        still_open = surveyor.producer_holds(pin, d.txn.producer_id)
    except PollError as exc:
        trail.write("outcome", "abort", target=target, before=before, outcome="failed", error=str(exc))
        return PartitionResult(pin.topic, pin.partition, "failed", f"could not read its producers: {exc}")
    if not still_open:
        trail.write("outcome", "abort", target=target, before=before, outcome="already_ended")
        return PartitionResult(pin.topic, pin.partition, "already_ended")
    trail.write("intent", "abort", target=target, before=before,
                accepted_risks=[r.kind for r in d.risks])
    try:
        writer.abort(pin.topic, pin.partition, d.txn.producer_id, d.txn.producer_epoch, pin.coordinator_epoch)
    except PollError as exc:
        if exc.cause == "authorization":
            why = _ACL_WORDS + acl_command(surveyor.cfg.bootstrap_servers, trail.who["kafka_principal"])
            trail.write("outcome", "abort", target=target, before=before, outcome="refused", why=[why])
            return PartitionResult(pin.topic, pin.partition, "refused", f"acl: {why}")
        trail.write("outcome", "abort", target=target, before=before, outcome="failed", cause=exc.cause,
                    error=str(exc))
        return PartitionResult(pin.topic, pin.partition, "failed", f"{exc.cause}: {exc}")
    except KeyboardInterrupt:
        trail.write("outcome", "abort", target=target, before=before, outcome="interrupted",
                    error="interrupted while the markers were being written: re-run to see whether they were")
        raise
    trail.write("outcome", "abort", target=target, before=before, outcome="aborted")
    return PartitionResult(pin.topic, pin.partition, "aborted")


def _verify(aborted: list[tuple[Decision, PartitionResult]], surveyor: Surveyor, trail: AuditTrail,
            wait_seconds: float, clock: Callable[[], float]) -> None:
    """Wait until each aborted partition's LSO has passed the transaction's first offset, then
    until the groups behind it commit again (both bounded by `wait_seconds`)."""
    if not aborted:
        return
    pins = {(r.topic, r.partition): next(p for p in d.txn.pins if (p.topic, p.partition) == (r.topic, r.partition))
            for d, r in aborted}
    deadline = clock() + wait_seconds
    lsos: dict = {}
    while True:
        lsos = _read_or_empty(lambda: surveyor.last_stable_offsets(pins))
        if all(lso_moved(p, lsos.get(tp)) for tp, p in pins.items()) or clock() >= deadline:
            break
        time.sleep(WAIT_STEP_SECONDS)
    groups = {g.group for p in pins.values() for g in p.groups}
    committed: dict = {}
    while groups:
        committed = _read_or_empty(lambda: surveyor.committed(groups, pins))
        if all(_moved(p, committed) for p in pins.values()) or clock() >= deadline:
            break
        time.sleep(WAIT_STEP_SECONDS)
    for d, r in aborted:
        pin = pins[(r.topic, r.partition)]
        r.lso_after = lsos.get((r.topic, r.partition))
        r.groups_moving, r.groups_still = groups_moved(
            pin.groups, {g: o for (g, t, p), o in committed.items() if (t, p) == (r.topic, r.partition)})
        trail.write("after", "abort", target=_target_fields(d, pin),
                    after={"last_stable_offset": r.lso_after, "lso_moved": lso_moved(pin, r.lso_after),
                           "groups_moving": r.groups_moving, "groups_not_moved": r.groups_still})


def _moved(pin: Pin, committed: dict) -> bool:
    moving, _ = groups_moved(pin.groups, {g: o for (g, t, p), o in committed.items()
                                          if (t, p) == (pin.topic, pin.partition)})
    return len(moving) == len(pin.groups)


def _read_or_empty(read: Callable[[], dict]) -> dict:
    try:
        return read()
    except Exception:  # noqa: BLE001 - a broker gone after the abort: reported as not seen moving
        return {}
