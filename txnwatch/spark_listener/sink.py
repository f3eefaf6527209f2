"""An exactly-once Kafka sink for PySpark foreachBatch, instrumented.

    sink = ExactlyOnceKafkaSink("orders-agg", "broker:9092", "orders-agg-out", num_tasks=4,
                                trigger_interval_seconds=5, metrics=listener)
    (df.select(key_col.alias("key"), value_col.alias("value"))
       .writeStream.foreachBatch(sink).trigger(processingTime="5 seconds")
       .option("checkpointLocation", ...).start())

How it stays exactly once (see docs/spark-sink.md):
- Each micro-batch is hash-partitioned on `key` into exactly `num_tasks` output tasks.
  Task i writes through a transactional producer with the id `txnwatch.<name>.<i>`,
  the same for every batch and every restart, so a retried or replayed task fences
  the zombie of its previous attempt (init_transactions aborts what it left open).
- The batch's progress is committed in the same transaction: a marker record
  (batch id, layout, attempt id) in partition i of the progress topic, and the group
  `txnwatch.<name>` committing offset (marker offset + 1) for that partition via
  sendOffsetsToTransaction. The coordinator applies that offset only if the
  transaction commits, so after init_transactions the committed offset names the
  last committed marker: a task whose marker already holds this batch id skips it.
  One OffsetFetch finds it, without scanning the progress partition.
- Every output record carries the header `txnwatch.txn` = attempt id, and every
  marker the offset of the previous committed marker, so an output record can be
  traced to its attempt and batch (`committed_attempts()` lists the committed ones).

Executors are other processes: each task returns a small result row (status, rows,
transaction records as JSON) that foreachBatch collects; the driver emits them as a
`producer_transactions` event into the listener's state or forwarder (`metrics=`).
A transaction whose attempt died (a fenced zombie, or a task that failed and aborted)
is reported by the next attempt of the same task: before its init_transactions it
asks the coordinator (KIP-664 DescribeTransactions) whether a transaction of its id
is open, which its init then fences - with or without a marker on the broker - and
it finds the markers of dead attempts after the committed one.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import re
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from txnwatch.producer import (
    APPLICATION_ERROR,
    DEFAULT_TRANSACTION_TIMEOUT_MS,
    TransactionalProducer,
    TransactionError,
    error_name,
    is_fencing,
    make_record,
)

log = logging.getLogger(__name__)

NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]*(\.[A-Za-z0-9_-]+)*$")
TXN_HEADER = "txnwatch.txn"
MIN_TRANSACTION_TIMEOUT_MS = 10_000       # floor: GC pauses, scheduling, slow commits
TRIGGER_FACTOR = 2                        # timeout >= 2 x trigger interval
DEFAULT_BROKER_MAX_TIMEOUT_MS = 900_000   # Kafka's transaction.max.timeout.ms default
DISCOVER = "discover"
PARTITIONINGS = ("key", "input")
RESULT_SCHEMA = "task INT, status STRING, rows LONG, records STRING, attempt STRING, seconds DOUBLE"

_REJECTED_PRODUCER_KEYS = {
    "transactional.id": "the sink owns transactional ids (txnwatch.<name>.<task index>)",
    "transaction.timeout.ms": "pass transaction_timeout_ms so it is checked against the trigger",
}


class UnsafeSinkSettings(ValueError):
    """Settings that would break exactly-once or guarantee aborts; raised up front."""


class SinkLayoutError(RuntimeError):
    """A replayed batch was (partly) written with another number of output tasks."""


class InjectedFailure(RuntimeError):
    """Raised by the test-only fault hooks."""


def input_partitions(df: Any) -> int | None:
    """How many partitions a batch DataFrame has, without running a job (None when the
    session cannot say: Spark Connect has no JVM handle)."""
    jdf = getattr(df, "_jdf", None)
    if jdf is None:
        return None
    try:
        return int(jdf.rdd().getNumPartitions())
    except Exception:  # noqa: BLE001 - "key" partitioning is always possible
        log.warning("could not read the batch's partition count", exc_info=True)
        return None


def transactional_id(name: str, task: int) -> str:
    return f"txnwatch.{name}.{task}"


def progress_group(name: str) -> str:
    return f"txnwatch.{name}"


def default_progress_topic(name: str) -> str:
    return f"txnwatch-progress.{name}"


# --------------------------------------------------------------------------- settings

def check_settings(transaction_timeout_ms: int, trigger_interval_seconds: float | None = None,
                   broker_max_timeout_ms: int | None = None, num_tasks: int = 1,
                   producer_config: dict | None = None) -> list[str]:
    """Reject unsafe settings with UnsafeSinkSettings; return warnings for doubtful ones.

    A transaction lives inside one micro-batch (a task's write), and a batch of a query
    that keeps up lasts up to the trigger interval; one that falls behind lasts longer.
    A transaction.timeout.ms shorter than a batch can take guarantees coordinator
    aborts and fencing of healthy tasks, so the timeout must be at least
    max(10 s, 2 x trigger interval). It must also stay under the broker's
    transaction.max.timeout.ms, or every InitProducerId fails with
    INVALID_TRANSACTION_TIMEOUT.
    """
    warnings: list[str] = []
    if not isinstance(num_tasks, int) or num_tasks < 1:
        raise UnsafeSinkSettings(f"num_tasks must be a positive integer, got {num_tasks!r}")
    t = int(transaction_timeout_ms)
    trigger_ms = int(round((trigger_interval_seconds or 0) * 1000))
    need = max(MIN_TRANSACTION_TIMEOUT_MS, TRIGGER_FACTOR * trigger_ms)
    if t < need:
        why = (f"{TRIGGER_FACTOR} x the trigger interval ({trigger_ms} ms)" if TRIGGER_FACTOR * trigger_ms
               >= MIN_TRANSACTION_TIMEOUT_MS else f"the {MIN_TRANSACTION_TIMEOUT_MS} ms floor")
        raise UnsafeSinkSettings(
            f"transaction.timeout.ms={t} is shorter than {why}: a transaction spans a task's write "
            f"of one micro-batch, and a timeout shorter than a batch can take guarantees coordinator "
            f"aborts and fenced tasks. Use transaction_timeout_ms >= {need}.")
    cap = broker_max_timeout_ms
    if cap is not None:
        if t > cap:
            raise UnsafeSinkSettings(
                f"transaction.timeout.ms={t} exceeds the broker's transaction.max.timeout.ms={cap}: "
                f"every InitProducerId would fail with INVALID_TRANSACTION_TIMEOUT. "
                + (f"Use {need} <= transaction_timeout_ms <= {cap}." if need <= cap else
                   f"The trigger interval is too long for this broker: need {need} ms > cap {cap} ms; "
                   "shorten the trigger or raise the broker cap."))
    elif t > DEFAULT_BROKER_MAX_TIMEOUT_MS:
        warnings.append(f"transaction.timeout.ms={t} exceeds Kafka's default transaction.max.timeout.ms "
                        f"({DEFAULT_BROKER_MAX_TIMEOUT_MS}); the broker's cap is unknown, InitProducerId "
                        "fails if the broker keeps the default")
    for key, why in _REJECTED_PRODUCER_KEYS.items():
        if producer_config and key in producer_config:
            raise UnsafeSinkSettings(f"producer_config[{key!r}] is not allowed: {why}")
    pc = producer_config or {}
    if str(pc.get("enable.idempotence", "true")).lower() == "false":
        raise UnsafeSinkSettings("enable.idempotence=false: transactions need the idempotent producer")
    if str(pc.get("acks", "all")).lower() not in ("all", "-1"):
        raise UnsafeSinkSettings(f"acks={pc.get('acks')}: transactions need acks=all")
    return warnings


def discover_broker_max_timeout_ms(bootstrap_servers: str, timeout: float = 3.0,
                                   admin_config: dict | None = None) -> int | None:
    """transaction.max.timeout.ms from DescribeConfigs, or None when the broker does not
    report it (some brokers return no config values; ACLs may forbid it)."""
    try:
        from confluent_kafka.admin import AdminClient, ConfigResource

        admin = AdminClient({"bootstrap.servers": bootstrap_servers, **(admin_config or {})})
        md = admin.list_topics(timeout=timeout)
        broker_id = next(iter(md.brokers))
        res = ConfigResource(ConfigResource.Type.BROKER, str(broker_id))
        fut = admin.describe_configs([res], request_timeout=timeout)[res]
        entry = fut.result(timeout=timeout + 1).get("transaction.max.timeout.ms")
        if entry is None or entry.value in (None, ""):
            return None
        return int(entry.value)
    except Exception as exc:  # noqa: BLE001 - unknown is a valid answer
        log.info("could not read the broker's transaction.max.timeout.ms: %s", exc)
        return None


# --------------------------------------------------------------------------- config shipped to tasks

@dataclass(frozen=True)
class SinkConfig:
    """Everything a task needs; small and picklable."""

    name: str
    bootstrap_servers: str
    topic: str
    num_tasks: int
    progress_topic: str
    transaction_timeout_ms: int = DEFAULT_TRANSACTION_TIMEOUT_MS
    producer_config: tuple = ()          # (key, value) pairs
    client_config: tuple = ()            # shared by producer and consumers (security, ...)
    commit_timeout_seconds: float = 60.0
    faults: tuple = ()                   # test-only hooks: ((name, json), ...)
    warm_spares: bool = True             # a connected spare producer per id a worker wrote

    def producer_conf(self, task: int) -> dict:
        conf = {"bootstrap.servers": self.bootstrap_servers, "linger.ms": 5,
                "partitioner": "murmur2_random", **dict(self.client_config), **dict(self.producer_config),
                "transactional.id": transactional_id(self.name, task),
                "transaction.timeout.ms": self.transaction_timeout_ms, "enable.idempotence": True,
                "acks": "all"}
        return conf

    def consumer_conf(self) -> dict:
        return {"bootstrap.servers": self.bootstrap_servers, **dict(self.client_config),
                "group.id": progress_group(self.name), "enable.auto.commit": False,
                "isolation.level": "read_uncommitted", "enable.partition.eof": True,
                "auto.offset.reset": "earliest",
                # Reads end at the partition's end (EOF); a long fetch wait would hold every
                # progress read for fetch.wait.max.ms (500 ms by default) when the last
                # offset is a commit marker.
                "fetch.wait.max.ms": 10}

    def fault(self, name: str) -> dict | None:
        for k, v in self.faults:
            if k == name:
                return json.loads(v)
        return None


# --------------------------------------------------------------------------- progress

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
    from confluent_kafka import Consumer

    topic = progress_topic or default_progress_topic(name)
    cfg = SinkConfig(name=name, bootstrap_servers=bootstrap_servers, topic="", num_tasks=1,
                     progress_topic=topic, client_config=tuple(sorted((client_config or {}).items())))
    c = Consumer(cfg.consumer_conf())
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


# --------------------------------------------------------------------------- executor side

_PRODUCERS: dict[str, TransactionalProducer] = {}
_CONSUMERS: dict[tuple, Any] = {}
_TXN_APIS: dict[tuple, Any] = {}      # KIP-664 client per cluster; None where the broker lacks it


def _consumer(cfg: SinkConfig) -> Any:
    key = (cfg.bootstrap_servers, progress_group(cfg.name), cfg.client_config)
    c = _CONSUMERS.get(key)
    if c is None:
        from confluent_kafka import Consumer

        c = _CONSUMERS[key] = Consumer(cfg.consumer_conf())
    return c


def _txn_api(cfg: SinkConfig) -> Any | None:
    key = (cfg.bootstrap_servers, cfg.client_config)
    if key not in _TXN_APIS:
        from txnwatch.exporter.kafka.kip664 import TransactionAPI

        api = TransactionAPI({"bootstrap.servers": cfg.bootstrap_servers, **dict(cfg.client_config)}, 10.0)
        try:
            api.detect()
        except Exception as exc:  # noqa: BLE001 - no view this time: dead attempts from markers only
            log.info("sink %s: no KIP-664 transaction view (%s)", cfg.name, exc)
            api.close()
            return None           # asked again at the next init
        if not api.available:
            log.info("sink %s: the broker lacks the KIP-664 APIs; dead attempts come from markers only",
                     cfg.name)
            api.close()
        _TXN_APIS[key] = api if api.available else None
    return _TXN_APIS[key]


_ABORTED_STATES = {"PrepareAbort", "CompleteAbort", "PrepareEpochFence"}


def prior_from(description: Any, producers: Iterable[Any], progress: tuple[str, int]) -> PriorTransaction | None:
    """The PriorTransaction a DescribeTransactions answer (TxnDescription) and the
    progress partition's DescribeProducers answer (ActiveProducer) describe, or None when
    the id's last transaction needs no report (committed, or none)."""
    d = description
    if d is None or (d.state != "Ongoing" and d.state not in _ABORTED_STATES):
        return None
    mine = [p for p in producers if p.producer_id == d.producer_id]
    if d.state == "Ongoing":
        offsets = [p.txn_start_offset for p in mine if p.txn_start_offset >= 0]
        return PriorTransaction(True, d.producer_id, d.producer_epoch, d.start_ms, d.timeout_ms,
                                offsets[0] if offsets else None, bool(offsets))
    # Aborted: while its markers are being written the coordinator lists the partitions
    # still waiting; after, the abort's control record in the progress partition carries
    # the transaction's final epoch, so an entry at that epoch means it wrote there.
    wrote = progress in d.partitions or any(p.producer_epoch == d.producer_epoch for p in mine)
    return PriorTransaction(False, d.producer_id, d.producer_epoch, d.start_ms, d.timeout_ms, None, wrote)


def prior_transaction(cfg: SinkConfig, task: int) -> PriorTransaction | None:
    """Before init_transactions: the last transaction of this task's id if it is open (the
    init will fence it) or was aborted, from the coordinator and the progress partition's
    leader. None when it committed, none exists, or the broker cannot say (no KIP-664)."""
    api = _txn_api(cfg)
    if api is None:
        return None
    tid = transactional_id(cfg.name, task)
    try:
        d = api.describe_transactions([tid]).get(tid)
        if prior_from(d, [], (cfg.progress_topic, task)) is None:
            return None           # nothing to report: no need to ask the partition's leader
        producers = api.describe_producers([(cfg.progress_topic, task)])
    except Exception as exc:  # noqa: BLE001 - unknown id (first run), or no answer: markers only
        log.debug("sink %s: describing %s: %s", cfg.name, tid, exc)
        return None
    return prior_from(d, producers, (cfg.progress_topic, task))


# Spare producers: per Python worker, for each task id it has written, one producer
# connected (bootstrap and metadata done) but not initialised. Spark runs a batch's task on
# whichever Python worker is idle, so a task id moves between workers; the worker taking
# it over must init_transactions (fencing the other's idle producer), and a cold producer's
# first init costs its connections too (about 55 ms against 7 ms warm, on loopback).
# A spare has no effect on the broker until its init.
_SPARES: OrderedDict[str, TransactionalProducer] = OrderedDict()
_WARMING: set[str] = set()
_SPARES_LOCK = threading.Lock()
MAX_SPARES = 16      # per Python worker; the least recently written ids' spares go first


def _take_spare(tid: str) -> TransactionalProducer | None:
    with _SPARES_LOCK:
        return _SPARES.pop(tid, None)


def _warm_spare(cfg: SinkConfig, task: int) -> None:
    """Make (on a thread of its own, never in the task's way) this id's spare if it has none."""
    if not cfg.warm_spares:
        return
    tid = transactional_id(cfg.name, task)
    with _SPARES_LOCK:
        if tid in _SPARES:
            _SPARES.move_to_end(tid)
            return
        if tid in _WARMING:
            return
        _WARMING.add(tid)

    def make() -> None:
        spare = None
        try:
            spare = TransactionalProducer(cfg.producer_conf(task))
            spare.producer.list_topics(cfg.topic, timeout=10)
        except Exception:  # noqa: BLE001 - no spare: the next takeover starts cold
            log.debug("sink %s: no spare producer for %s", cfg.name, tid, exc_info=True)
            spare = None
        dropped = []
        with _SPARES_LOCK:
            _WARMING.discard(tid)
            if spare is not None:
                _SPARES[tid] = spare
                while len(_SPARES) > MAX_SPARES:
                    dropped.append(_SPARES.popitem(last=False)[1])
        for d in dropped:
            d.close(0)

    threading.Thread(target=make, name=f"txnwatch-spare-{tid}", daemon=True).start()


def _producer(cfg: SinkConfig, task: int) -> tuple[TransactionalProducer, bool]:
    """The worker's cached producer for this task's id (initialised when missing: from the
    id's spare when there is one; the transaction its init found is kept in `prior` for the
    first write to report)."""
    tid = transactional_id(cfg.name, task)
    p = _PRODUCERS.get(tid)
    if p is not None and p.broken is None:
        return p, False
    p = _take_spare(tid) or TransactionalProducer(cfg.producer_conf(task))
    prior = prior_transaction(cfg, task)
    p.init_transactions(cfg.commit_timeout_seconds)
    p.prior = None if prior is None else dataclasses.replace(prior, fenced_at=time.time())
    p.last_committed_offset = None
    p.last_marker = None
    _PRODUCERS[tid] = p
    return p, True


def _drop_producer(cfg: SinkConfig, task: int) -> None:
    p = _PRODUCERS.pop(transactional_id(cfg.name, task), None)
    if p is not None:
        p.close(1.0)


def _to_bytes(values: list) -> list:
    return [v.encode() if isinstance(v, str) else v for v in values]


def _result(task: int, status: str, rows: int, records: list, attempt: str = "",
            seconds: float = 0.0) -> Any:
    import pyarrow as pa

    return pa.RecordBatch.from_pydict({
        "task": pa.array([task], pa.int32()), "status": pa.array([status]),
        "rows": pa.array([rows], pa.int64()), "records": pa.array([json.dumps(records)]),
        "attempt": pa.array([attempt]), "seconds": pa.array([seconds], pa.float64())})


def _wait_for_others(cfg: SinkConfig, task: int, batch_id: int, timeout: float) -> None:
    """Fault hook helper: wait until the other tasks committed this batch (or timed out)."""
    c = _consumer(cfg)
    others = [t for t in range(cfg.num_tasks) if t != task]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        done = 0
        for t in others:
            off = committed_offset(c, cfg.progress_topic, t, 10)
            if off > 0:
                recs = read_markers(c, cfg.progress_topic, t, off - 1, off)
                if recs and int(recs[0][1].get("batch", -1)) >= batch_id:
                    done += 1
        if done == len(others):
            return
        time.sleep(0.2)


def write_partition(cfg: SinkConfig, batch_id: int, batches: Iterator) -> Iterator:
    """mapInArrow body: write this task's rows of the batch in one transaction (or skip a
    batch already committed); yield one result row."""
    from pyspark import TaskContext

    task = TaskContext.get().partitionId()
    if task >= cfg.num_tasks:
        raise SinkLayoutError(f"task index {task} >= num_tasks {cfg.num_tasks}: the batch was not "
                              "partitioned into exactly num_tasks partitions")
    data = [b for b in batches if b.num_rows]
    if not data:
        yield _result(task, "empty", 0, [])
        return
    t0 = time.perf_counter()
    for retry in (False, True):
        producer, fresh = _producer(cfg, task)
        try:
            status, rows, records, attempt = _write(cfg, task, batch_id, data, producer, fresh)
            _warm_spare(cfg, task)        # for when this worker takes the id over again
            yield _result(task, status, rows, records, attempt, time.perf_counter() - t0)
            return
        except _StaleProducer:
            # Another Python worker initialised this id since this cached producer did
            # (Spark ran the task there): it is fenced. Re-initialise and start over;
            # progress is re-read after the new init, so this stays exactly once.
            _drop_producer(cfg, task)
            if retry:
                raise


class _StaleProducer(Exception):
    pass


def _write(cfg: SinkConfig, task: int, batch_id: int, data: list, producer: TransactionalProducer,
           fresh: bool) -> tuple[str, int, list, str]:
    from confluent_kafka import TopicPartition

    consumer = _consumer(cfg)
    known = getattr(producer, "last_marker", None) if not fresh else None
    try:
        prog = task_progress(consumer, cfg, task, known=known)
    except Exception:
        _drop_producer(cfg, task)
        raise
    if not fresh and getattr(producer, "last_committed_offset", None) != prog.committed_offset:
        raise _StaleProducer()        # someone else committed with this id since our init
    prior, producer.prior = getattr(producer, "prior", None), None
    own = fenced_by_init(prog, prior)
    records = dead_attempt_records(cfg, task, prog, own, time.time())
    if prog.batch is not None and prog.batch >= batch_id:
        if prog.marker.tasks != cfg.num_tasks:
            raise SinkLayoutError(
                f"batch {batch_id} was already written by task {task} with num_tasks={prog.marker.tasks}; "
                f"replaying it with num_tasks={cfg.num_tasks} would write rows twice or lose them")
        producer.last_committed_offset = prog.committed_offset
        producer.last_marker = prog.marker
        return "replayed", 0, records, ""

    attempt = uuid.uuid4().hex
    headers = [(TXN_HEADER, attempt.encode())]
    marker_offset: list[int] = []

    def on_marker(err, msg):
        if err is None:
            marker_offset.append(msg.offset())

    started = time.time()
    producer.begin()
    try:
        marker = {"kind": "begin", "sink": cfg.name, "task": task, "batch": batch_id,
                  "tasks": cfg.num_tasks, "attempt": attempt, "started": started,
                  "timeout_ms": cfg.transaction_timeout_ms,
                  "prev": prog.marker.offset if prog.marker else -1}
        if own:
            marker["fenced"] = own    # so the fence is reported even if this attempt dies too
        _pause_before_marker(cfg, producer, task, batch_id, data, headers)
        producer.produce(cfg.progress_topic, value=json.dumps(marker).encode(),
                         key=transactional_id(cfg.name, task).encode(), partition=task,
                         on_delivery=on_marker)
        rows = _produce_rows(cfg, producer, data, headers)
        if producer.flush(cfg.commit_timeout_seconds) or not marker_offset:
            raise RuntimeError("the progress marker was not delivered")
        producer.send_offsets_to_transaction(
            [TopicPartition(cfg.progress_topic, task, marker_offset[0] + 1)],
            consumer.consumer_group_metadata(), cfg.commit_timeout_seconds)
        # test hooks: after every record of the attempt reached the broker, before the commit
        # (before the flush, a kill could beat librdkafka's send and leave no row behind)
        _fault_hooks(cfg, task, batch_id)
    except BaseException as exc:
        _abort_with_note(cfg, producer, task, attempt, exc)
        # A cached producer fenced by another instance's init since (the fence can surface
        # as an undelivered marker first, then as the producer's fatal error).
        if not fresh and (is_fencing(error_name(exc)) or is_fencing(producer.broken)):
            raise _StaleProducer() from exc
        raise
    try:
        rec = producer.commit(cfg.commit_timeout_seconds)
    except TransactionError as exc:
        _drop_producer(cfg, task)   # state unknown or fenced: the next attempt re-inits
        if not fresh and exc.fenced:
            raise _StaleProducer() from exc
        raise
    producer.last_committed_offset = marker_offset[0] + 1
    producer.last_marker = Marker(offset=marker_offset[0], batch=batch_id, tasks=cfg.num_tasks,
                                  attempt=attempt, started=started, timeout_ms=cfg.transaction_timeout_ms,
                                  prev=marker["prev"])
    rec["attempt"] = attempt
    rec["batch"] = batch_id
    records.append(rec)
    return "committed", rows, records, attempt


def _produce_rows(cfg: SinkConfig, producer: TransactionalProducer, data: list, headers: list) -> int:
    rows = 0
    for b in data:
        keys = _to_bytes(b.column("key").to_pylist()) if "key" in b.schema.names else None
        values = _to_bytes(b.column("value").to_pylist())
        if keys is None:
            for v in values:
                producer.produce(cfg.topic, value=v, headers=headers)
        else:
            for k, v in zip(keys, values, strict=True):
                producer.produce(cfg.topic, value=v, key=k, headers=headers)
        rows += len(values)
    return rows


def _abort_with_note(cfg: SinkConfig, producer: TransactionalProducer, task: int, attempt: str,
                     exc: BaseException) -> None:
    """Leave a note (in the aborted transaction itself) for the next attempt to report, then abort."""
    name = error_name(exc)
    fenced = is_fencing(name)
    try:
        if not fenced and producer.broken is None:
            note = {"kind": "abort", "attempt": attempt, "error": name,
                    "duration": producer.elapsed() or 0.0}
            producer.produce(cfg.progress_topic, value=json.dumps(note).encode(),
                             key=transactional_id(cfg.name, task).encode(), partition=task)
            producer.flush(10)
        producer.abort(cfg.commit_timeout_seconds, error=name)
    except Exception:  # noqa: BLE001 - the original error matters; the next init cleans up
        pass
    if fenced or producer.broken is not None:
        _drop_producer(cfg, task)


def _fault_hooks(cfg: SinkConfig, task: int, batch_id: int) -> None:
    if not cfg.faults:
        return
    f = cfg.fault("fail_after_produce")
    if f and f.get("batch", batch_id) == batch_id and f.get("task", task) == task:
        flag = f["once_file"]
        if not os.path.exists(flag):
            with open(flag, "w") as fh:
                fh.write(f"{task} {batch_id}\n")
            if f.get("wait_others"):
                _wait_for_others(cfg, task, batch_id, float(f.get("wait_seconds", 30)))
            raise InjectedFailure(f"injected failure in task {task} of batch {batch_id} after producing")
    f = cfg.fault("pause_before_commit")
    if f and f.get("batch", batch_id) == batch_id and f.get("task", task) == task:
        _pause(f, task, batch_id)


def _pause(f: dict, task: int, batch_id: int) -> None:
    with open(f["signal_file"], "w") as fh:
        fh.write(f"{os.getpid()} {task} {batch_id}\n")
    time.sleep(float(f.get("seconds", 300)))


def _pause_before_marker(cfg: SinkConfig, producer: TransactionalProducer, task: int, batch_id: int,
                         data: list, headers: list) -> None:
    """Test hook: the transaction's rows reach the broker but its marker never does (as when
    the progress partition's leader is slow and the process dies); then pause, to be killed."""
    f = cfg.fault("pause_before_marker") if cfg.faults else None
    if f and f.get("batch", batch_id) == batch_id and f.get("task", task) == task:
        _produce_rows(cfg, producer, data, headers)
        producer.flush(cfg.commit_timeout_seconds)
        _pause(f, task, batch_id)
        raise InjectedFailure(f"task {task} of batch {batch_id} paused before its marker and was not killed")


# --------------------------------------------------------------------------- driver side

MetricsTarget = Any   # TxnWatchListener (emit), SparkQueryState (apply) or a callable(event)


def _emitter(metrics: MetricsTarget | None) -> Callable[[dict], object] | None:
    if metrics is None:
        return None
    if hasattr(metrics, "emit"):
        return metrics.emit
    if hasattr(metrics, "apply"):
        return metrics.apply
    if callable(metrics):
        return metrics
    raise TypeError("metrics must be a TxnWatchListener, a SparkQueryState or a callable(event)")


def ensure_progress_topic(bootstrap_servers: str, topic: str, num_tasks: int,
                          client_config: dict | None = None, timeout: float = 30.0) -> int:
    """Create the compacted progress topic with num_tasks partitions if missing; reject one
    with fewer partitions than tasks. Returns its partition count."""
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap_servers, **(client_config or {})})
    md = admin.list_topics(timeout=timeout)
    if topic not in md.topics or md.topics[topic].error is not None:
        fut = admin.create_topics([NewTopic(topic, num_tasks, -1, config={"cleanup.policy": "compact"})],
                                  request_timeout=timeout)[topic]
        try:
            fut.result()
        except Exception as exc:  # noqa: BLE001 - a concurrent creation is fine
            if "already exists" not in str(exc).lower():
                raise
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            md = admin.list_topics(topic, timeout=timeout)
            if topic in md.topics and len(md.topics[topic].partitions) >= num_tasks:
                break
            time.sleep(0.1)
    n = len(admin.list_topics(topic, timeout=timeout).topics[topic].partitions)
    if n < num_tasks:
        raise UnsafeSinkSettings(
            f"progress topic {topic} has {n} partitions but num_tasks={num_tasks}: each output task "
            "needs its own partition; add partitions or use another progress topic")
    return n


