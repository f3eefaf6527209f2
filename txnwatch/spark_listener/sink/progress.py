"""The sink's progress, read from the broker: a task's last committed marker (the group's
committed offset in the progress topic names it), the markers of dead attempts after it,
and what an init fenced; from them the transaction records of attempts that died."""

from __future__ import annotations

import json
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from txnwatch.kafka import clients
from txnwatch.producer import (
    APPLICATION_ERROR,
    error_name,
    make_record,
)

from .settings import SinkConfig, default_progress_topic, transactional_id


@dataclass
class Marker:
    offset: int
    batch: int
    tasks: int
    attempt: str
    started: float
    timeout_ms: float | None
    prev: int
    note: dict | None = None      # the abort note a failing attempt left, if any
    fenced: list = field(default_factory=list)   # what this attempt's init fenced (fence_entry dicts)


@dataclass
class TaskProgress:
    committed_offset: int                       # group offset (marker offset + 1), -1 when none
    marker: Marker | None                       # the last committed marker
    aborted: list[Marker] = field(default_factory=list)   # markers after it (dead attempts)
    high_watermark: int = 0

    @property
    def batch(self) -> int | None:
        return None if self.marker is None else self.marker.batch


@dataclass(frozen=True)
class PriorTransaction:
    """The last transaction of a task's id, as the coordinator described it (KIP-664
    DescribeTransactions) just before a fresh producer's init_transactions: still `open`
    (the init fences it), or aborted by the coordinator before (its timeout, or the fence
    of an attempt that died before reporting). `marker_offset` is where an open one's
    first record in the task's progress partition is (DescribeProducers' current
    transaction start offset); `has_marker` whether it wrote to that partition at all."""

    open: bool
    producer_id: int
    producer_epoch: int
    start_ms: int
    timeout_ms: int
    marker_offset: int | None
    has_marker: bool
    fenced_at: float = 0.0        # wall clock right after the init

    @property
    def attempt(self) -> str:
        """A stable name for a transaction without a marker (none carries its attempt id)."""
        return f"txn-{self.producer_id}.{self.producer_epoch}@{self.start_ms}"


def _decode(msg: Any) -> dict | None:
    try:
        v = json.loads(msg.value())
        return v if isinstance(v, dict) else None
    except Exception:  # noqa: BLE001 - foreign records in the progress topic are ignored
        return None


def _marker(offset: int, v: dict) -> Marker | None:
    try:
        fenced = v.get("fenced") or []
        return Marker(offset=offset, batch=int(v["batch"]), tasks=int(v["tasks"]), attempt=str(v["attempt"]),
                      started=float(v.get("started", 0)), timeout_ms=v.get("timeout_ms"),
                      prev=int(v.get("prev", -1)), fenced=[e for e in fenced if _fence_ok(e)])
    except (KeyError, TypeError, ValueError, AttributeError):
        return None


def _fence_ok(e: Any) -> bool:
    return (isinstance(e, dict) and bool(e.get("attempt")) and isinstance(e.get("started"), (int, float))
            and isinstance(e.get("fenced_at"), (int, float)))


# Group-coordinator errors a committed-offset lookup meets while the coordinator moves or
# loads (__consumer_offsets is created on a cluster's first group request): try again.
_COORDINATOR_BUSY = {"NOT_COORDINATOR", "COORDINATOR_LOAD_IN_PROGRESS", "COORDINATOR_NOT_AVAILABLE",
                     "_WAIT_COORD", "_TIMED_OUT", "_TRANSPORT", "LEADER_NOT_AVAILABLE",
                     "NOT_LEADER_FOR_PARTITION", "UNKNOWN_TOPIC_OR_PART", "_UNKNOWN_PARTITION"}


def _retrying(what: str, call: Callable[[float], Any], timeout: float) -> Any:
    """call(remaining) until it returns, retrying while the broker says "not yet"."""
    deadline = time.monotonic() + timeout
    while True:
        remaining = deadline - time.monotonic()
        try:
            return call(max(1.0, remaining))
        except Exception as exc:  # noqa: BLE001 - re-raised unless transient
            if error_name(exc) not in _COORDINATOR_BUSY or remaining <= 0:
                raise RuntimeError(f"{what}: {exc}") from exc
            time.sleep(0.2)


def committed_offset(consumer: Any, topic: str, partition: int, timeout: float = 30.0) -> int:
    """The progress group's committed offset of one partition, -1 when none."""
    from confluent_kafka import TopicPartition

    tp = _retrying(f"committed offset of {topic}[{partition}]",
                   lambda t: consumer.committed([TopicPartition(topic, partition)], t)[0], timeout)
    return tp.offset if tp.offset is not None and tp.offset >= 0 else -1


