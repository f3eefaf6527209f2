"""The canary's I/O: a transactional producer running rounds on its own thread, and a
read_committed consumer (no group membership) watching the records become visible.

Every `interval_seconds` a round begins a transaction, writes one record to each canary
partition and commits it (one round in `abort_every` aborts it). Each step has its own
deadline, never past the round's interval: a commit stuck on a coordinator that cannot
write its log counts as a `commit` failure when its time is up, and the producer is
replaced (its InitProducerId next round is the `init` stage). Nothing here blocks the
poller, the tap or a scrape: they run on other threads and read `view()`.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from ..apps import CANARY_APP
from ..config import CanaryConfig
from ..kafka import clients
from ..kafka.errors import AUTH
from ..kafka.login import explain as explain_failure
from .rounds import CanaryRecord as Record
from .rounds import PayloadError, RoundBook, charged_partitions, decode, is_abort_round, step_deadline
from .stats import CanaryStats, CanaryView

log = logging.getLogger(__name__)



def transactional_id(cluster: str, instance: str) -> str:
    return f"{CANARY_APP}-{cluster}-{instance}"


def default_instance() -> str:
    """This exporter instance's part of the canary's transactional id: the host (pod) name."""
    import socket

    return socket.gethostname() or "txnwatch"


def error_name(exc: BaseException) -> str:
    """librdkafka's error name (PRODUCER_FENCED, _TIMED_OUT, ...) or the exception's type."""
    err = exc.args[0] if getattr(exc, "args", None) else None
    name = getattr(err, "name", None)
    if callable(name):
        try:
            return str(name()).lstrip("_").upper() or type(exc).__name__
        except Exception:  # noqa: BLE001
            pass
    return type(exc).__name__


def init_resumable(exc: BaseException) -> bool:
    """Whether init_transactions failed in a way librdkafka resumes when it is called again on
    the same producer (a timeout, a coordinator loading or moving), not a fatal error."""
    err = exc.args[0] if getattr(exc, "args", None) else None
    for attr in ("fatal", "retriable"):
        if not callable(getattr(err, attr, None)):
            return False
    try:
        return not err.fatal() and (err.retriable() or error_name(exc) == "TIMED_OUT")
    except Exception:  # noqa: BLE001
        return False


def fetch_wait_ms(interval_seconds: float) -> int:
    """The canary consumer's fetch.wait.max.ms: half the interval, within 0.5-5 s (a partition
    newly assigned on a broker waits for that broker's fetch in flight at most this long)."""
    return int(min(5000.0, max(500.0, interval_seconds * 500.0)))


class StepFailed(Exception):
    def __init__(self, stage: str, error: str, message: str) -> None:
        super().__init__(f"{stage}: {error}: {message}")
        self.stage, self.error, self.message = stage, error, message
        self.renew_producer = False