class _Sink:
    """What the two sinks share: the foreachBatch call shape and result handling."""

    def __init__(self, name: str, bootstrap_servers: str, topic: str, num_tasks: int) -> None:
        if not NAME_RE.match(name or ""):
            raise UnsafeSinkSettings(f"sink name {name!r} must match {NAME_RE.pattern}")
        if not isinstance(num_tasks, int) or num_tasks < 1:
            raise UnsafeSinkSettings(f"num_tasks must be a positive integer, got {num_tasks!r}")
        self.name = name
        self.bootstrap_servers = bootstrap_servers
        self.topic = topic
        self.num_tasks = num_tasks
        self.stats: dict[str, int] = {}
        self.task_seconds: list[float] = []     # time in the write function, tasks that wrote

    def _count(self, key: str, n: int = 1) -> None:
        self.stats[key] = self.stats.get(key, 0) + n

    @staticmethod
    def _columns(df: Any) -> list[str]:
        cols = df.columns
        if "value" not in cols:
            raise ValueError(f"the batch needs a `value` column (and optionally `key`); got {cols}")
        return ["key", "value"] if "key" in cols else ["value"]

    @classmethod
    def _prepare(cls, df: Any, num_tasks: int) -> Any:
        cols = cls._columns(df)
        return df.select(*cols).repartition(num_tasks, cols[0])


