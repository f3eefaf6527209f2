"""An instrumented transactional producer (confluent-kafka) for any Python service.

    from txnwatch.producer import TransactionalProducer, ProducerMetricsCollector
    collector = ProducerMetricsCollector()             # prometheus_client Collector
    prometheus_client.REGISTRY.register(collector)
    p = TransactionalProducer({"bootstrap.servers": "...", "transactional.id": "orders-1"},
                              on_record=collector.record)
    p.init_transactions()
    with p.transaction():                              # commit on exit, abort on exception
        p.produce("orders", value=b"...", key=b"...")

Every finished transaction yields one record in the shape of the listener's
`producer_transactions` event (see txnwatch/spark_listener/events.py):

    {"transactional_id", "outcome": "committed"|"aborted", "duration_seconds",
     "commit_seconds" (commit call latency, None for aborts), "timeout_ms",
     "error" (librdkafka error name or None)}

so the same records feed the Spark sink's driver-side metrics, the exporter's ingest
endpoint, or the standalone `ProducerMetricsCollector`, which renders the catalogue's
kafka_producer_* series (commit latency, begin-to-end duration, outcome, errors by
librdkafka name, headroom = transaction.timeout.ms - duration).

Errors are recorded wherever they surface, once: a Kafka error raised by begin, produce,
flush, send_offsets_to_transaction, commit or abort is the error of the open
transaction (the first one wins: it is the cause, later ones are consequences). A fatal
error (fencing included) ends the transaction there and then (the coordinator aborts it),
so its record is written at once and a later commit or abort writes none. A fatal error
that surfaces while no transaction is open gets a record with `outcome` None: it counts
as an error, not as a transaction.

Fencing is told apart: `is_fencing(name)` is true for the errors of
txnwatch.fencing.FENCING_ERRORS (PRODUCER_FENCED, INVALID_PRODUCER_EPOCH and librdkafka's
local _FENCED); after fencing the producer is unusable (a newer instance owns the
transactional id) and must be closed.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from txnwatch.apps import AppResolver
from txnwatch.fencing import FENCING_ERRORS
from txnwatch.kafka import clients
from txnwatch.metrics import FamilyWriter
from txnwatch.producer_state import ProducerTransactions

APPLICATION_ERROR = "_APPLICATION"   # librdkafka's name for "application generated error"
DEFAULT_TRANSACTION_TIMEOUT_MS = 60000

Record = dict[str, Any]
_resolve_app = AppResolver()


def is_fencing(error_name: str | None) -> bool:
    """True when the error means another producer instance owns the transactional id."""
    return bool(error_name) and error_name in FENCING_ERRORS


def kafka_error_of(exc: BaseException) -> Any | None:
    """The confluent_kafka.KafkaError inside a KafkaException (or the error itself)."""
    err = exc.args[0] if getattr(exc, "args", None) else None
    return err if err is not None and hasattr(err, "name") and hasattr(err, "code") else None


def error_name(exc: BaseException | None) -> str | None:
    """The librdkafka error name of an exception (`_APPLICATION` for non-Kafka errors)."""
    if exc is None:
        return None
    err = kafka_error_of(exc)
    if err is not None:
        try:
            return str(err.name())
        except Exception:  # noqa: BLE001 - a broken error object still gets a name
            return "UNKNOWN"
    return APPLICATION_ERROR


def make_record(transactional_id: str, outcome: str | None, duration_seconds: float,
                commit_seconds: float | None = None, timeout_ms: float | None = None,
                error: str | None = None) -> Record:
    """One transaction in the `producer_transactions` event-record shape (outcome None: an
    error that surfaced outside any transaction; it needs `error`)."""
    if outcome not in ("committed", "aborted", None):
        raise ValueError(f"outcome must be committed, aborted or None, got {outcome!r}")
    if outcome is None and not error:
        raise ValueError("a record without an outcome must carry an error")
    return {"transactional_id": transactional_id, "outcome": outcome,
            "duration_seconds": max(0.0, float(duration_seconds)),
            "commit_seconds": None if commit_seconds is None else max(0.0, float(commit_seconds)),
            "timeout_ms": None if timeout_ms is None else float(timeout_ms),
            "error": error}


class TransactionError(Exception):
    """A transaction failed; `record` is its (aborted) record, `error` the librdkafka name,
    `fatal` whether the producer is unusable now (fenced or fatal error: close it)."""

    def __init__(self, message: str, record: Record | None, error: str | None, fatal: bool) -> None:
        super().__init__(message)
        self.record = record
        self.error = error
        self.fatal = fatal

    @property
    def fenced(self) -> bool:
        return is_fencing(self.error)


class TransactionalProducer:
    """A confluent-kafka transactional producer that times and records every transaction.

    `on_record(record)` (optional) is called with every finished transaction's record;
    records are also kept until `drain_records()` (bounded by `max_records`).
    `producer_factory` builds the underlying confluent-kafka producer from the config (by
    default the Kafka room's, txnwatch.kafka.clients.producer; the unit tests pass a fake).
    """

    def __init__(self, config: Mapping[str, Any], *, on_record: Callable[[Record], object] | None = None,
                 producer_factory: Callable[[dict], Any] | None = None,
                 clock: Callable[[], float] = time.monotonic, max_records: int = 10_000) -> None:
        conf = dict(config)
        tid = conf.get("transactional.id")
        if not tid:
            raise ValueError("a transactional producer needs transactional.id")
        if str(conf.get("enable.idempotence", "true")).lower() == "false":
            raise ValueError("transactions need enable.idempotence=true")
        self.transactional_id = str(tid)
        self.timeout_ms = int(conf.get("transaction.timeout.ms", DEFAULT_TRANSACTION_TIMEOUT_MS))
        # librdkafka refuses message.timeout.ms > transaction.timeout.ms at creation.
        conf.setdefault("message.timeout.ms", min(300000, self.timeout_ms))
        # After a fatal error librdkafka fails every call with a bare _FATAL; the cause (a
        # fence by a newer instance, ...) reaches only error_cb, which confluent-kafka calls
        # with the underlying error. Kept so a fence stays a fence however it surfaces.
        self._fatal_cause: str | None = None
        user_error_cb = conf.get("error_cb")

        def on_error(err: Any) -> None:
            if _flag(err, "fatal") and self._fatal_cause is None:
                self._fatal_cause = str(err.name())
            if user_error_cb is not None:
                user_error_cb(err)
        conf["error_cb"] = on_error
        self._producer = (producer_factory or clients.producer)(conf)
        self._clock = clock
        self._on_record = on_record
        self._records: list[Record] = []
        self._max_records = max_records
        self._began: float | None = None
        self._txn_error: str | None = None   # first Kafka error of the open transaction
        self.initialized = False
        self.broken: str | None = None      # error name once the producer became unusable

    # ------------------------------------------------------------------ lifecycle
    @property
    def producer(self) -> Any:
        """The underlying confluent_kafka.Producer (for delivery callbacks, poll, ...)."""
        return self._producer

    @property
    def in_transaction(self) -> bool:
        return self._began is not None

    def init_transactions(self, timeout: float = 30.0) -> None:
        """Register the transactional id: fences older instances and completes (aborts)
        any transaction they left open."""
        try:
            self._producer.init_transactions(timeout)
        except Exception as exc:
            name = error_name(exc)
            if name == "INVALID_TRANSACTION_TIMEOUT":
                raise ValueError(
                    f"the broker refused transaction.timeout.ms={self.timeout_ms}: it exceeds the "
                    "broker's transaction.max.timeout.ms (default 900000)") from exc
            raise
        self.initialized = True

    def begin(self) -> None:
        try:
            self._producer.begin_transaction()
        except Exception as exc:
            self._surfaced(exc)
            raise
        self._began = self._clock()
        self._txn_error = None

    def produce(self, topic: str, value: Any = None, key: Any = None, partition: int | None = None,
                headers: Any = None, on_delivery: Callable | None = None) -> None:
        """produce() that waits for queue space instead of raising BufferError."""
        kwargs: dict[str, Any] = {}
        if partition is not None:
            kwargs["partition"] = partition
        if headers is not None:
            kwargs["headers"] = headers
        if on_delivery is not None:
            kwargs["on_delivery"] = on_delivery
        while True:
            try:
                self._producer.produce(topic, value=value, key=key, **kwargs)
                return
            except BufferError:
                self._producer.poll(0.05)
            except Exception as exc:
                self._surfaced(exc)
                raise

    def flush(self, timeout: float = 60.0) -> int:
        try:
            return self._producer.flush(timeout)
        except Exception as exc:
            self._surfaced(exc)
            raise

    def send_offsets_to_transaction(self, offsets: Any, group_metadata: Any, timeout: float = 60.0) -> None:
        """Add consumer offsets to the open transaction (exactly-once consume-transform-produce)."""
        try:
            self._producer.send_offsets_to_transaction(offsets, group_metadata, timeout)
        except Exception as exc:
            self._surfaced(exc)
            raise

    def _surfaced(self, exc: BaseException) -> None:
        """An operation raised. A Kafka error becomes the open transaction's error (the first
        one only); a fatal one (fencing included) ends the transaction and the producer."""
        err = kafka_error_of(exc)
        if err is None:
            return   # not the client's error (the caller's own, recorded when it aborts)
        name = error_name(exc)
        if name == "_FATAL":
            name = self.fatal_cause() or name
        fatal = _flag(err, "fatal") or is_fencing(name) or name == "_FATAL"
        if self.in_transaction:
            if self._txn_error is None:
                self._txn_error = name
            if fatal:
                self.broken = self.broken or name
                self._finish("aborted", None, self._txn_error)
        elif fatal and self.broken is None:
            self.broken = name
            self._emit(make_record(self.transactional_id, None, 0.0, timeout_ms=self.timeout_ms, error=name))

    def fatal_cause(self, wait: float = 1.0) -> str | None:
        """The error that made the producer fatal (e.g. _FENCED), served from error_cb. Only
        asked once a call failed with _FATAL: librdkafka marks the producer fatal, then queues
        the cause for error_cb, so a call can fail a moment before the cause is there to serve
        (a fence would then pass for a bare _FATAL): polled for up to `wait` seconds."""
        deadline = time.monotonic() + wait
        while self._fatal_cause is None:
            try:
                self._producer.poll(0.05)    # serves a queued error_cb
            except Exception:  # noqa: BLE001 - a fatal producer may refuse that too
                pass
            if time.monotonic() >= deadline:
                break
        return self._fatal_cause

    def elapsed(self) -> float | None:
        """Seconds since begin() of the open transaction (None when none is open)."""
        return None if self._began is None else self._clock() - self._began

    def headroom_seconds(self) -> float | None:
        """transaction.timeout.ms - time the open transaction has been running."""
        e = self.elapsed()
        return None if e is None else self.timeout_ms / 1000.0 - e

    # ------------------------------------------------------------------ outcome
    def _finish(self, outcome: str, commit_seconds: float | None, error: str | None) -> Record:
        began = self._began if self._began is not None else self._clock()
        rec = make_record(self.transactional_id, outcome, self._clock() - began, commit_seconds,
                          self.timeout_ms, error)
        self._began = None
        self._txn_error = None
        self._emit(rec)
        return rec

    def _emit(self, rec: Record) -> None:
        if len(self._records) < self._max_records:
            self._records.append(rec)
        if self._on_record is not None:
            try:
                self._on_record(rec)
            except Exception:  # noqa: BLE001, S110 - metrics never break the producer
                pass

    def commit(self, timeout: float = 60.0) -> Record:
        """Commit the open transaction. Retriable errors are retried until `timeout`;
        abortable ones abort it and fatal ones (fencing included) leave the producer
        unusable: both raise TransactionError carrying the aborted record (None when a
        fatal error had already ended the transaction, and was recorded then)."""
        if not self.in_transaction and self.broken is not None:
            raise TransactionError(f"commit of {self.transactional_id} failed: the transaction already ended "
                                   f"with {self.broken}", None, self.broken, True)
        deadline = self._clock() + timeout
        t0 = self._clock()
        while True:
            try:
                self._producer.commit_transaction(max(0.1, deadline - self._clock()))
                return self._finish("committed", self._clock() - t0, None)
            except Exception as exc:
                err = kafka_error_of(exc)
                name = error_name(exc)
                if name == "_FATAL":
                    name = self.fatal_cause() or name
                if err is not None and _flag(err, "retriable") and self._clock() < deadline:
                    continue
                fatal = err is None or _flag(err, "fatal") or is_fencing(name)
                if not fatal and err is not None and _flag(err, "txn_requires_abort"):
                    try:
                        self._producer.abort_transaction(max(0.1, deadline - self._clock()))
                    except Exception as abort_exc:  # noqa: BLE001 - reported through `fatal`
                        fatal = True
                        name = name or error_name(abort_exc)
                else:
                    fatal = True
                if fatal:
                    self.broken = self.broken or name
                cause = self._txn_error or name
                rec = self._finish("aborted", None, cause)
                raise TransactionError(f"commit of {self.transactional_id} failed: {cause}", rec, cause,
                                       fatal) from exc

    def abort(self, timeout: float = 60.0, error: str | BaseException | None = None) -> Record | None:
        """Abort the open transaction; `error` (a name or the exception that caused the
        abort), else the first Kafka error the transaction met, is recorded. If the abort
        itself fails the producer is marked broken. Without an open transaction (a fatal
        error ended it and was recorded then) nothing more is recorded: None."""
        name = error_name(error) if isinstance(error, BaseException) else error
        if not self.in_transaction:
            try:
                self._producer.abort_transaction(timeout)
            except Exception as exc:  # noqa: BLE001 - already broken, or no transaction to abort
                self._surfaced(exc)
            return None
        name = self._txn_error or name
        try:
            self._producer.abort_transaction(timeout)
        except Exception as exc:  # noqa: BLE001
            failed = error_name(exc)
            self.broken = self.broken or (self.fatal_cause() if failed == "_FATAL" else None) or failed
            name = name or self.broken
        return self._finish("aborted", None, name)

    @contextmanager
    def transaction(self, commit_timeout: float = 60.0) -> Iterator[TransactionalProducer]:
        """begin(); yield; commit() — or abort() with the error's name if the body raises."""
        self.begin()
        try:
            yield self
        except BaseException as exc:
            if self.in_transaction:
                self.abort(commit_timeout, error=exc)
            raise
        self.commit(commit_timeout)

    def drain_records(self) -> list[Record]:
        out, self._records = self._records, []
        return out

    def close(self, timeout: float = 5.0) -> None:
        try:
            self._producer.flush(timeout)
        except Exception:  # noqa: BLE001, S110 - closing a broken producer
            pass


