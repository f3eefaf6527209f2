"""confluent-kafka I/O for the poller: metadata, ListOffsets in both isolation levels,
consumer-group offsets, DescribeConfigs, LSO record timestamps and the gaps to the LSO that
hold only transaction markers. Everything is issued as batched futures and bounded by a
timeout; errors raise PollError with a cause.

Partition offsets go through list_offsets.py (one ListOffsets per leader and isolation
level, sent over kafka-python's connections) where kafka-python can connect, else through
librdkafka's batched futures in chunks. Committed offsets of consumer groups go through group_offsets.py (batched OffsetFetch v8
and FindCoordinator v4 over kafka-python, which librdkafka lacks) where the broker has
them, else through librdkafka one group per request."""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import Future

from confluent_kafka import (
    Consumer,
    ConsumerGroupTopicPartitions,
    IsolationLevel,
    KafkaError,
    KafkaException,
    TopicCollection,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, ConfigResource, OffsetSpec

from . import clients
from . import list_offsets as lo
from . import metadata as mdw
from .answers import (
    TRANSACTION_STATE_TOPIC,
    ClusterFacts,
    ClusterMetadata,
    PartitionOffsets,
    PartitionReplicas,
)
from .errors import (
    AUTHENTICATION,
    BROKER_UNAVAILABLE,
    TIMEOUT,
    BatchedUnsupported,
    PollError,
    auth_failure_message,
    cause_of_code,
    cause_of_exception,
    classify,
    tls_failure_message,
)
from .group_offsets import BatchedGroupOffsets, batched_supported
from .kafka_python import KafkaPythonTransport
from .request_path import RequestPath
from .wire import ProtocolError, RawRequest

log = logging.getLogger(__name__)

BROKER_CONFIGS = {
    "transaction.max.timeout.ms": "transaction_max_timeout_ms",
    "transactional.id.expiration.ms": "transactional_id_expiration_ms",
    "producer.id.expiration.ms": "producer_id_expiration_ms",
    "transaction.state.log.min.isr": "transaction_state_log_min_isr",
    "transaction.state.log.replication.factor": "transaction_state_log_replication_factor",
}


OFFSETS_CHUNK = 1000   # partitions per ListOffsets call


INVALID_OFFSET = lo.INVALID_OFFSET   # kafka_partition_unavailable's cause for an answer without offsets


def partition_offsets(topic: str, partition: int, hwm: int, lso: int) -> PartitionOffsets | None:
    """A partition's offsets from its two ListOffsets answers, or None when either has no
    offset. librdkafka answers a partition it could not ask (its leader just died, the
    metadata not yet updated) with a result, not an error, at offset -1001 (OFFSET_INVALID):
    exported, that would read as an offset; the partition is unavailable instead, its last
    values kept."""
    if hwm < 0 or lso < 0:
        return None
    return PartitionOffsets(topic, partition, hwm, min(lso, hwm))


class KafkaIO:
    """One AdminClient (and a lazily created Consumer for LSO timestamps) per cluster."""

    def __init__(self, client_props: dict[str, str], timeout: float) -> None:
        self.timeout = timeout
        self._props = dict(client_props)
        # librdkafka tells why it cannot connect (rejected credentials, a failed TLS handshake)
        # only through error_cb; a request just fails with a transport error or times out.
        self._connect_errors: dict[int, KafkaError] = {}   # since the last answered request
        self._admin: AdminClient | None = None
        self._consumer: Consumer | None = None
        self._marker_consumer: Consumer | None = None
        self._broker_ids: set[int] | None = None   # of the last metadata(): coordinator cache upkeep
        # kafka-python's connections, shared by batched ListOffsets and batched OffsetFetch
        self._kp: KafkaPythonTransport | None = None
        self._kp_versions: dict[int, tuple[int, int]] = {}
        # Each request kind: txnwatch's own path once it is known to work, else librdkafka's
        # Cluster metadata: one Metadata request (metadata.py)
        self.metadata_path = RequestPath("cluster metadata", "librdkafka's")
        self._metadata_body: dict[int, bytes] = {}
        # Partition offsets: one ListOffsets per leader and isolation level (list_offsets.py)
        self.list_offsets_path = RequestPath("partition offsets", "librdkafka's ListOffsets in chunks")
        self._offsets_requests = lo.RequestCache()
        self._offsets_answers: dict = {}            # combine's: last poll's answers and offsets per topic
        # Committed offsets: batched OffsetFetch per coordinator (group_offsets.py)
        self.offset_fetch_path = RequestPath("committed offsets of consumer groups", "one request per group")
        self._groups_batched = None                 # BatchedGroupOffsets, while that path is on
        self._group_failure_causes: frozenset[str] = frozenset()
        self.group_offsets_report = None            # FetchReport of the last batched fetch
        self.groups_left_out: dict[str, str] = {}   # group -> cause, of the last group_offsets call
        # Called with "group_offsets_<cause>" once per poll and cause when groups were left out
        # (the others answered); the poller can point it at HealthTracker.count_error.
        self.count_error: Callable[[str], None] | None = None

    @property
    def admin(self) -> AdminClient:
        """The AdminClient, made at the first call: a poll step, so that a login that cannot be
        made (a library missing) fails that step, named, rather than the poller's start."""
        if self._admin is None:
            self._admin = clients.admin_client({**self._props,
                                                "socket.connection.setup.timeout.ms": int(self.timeout * 1000),
                                                "logger": logging.getLogger("txnwatch.librdkafka"),
                                                "error_cb": self._on_client_error})
        return self._admin

    def _on_client_error(self, err: KafkaError) -> None:
        if err.code() in AUTHENTICATION or err.code() == KafkaError._SSL:
            self._connect_errors[err.code()] = err

    def named_failure(self, exc: BaseException) -> BaseException:
        """A failed poll step as librdkafka's reports name it: one that says only that no
        broker answered (in time) while librdkafka reported a refused login or TLS handshake
        since its last answered request is that (PollError auth or tls, in words), whichever
        request ran into it first; any other failure as it is. The reports are served here: one
        made while the step waited counts."""
        if self._admin is None or classify(exc) not in (TIMEOUT, BROKER_UNAVAILABLE):
            return exc
        try:
            return self._why_unreachable(exc)
        except Exception:  # noqa: BLE001 - naming a failure never fails the poller
            return exc

    def _why_unreachable(self, exc: KafkaException) -> Exception:
        """A failed request, named by what librdkafka reported meanwhile: PollError('auth') or
        PollError('tls') with what to check, else the request's own error."""
        self.admin.poll(0)   # serves error_cb (and the logger)
        auth = next((e for c, e in self._connect_errors.items() if c in AUTHENTICATION), None)
        if auth is not None:
            return PollError("auth", auth_failure_message(self._props, auth.str()))
        tls = self._connect_errors.get(KafkaError._SSL)
        if tls is not None:
            return PollError("tls", tls_failure_message(self._props, tls.str()))
        return exc

    # -- helpers
    def _wait(self, futures: Iterable[Future], deadline: float) -> None:
        """Every future done by `deadline` (else PollError timeout); the first failure raises."""
        futures = list(futures)
        self._wait_settled(futures, deadline)
        for f in futures:
            f.result()

    def _wait_settled(self, futures: Iterable[Future], deadline: float) -> None:
        """Like _wait, but a future that failed is left for the caller to look at."""
        for f in futures:
            left = deadline - time.monotonic()
            if left <= 0:
                raise PollError("timeout", self._timed_out())
            try:
                f.exception(timeout=left)
            except TimeoutError:
                raise PollError("timeout", self._timed_out()) from None

    def _wait_answered(self, futures: list[Future], deadline: float) -> None:
        """Until every future is done or `deadline` passes (those still pending then count
        as timed out, by _failure); never raises."""
        for f in futures:
            left = deadline - time.monotonic()
            if left <= 0:
                return
            try:
                f.exception(timeout=left)
            except TimeoutError:
                return

    def _timed_out(self) -> str:
        # worded like librdkafka's own timeouts ("Local: Timed out"), so every timeout reads alike
        return f"Timed out: the poll did not finish within poll_timeout_seconds ({self.timeout:g}s)"

    def metadata(self, topic_filter: Callable[[str], bool]) -> ClusterMetadata:
        """Live brokers, the selected topics' partition counts and leaders, __transaction_state's
        partitions, and the selected partitions that are offline or under-replicated.

        One Metadata request over kafka-python, decoded here (metadata.py), once it is known
        to work; else, or when it fails, librdkafka's."""
        started = time.monotonic()
        raw = self._metadata_raw(topic_filter)
        if raw is not None:
            return raw
        return self._metadata_librdkafka(topic_filter, max(self.timeout - (time.monotonic() - started), 1.0))

    def _metadata_librdkafka(self, topic_filter: Callable[[str], bool], timeout: float) -> ClusterMetadata:
        try:
            md = self.admin.list_topics(timeout=timeout)
        except KafkaException as exc:
            raise self._why_unreachable(exc) from None
        self.admin.poll(0)
        self._connect_errors.clear()   # connected: older connect errors are history
        self._broker_ids = set(md.brokers)
        topics: dict[str, int] = {}
        leaders: dict[str, tuple[int, ...]] = {}
        degraded: list[PartitionReplicas] = []
        for name, t in md.topics.items():
            if t.error is not None or not topic_filter(name):
                continue
            n = len(t.partitions)
            topics[name] = n
            by_index = [-1] * n
            for p in t.partitions.values():
                if 0 <= p.id < n:
                    by_index[p.id] = p.leader
                if p.leader < 0 or len(p.isrs) < len(p.replicas):
                    degraded.append(_replicas(name, p))
            leaders[name] = tuple(by_index)
        log_topic = md.topics.get(TRANSACTION_STATE_TOPIC)
        txn_log = () if log_topic is None or log_topic.error is not None else tuple(
            _replicas(TRANSACTION_STATE_TOPIC, p) for _, p in sorted(log_topic.partitions.items()))
        return ClusterMetadata(tuple(sorted(md.brokers)), topics, txn_log, tuple(degraded), leaders)

    def _metadata_raw(self, topic_filter: Callable[[str], bool]) -> ClusterMetadata | None:
        """metadata() from txnwatch's own Metadata request, or None where that path is off or
        failed (the caller asks librdkafka, with the time left)."""
        if not self.metadata_path.due():
            return None
        # a short budget: a broker that froze must leave librdkafka's path most of the poll
        deadline = time.monotonic() + max(min(self.timeout / 4, 10.0), 1.0)
        path = self._raw_path(deadline, self.metadata_path, mdw)
        if path is None:
            return None
        transport, version = path
        body = self._metadata_body.get(version)
        if body is None:
            body = self._metadata_body[version] = mdw.encode_request(version)
        request = RawRequest("MetadataRequest", mdw.API_KEY, version, True, body,
                             mdw.decoder({TRANSACTION_STATE_TOPIC}))
        try:
            answer = transport.send([(None, request)], deadline, what="Metadata")[0]
        except Exception as exc:  # noqa: BLE001 - librdkafka's path gets its turn
            answer = exc
        if isinstance(answer, ProtocolError):
            log.warning("cluster metadata: txnwatch cannot read this broker's Metadata v%d answer (%s); "
                        "librdkafka's from now on", version, answer)
            self.metadata_path.turn_off(str(answer), forever=True)
            return None
        if isinstance(answer, BaseException) or answer.error_code:
            why = answer if isinstance(answer, BaseException) else f"error code {answer.error_code}"
            self.metadata_path.turn_off(f"Metadata failed ({type(why).__name__}: {why})")
            return None
        self.metadata_path.turn_on(f"one Metadata v{version} request, read by txnwatch", version)
        transport.know_brokers(answer.endpoints)
        brokers = set(answer.brokers)
        if self._broker_ids is not None and brokers != self._broker_ids:
            # librdkafka learns which brokers are gone or back only from a metadata answer of
            # its own: without one, its admin calls to every broker (ListGroups) would wait
            # on a broker that left until they time out
            try:
                self.admin.list_topics(timeout=max(deadline - time.monotonic(), 1.0))
            except KafkaException:
                pass                # its own next refresh, then; the poll goes on
        self.admin.poll(0)
        self._connect_errors.clear()
        self._broker_ids = brokers
        topics: dict[str, int] = {}
        leaders: dict[str, tuple[int, ...]] = {}
        degraded: list[PartitionReplicas] = []
        for name, t in answer.topics.items():
            if t.error_code or not topic_filter(name):
                continue
            topics[name] = len(t.leaders)
            leaders[name] = t.leaders
            degraded.extend(PartitionReplicas(name, r.partition, r.leader, r.replicas, r.isr) for r in t.degraded)
        log_topic = answer.topics.get(TRANSACTION_STATE_TOPIC)
        txn_log = () if log_topic is None or log_topic.error_code else tuple(
            PartitionReplicas(TRANSACTION_STATE_TOPIC, r.partition, r.leader, r.replicas, r.isr)
            for r in log_topic.replicas or ())
        return ClusterMetadata(answer.brokers, topics, txn_log, tuple(degraded), leaders)

    def offsets(self, topics: dict[str, int], partitions_of: Callable[[str, int], Iterable[int]] | None = None,
                skip: Iterable[tuple[str, int]] = (), leaders: Mapping[str, tuple[int, ...]] | None = None,
                ) -> tuple[list[PartitionOffsets], dict[tuple[str, int], str]]:
        """HWM and LSO for every partition (of each topic and its partition count, those
        `partitions_of` gives; None: all), but `skip` (offline ones), and {partition: cause}
        for those left without an answer (a leader that failed or did not answer in time):
        one partition never costs the others theirs. Raises only when no partition at all
        was answered.

        With the metadata's `leaders` (topic -> leader per partition index), one ListOffsets
        per leader and isolation level over kafka-python (list_offsets.py); else, or where
        that path cannot be used, librdkafka's futures in chunks."""
        if not topics:
            return [], {}
        wanted = wanted_partitions(topics, partitions_of, skip)
        if leaders is not None:
            batched = self._offsets_batched(topics, leaders, wanted)
            if batched is not None:
                return batched
        return self._offsets_librdkafka(topics, wanted)

    def _offsets_librdkafka(self, topics: dict[str, int], wanted: Mapping[str, Sequence[int]] | None,
                            ) -> tuple[list[PartitionOffsets], dict[tuple[str, int], str]]:
        tps = [TopicPartition(t, p) for t, ps in (wanted or {t: range(n) for t, n in topics.items()}).items()
               for p in ps]
        if not tps:
            return [], {}
        deadline = time.monotonic() + self.timeout
        results: dict = {IsolationLevel.READ_UNCOMMITTED: {}, IsolationLevel.READ_COMMITTED: {}}
        latest = OffsetSpec.latest()
        # Issued in chunks: creating each call's futures holds the GIL inside the client
        # library, and a 10,000-partition call would stall every scrape thread meanwhile.
        for i in range(0, len(tps), OFFSETS_CHUNK):
            chunk = {tp: latest for tp in tps[i:i + OFFSETS_CHUNK]}
            for iso in (IsolationLevel.READ_UNCOMMITTED, IsolationLevel.READ_COMMITTED):
                results[iso].update(self.admin.list_offsets(chunk, isolation_level=iso,
                                                            request_timeout=self.timeout))
        hwm_f, lso_f = results[IsolationLevel.READ_UNCOMMITTED], results[IsolationLevel.READ_COMMITTED]
        self._wait_answered(list(hwm_f.values()) + list(lso_f.values()), deadline)
        out, failed = [], {}
        first_error: BaseException | None = None
        lso_by = {(tp.topic, tp.partition): f for tp, f in lso_f.items()}
        for tp, f in hwm_f.items():
            key = (tp.topic, tp.partition)
            lf = lso_by.get(key)
            exc = _failure(f) or (_failure(lf) if lf is not None else None)
            if exc is not None:
                failed[key] = classify(exc)
                first_error = first_error or exc
                continue
            hwm = f.result().offset
            po = partition_offsets(tp.topic, tp.partition, hwm, lf.result().offset if lf is not None else hwm)
            if po is None:
                failed[key] = INVALID_OFFSET
                continue
            out.append(po)
        if not out and first_error is not None:
            raise first_error
        return out, failed

    def _offsets_batched(self, topics: dict[str, int], leaders: Mapping[str, tuple[int, ...]],
                         wanted: Mapping[str, Sequence[int]] | None,
                         ) -> tuple[list[PartitionOffsets], dict[tuple[str, int], str]] | None:
        """One ListOffsets per leader and isolation level (list_offsets.py); None where this
        path cannot be used (the caller takes librdkafka's)."""
        if not self.list_offsets_path.due():
            return None
        deadline = time.monotonic() + self.timeout
        path = self._raw_path(deadline, self.list_offsets_path, lo)
        if path is None:
            return None
        transport, version = path
        self.list_offsets_path.turn_on(f"one ListOffsets v{version} per leader and isolation level", version)
        selected = {t: leaders.get(t, (-1,) * n) for t, n in topics.items()}
        requests, leaderless = self._offsets_requests.plan(version, selected, wanted, int(self.timeout * 1000))
        # partitions without a leader in this metadata (offline ones the caller skips already)
        no_leader = dict.fromkeys(leaderless, "offline")
        flexible = version >= lo.FLEXIBLE_FROM
        calls = [(r.leader, RawRequest("ListOffsetsRequest", lo.API_KEY, version, flexible, body, lo.decode_response))
                 for r in requests for body in r.bodies]
        answers = transport.send(calls, deadline, what="ListOffsets") if calls else []
        out, failed = lo.combine(requests, answers, cause_of_code, cause_of_exception, self._offsets_answers)
        failed.update(no_leader)
        if not out and failed:
            first = next((a for a in answers if isinstance(a, BaseException)), None)
            cause = next(iter(failed.values()))
            raise PollError(cause_of_exception(first) if first is not None else cause,
                            f"ListOffsets: no partition answered ({first if first is not None else cause})")
        return out, failed

    def _kafka_python(self, deadline: float) -> KafkaPythonTransport:
        """kafka-python's connections to the cluster and the bootstrap broker's ApiVersions,
        connected on first use (half the time left at most, so the librdkafka path still gets
        the rest of the poll). Raises BatchedUnsupported for settings kafka-python cannot use."""
        if self._kp is None:
            transport = KafkaPythonTransport(self._props, self.timeout,
                                             connect_timeout=max((deadline - time.monotonic()) / 2, 0.5))
            try:
                self._kp_versions = transport.api_versions()
            except BaseException:
                transport.close()
                raise
            self._kp = transport
        return self._kp

    def _raw_path(self, deadline: float, path: RequestPath, api) -> tuple[KafkaPythonTransport, int] | None:
        """kafka-python's connections and the version of `api` (a module of this package with
        API_KEY and choose_version) to speak, or None after `path` was turned off."""
        transport = self._kafka_python_or_off(deadline, path)
        if transport is None:
            return None
        try:
            return transport, api.choose_version(self._kp_versions.get(api.API_KEY))
        except BatchedUnsupported as exc:
            path.turn_off(str(exc), forever=True)
            return None

    def _kafka_python_or_off(self, deadline: float, path: RequestPath) -> KafkaPythonTransport | None:
        """_kafka_python(), or None after `path` was turned off: for good where kafka-python
        cannot use the settings, for a while where it could not connect."""
        try:
            return self._kafka_python(deadline)
        except BatchedUnsupported as exc:
            path.turn_off(str(exc), forever=True)
        except Exception as exc:  # noqa: BLE001 - kafka-python reports failed bootstraps as timeouts
            path.turn_off(f"kafka-python could not connect ({type(exc).__name__}: {exc})")
        return None

    def _drop_kafka_python(self) -> None:
        """A new kafka-python connection next time (as the KIP-664 client does after a failure)."""
        if self._kp is not None:
            self._kp.close()
            self._kp = None
        self._groups_batched = None

    @property
    def capabilities(self) -> dict[str, bool]:
        """{"offset_fetch_batched": True when committed offsets go through batched OffsetFetch
        v8 / FindCoordinator v4, False on the per-group path}; empty until group_offsets ran."""
        on = self.offset_fetch_path.on
        return {} if on is None else {"offset_fetch_batched": on}

    def group_offsets(self, group_filter: Callable[[str], bool], keep_topic: Callable[[str], bool] | None = None,
                      ) -> list[tuple[str, str, int, int]]:
        """(group, topic, partition, committed offset) for every selected group, sorted: one
        OffsetFetch per coordinator where the broker has OffsetFetch v8 (Kafka 3.0+), else one
        request per group; only the rows of the topics `keep_topic` keeps (None: all), the
        others not even decoded on the batched path. Groups that fail while others answer are
        left out of this poll (count_error says so); when all fail the call raises."""
        deadline = time.monotonic() + self.timeout
        groups = self.list_groups(group_filter, deadline)
        fetcher = self._batched_fetcher(deadline)
        if fetcher is not None:
            try:
                rows = fetcher.fetch(groups, deadline, live_nodes=self._broker_ids, keep_topic=keep_topic)
            except BatchedUnsupported as exc:   # a broker without the versions (mixed cluster)
                self._groups_batched = None
                self.offset_fetch_path.turn_off(str(exc))
            except Exception:
                self._drop_kafka_python()
                raise
            else:
                self.group_offsets_report = fetcher.last
                self._report_group_failures(fetcher.last.failed)
                return rows
        rows = self.group_offsets_per_group(groups, deadline)
        return rows if keep_topic is None else [row for row in rows if keep_topic(row[1])]

    def list_groups(self, group_filter: Callable[[str], bool], deadline: float) -> list[str]:
        """Selected consumer groups, sorted (ListGroups to every broker)."""
        listing = self.admin.list_consumer_groups(request_timeout=max(deadline - time.monotonic(), 0.001))
        self._wait([listing], deadline)
        return sorted(g.group_id for g in listing.result().valid if group_filter(g.group_id))

    def group_offsets_per_group(self, groups: list[str], deadline: float) -> list[tuple[str, str, int, int]]:
        """The librdkafka path: its API takes one group per request (and finds the group's
        coordinator for each); all are issued at once and waited for together."""
        futures: dict[str, Future] = {}
        for g in groups:
            futures.update(self.admin.list_consumer_group_offsets(
                [ConsumerGroupTopicPartitions(g)], request_timeout=max(deadline - time.monotonic(), 0.001)))
        self._wait_settled(futures.values(), deadline)
        out = []
        failed: dict[str, BaseException] = {}
        for g, f in futures.items():
            exc = f.exception()
            if exc is not None:
                failed[g] = exc
                continue
            for tp in f.result().topic_partitions or []:
                if tp.error is None and tp.offset >= 0:
                    out.append((g, tp.topic, tp.partition, tp.offset))
        if failed and len(failed) == len(futures):
            raise next(iter(failed.values()))
        self._report_group_failures({g: classify(e) for g, e in failed.items()})
        return sorted(out)

    def _batched_fetcher(self, deadline: float):
        """The batched path's fetcher, connected on first use; None where it cannot be used
        (broker without OffsetFetch v8 / FindCoordinator v4, security settings kafka-python
        cannot use, kafka-python failing to connect: tried again after RECHECK_CALLS)."""
        if not self.offset_fetch_path.due():
            return None
        if self._groups_batched is not None:
            return self._groups_batched
        transport = self._kafka_python_or_off(deadline, self.offset_fetch_path)
        if transport is None:
            return None
        if not batched_supported(self._kp_versions):
            self.offset_fetch_path.turn_off("the broker lacks OffsetFetch v8 or FindCoordinator v4 (ApiVersions)")
            return None
        self._groups_batched = BatchedGroupOffsets(transport)
        self.offset_fetch_path.turn_on("batched (OffsetFetch v8 per coordinator)")
        return self._groups_batched

    def _report_group_failures(self, failed: dict[str, str]) -> None:
        """Groups left out of this poll (their cause), while the others answered."""
        self.groups_left_out = dict(failed)
        causes = Counter(failed.values())
        if frozenset(causes) != self._group_failure_causes and causes:
            log.warning("committed offsets: %d of the consumer groups left out of this poll (%s), e.g. %s",
                        len(failed), ", ".join(f"{c}: {n}" for c, n in sorted(causes.items())),
                        ", ".join(sorted(failed)[:3]))
        self._group_failure_causes = frozenset(causes)
        if self.count_error is not None:
            for cause in sorted(causes):
                self.count_error("group_offsets_" + cause)

    def configs(self, broker_ids: Iterable[int], topics: Iterable[str], txn_log: bool = False) -> ClusterFacts:
        """Broker configs that matter to transactions, topic retention.ms and (with `txn_log`)
        __transaction_state's own min.insync.replicas, where the broker returns values (some
        brokers and proxies return none)."""
        broker_ids = list(broker_ids)
        deadline = time.monotonic() + self.timeout
        values: dict[str, int] = {}
        if broker_ids:
            fs = self.admin.describe_configs([ConfigResource("BROKER", str(broker_ids[0]))],
                                             request_timeout=self.timeout)
            self._wait(fs.values(), deadline)
            for f in fs.values():
                for name, entry in f.result().items():
                    if name in BROKER_CONFIGS and entry.value not in (None, ""):
                        try:
                            values[BROKER_CONFIGS[name]] = int(entry.value)
                        except ValueError:
                            log.warning("broker config %s has a non-integer value %r", name, entry.value)
        retention: dict[str, int] = {}
        log_min_isr: int | None = None
        selected = set(topics)
        topic_list = sorted(selected | ({TRANSACTION_STATE_TOPIC} if txn_log else set()))
        if topic_list:
            fs = self.admin.describe_configs([ConfigResource("TOPIC", t) for t in topic_list],
                                             request_timeout=self.timeout)
            self._wait_settled(fs.values(), deadline)
            for res, f in fs.items():
                if f.exception() is not None:
                    continue   # one refused topic (ACLs) costs its retention only, not the broker values
                if res.name == TRANSACTION_STATE_TOPIC and txn_log:
                    entry = f.result().get("min.insync.replicas")
                    if entry is not None and str(entry.value or "").isdigit():
                        log_min_isr = int(entry.value)
                if res.name not in selected:
                    continue
                entry = f.result().get("retention.ms")
                if entry is not None and entry.value not in (None, ""):
                    try:
                        retention[res.name] = int(entry.value)
                    except ValueError:
                        pass
        return ClusterFacts(topic_retention_ms=retention, configs_from_broker=bool(values),
                            transaction_state_min_insync_replicas=log_min_isr, **values)

    def topic_operations(self, topic: str) -> tuple[frozenset[str] | None, str | None]:
        """(operations the principal may perform on `topic`, None) from DescribeTopics with
        authorized operations (KIP-430), or (None, error name) when the broker refuses or
        does not know the topic."""
        futures = self.admin.describe_topics(TopicCollection([topic]), request_timeout=self.timeout,
                                             include_authorized_operations=True)
        try:
            d = futures[topic].result(timeout=self.timeout)
        except KafkaException as exc:
            err = exc.args[0] if exc.args else None
            return None, err.name() if isinstance(err, KafkaError) else type(exc).__name__
        ops = d.authorized_operations
        return (None if ops is None else frozenset(o.name for o in ops)), None

    def cluster_operations(self) -> frozenset[str] | None:
        """Operations the principal may perform on the cluster (DescribeCluster with authorized
        operations), None when unknown."""
        try:
            d = self.admin.describe_cluster(include_authorized_operations=True,
                                            request_timeout=self.timeout).result(timeout=self.timeout)
        except Exception:  # noqa: BLE001 - unknown
            return None
        ops = d.authorized_operations
        return None if ops is None else frozenset(o.name for o in ops)

    def record_timestamps(self, wanted: list[tuple[str, int, int]], timeout: float) -> dict[tuple[str, int, int], float]:
        """Timestamp (unix seconds) of the record at each (topic, partition, offset): at the LSO
        that is the first record of the oldest open transaction."""
        if not wanted:
            return {}
        if self._consumer is None:
            props = {k: v for k, v in self._props.items()}
            props.update({"group.id": "txnwatch-lso-probe", "enable.auto.commit": False,
                          "isolation.level": "read_uncommitted", "enable.partition.eof": False,
                          "fetch.wait.max.ms": 50,
                          "logger": logging.getLogger("txnwatch.librdkafka")})
            self._consumer = clients.consumer(props)
        c = self._consumer
        c.assign([TopicPartition(t, p, o) for t, p, o in wanted])
        pending = {(t, p): o for t, p, o in wanted}
        out: dict[tuple[str, int, int], float] = {}
        deadline = time.monotonic() + timeout
        try:
            while pending and time.monotonic() < deadline:
                for msg in c.consume(num_messages=len(pending) * 2, timeout=0.2):
                    if msg.error():
                        continue
                    key = (msg.topic(), msg.partition())
                    want = pending.get(key)
                    if want is None or msg.offset() < want:
                        continue
                    ts_type, ts = msg.timestamp()
                    if ts > 0:
                        out[(key[0], key[1], want)] = ts / 1000
                    del pending[key]
                    c.incremental_unassign([TopicPartition(key[0], key[1])])
        finally:
            c.unassign()
        return out

    def read_marker_gaps(self, gaps: list[tuple[str, int, int, int]], timeout: float,
                         ) -> tuple[dict[tuple[str, int, int, int], bool], dict[tuple[str, int, int, int], str]]:
        """Whether each gap (topic, partition, committed offset, LSO) holds only transaction
        markers and aborted records: a read_committed consumer assigned at the partition's
        lowest committed offset reaches the end (the LSO, for read_committed) with no record
        delivered inside the gap. Returns (verdict per gap, cause per gap whose partition
        failed, "timeout" where it was not read to the end within `timeout`)."""
        if not gaps:
            return {}, {}
        start: dict[tuple[str, int], int] = {}
        lso: dict[tuple[str, int], int] = {}
        for t, p, committed, end in gaps:
            start[(t, p)] = min(committed, start.get((t, p), committed))
            lso[(t, p)] = end
        delivered: dict[tuple[str, int], list[int]] = {tp: [] for tp in start}
        failed: dict[tuple[str, int], str] = {}
        pending = set(start)
        reader = self._marker_reader()
        reader.assign([TopicPartition(t, p, o) for (t, p), o in start.items()])
        deadline = time.monotonic() + timeout
        try:
            while pending and (left := deadline - time.monotonic()) > 0:
                for msg in reader.consume(num_messages=100, timeout=min(left, 0.05)):
                    tp = (msg.topic(), msg.partition())
                    if tp not in pending:
                        continue
                    err = msg.error()
                    if err is not None and err.code() != KafkaError._PARTITION_EOF:
                        failed[tp] = classify(KafkaException(err))
                    elif msg.offset() < lso[tp]:
                        if err is None:
                            delivered[tp].append(msg.offset())
                        continue     # inside the gaps: a record, or an end below the LSO the poll read
                    pending.discard(tp)
                    reader.incremental_unassign([TopicPartition(*tp)])
        finally:
            reader.unassign()
        verdicts, causes = {}, {}
        for gap in gaps:
            tp = gap[:2]
            if tp in failed or tp in pending:
                causes[gap] = failed.get(tp, TIMEOUT)
            else:
                verdicts[gap] = not any(gap[2] <= o < gap[3] for o in delivered[tp])
        return verdicts, causes

    def _marker_reader(self) -> Consumer:
        """The read_committed consumer of read_marker_gaps, made at its first use. It never
        commits; auto.offset.reset=error, so a committed offset the log no longer holds fails
        instead of jumping to the end (which would read as a gap of markers)."""
        if self._marker_consumer is None:
            self._marker_consumer = clients.consumer({
                **self._props, "group.id": "txnwatch-marker-probe", "enable.auto.commit": False,
                "isolation.level": "read_committed", "enable.partition.eof": True,
                "auto.offset.reset": "error", "fetch.wait.max.ms": 50,
                "logger": logging.getLogger("txnwatch.librdkafka")})
        return self._marker_consumer

    def close(self) -> None:
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None
        if self._marker_consumer is not None:
            self._marker_consumer.close()
            self._marker_consumer = None
        self._drop_kafka_python()


def _replicas(topic: str, p) -> PartitionReplicas:
    return PartitionReplicas(topic, p.id, p.leader, tuple(p.replicas), tuple(p.isrs))


def _failure(f: Future) -> BaseException | None:
    """Why a future gave no answer: its exception, a timeout when still pending, else None."""
    if not f.done():
        return PollError("timeout", "no answer within poll_timeout_seconds")
    return f.exception()


def wanted_partitions(topics: Mapping[str, int], partitions_of: Callable[[str, int], Iterable[int]] | None,
                      skip: Iterable[tuple[str, int]]) -> dict[str, Sequence[int]] | None:
    """{topic: its partitions to read}: those `partitions_of` gives (None: all) but `skip`;
    None when that is every partition of every topic. A shard's share is a range per topic,
    kept as such: the request plan compares it whole, not partition by partition."""
    skipped: dict[str, set[int]] = {}
    for t, p in skip:
        skipped.setdefault(t, set()).add(p)
    if partitions_of is None and not skipped:
        return None
    out: dict[str, Sequence[int]] = {}
    for t, n in topics.items():
        ps = range(n) if partitions_of is None else partitions_of(t, n)
        gone = skipped.get(t)
        out[t] = ps if gone is None else tuple(p for p in ps if p not in gone)
    return out