class ExactlyOnceKafkaSink(_Sink):
    """foreachBatch writer: `query = df.writeStream.foreachBatch(sink).start()`.

    The batch DataFrame needs a `value` column (string or binary) and optionally `key`.
    Parameters:
    - name: the sink's name; transactional ids are `txnwatch.<name>.<task index>`, the
      progress group `txnwatch.<name>`, the `app` label of its metrics is `name`.
    - num_tasks: output tasks (= transactional ids) per batch; fixed for the checkpoint.
    - progress_topic: default `txnwatch-progress.<name>`, created compacted with
      num_tasks partitions; one per sink.
    - transaction_timeout_ms / trigger_interval_seconds / broker_max_timeout_ms: checked
      by `check_settings` (broker_max_timeout_ms="discover" asks DescribeConfigs; None
      skips the cap check).
    - metrics: TxnWatchListener, SparkQueryState or callable receiving the
      `producer_transactions` event of every batch.
    - producer_config / client_config: extra librdkafka settings (client_config is also
      used by the progress consumer: security settings go there).
    - partitioning: "key" (default) hashes each batch on `key` into num_tasks output
      tasks (a shuffle); "input" writes the batch's own partitions as they are, task i =
      partition i, with no shuffle, when the batch has at most num_tasks partitions (else
      it falls back to "key" for that batch, counted in stats["layout_fallback"]). "input"
      is exactly once only while a replayed batch gets the partitioning its first attempt
      had: true of a stateful query's shuffle partitions (fixed by the checkpoint) and of
      Spark's Kafka source without minPartitions (one partition per topic-partition
      range, from the offset log); not across a change of the query's plan while a
      batch is pending. See docs/spark-sink.md.
    - warm_spares: each Python worker keeps, for every task id it has written, a spare
      producer connected to the cluster but not initialised, so that taking the id over
      from another worker (Spark runs a task on whichever worker is idle) costs an
      InitProducerId, not a new client's connections too. False to save the connections.
    """

    def __init__(self, name: str, bootstrap_servers: str, topic: str, *, num_tasks: int = 2,
                 progress_topic: str | None = None,
                 transaction_timeout_ms: int = DEFAULT_TRANSACTION_TIMEOUT_MS,
                 trigger_interval_seconds: float | None = None,
                 broker_max_timeout_ms: int | str | None = DISCOVER,
                 producer_config: dict | None = None, client_config: dict | None = None,
                 metrics: MetricsTarget | None = None, commit_timeout_seconds: float = 60.0,
                 create_progress_topic: bool = True, faults: dict | None = None,
                 partitioning: str = "key", warm_spares: bool = True) -> None:
        super().__init__(name, bootstrap_servers, topic, num_tasks)
        if partitioning not in PARTITIONINGS:
            raise UnsafeSinkSettings(f"partitioning must be one of {', '.join(PARTITIONINGS)}, got {partitioning!r}")
        self.partitioning = partitioning
        if broker_max_timeout_ms == DISCOVER:
            broker_max_timeout_ms = discover_broker_max_timeout_ms(bootstrap_servers,
                                                                   admin_config=client_config)
        self.broker_max_timeout_ms = broker_max_timeout_ms
        self.warnings = check_settings(transaction_timeout_ms, trigger_interval_seconds,
                                       broker_max_timeout_ms, num_tasks, producer_config)
        for w in self.warnings:
            log.warning("txnwatch sink %s: %s", name, w)
        self.progress_topic = progress_topic or default_progress_topic(name)
        self.config = SinkConfig(
            name=name, bootstrap_servers=bootstrap_servers, topic=topic, num_tasks=num_tasks,
            progress_topic=self.progress_topic, transaction_timeout_ms=int(transaction_timeout_ms),
            producer_config=tuple(sorted((producer_config or {}).items())),
            client_config=tuple(sorted((client_config or {}).items())),
            commit_timeout_seconds=commit_timeout_seconds,
            faults=tuple(sorted((k, json.dumps(v)) for k, v in (faults or {}).items())),
            warm_spares=bool(warm_spares))
        if create_progress_topic:
            ensure_progress_topic(bootstrap_servers, self.progress_topic, num_tasks, client_config)
        self._emit = _emitter(metrics)
        self._checked = False
        self._reported: OrderedDict[str, None] = OrderedDict()
        self.last_results: list[dict] = []

    # ------------------------------------------------------------------ driver API
    def progress(self) -> dict[int, TaskProgress]:
        """Committed progress per progress-topic partition (read from the driver)."""
        from confluent_kafka import Consumer

        c = Consumer(self.config.consumer_conf())
        try:
            md = c.list_topics(self.progress_topic, timeout=10)
            parts = sorted(md.topics[self.progress_topic].partitions)
            return {p: task_progress(c, self.config, p) for p in parts}
        finally:
            c.close()

    def check_layout(self, batch_id: int) -> None:
        """Refuse to replay a batch that was written with another number of tasks."""
        for task, prog in self.progress().items():
            m = prog.marker
            if m is None:
                continue
            if m.batch >= batch_id and (m.tasks != self.num_tasks or task >= self.num_tasks):
                raise SinkLayoutError(
                    f"sink {self.name}: batch {m.batch} was written by task {task} of {m.tasks} tasks, "
                    f"and batch {batch_id} is being (re)played with num_tasks={self.num_tasks}. Output "
                    f"tasks hash the batch by key, so another task count would write some rows twice "
                    f"and lose others. Restart with num_tasks={m.tasks} until the query has moved past "
                    f"batch {m.batch}, then change it.")

    def __call__(self, df: Any, batch_id: int) -> None:
        if not self._checked:
            self.check_layout(batch_id)
            self._checked = True
        from functools import partial

        fn = partial(write_partition, self.config, int(batch_id))
        prepared, tasks = self._layout(df)
        rows = prepared.mapInArrow(fn, RESULT_SCHEMA).collect()
        self._handle(batch_id, [r.asDict() for r in rows], tasks)

    def _layout(self, df: Any) -> tuple[Any, int]:
        """The batch as the write tasks get it, and how many tasks that is."""
        if self.partitioning == "input":
            n = input_partitions(df)
            if n is not None and 1 <= n <= self.num_tasks:
                return df.select(*self._columns(df)), n
            self._count("layout_fallback")
        return self._prepare(df, self.num_tasks), self.num_tasks

    def _handle(self, batch_id: int, results: list[dict], expected_tasks: int | None = None) -> None:
        """One batch's task results; `expected_tasks` the tasks its layout made (num_tasks by default)."""
        expected_tasks = self.num_tasks if expected_tasks is None else expected_tasks
        tasks = sorted(r["task"] for r in results)
        if tasks != list(range(expected_tasks)):
            # Output already committed stays exactly once; this says the layout assumption broke.
            log.error("sink %s batch %s: results from tasks %s, expected 0..%d", self.name, batch_id,
                      tasks, expected_tasks - 1)
            self._count("layout_mismatch")
        self.last_results = results
        self._count("batches")
        records: list[dict] = []
        self.task_seconds.extend(float(r.get("seconds") or 0.0) for r in results if r["status"] == "committed")
        for r in results:
            self._count(f"tasks_{r['status']}")
            self._count("rows", int(r["rows"] or 0))
            for rec in json.loads(r["records"] or "[]"):
                key = f"{rec.get('attempt')}:{rec.get('outcome')}"
                if key in self._reported:
                    continue           # a dead attempt reported twice (skipped replays)
                self._reported[key] = None
                while len(self._reported) > 10_000:
                    self._reported.popitem(last=False)
                self._count(f"transactions_{rec['outcome']}")
                if rec.get("error"):
                    self._count(f"error_{rec['error']}")
                records.append({k: rec[k] for k in ("transactional_id", "outcome", "duration_seconds",
                                                    "commit_seconds", "timeout_ms", "error")})
        if records and self._emit is not None:
            try:
                self._emit({"type": "producer_transactions", "app": self.name, "timestamp": time.time(),
                            "records": records})
            except Exception:  # noqa: BLE001 - metrics never fail a batch
                log.warning("sink %s: emitting metrics failed", self.name, exc_info=True)


