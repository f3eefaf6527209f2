"""The transaction-log tap: a consumer of `__transaction_state` feeding TxnLogState.

One thread per cluster. It assigns every partition of the coordinator's log explicitly
(no consumer group membership, no commits, read_uncommitted), and

* waits patiently while the topic does not exist (reported in health as
  `topic_not_found`; metadata is retried, never a crash);
* rebuilds state from the log up to the end offsets as of the moment its partitions
  were first found, without counting (`counting=False`), then follows new records
  with counting. A log that already existed when the tap started is never counted,
  also when the topic shows up only after the tap started (a broker can answer
  "unknown topic" for a while after it starts, and counting a whole existing log as new
  would inflate every counter). But once the tap has seen the topic absent, records of
  that first rebuild whose timestamp is at or after the moment it first saw it absent
  are counted: they were written after the tap started (on a new cluster, the first
  transactions happen between the topic's creation and the tap's next metadata check).
  The record timestamps are the coordinator's clock: a broker clock behind the tap's
  by d loses the counts of the first d of records, never counts a record twice.
  Partitions added to a topic the tap already reads hold only new records and are
  counted from their first offset;
* keeps the next offset per partition and ignores records below it, so broker
  outages, reconnects and offset resets never double-count. After the client lost the
  whole cluster (all brokers down) it is replaced once the cluster answers again, and
  the new one resumes at these positions: nothing of the old client's fetch state
  (positions, leader epochs, a topic id from before the restart) is trusted. The same
  after a partition turned out truncated or recreated;
* treats a log that ends before its position as truncated (re-read without counting)
  only once it stays short for `truncation_grace` seconds: a restarted broker, or one
  whose log is being written back, can report a short log for a moment, and re-reading
  the records written back in that moment as new would count them twice;
* counts undecodable records by reason and skips them;
* publishes an immutable `TapView` (a reference swap) for the scrape to render.

Client properties are passed to librdkafka as given and never logged (they may carry
SASL passwords); only the cluster name appears in log lines. librdkafka's own log lines
go to the `txnwatch.librdkafka` logger (rate-limited by logsetup), never straight to
stderr: a broker outage makes it repeat connect errors many times a second.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Callable, Mapping
from types import MappingProxyType

from ...apps import AppResolver
from ...kafka import clients
from ...kafka.errors import AUTHENTICATION, auth_failure_message, tls_failure_message
from ...kafka.login import explain as explain_failure
from ..health import HealthTracker, SourceHealth
from .decoder import TxnLogDecodeError, decode_key, decode_value
from .malloc import release_free_memory
from .state import IdleSummary, TapView, TxnLogState

log = logging.getLogger(__name__)

TOPIC = "__transaction_state"
SOURCE = "tap"
LIBRDKAFKA_LOGGER = "txnwatch.librdkafka"
# A request of ours failing with one of these means the client has lost the cluster
LOST_CLUSTER_CAUSES = frozenset({"transport", "all_brokers_down", "timed_out"})
# what librdkafka reports through error_cb about one broker's connection
ONE_BROKER_CAUSES = frozenset({"transport", "resolve", "timed_out"})
RENEW_LOST_CLIENT_AFTER = 10.0   # seconds without an answer before the client is replaced anyway
# seconds the cluster has to answer a metadata request after a refused login or TLS handshake
# (librdkafka reconnects with the login's token in hand) before the tap is down for it
REFUSAL_CHECK_SECONDS = 5.0


class TransactionLogTap:
    """Follows __transaction_state of one cluster. `start()`/`stop()`, `view()`, `health()`."""

    def __init__(self, cluster_name: str, client_config: Mapping[str, object],
                 resolver: AppResolver, cap: int, expiration_ms: int | None = None,
                 poll_timeout: float = 1.0, *, topic: str = TOPIC, metadata_interval: float = 10.0,
                 view_interval: float = 0.5, idle_scan_interval: float = 1.0,
                 batch_size: int = 2000, truncation_grace: float = 5.0,
                 resume_from: TapView | None = None,
                 partition_filter: Callable[[int], bool] | None = None,
                 id_filter: Callable[[str], bool] | None = None) -> None:
        self.cluster = cluster_name
        self._client_config = dict(client_config)
        self.cap = int(cap)
        self.topic = topic
        self.poll_timeout = poll_timeout
        self.metadata_interval = metadata_interval
        self.view_interval = view_interval
        self.idle_scan_interval = idle_scan_interval
        self.batch_size = batch_size
        self.truncation_grace = truncation_grace
        self._state = TxnLogState(resolver, expiration_ms, id_filter)
        # A checkpoint of an earlier tap (a restarted worker): its counters, and the offsets
        # they were counted to. Records below them are rebuilt, records from them on counted.
        self._resume_at: dict[int, int] = {}
        self._owns = partition_filter or (lambda _p: True)   # --total-shards: this replica's log partitions
        if resume_from is not None:
            self._state.restore_counters(resume_from)
            self._resume_at = dict(resume_from.positions)
        self._health = HealthTracker(SOURCE)
        self._view = TapView(expiration_ms=self._state.expiration_ms, cap=self.cap)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        # per partition: next offset to apply, and the end offset the rebuild reads up to
        self._next: dict[int, int] = {}
        self._rebuild_to: dict[int, int] = {}
        self._topic_found = False
        self._topic_absent_seen = False   # metadata said "no such topic" at least once
        self._absent_since_ms: int | None = None   # wall clock (ms) when it first said so
        # per partition of the first rebuild after the topic was absent: records stamped at
        # or after this (the coordinator's clock) are counted although below _rebuild_to
        self._count_from_ms: dict[int, int] = {}
        self._rebuilt = False
        self._idle = IdleSummary()
        self._idle_at = 0.0
        self._idle_cost = 0.0
        self._errors_logged: set[str] = set()
        self._poll_error: str | None = None
        # The last refused login or TLS handshake (cause, message) since the last success: a
        # metadata or consume failure meanwhile is its consequence, and is reported as it
        self._refusal: tuple[str, str] | None = None
        self._down = False   # the client reported all brokers down, or a refused login or TLS handshake
        self._refusal_unconfirmed = False   # reported since the last consume, not yet checked (_confirm_refusal)
        # partitions whose last fetch was refused (ACLs): librdkafka reports it once and then
        # fetches nothing, so the tap is down until a record or the end of the log arrives
        self._denied: set[int] = set()
        # the client lost the cluster (all brokers down, or a request of ours failed at the
        # transport): replace it once the cluster answers, or after RENEW_LOST_CLIENT_AFTER
        self._lost_cluster = False
        self._lost_since = 0.0
        self._stale_client = False   # a partition is not the one the client knew: replace it
        # partitions whose log ended before our position (or out of range), since when
        self._short: dict[int, float] = {}

    # ------------------------------------------------------------------ public API
    def start(self) -> None:
        if self._thread is not None and self._thread.is_alive():
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name=f"txnwatch-tap-{self.cluster}", daemon=True)
        self._thread.start()

    def signal_stop(self) -> None:
        """Ask the tap thread to end after its current step (stop() waits for it)."""
        self._stop.set()

    def stop(self, timeout: float | None = None) -> None:
        self._stop.set()
        t = self._thread
        if t is not None:
            t.join(timeout if timeout is not None else self.poll_timeout + 15)
        self._thread = None

    def view(self) -> TapView:
        """The last published snapshot (immutable; safe from any thread)."""
        return self._view

    def health(self) -> SourceHealth:
        return self._health.view()

    @property
    def rebuilt(self) -> bool:
        """True once state is rebuilt from the log as of start (or there was no log)."""
        return self._rebuilt

    # ------------------------------------------------------------------ internals
    def _consumer_config(self) -> dict:
        cfg = dict(self._client_config)
        cfg.setdefault("group.id", f"txnwatch-tap-{self.cluster}")   # required by librdkafka; never joined
        cfg.setdefault("client.id", f"txnwatch-tap-{self.cluster}")
        # librdkafka prefetches up to 100,000 records per partition and 64 MB (payload only;
        # each record costs a few hundred bytes more): ~0.5 GB while rebuilding a million
        # ids. The tap decodes ~150k records/s, so a tenth of that keeps it fed.
        cfg.setdefault("queued.min.messages", 10_000)
        cfg.setdefault("queued.max.messages.kbytes", 16_384)
        cfg.update({
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "isolation.level": "read_uncommitted",
            "enable.partition.eof": True,
            # out-of-range positions surface as _AUTO_OFFSET_RESET and are handled in _resync
            "auto.offset.reset": "error",
            "allow.auto.create.topics": False,
            "error_cb": self._on_client_error,
            # served from consume() on the tap thread; logsetup rate-limits this logger
            "logger": logging.getLogger(LIBRDKAFKA_LOGGER),
        })
        return cfg

    def _on_client_error(self, err) -> None:
        # Called from poll/consume in the tap thread. librdkafka messages carry no secrets.
        name = (err.name() if hasattr(err, "name") else "error").lstrip("_").lower()
        detail = err.str() if hasattr(err, "str") else str(err)
        code = err.code() if hasattr(err, "code") else None
        # A rejected login or a failed TLS handshake is only ever reported here; name it as the
        # poller does (cause auth / tls, with what to check) rather than as a transport error.
        if code in AUTHENTICATION:
            name, message = "auth", auth_failure_message(self._client_config, detail)
        elif name == "ssl":
            name, message = "tls", tls_failure_message(self._client_config, detail)
        else:
            message = f"kafka client: {detail}"
        if name in ("auth", "tls"):
            # one connection's: whether the cluster refuses the tap is asked after the consume
            self._refusal, self._refusal_unconfirmed = (name, message), True
            return
        if name in ONE_BROKER_CAUSES:
            # One broker's connection (a broker stopped, restarting or slow): the client goes
            # on with the others and follows the leaders they take over. Counted, not a
            # failure: with one broker of three dead, the tap kept reading and a flapping
            # txnwatch_up and /readyz would have said otherwise. All brokers gone is
            # all_brokers_down; a request of the tap's own that fails is a failure below.
            self._health.count_error(name)
            return
        self._poll_error = name
        if name == "all_brokers_down":
            self._down = True
            self._mark_lost()
        self._failure(name, message)

    def _failure(self, cause: str, message: str) -> None:
        """The tap is down for `cause`; the login says why when the cause is its credentials."""
        self._health.failure(*explain_failure(self._client_config, cause, message))

    def _log_once(self, key: str, msg: str, *args) -> None:
        if key not in self._errors_logged:
            self._errors_logged.add(key)
            log.warning("tap[%s]: " + msg, self.cluster, *args)

    def _run(self) -> None:
        consumer = None
        next_metadata = 0.0
        next_view = 0.0
        next_probe = 0.0
        backoff = 1.0
        failures = 0
        try:
            while not self._stop.is_set():
                try:
                    if consumer is None:
                        consumer = self._new_consumer()
                    now = time.monotonic()
                    if self._lost_cluster and now >= next_probe:
                        # the client lost the cluster: look for it every second and, once it
                        # answers, resume with a new client at our own positions. A client that
                        # cannot reach a cluster back after a restart (seen with librdkafka 2.x,
                        # no ALL_BROKERS_DOWN, metadata failing for a minute) is replaced anyway.
                        next_probe = now + 1.0
                        answers = self._cluster_answers(consumer)
                        if answers or now - self._lost_since >= RENEW_LOST_CLIENT_AFTER:
                            log.info("tap[%s]: %s; resuming %s with a new client at the tap's own positions",
                                     self.cluster, "the cluster answers again" if answers else
                                     f"no answer for {now - self._lost_since:.0f} s", self.topic)
                            self._close(consumer)
                            consumer = None
                            consumer = self._new_consumer()
                            next_metadata = now
                    if now >= next_metadata:
                        self._refresh_partitions(consumer)
                        next_metadata = now + self.metadata_interval
                    if not self._next:
                        self._publish()
                        self._stop.wait(min(self.metadata_interval, 1.0))
                        if self._topic_absent_seen and not self._topic_found:
                            # waiting for the topic: look again soon (cheap, one metadata request)
                            next_metadata = min(next_metadata, time.monotonic() + 1.0)
                        continue
                    t0 = time.monotonic()
                    self._poll_error = None
                    msgs = consumer.consume(self.batch_size, self.poll_timeout)
                    self._apply_batch(consumer, msgs)
                    if self._refusal_unconfirmed:
                        self._confirm_refusal(consumer)
                    if msgs:
                        self._down = False
                    if self._poll_error is None and not self._down and not self._denied:
                        self._refusal = None
                        self._health.success(time.monotonic() - t0)
                    if time.monotonic() >= next_view:
                        self._publish(consumer)
                        next_view = time.monotonic() + self.view_interval
                        for p in list(self._short):
                            self._resync(consumer, p)
                    if self._stale_client:
                        log.info("tap[%s]: resuming %s with a new client at the tap's own positions",
                                 self.cluster, self.topic)
                        self._close(consumer)
                        consumer = None
                        consumer = self._new_consumer()
                    backoff = 1.0
                    failures = 0
                except Exception as exc:  # noqa: BLE001 - the tap never dies; it reports and retries
                    cause = _cause(exc)
                    failures += 1
                    # A rejected login or TLS handshake reaches only error_cb, which librdkafka
                    # serves from poll(): serve it now (a client replaced after 5 failures would
                    # take its queued errors along), and keep its cause rather than the generic one.
                    self._poll_error = None
                    if consumer is not None:
                        try:
                            consumer.poll(0)
                        except Exception:  # noqa: BLE001
                            pass
                    if self._refusal is not None:
                        self._refusal_unconfirmed, self._down = False, True   # the cluster did not answer
                        self._failure(*self._refusal)
                    else:
                        self._failure(cause, f"{type(exc).__name__}: {exc}")
                    if cause in LOST_CLUSTER_CAUSES:
                        self._mark_lost()
                    self._log_once(f"exc:{cause}", "%s (retrying; further occurrences are counted only)",
                                   exc)
                    if consumer is not None and (failures >= 5 or _fatal(exc)):
                        # a client that keeps failing is replaced; positions and state are kept
                        self._close(consumer)
                        consumer = None
                        failures = 0
                    self._stop.wait(backoff)
                    backoff = min(backoff * 2, 30.0)
        finally:
            self._publish(consumer)
            if consumer is not None:
                self._close(consumer)

    def _confirm_refusal(self, consumer) -> None:
        """A refused login or TLS handshake makes the tap down only while the cluster then
        refuses it too. librdkafka re-authenticates a session that ends with its token; one that
        met the token just before librdkafka took the fresh one from the login (it asks again
        on a timer) is refused once, and the next connection logs in. Counted either way."""
        cause, message = self._refusal
        self._refusal_unconfirmed = False
        if self._cluster_answers(consumer, REFUSAL_CHECK_SECONDS):
            self._health.count_error(cause)
            self._log_once(f"refused-once:{cause}", "%s; the cluster answered right after: counted, not a failure",
                           message)
        else:
            self._poll_error, self._down = cause, True
            self._failure(cause, message)

    def _mark_lost(self) -> None:
        if not self._lost_cluster:
            self._lost_cluster, self._lost_since = True, time.monotonic()

    def _new_consumer(self):
        consumer = clients.consumer(self._consumer_config())
        self._lost_cluster = False
        self._stale_client = False
        self._short.clear()   # a log still short is seen again by the new client; its grace restarts
        self._assign_known(consumer)
        return consumer

    def _cluster_answers(self, consumer, timeout: float = 1.0) -> bool:
        try:
            consumer.list_topics(topic=self.topic, timeout=timeout)
            return True
        except Exception:  # noqa: BLE001 - still down: the outage is already reported
            return False

    @staticmethod
    def _close(consumer) -> None:
        try:
            consumer.close()
        except Exception:  # noqa: BLE001 - closing is best effort
            pass

    def _assign_known(self, consumer) -> None:
        """A new client resumes every partition already followed at its next offset."""
        if self._next:
            from confluent_kafka import TopicPartition

            consumer.incremental_assign([TopicPartition(self.topic, p, n) for p, n in sorted(self._next.items())])

    def _refresh_partitions(self, consumer) -> None:
        from confluent_kafka import OFFSET_BEGINNING, KafkaError, TopicPartition

        md = consumer.list_topics(topic=self.topic, timeout=10)
        self._down = False
        t = md.topics.get(self.topic)
        err = None if t is None else t.error
        if t is None or (err is not None and err.code() in (KafkaError.UNKNOWN_TOPIC_OR_PART,
                                                            KafkaError._UNKNOWN_TOPIC)):
            if not self._topic_found:
                # No transactional producer has run on this cluster yet: nothing to tap, and
                # nothing wrong. The broker answered, so the source is up (the page says it waits).
                self._topic_absent_seen = True
                if self._absent_since_ms is None:
                    self._absent_since_ms = int(time.time() * 1000)
                self._rebuilt = True   # nothing to rebuild (yet)
                self._refusal = None
                self._health.success(0.0)
                return
            self._health.failure("topic_not_found", f"topic {self.topic} disappeared")
            return
        if err is not None:
            self._failure(err.name().lstrip("_").lower(), f"metadata for {self.topic}: {err.str()}")
            return
        if not t.partitions:
            return
        new = sorted(p for p in t.partitions if p not in self._next and self._owns(p))
        if not new:
            return
        count_all = self._topic_found   # partitions added to a topic we already read
        if not count_all:
            self._rebuilt = False
        assign = []
        targets = {}
        for p in new:
            if count_all:
                targets[p] = 0
            else:
                _low, high = consumer.get_watermark_offsets(TopicPartition(self.topic, p), timeout=10)
                targets[p] = max(0, high)
                if p in self._resume_at:   # counted up to there by the tap before this one
                    targets[p] = min(targets[p], self._resume_at.pop(p))
            assign.append(TopicPartition(self.topic, p, OFFSET_BEGINNING))
        consumer.incremental_assign(assign)
        for p in new:
            self._next[p] = 0
            self._rebuild_to[p] = targets[p]
            if not count_all and self._absent_since_ms is not None and targets[p] > 0:
                self._count_from_ms[p] = self._absent_since_ms
        if not self._topic_found:
            log.info("tap[%s]: reading %s (%d partitions)%s", self.cluster, self.topic, len(new),
                     "" if count_all else ", rebuilding state")
        else:
            log.info("tap[%s]: %d new partition(s) of %s", self.cluster, len(new), self.topic)
        self._topic_found = True
        self._update_rebuilt()

    def _update_rebuilt(self) -> None:
        if not self._rebuilt and self._next and all(
                self._next[p] >= self._rebuild_to[p] for p in self._next):
            self._rebuilt = True
            self._count_from_ms.clear()   # past the rebuild everything is counted anyway
            log.info("tap[%s]: state rebuilt from %s (%d transactional ids)", self.cluster, self.topic,
                     len(self._state))
            self._idle_at = 0.0  # rescan idle ids right away
            release_free_memory()

    def _apply_batch(self, consumer, msgs) -> None:
        from confluent_kafka import TIMESTAMP_NOT_AVAILABLE, KafkaError

        state = self._state
        nxt = self._next
        rebuild_to = self._rebuild_to
        count_from = self._count_from_ms
        now_ms = int(time.time() * 1000)
        for m in msgs:
            err = m.error()
            if err is not None:
                if err.code() == KafkaError._PARTITION_EOF:
                    p = m.partition()
                    self._denied.discard(p)
                    if p in nxt and m.offset() is not None and m.offset() > nxt[p]:
                        nxt[p] = m.offset()
                    continue
                if err.code() == KafkaError._AUTO_OFFSET_RESET and m.partition() in nxt:
                    self._short.setdefault(m.partition(), time.monotonic())
                    self._resync(consumer, m.partition())
                    continue
                name = err.name().lstrip("_").lower()
                if err.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED:
                    self._denied.add(m.partition())
                log.debug("tap[%s]: consume error on partition %s: %s", self.cluster, m.partition(), err)
                self._poll_error = name
                self._failure(name, f"consume: {err.str()}")
                continue
            p = m.partition()
            self._denied.discard(p)
            off = m.offset()
            expected = nxt.get(p)
            if expected is None or off < expected:
                continue   # already applied (re-delivery after reconnect/reset) or unknown partition
            nxt[p] = off + 1
            ts_type, ts = m.timestamp()
            counting = off >= rebuild_to[p]
            if not counting and p in count_from:
                # stamped after the tap first saw the topic absent: written after it started
                counting = ts_type != TIMESTAMP_NOT_AVAILABLE and ts >= count_from[p]
            try:
                key = decode_key(m.key())
                raw = m.value()
                value = None if raw is None else decode_value(raw)
            except TxnLogDecodeError as exc:
                state.skip(exc.reason)
                self._log_once(f"skip:{exc.reason}", "skipping undecodable record at %s-%d@%d: %s "
                               "(further ones are counted only)", self.topic, p, off, exc)
                continue
            state.apply(key.transactional_id, value, ts if ts_type else None, now_ms, counting)
        if not self._rebuilt:
            self._update_rebuilt()

    def _resync(self, consumer, p: int) -> None:
        """Our position is out of the log's range (a fetch said so, or the log ends before
        it). Either the log start moved past it (retention): skip ahead. Or the log is
        shorter than what we read: unclean truncation, or the topic was deleted and
        recreated, or a restarted broker is still getting its log back. Only a log that
        stays short for `truncation_grace` seconds is taken as truncated; then the records
        now in it may be ones already applied, so they are re-applied without counting
        (like a rebuild) and counting resumes after the current end: never double-count.
        A log that reaches our position again (the records before it are the ones we
        applied) is followed on from our position."""
        from confluent_kafka import TopicPartition

        since = self._short.setdefault(p, time.monotonic())
        try:
            low, high = consumer.get_watermark_offsets(TopicPartition(self.topic, p), timeout=10)
        except Exception:
            # the log could not be looked at: the grace restarts once it can
            self._short[p] = time.monotonic()
            raise
        n = self._next[p]
        if n < low:
            self._next[p] = low
            self._health.count_error("log_start_moved")
            log.warning("tap[%s]: %s-%d starts at %d, after our position %d; skipping ahead",
                        self.cluster, self.topic, p, low, n)
            target = low
        elif n > high:
            if time.monotonic() - since < self.truncation_grace:
                return   # look again at the next view tick
            self._rebuild_to[p] = high
            self._next[p] = low
            # what is read again may have been counted already, whatever its timestamp
            self._count_from_ms.pop(p, None)
            self._health.count_error("log_truncated")
            log.warning("tap[%s]: %s-%d ends at %d, before our position %d (truncated or recreated); "
                        "re-reading it without counting up to %d", self.cluster, self.topic, p, high, n, high)
            target = low
            # the partition is not the one the client knew (its leader epochs, a topic id):
            # a new client is assigned at our positions instead of trusting the old one
            self._stale_client = True
        else:
            log.info("tap[%s]: %s-%d reaches our position %d again (%d..%d); following on from it",
                     self.cluster, self.topic, p, n, low, high)
            target = n
        del self._short[p]
        consumer.seek(TopicPartition(self.topic, p, target))

    def _lag(self, consumer) -> int | None:
        """Records behind the end offsets (cached from fetch responses: no request). A log
        that ends before our position (some brokers answer such fetches with nothing
        instead of OFFSET_OUT_OF_RANGE) is queued for a resync."""
        if consumer is None or not self._next:
            return None
        from confluent_kafka import TopicPartition

        total: int | None = 0
        for p, n in self._next.items():
            try:
                _low, high = consumer.get_watermark_offsets(TopicPartition(self.topic, p), cached=True)
            except Exception:  # noqa: BLE001 - unknown lag is rendered as absent
                high = None
            if high is None or high < 0:
                total = None
                continue
            if high < n:
                self._short.setdefault(p, time.monotonic())
            elif total is not None:
                total += high - n
        return total

    def _publish(self, consumer=None) -> None:
        now = time.monotonic()
        if now >= self._idle_at:
            t0 = time.monotonic()
            self._idle = self._state.idle_scan(self.cap, int(time.time() * 1000))
            self._idle_cost = time.monotonic() - t0
            # an O(ids) scan: at most every `idle_scan_interval`, and never more than ~5% of the time
            self._idle_at = now + max(self.idle_scan_interval, 20 * self._idle_cost)
        view = self._state.view(self._idle, cap=self.cap)
        self._view = dataclasses.replace(view, rebuilt=self._rebuilt, lag_records=self._lag(consumer),
                                         partitions=len(self._next), topic_found=self._topic_found,
                                         positions=MappingProxyType(self._counted_positions()))

    def _counted_positions(self) -> dict[int, int]:
        """Per partition, the offset the counters are complete up to: the next offset once
        past the rebuild, else the rebuild's end (nothing below it is counted later)."""
        out = {p: n if p in self._count_from_ms else max(n, self._rebuild_to.get(p, 0))
               for p, n in self._next.items()}
        for p, n in self._resume_at.items():   # not seen yet by this tap: keep the old checkpoint
            out.setdefault(p, n)
        return out


def _fatal(exc: Exception) -> bool:
    err = exc.args[0] if exc.args else None
    try:
        return bool(err.fatal())
    except Exception:  # noqa: BLE001 - not a KafkaError
        return False


def _cause(exc: Exception) -> str:
    """A short label for an exception: the librdkafka error name when there is one."""
    err = exc.args[0] if exc.args else None
    if hasattr(err, "name"):
        try:
            return str(err.name()).lstrip("_").lower()
        except Exception:  # noqa: BLE001
            pass
    return type(exc).__name__.lower()
