"""The demo's status line: what the exporter sees, one line every few seconds (pure: parsed
/metrics in, text out)."""

from __future__ import annotations

from txnwatch.fencing import FENCING_ERRORS

from ..observability.scrape import Metrics


def _sum(m: Metrics, name: str, **labels) -> float:
    return sum(v for _, v in m.select(name, **labels))


def outbox_status(m: Metrics, group: str) -> str:
    """The outbox group's lag against the LSO and the HWM, and what blocks it."""
    rc = m.select("kafka_consumergroup_read_committed_lag_offsets", group=group)
    if not rc:
        return f"outbox {group}: no committed offsets yet"
    ru = {(lbl["topic"], lbl["partition"]): v for lbl, v in
          m.select("kafka_consumergroup_read_uncommitted_lag_offsets", group=group)}
    # where the LSO is at the HWM, a lag vs HWM above the lag vs LSO is transaction markers
    behind = sorted((lbl["topic"], lbl["partition"]) for lbl, v in rc
                    if ru.get((lbl["topic"], lbl["partition"]), 0) > v
                    and m.get_value("kafka_partition_lso_lag_offsets", topic=lbl["topic"], partition=lbl["partition"]) != 0)
    hanging = [f"{t}-{p}" for t, p in behind
               if (m.get_value("kafka_transaction_hanging", topic=t, partition=p) or 0) > 0]
    if hanging:
        why = "blocked by a hanging transaction on " + ", ".join(hanging)
    elif behind:
        why = "behind an open transaction on " + ", ".join(f"{t}-{p}" for t, p in behind)
    else:
        why = "not blocked"
    return f"outbox {group}: lag {sum(v for _, v in rc):.0f} vs LSO, {sum(ru.values()):.0f} vs HWM, {why}"


def flink_status(m: Metrics, app: str, state: str, checkpoint: int | None) -> str:
    """The Flink job's process state, its latest retained checkpoint and what the tap counted
    under its app: its sink commits one transaction per subtask at each checkpoint."""
    fences = {lbl["reason"]: v for lbl, v in m.select("kafka_transaction_fencing_events_total", app=app)}
    return (f"flink {app}: {state}, checkpoint {'-' if checkpoint is None else checkpoint}, "
            f"commits {_sum(m, 'kafka_transactions_total', app=app, outcome='committed'):.0f}, "
            f"startup aborts {fences.get('startup_abort', 0):.0f}")


def status_line(m: Metrics, firing: str | None = None, outbox_group: str | None = None,
                flink: tuple[str, str, int | None] | None = None) -> str:
    """One line of what the exporter sees (pure: parsed /metrics in, text out)."""
    up = m.get_value("txnwatch_up", source="poller")
    parts = [f"poller {'up' if up == 1 else 'DOWN'}",
             f"hanging {_sum(m, 'kafka_transaction_hanging'):.0f}"]
    headrooms = [v for _, v in m.select("kafka_transaction_timeout_headroom_seconds")]
    if headrooms:
        parts.append(f"open txns {len(headrooms)} (min headroom {min(headrooms):.0f}s)")
    if m.select("kafka_transactions_total"):   # the transaction-log tap: the coordinator's view
        fences = "kafka_transaction_fencing_events_total"
        parts.append(f"tap: commits {_sum(m, 'kafka_transactions_total', outcome='committed'):.0f} "
                     f"aborts {_sum(m, 'kafka_transactions_total', outcome='aborted'):.0f} "
                     f"fences new_instance {_sum(m, fences, reason='new_instance'):.0f} "
                     f"timeout {_sum(m, fences, reason='timeout'):.0f} "
                     f"re-inits {_sum(m, 'kafka_transactional_id_reinitializations_total'):.0f} "
                     f"coordinator timeouts {_sum(m, 'kafka_transaction_timeouts_total'):.0f}")
    else:
        stall = max((v for _, v in m.select("kafka_partition_lso_stalled_seconds")), default=0)
        parts.append(f"max LSO stall {stall:.0f}s")
    client_fences = sum(v for lbl, v in m.select("kafka_producer_transaction_errors_total")
                        if lbl.get("error") in FENCING_ERRORS)
    parts.append(f"client: aborts {_sum(m, 'kafka_producer_transactions_total', outcome='aborted'):.0f} "
                 f"fenced {client_fences:.0f}")
    if m.select("txnwatch_canary_rounds_total"):
        parts.append(f"canary: committed {_sum(m, 'txnwatch_canary_rounds_total', outcome='committed'):.0f} "
                     f"aborted {_sum(m, 'txnwatch_canary_rounds_total', outcome='aborted'):.0f} "
                     f"failures {_sum(m, 'txnwatch_canary_failures_total'):.0f} "
                     f"aborted seen {_sum(m, 'txnwatch_canary_visibility_violations_total'):.0f}")
    if outbox_group:
        parts.append(outbox_status(m, outbox_group))
    if flink:
        parts.append(flink_status(m, *flink))
    batch = max((v for _, v in m.select("spark_streaming_batch_id")), default=None)
    spark = f"spark batch {'-' if batch is None else int(batch)}"
    behind = m.select("spark_streaming_source_partition_behind_latest_offsets")
    if behind:
        spark += f", {sum(v for _, v in behind):.0f} offsets behind"
    blocked = m.select("spark_streaming_source_blocked_seconds")
    if blocked:
        spark += ", BLOCKED by an open transaction on " + ", ".join(
            sorted({f"{lbl['topic']}-{lbl['partition']}" for lbl, _ in blocked}))
    parts.append(spark)
    parts.append(f"alerts firing: {firing or 'n/a'}")
    return " | ".join(parts)