class AtLeastOnceKafkaSink(_Sink):
    """The same write path without transactions (idempotent producer, plain produce and
    flush): the guarantee of Spark's own Kafka sink (at least once) on the Python write path,
    which separates the cost of transactions from that of foreachBatch in bench_sink.py."""

    def __init__(self, name: str, bootstrap_servers: str, topic: str, *, num_tasks: int = 2,
                 producer_config: dict | None = None, client_config: dict | None = None) -> None:
        super().__init__(name, bootstrap_servers, topic, num_tasks)
        conf = {"bootstrap.servers": bootstrap_servers, "linger.ms": 5, "partitioner": "murmur2_random",
                "enable.idempotence": True, **(client_config or {}), **(producer_config or {})}
        self.conf = tuple(sorted(conf.items()))

    def __call__(self, df: Any, batch_id: int) -> None:
        from functools import partial

        fn = partial(_plain_partition, self.conf, self.topic)
        rows = self._prepare(df, self.num_tasks).mapInArrow(fn, RESULT_SCHEMA).collect()
        self._count("batches")
        for r in rows:
            self._count("rows", int(r["rows"] or 0))
            if r["rows"]:
                self.task_seconds.append(float(r["seconds"] or 0.0))


_PLAIN: dict[tuple, Any] = {}


def _plain_partition(conf: tuple, topic: str, batches: Iterable) -> Iterator:
    from confluent_kafka import Producer
    from pyspark import TaskContext

    task = TaskContext.get().partitionId()
    t0 = time.perf_counter()
    p = _PLAIN.get(conf)
    if p is None:
        p = _PLAIN[conf] = Producer(dict(conf))
    rows = 0
    for b in batches:
        if not b.num_rows:
            continue
        values = _to_bytes(b.column("value").to_pylist())
        keys = _to_bytes(b.column("key").to_pylist()) if "key" in b.schema.names else [None] * len(values)
        for k, v in zip(keys, values, strict=True):
            while True:
                try:
                    p.produce(topic, value=v, key=k)
                    break
                except BufferError:
                    p.poll(0.05)
        rows += len(values)
    if p.flush(60):
        raise RuntimeError("at-least-once sink: records not delivered within 60 s")
    yield _result(task, "written", rows, [], seconds=time.perf_counter() - t0)

