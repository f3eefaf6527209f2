"""The executor side: the mapInArrow body each output task runs (`write_partition`), with
the Python worker's cached producers, spares and clients, and the at-least-once write
path bench_sink.py compares against."""

from __future__ import annotations

import dataclasses
import json
import logging
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from txnwatch.kafka import clients
from txnwatch.producer import (
    TransactionalProducer,
    TransactionError,
    error_name,
    is_fencing,
)

from .progress import (
    Marker,
    PriorTransaction,
    TaskProgress,
    dead_attempt_records,
    fenced_by_init,
    task_progress,
)
from .settings import TXN_HEADER, SinkConfig, SinkLayoutError, progress_group, transactional_id

log = logging.getLogger(__name__)

_CONSUMERS: dict[tuple, Any] = {}
_TXN_APIS: dict[tuple, Any] = {}      # KIP-664 client per cluster; None where the broker lacks it


def _consumer(cfg: SinkConfig) -> Any:
    key = (cfg.bootstrap_servers, progress_group(cfg.name), cfg.client_config)
    c = _CONSUMERS.get(key)
    if c is None:
        c = _CONSUMERS[key] = clients.consumer(cfg.consumer_conf())
    return c


def _txn_api(cfg: SinkConfig) -> Any | None:
    key = (cfg.bootstrap_servers, cfg.client_config)
    if key not in _TXN_APIS:
        from txnwatch.kafka.kip664 import TransactionAPI

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
            spare = cfg.producer_factory(cfg, task)
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


@dataclass
class _TaskProducer:
    """A Python worker's initialised producer for one task's id, and what it knows of the id
    since its init: checked against the broker's progress before each write."""

    producer: TransactionalProducer
    prior: PriorTransaction | None = None   # what its init fenced or found aborted: the first write reports it
    committed_offset: int | None = None     # the progress group's offset after its last commit or replay
    last_marker: Marker | None = None       # the marker that offset names


_PRODUCERS: dict[str, _TaskProducer] = {}


def _producer(cfg: SinkConfig, task: int) -> tuple[_TaskProducer, bool]:
    """The worker's cached producer for this task's id, and whether it was initialised just
    now (from the id's spare when there is one; the transaction its init found is kept in
    `prior` for the first write to report)."""
    tid = transactional_id(cfg.name, task)
    cached = _PRODUCERS.get(tid)
    if cached is not None and cached.producer.broken is None:
        return cached, False
    p = _take_spare(tid) or cfg.producer_factory(cfg, task)
    prior = prior_transaction(cfg, task)
    p.init_transactions(cfg.commit_timeout_seconds)
    cached = _PRODUCERS[tid] = _TaskProducer(
        p, prior=None if prior is None else dataclasses.replace(prior, fenced_at=time.time()))
    return cached, True


def _drop_producer(cfg: SinkConfig, task: int) -> None:
    cached = _PRODUCERS.pop(transactional_id(cfg.name, task), None)
    if cached is not None:
        cached.producer.close(1.0)


def _to_bytes(values: list) -> list:
    return [v.encode() if isinstance(v, str) else v for v in values]


def _result(task: int, status: str, rows: int, records: list, attempt: str = "",
            seconds: float = 0.0) -> Any:
    import pyarrow as pa

    return pa.RecordBatch.from_pydict({
        "task": pa.array([task], pa.int32()), "status": pa.array([status]),
        "rows": pa.array([rows], pa.int64()), "records": pa.array([json.dumps(records)]),
        "attempt": pa.array([attempt]), "seconds": pa.array([seconds], pa.float64())})


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
        cached, fresh = _producer(cfg, task)
        try:
            status, rows, records, attempt = _write(cfg, task, batch_id, data, cached, fresh)
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


def _write(cfg: SinkConfig, task: int, batch_id: int, data: list, cached: _TaskProducer,
           fresh: bool) -> tuple[str, int, list, str]:
    """Write the batch's rows and its marker in one transaction, or skip a batch already
    committed: (status, rows, transaction records, attempt id)."""
    consumer = _consumer(cfg)
    prog = _progress(cfg, task, consumer, cached, fresh)
    prior, cached.prior = cached.prior, None
    own = fenced_by_init(prog, prior)
    records = dead_attempt_records(cfg, task, prog, own, time.time())
    if prog.batch is not None and prog.batch >= batch_id:
        _check_replay(cfg, task, batch_id, prog)
        cached.committed_offset, cached.last_marker = prog.committed_offset, prog.marker
        return "replayed", 0, records, ""
    attempt = uuid.uuid4().hex
    marker = _begin_marker(cfg, task, batch_id, attempt, prog, own)
    rows, marker_offset = _produce_in_transaction(cfg, task, cached.producer, consumer, data, marker, fresh)
    rec = _commit(cfg, task, cached.producer, fresh)
    cached.committed_offset = marker_offset + 1
    cached.last_marker = Marker(offset=marker_offset, batch=batch_id, tasks=cfg.num_tasks, attempt=attempt,
                                started=marker["started"], timeout_ms=cfg.transaction_timeout_ms,
                                prev=marker["prev"])
    rec["attempt"] = attempt
    rec["batch"] = batch_id
    records.append(rec)
    return "committed", rows, records, attempt