def watermarks(consumer: Any, tp: Any, timeout: float = 30.0) -> tuple[int, int]:
    """(low, high) of a progress partition, asked of its leader."""
    def call(t: float) -> tuple[int, int]:
        try:
            return consumer.get_watermark_offsets(tp, t, cached=False)
        except Exception as exc:
            if error_name(exc) == "_UNKNOWN_PARTITION":
                # A partition added since this (cached) client last refreshed its metadata.
                consumer.list_topics(tp.topic, timeout=t)
            raise
    return _retrying(f"offsets of {tp.topic}[{tp.partition}]", call, timeout)


def read_markers(consumer: Any, topic: str, partition: int, start: int, end: int,
                 timeout: float = 30.0) -> list[tuple[int, dict]]:
    """(offset, value) of the progress records in [start, end), read_uncommitted."""
    from confluent_kafka import TopicPartition

    if start >= end:
        return []
    consumer.assign([TopicPartition(topic, partition, start)])
    out: list[tuple[int, dict]] = []
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            if msg.error():
                if msg.error().code() == -191:  # _PARTITION_EOF
                    if msg.offset() >= end:
                        return out
                    continue
                raise RuntimeError(f"reading {topic}[{partition}]: {msg.error()}")
            if msg.offset() >= end:
                return out
            v = _decode(msg)
            if v is not None:
                out.append((msg.offset(), v))
            if msg.offset() >= end - 1:
                return out
        raise TimeoutError(f"reading {topic}[{partition}] [{start}, {end}) took over {timeout}s")
    finally:
        consumer.unassign()


def task_progress(consumer: Any, cfg: SinkConfig, task: int, timeout: float = 30.0,
                  known: Marker | None = None) -> TaskProgress:
    """The task's last committed marker and the dead attempts after it. Exact only once
    no transaction of this task's id is open (after init_transactions).

    `known`: the marker this process committed last for the task. When the committed
    offset still points at it and nothing follows it but its commit control record, it
    is the answer without fetching it again."""
    from confluent_kafka import TopicPartition

    tp = TopicPartition(cfg.progress_topic, task)
    c = committed_offset(consumer, cfg.progress_topic, task, timeout)
    low, high = watermarks(consumer, tp, timeout)
    if known is not None and c > 0 and known.offset == c - 1 and high == c + 1:
        return TaskProgress(c, known, [], high)
    start = c - 1 if c > 0 else low
    records = read_markers(consumer, cfg.progress_topic, task, max(start, low), high, timeout)
    marker: Marker | None = None
    dead: OrderedDict[str, Marker] = OrderedDict()
    notes: dict[str, dict] = {}
    for off, v in records:
        if v.get("kind") == "abort":
            notes[str(v.get("attempt"))] = v
            continue
        m = _marker(off, v)
        if m is None:
            continue
        if c > 0 and off == c - 1:
            marker = m
        elif off >= max(c, 0):
            dead[m.attempt] = m
    if c > 0 and marker is None:
        raise RuntimeError(f"progress of {transactional_id(cfg.name, task)}: the committed marker at "
                           f"{cfg.progress_topic}[{task}]@{c - 1} is missing (retention or compaction "
                           "removed it?); refusing to guess which batch committed")
    for attempt, m in dead.items():
        m.note = notes.get(attempt)
    return TaskProgress(c, marker, list(dead.values()), high)


def fence_entry(attempt: str, batch: int | None, started: float, fenced_at: float,
                timeout_ms: float | None) -> dict:
    """What an init fenced, as written into the fencing attempt's marker (so the attempt
    after it can still report the fence if the fencing attempt dies too)."""
    return {"attempt": attempt, "batch": batch, "started": started, "fenced_at": fenced_at,
            "timeout_ms": timeout_ms}


def fenced_by_init(prog: TaskProgress, prior: PriorTransaction | None) -> list[dict]:
    """Fence entries for what the coordinator showed before this attempt's init: an open
    transaction (matched to its marker when that reached the broker; none when it
    committed in the meantime, a live zombie that won the race), or one the coordinator
    had aborted whose marker never reached the broker (a dead marker reports itself)."""
    if prior is None:
        return []
    if not prior.open:
        if prior.has_marker:
            return []
        end = min(prior.fenced_at, (prior.start_ms + prior.timeout_ms) / 1000.0)
        return [fence_entry(prior.attempt, None, prior.start_ms / 1000.0, end, prior.timeout_ms)]
    if prior.marker_offset is not None:
        for m in prog.aborted:
            if m.offset == prior.marker_offset:
                return [fence_entry(m.attempt, m.batch, m.started, prior.fenced_at, m.timeout_ms)]
        if prior.marker_offset < prog.committed_offset:
            return []
    return [fence_entry(prior.attempt, None, prior.start_ms / 1000.0, prior.fenced_at, prior.timeout_ms)]