class CanaryProbe:
    def __init__(self, cluster: str, client_props: dict[str, str], cfg: CanaryConfig, instance: str,
                 clock: Callable[[], float] = time.time) -> None:
        self.cluster, self.cfg, self.clock = cluster, cfg, clock
        self.props = dict(client_props)
        self.tid = transactional_id(cluster, instance)
        self.book = RoundBook(self.tid)
        self.stats = CanaryStats()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._producer = None
        self._initialising = None        # a producer whose init_transactions timed out, resumed next round
        self._admin = None
        self._partitions: list[int] = []
        self._round = 0
        self._threads: list[threading.Thread] = []
        self._watch = threading.Condition()
        self._watched: set[int] = set()      # partitions the consumer reads (from before any round of ours)
        self._view: CanaryView | None = None
        self._view_version = -1

    # ------------------------------------------------------------------ public
    def view(self) -> CanaryView:
        """The same object until something changed (a scrape's cache key)."""
        with self._lock:
            if self._view is None or self._view_version != self.stats.version:
                self._view, self._view_version = self.stats.view(), self.stats.version
            return self._view

    def restore(self, view: CanaryView) -> None:
        """Continue the counters and histograms of an earlier probe of this cluster (a
        restarted worker process): they never go backwards."""
        with self._lock:
            self.stats.restore(view)

    def start(self) -> None:
        self._threads = [threading.Thread(target=self._consume_loop, name=f"canary-consumer-{self.cluster}",
                                          daemon=True),
                         threading.Thread(target=self._round_loop, name=f"canary-{self.cluster}", daemon=True)]
        for t in self._threads:
            t.start()

    def signal_stop(self) -> None:
        self._stop.set()

    def stop(self, timeout: float = 15.0) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(timeout)

    def run_round(self) -> StepFailed | None:
        """One round now (on the caller's thread); the failure, if any."""
        try:
            self._one_round()
            return None
        except StepFailed as exc:
            return exc

    def check_once(self) -> dict:
        """One committed round now, waited for until it is visible or its visibility timeout
        passes (`txnwatch check --canary`): what it measured and the failure, if any."""
        consumer = threading.Thread(target=self._consume_loop, name=f"canary-consumer-{self.cluster}", daemon=True)
        consumer.start()
        try:
            while is_abort_round(self._round + 1, self.cfg.abort_every):
                self._round += 1
            failure = self.run_round()
            if failure is None:
                deadline = time.monotonic() + (self.cfg.visibility_timeout_seconds or self.cfg.interval_seconds) + 1
                while time.monotonic() < deadline:
                    with self._lock:
                        if not self.book.rounds:
                            break
                    time.sleep(0.05)
                with self._lock:   # whatever is still pending now has timed out
                    for timed_out in self.book.expire(float("inf")):
                        self.stats.seen(timed_out)
        finally:
            self._stop.set()
            consumer.join(10)
            self._drop_producer()
        v = self.view()
        last = v.last_failure if failure is None or v.last_failure is not None else (
            failure.stage, failure.error, failure.message)
        return {"ok": failure is None and not v.failures and v.rounds.get("committed", 0) == 1
                and not v.violations,
                "transactional_id": self.tid, "topic": self.cfg.topic,
                "init_seconds": v.init_seconds, "commit_seconds": v.commit.sum if v.commit.count else None,
                "visibility_seconds": {p: h.sum for p, h in sorted(v.visibility.items())},
                "not_visible": sorted(v.visibility_timeouts),
                "failure": None if last is None else {"stage": last[0], "error": last[1], "message": last[2]}}

    # ------------------------------------------------------------------ rounds
    def _round_loop(self) -> None:
        while not self._stop.is_set():
            started = time.monotonic()
            try:
                failure = self.run_round()
            except Exception as exc:  # noqa: BLE001 - a bug of ours must not end the canary for good
                cause, message = explain_failure(self.props, error_name(exc), str(exc))
                if cause != AUTH:       # a login without credentials is no bug: its failure says why
                    log.exception("canary[%s]: round failed unexpectedly", self.cluster)
                failure = StepFailed("round", "AUTHENTICATION" if cause == AUTH else cause, message)
                with self._lock:
                    self.stats.failed(failure.stage, failure.error, failure.message, self.clock())
                self._drop_producer()
            if failure is not None:
                log.warning("canary[%s]: round failed at %s (%s): %s", self.cluster, failure.stage,
                            failure.error, failure.message)
            self._stop.wait(max(0.0, self.cfg.interval_seconds - (time.monotonic() - started)))
        self._drop_producer()

    def _one_round(self) -> None:
        interval = self.cfg.interval_seconds
        t0 = time.monotonic()
        self._round += 1
        round_ = self._round
        parts = self._ensure_topic(step_deadline(interval, 0))
        self._wait_watched(parts, step_deadline(interval, time.monotonic() - t0))
        producer = self._ensure_producer(step_deadline(interval, time.monotonic() - t0))
        commit = not is_abort_round(round_, self.cfg.abort_every)
        produced_at = self.clock()
        try:
            self._step("begin", producer.begin_transaction)
            delivered: set[int] = set()

            def on_delivery(err, msg, delivered=delivered) -> None:
                if err is None:
                    delivered.add(msg.partition())

            def produce_all() -> int:
                for p in parts:
                    producer.produce(self.cfg.topic, partition=p, key=self.tid.encode(), on_delivery=on_delivery,
                                     value=Record(self.tid, round_, commit, produced_at, p).encode())
                # flush raises once the producer is fenced or in a fatal state (found by the fencing test)
                return producer.flush(step_deadline(interval, time.monotonic() - t0))

            left = self._step("produce", produce_all)
            if left:
                missing = sorted(set(parts) - delivered)
                with self._lock:   # a record that could not be written is not visible in time either
                    for p in charged_partitions(parts, delivered):
                        self.stats.not_visible(p)
                failed = StepFailed("produce", "TIMED_OUT", f"partitions {missing} did not take the round's "
                                                              "record within the interval")
                # Nothing written at all: rather the coordinator (AddPartitionsToTxn) than every leader.
                # A new producer's InitProducerId next round asks the coordinator directly.
                failed.renew_producer = missing == sorted(parts)
                raise failed
            stage = "commit" if commit else "abort"
            call = producer.commit_transaction if commit else producer.abort_transaction
            ts = time.monotonic()
            self._step(stage, lambda: call(step_deadline(interval, ts - t0)))
            took = time.monotonic() - ts
        except StepFailed as exc:
            with self._lock:
                self.book.failed(round_)
                self.stats.failed(exc.stage, exc.error, exc.message, self.clock())
            self._recover(producer, exc)
            raise
        visible_by = self.clock() + (self.cfg.visibility_timeout_seconds or interval)
        with self._lock:
            if commit:
                self.stats.committed(took)
            self.book.wrote(round_, parts, commit, produced_at, visible_by)
            self.stats.round_ended("committed" if commit else "aborted", self.clock())

    def _step(self, stage: str, fn: Callable[[], object]):
        try:
            return fn()
        except Exception as exc:  # noqa: BLE001 - any client error is this stage's failure
            # without credentials it can use a client says only that no broker answered: the login says why
            cause, message = explain_failure(self.props, error_name(exc), str(exc))
            raise StepFailed(stage, "AUTHENTICATION" if cause == AUTH else cause, message) from None

    def _recover(self, producer, exc: StepFailed) -> None:
        """After a failed step: abort what is open if the producer can, else replace it."""
        if exc.stage in ("init", "topic"):
            return
        if exc.renew_producer:
            self._drop_producer()
            return
        try:
            producer.abort_transaction(max(1.0, self.cfg.interval_seconds / 2))
        except Exception:  # noqa: BLE001 - fenced, fatal, or the coordinator is away: a new producer
            self._drop_producer()

    # ------------------------------------------------------------------ producer, topic
    def _ensure_producer(self, timeout: float):
        if self._producer is not None:
            return self._producer
        producer, self._initialising = self._initialising, None
        if producer is None:
            props = {**self.props, "transactional.id": self.tid, "linger.ms": 0,
                     # a canary transaction open past its interval has failed anyway; a longer timeout
                     # could exceed the broker's transaction.max.timeout.ms (INVALID_TRANSACTION_TIMEOUT)
                     "transaction.timeout.ms": int(max(1.0, self.cfg.interval_seconds) * 1000),
                     "logger": logging.getLogger("txnwatch.librdkafka")}
            producer = clients.producer(props)
        t = time.monotonic()
        try:
            producer.init_transactions(timeout)
        except Exception as exc:  # noqa: BLE001
            with self._lock:
                self.stats.init(time.monotonic() - t)
                self.stats.failed("init", error_name(exc), str(exc), self.clock())
            if init_resumable(exc):
                # librdkafka carries on with the InitProducerId it started: the next round
                # resumes it on this producer. A new producer would race it, and whichever
                # init finished second would fence the other (a fresh cluster loading
                # __transaction_state made the canary fence itself that way).
                self._initialising = producer
            else:
                _release(producer)
            raise StepFailed("init", error_name(exc), str(exc)) from None
        with self._lock:
            self.stats.init(time.monotonic() - t)
        self._producer = producer
        return producer

    def _drop_producer(self) -> None:
        if self._producer is not None:
            _release(self._producer)
            self._producer = None
        if self._initialising is not None:
            _release(self._initialising)
            self._initialising = None

    def _ensure_topic(self, timeout: float) -> list[int]:
        from confluent_kafka.admin import NewTopic

        # one admin client for the probe's life: a new one each round would open (and, with
        # SASL/TLS, authenticate) a connection every interval
        if self._admin is None:
            # no auto-creation by a Metadata request for the topic (librdkafka's producer-side
            # default): a missing topic is created here with one partition per broker, or not at all
            self._admin = clients.admin_client({**self.props, "allow.auto.create.topics": False,
                                                "logger": logging.getLogger("txnwatch.librdkafka")})
        admin = self._admin
        deadline = time.monotonic() + timeout
        try:
            if self._partitions:
                # Known topic: only its metadata (a full listing is large on a big cluster), to
                # see new partitions or a deleted topic. A refresh that fails (the broker asked
                # is down or frozen) is not the round's failure: the producer and the consumer
                # follow leaders themselves, so the round goes on with the partitions known.
                try:
                    md = admin.list_topics(topic=self.cfg.topic,
                                           timeout=min(timeout, max(0.5, self.cfg.interval_seconds / 5)))
                except Exception as exc:  # noqa: BLE001
                    log.debug("canary[%s]: metadata refresh failed, going on with partitions %s: %s",
                              self.cluster, self._partitions, exc)
                    return list(self._partitions)
            else:
                md = admin.list_topics(timeout=timeout)
            t = md.topics.get(self.cfg.topic)
            if t is None or t.error is not None or not t.partitions:
                if not self.cfg.create_topic:
                    raise StepFailed("topic", "UNKNOWN_TOPIC_OR_PART",
                                     f"{self.cfg.topic} does not exist and canary.create_topic is false: "
                                     "create it (one partition per broker) or allow txnwatch to")
                brokers = len(md.brokers)
                rf = self.cfg.replication_factor or min(3, brokers)
                fut = admin.create_topics([NewTopic(self.cfg.topic, brokers, rf)], request_timeout=timeout)
                try:
                    fut[self.cfg.topic].result(timeout)
                except Exception as exc:  # noqa: BLE001
                    if "already exists" not in str(exc).lower():
                        raise StepFailed("topic", error_name(exc), f"creating {self.cfg.topic}: {exc}") from None
                t = self._created_topic(admin, deadline)
            self._partitions = sorted(t.partitions) if t is not None and t.partitions else self._partitions
            if not self._partitions:
                raise StepFailed("topic", "NO_PARTITIONS", f"{self.cfg.topic} has no partitions yet")
        except StepFailed as exc:
            with self._lock:
                self.stats.failed(exc.stage, exc.error, exc.message, self.clock())
            raise
        except Exception as exc:  # noqa: BLE001
            self._admin = None   # a new client next round, in case this one is what is broken
            with self._lock:
                self.stats.failed("topic", error_name(exc), str(exc), self.clock())
            raise StepFailed("topic", error_name(exc), str(exc)) from None
        return list(self._partitions)

    def _created_topic(self, admin, deadline: float):
        """The topic's metadata once every partition of a topic just created has a leader
        (right after CreateTopics the metadata may list none), or as it is at the deadline."""
        while True:
            md = admin.list_topics(topic=self.cfg.topic, timeout=max(0.1, deadline - time.monotonic()))
            t = md.topics.get(self.cfg.topic)
            ready = t is not None and t.error is None and t.partitions and all(
                p.leader >= 0 for p in t.partitions.values())
            if ready or time.monotonic() >= deadline or self._stop.wait(0.1):
                return t

    # ------------------------------------------------------------------ visibility
    def _wait_watched(self, parts: list[int], timeout: float) -> None:
        """Until the consumer reads every partition from an offset below this round's records
        (a partition it has not assigned yet would miss them: a visibility timeout that is not)."""
        with self._watch:
            ready = self._watch.wait_for(lambda: set(parts) <= self._watched or self._stop.is_set(), timeout)
            missing = sorted(set(parts) - self._watched)
        if not ready:
            failed = StepFailed("produce", "CONSUMER_NOT_READY",
                                f"the canary consumer has not assigned partitions {missing}")
            with self._lock:   # counted like any failed step: the round wrote nothing
                self.stats.failed(failed.stage, failed.error, failed.message, self.clock())
            raise failed

    def _consume_loop(self) -> None:
        from confluent_kafka import TopicPartition

        consumer = clients.consumer({
            **self.props, "group.id": f"{CANARY_APP}-{self.cluster}", "enable.auto.commit": False,
            "isolation.level": "read_committed", "auto.offset.reset": "latest",
            # a fetch returns as soon as a record is readable: a longer wait only
            # means fewer empty fetches between rounds (2/s per broker otherwise)
            "fetch.wait.max.ms": fetch_wait_ms(self.cfg.interval_seconds),
            "logger": logging.getLogger("txnwatch.librdkafka")})
        try:
            while not self._stop.is_set():
                new = sorted(set(self._partitions) - self._watched)
                if new:
                    try:
                        # from the LSO as of now (read_committed), resolved here rather than left to
                        # OFFSET_END, which librdkafka resolves later: a round written meanwhile would
                        # be skipped
                        starts = [TopicPartition(self.cfg.topic, p, consumer.get_watermark_offsets(
                            TopicPartition(self.cfg.topic, p), timeout=5)[1]) for p in new]
                        consumer.incremental_assign(starts)
                        with self._watch:
                            self._watched |= set(new)
                            self._watch.notify_all()
                    except Exception as exc:  # noqa: BLE001 - retried next loop; rounds wait for it
                        log.debug("canary[%s]: assigning %s failed: %s", self.cluster, new, exc)
                        self._stop.wait(0.5)
                for m in consumer.consume(100, 0.2):
                    if m.error():
                        continue
                    try:
                        rec = decode(m.value())
                    except PayloadError as exc:
                        log.debug("canary[%s]: skipped a record: %s", self.cluster, exc)
                        continue
                    with self._lock:
                        self.stats.seen(self.book.seen(rec, self.clock()))
                with self._lock:
                    for timed_out in self.book.expire(self.clock()):
                        self.stats.seen(timed_out)
        finally:
            consumer.close()


def _release(client) -> None:
    """Drop a client that may be stuck (librdkafka's destroy waits for its requests) on a
    thread of its own, so the round loop never waits for it."""
    def drop(c=client) -> None:
        try:
            c.flush(0)      # a producer in a fatal state raises here; it is dropped either way
        except Exception:  # noqa: BLE001
            pass

    threading.Thread(target=drop, name="canary-release", daemon=True).start()