def _progress(cfg: SinkConfig, task: int, consumer: Any, cached: _TaskProducer, fresh: bool) -> TaskProgress:
    """The task's committed progress; _StaleProducer when someone else committed with this
    id since the cached producer's init."""
    try:
        prog = task_progress(consumer, cfg, task, known=cached.last_marker)
    except Exception:
        _drop_producer(cfg, task)
        raise
    if not fresh and cached.committed_offset != prog.committed_offset:
        raise _StaleProducer()
    return prog


def _check_replay(cfg: SinkConfig, task: int, batch_id: int, prog: TaskProgress) -> None:
    if prog.marker.tasks != cfg.num_tasks:
        raise SinkLayoutError(
            f"batch {batch_id} was already written by task {task} with num_tasks={prog.marker.tasks}; "
            f"replaying it with num_tasks={cfg.num_tasks} would write rows twice or lose them")


def _begin_marker(cfg: SinkConfig, task: int, batch_id: int, attempt: str, prog: TaskProgress,
                  own: list[dict]) -> dict:
    """The progress marker that opens the attempt's transaction."""
    marker = {"kind": "begin", "sink": cfg.name, "task": task, "batch": batch_id,
              "tasks": cfg.num_tasks, "attempt": attempt, "started": time.time(),
              "timeout_ms": cfg.transaction_timeout_ms,
              "prev": prog.marker.offset if prog.marker else -1}
    if own:
        marker["fenced"] = own    # so the fence is reported even if this attempt dies too
    return marker


def _produce_in_transaction(cfg: SinkConfig, task: int, producer: TransactionalProducer, consumer: Any, data: list,
             marker: dict, fresh: bool) -> tuple[int, int]:
    """Begin the transaction; produce the marker, then the rows; add the progress group's
    offset past the marker to it: (rows, the marker's offset). On failure the transaction is
    aborted with a note, and a cached producer fenced since its init is _StaleProducer."""
    from confluent_kafka import TopicPartition

    marker_offset: list[int] = []

    def on_marker(err, msg):
        if err is None:
            marker_offset.append(msg.offset())

    producer.begin()
    try:
        producer.produce(cfg.progress_topic, value=json.dumps(marker).encode(),
                         key=transactional_id(cfg.name, task).encode(), partition=task,
                         on_delivery=on_marker)
        rows = _produce_rows(cfg, producer, data, [(TXN_HEADER, marker["attempt"].encode())])
        if producer.flush(cfg.commit_timeout_seconds) or not marker_offset:
            raise RuntimeError("the progress marker was not delivered")
        producer.send_offsets_to_transaction(
            [TopicPartition(cfg.progress_topic, task, marker_offset[0] + 1)],
            consumer.consumer_group_metadata(), cfg.commit_timeout_seconds)
    except BaseException as exc:
        _abort_with_note(cfg, producer, task, marker["attempt"], exc)
        # A cached producer fenced by another instance's init since (the fence can surface
        # as an undelivered marker first, then as the producer's fatal error).
        if not fresh and (is_fencing(error_name(exc)) or is_fencing(producer.broken)):
            raise _StaleProducer() from exc
        raise
    return rows, marker_offset[0]


def _commit(cfg: SinkConfig, task: int, producer: TransactionalProducer, fresh: bool) -> dict:
    """Commit the transaction: its record. On failure the producer is dropped (the next
    attempt re-inits), and a cached one fenced since its init is _StaleProducer."""
    try:
        return producer.commit(cfg.commit_timeout_seconds)
    except TransactionError as exc:
        _drop_producer(cfg, task)
        if not fresh and exc.fenced:
            raise _StaleProducer() from exc
        raise


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


_PLAIN: dict[tuple, Any] = {}


def _plain_partition(conf: tuple, topic: str, batches: Iterable) -> Iterator:
    from pyspark import TaskContext

    task = TaskContext.get().partitionId()
    t0 = time.perf_counter()
    p = _PLAIN.get(conf)
    if p is None:
        p = _PLAIN[conf] = clients.producer(dict(conf))
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