def dead_attempt_records(cfg: SinkConfig, task: int, prog: TaskProgress, own: list[dict],
                         now: float) -> list[dict]:
    """Records of the attempts of this task that ended without reporting themselves:
    - a marker with an abort note: the attempt aborted itself (error and duration noted);
    - a transaction some init fenced (`own`: this attempt's; or listed in a later dead
      attempt's marker): PRODUCER_FENCED, duration from its begin to that init; also
      when its marker never reached the broker (then its batch is unknown);
    - any other marker: its transaction was aborted before any reporting attempt saw it
      open (the coordinator's timeout, or a fence by an attempt that died before it
      wrote its own marker): PRODUCER_FENCED (the coordinator fenced its epoch either
      way), duration up to the fence, at most its timeout."""
    tid = transactional_id(cfg.name, task)
    fences: dict[str, dict] = {}
    for m in prog.aborted:
        for e in m.fenced:
            fences.setdefault(str(e["attempt"]), e)
    for e in own:
        fences[str(e["attempt"])] = e
    out = []

    def record(attempt: str, batch: int | None, duration: float, timeout_ms: float | None,
               error: str) -> None:
        rec = make_record(tid, "aborted", duration, None,
                          timeout_ms if timeout_ms is not None else cfg.transaction_timeout_ms, error)
        rec["attempt"] = attempt
        rec["batch"] = batch
        out.append(rec)

    seen = set()
    for m in prog.aborted:
        seen.add(m.attempt)
        timeout_s = (m.timeout_ms if m.timeout_ms is not None else cfg.transaction_timeout_ms) / 1000.0
        if m.note is not None:
            record(m.attempt, m.batch, float(m.note.get("duration") or 0.0), m.timeout_ms,
                   m.note.get("error") or APPLICATION_ERROR)
        elif m.attempt in fences:
            f = fences[m.attempt]
            record(m.attempt, m.batch, float(f["fenced_at"]) - m.started, m.timeout_ms, "PRODUCER_FENCED")
        else:
            record(m.attempt, m.batch, min(now - m.started, timeout_s), m.timeout_ms, "PRODUCER_FENCED")
    for attempt, f in fences.items():
        if attempt not in seen:      # a transaction whose marker never reached the broker
            record(attempt, f.get("batch"), float(f["fenced_at"]) - float(f["started"]), f.get("timeout_ms"),
                   "PRODUCER_FENCED")
    return out


def committed_attempts(bootstrap_servers: str, name: str, progress_topic: str | None = None,
                       client_config: dict | None = None, timeout: float = 30.0) -> dict[str, Marker]:
    """Audit: attempt id -> marker of every committed transaction of the sink, found by
    walking back from each task's committed marker along the markers' `prev` links.

    For diagnosis: an output record's `txnwatch.txn` header names its attempt, so this
    map tells its batch and task; a read_uncommitted reader's records whose attempt is
    not in it belong to aborted transactions. (read_committed consumers never see those:
    the broker filters them.)"""
    topic = progress_topic or default_progress_topic(name)
    cfg = SinkConfig(name=name, bootstrap_servers=bootstrap_servers, topic="", num_tasks=1,
                     progress_topic=topic, client_config=tuple(sorted((client_config or {}).items())))
    c = clients.consumer(cfg.consumer_conf())
    out: dict[str, Marker] = {}
    try:
        from confluent_kafka import TopicPartition

        parts = sorted(c.list_topics(topic, timeout=timeout).topics[topic].partitions)
        for p in parts:
            tp = TopicPartition(topic, p)
            committed = committed_offset(c, topic, p, timeout)
            if committed <= 0:
                continue
            low, high = watermarks(c, tp, timeout)
            by_offset = {}
            for off, v in read_markers(c, topic, p, low, high, timeout):
                m = _marker(off, v) if v.get("kind") != "abort" else None
                if m is not None:
                    by_offset[off] = m
            off = committed - 1
            while off >= 0 and off in by_offset:
                m = by_offset[off]
                out[m.attempt] = m
                off = m.prev
    finally:
        c.close()
    return out