def _flag(err: Any, name: str) -> bool:
    try:
        return bool(getattr(err, name)())
    except Exception:  # noqa: BLE001
        return False


class ProducerMetricsCollector:
    """A prometheus_client Collector rendering kafka_producer_* from transaction records.

    It keeps the same state the Spark listener and the exporter's ingest keep for the
    records they receive (`ProducerTransactions`, never expiring by default), so the series
    are identical whichever way records arrive. `record(rec)` is an `on_record` callback;
    `app` is derived from the transactional id with the exporter's built-in app rules unless
    given. `ttl_seconds`: an app with no record for that long is forgotten.
    """

    def __init__(self, app: str | None = None, ttl_seconds: float | None = None,
                 max_transactional_ids: int = 500) -> None:
        self.app = app
        self.ttl_seconds = ttl_seconds
        self._lock = threading.Lock()
        self._transactions = ProducerTransactions(max_transactional_ids=max_transactional_ids)

    def record(self, rec: Record) -> None:
        self.record_many([rec])

    def record_many(self, records: Iterable[Record], app: str | None = None) -> None:
        by_app: dict[str, list[Record]] = {}
        for r in records:
            a = app or self.app or _resolve_app(r.get("transactional_id"))
            by_app.setdefault(a, []).append(r)
        now = time.time()
        with self._lock:
            self._expire(now)
            for a, recs in by_app.items():
                self._transactions.apply(a, recs, now)

    def _expire(self, now: float) -> None:
        if self.ttl_seconds is not None:
            self._transactions.expire(now - self.ttl_seconds)

    def collect(self):
        writer = FamilyWriter()
        with self._lock:
            self._expire(time.time())
            self._transactions.render(writer)
        yield from writer.families()

    def describe(self):
        return []
