"""KIP-664 transaction APIs (ListTransactions 66, DescribeTransactions 65,
DescribeProducers 61) through kafka-python, which implements them (librdkafka does not).

The raw responses are turned into plain values (answers.py) right here, so the derivations
and the Spark sink never see a kafka-python object."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Mapping

from .answers import ActiveProducer, TxnDescription, TxnListing
from .errors import PollError
from .kafka_python import (
    api_versions,
    can_send_to_nodes,
    close_admin,
    kafka_python_config,
    send_to_every_broker,
)

log = logging.getLogger(__name__)

API_KEYS = {"list_transactions": 66, "describe_transactions": 65, "describe_producers": 61}
LIST_GROUPS = 16
INVALID_REGULAR_EXPRESSION = 128   # error code (kafka-python 3.0 has no class for it)
DESCRIBE_PRODUCERS_BATCH = 500   # partitions per DescribeProducers round, as the Java tool does

def capabilities_from_api_versions(api_versions: Mapping[int, object]) -> dict[str, bool]:
    """Which KIP-664 APIs the broker advertises (ApiVersions keys)."""
    keys = {int(k) for k in api_versions}
    return {name: key in keys for name, key in API_KEYS.items()}


def list_transactions_version(api_versions: Mapping[int, object]) -> int:
    """The newest ListTransactions version the broker takes (-1: none): v1 adds KIP-994's
    duration filter (Kafka 3.8+), v2 KIP-1152's transactional-id pattern (4.1+)."""
    for k, v in api_versions.items():
        if int(k) == API_KEYS["list_transactions"]:
            top = v[-1] if isinstance(v, (tuple, list)) else getattr(v, "max_version", 0)
            return int(top)
    return -1


def duration_filter_supported(api_versions: Mapping[int, object]) -> bool:
    """ListTransactions v1 (KIP-994, Kafka 3.8+) takes a duration filter."""
    return list_transactions_version(api_versions) >= 1


def listings_from_response(by_broker: Mapping[int, Iterable]) -> list[TxnListing]:
    out = {}
    for txns in by_broker.values():
        for t in txns:
            state = getattr(t.state, "value", t.state)
            out[t.transactional_id] = TxnListing(t.transactional_id, int(t.producer_id), str(state))
    return list(out.values())


def list_request(filters: Mapping[str, object]):
    """A ListTransactions request with kafka-python's list_transactions keywords: the lowest
    version that carries the filters asked for (v1 the duration, v2 the id pattern)."""
    from kafka.protocol.admin import ListTransactionsRequest

    kwargs: dict = {"min_version": 0, "state_filters": list(filters.get("state_filters") or []),
                    "producer_id_filters": list(filters.get("producer_id_filters") or [])}
    if filters.get("duration_filter_ms") is not None:
        kwargs["duration_filter"], kwargs["min_version"] = int(filters["duration_filter_ms"]), 1
    if filters.get("transactional_id_pattern") is not None:
        kwargs["transactional_id_pattern"], kwargs["min_version"] = filters["transactional_id_pattern"], 2
    return ListTransactionsRequest(**kwargs)


def listings_of(answers: Iterable) -> list[TxnListing]:
    """The listings of every broker's ListTransactions answer (one id once); a broker's
    error code raises its kafka-python error class."""
    from kafka.errors import NoError, for_code

    out = {}
    for answer in answers:
        error = for_code(answer.error_code)
        if error is not NoError:
            raise error(f"ListTransactions failed with error code {answer.error_code}")
        for t in answer.transaction_states:
            out[t.transactional_id] = TxnListing(t.transactional_id, int(t.producer_id), str(t.transaction_state))
    return list(out.values())


def descriptions_from_response(by_id: Mapping[str, object]) -> dict[str, TxnDescription]:
    out = {}
    for tid, d in by_id.items():
        state = getattr(d.state, "value", d.state)
        parts = frozenset((tp.topic, int(tp.partition)) for tp in d.topic_partitions)
        out[tid] = TxnDescription(tid, str(state), int(d.producer_id), int(d.producer_epoch),
                                  int(d.transaction_timeout_ms), int(d.transaction_start_time_ms), parts)
    return out


def producers_from_response(by_tp: Mapping[object, object]) -> list[ActiveProducer]:
    out = []
    for tp, state in by_tp.items():
        for p in state.active_producers:
            out.append(ActiveProducer(tp.topic, int(tp.partition), int(p.producer_id), int(p.producer_epoch),
                                      int(p.last_timestamp), int(p.coordinator_epoch),
                                      int(p.current_transaction_start_offset)))
    return out


class TransactionAPI:
    """Lazily connected kafka-python admin client for the KIP-664 calls."""

    def __init__(self, client_props: Mapping[str, str], timeout: float) -> None:
        self._props = dict(client_props)
        self._timeout = timeout
        self._admin = None
        self.capabilities: dict[str, bool] | None = None
        self.denied_topics: tuple[str, ...] = ()   # DescribeProducers refused (last call)
        self.duration_filter = False               # ListTransactions v1 (KIP-994), from detect()
        self.id_pattern_filter = False             # ListTransactions v2 (KIP-1152), from detect()
        self.listed = 0                            # transactions the brokers listed (last call)

    def _client(self):
        if self._admin is None:
            from kafka.admin import KafkaAdminClient
            try:
                self._admin = KafkaAdminClient(**kafka_python_config(self._props, self._timeout))
            except PollError:
                raise                  # a login setting that cannot work (login_config), or no token (auth)
            except Exception as exc:  # noqa: BLE001 - kafka-python reports failed bootstraps as timeouts
                # kafka-python logs why a bootstrap failed (authentication, TLS) but raises a
                # timeout: the login says why when it is its credentials (login.explain).
                raise PollError("kip664_connect", f"the KIP-664 client (kafka-python) could not connect: "
                                f"{type(exc).__name__}: {exc}") from None
        return self._admin

    def detect(self) -> dict[str, bool]:
        """Ask the broker which APIs it has (ApiVersions) and remember the answer."""
        versions = api_versions(self._client())
        self.capabilities = capabilities_from_api_versions(versions)
        self.duration_filter = duration_filter_supported(versions)
        self.id_pattern_filter = list_transactions_version(versions) >= 2
        return self.capabilities

    def filter_capabilities(self) -> dict[str, bool]:
        """The ListTransactions filters the broker has, once detect() ran."""
        if self.capabilities is None:
            return {}
        return {"list_transactions_duration_filter": self.duration_filter,
                "list_transactions_id_pattern": self.id_pattern_filter}

    def finalized_features(self) -> dict[str, int]:
        """The cluster's finalized feature levels (ApiVersions v3+): transaction.version,
        group.version, ... ({} on a broker without features)."""
        out = {}
        for name, f in self._call("describe_features").items():
            if "finalized" in f:
                out[str(name)] = int(f["finalized"][1])
        return out

    @property
    def available(self) -> bool:
        return bool(self.capabilities) and all(self.capabilities.values())

    def list_transactions(self, states: Iterable[str] | None = None, min_duration_ms: int = 0,
                          id_pattern: str | None = None) -> list[TxnListing]:
        """Transactions in `states` (all when None), the coordinators filtering them; with
        `min_duration_ms` and a broker that has KIP-994, only those open longer than that
        (an older broker lists them all: the caller's describe step sees their ages); with
        `id_pattern` (a full-match regular expression) and a broker that has KIP-1152, only
        the ids it matches (an older broker lists them all: the caller filters). A pattern the
        broker refuses (RE2/J lacks some of Python's syntax) is not sent again."""
        kwargs: dict = {"state_filters": sorted(states)} if states else {}
        if min_duration_ms > 0 and self.duration_filter:
            kwargs["duration_filter_ms"] = int(min_duration_ms)
        if id_pattern and self.id_pattern_filter:
            kwargs["transactional_id_pattern"] = id_pattern
        from kafka.errors import BrokerResponseError
        try:
            listings = self._list_everywhere(kwargs, keep=(BrokerResponseError,))
        except BrokerResponseError as exc:
            if getattr(exc, "errno", None) != INVALID_REGULAR_EXPRESSION or "transactional_id_pattern" not in kwargs:
                self.close()
                raise PollError("kip664_list_transactions", f"list_transactions: {type(exc).__name__}: {exc}") from None
            log.warning("the broker refuses the transactional-id pattern %r (%s): filtering here instead",
                        id_pattern, exc)
            self.id_pattern_filter = False
            kwargs.pop("transactional_id_pattern")
            listings = self._list_everywhere(kwargs)
        self.listed = len(listings)
        return listings

    def _list_everywhere(self, filters: dict, keep: tuple[type[Exception], ...] = ()) -> list[TxnListing]:
        """ListTransactions sent to every broker at once: each coordinator holds a slice of
        __transaction_state, and kafka-python's own call asks one broker after another (a
        round trip each: a poll waited for their sum). The first failure raises, as
        kafka-python's does; a broker's error code raises its error class."""
        admin = self._client()
        if not can_send_to_nodes(admin):   # another kafka-python: its own serial call
            return listings_from_response(self._call("list_transactions", keep=keep, **filters))

        def ask_every_broker() -> list[TxnListing]:
            answers = send_to_every_broker(admin, lambda: list_request(filters), time.monotonic() + self._timeout,
                                           "ListTransactions")
            failed = next((a for a in answers if isinstance(a, BaseException)), None)
            if failed is not None:
                raise failed
            return listings_of(answers)
        return self._guarded("list_transactions", ask_every_broker, keep)

    def describe_transactions(self, ids: Iterable[str]) -> dict[str, TxnDescription]:
        """Descriptions of `ids`; ids the coordinator no longer knows (expired since they
        were listed) are left out instead of failing the whole request."""
        from kafka.errors import TransactionalIdNotFoundError
        ids = list(ids)
        if not ids:
            return {}
        try:
            return descriptions_from_response(self._call("describe_transactions", ids,
                                                         keep=(TransactionalIdNotFoundError,)))
        except TransactionalIdNotFoundError:
            # kafka-python raises for the first unknown id of a request: ask one by one (rare)
            out: dict[str, TxnDescription] = {}
            for tid in ids:
                try:
                    out.update(descriptions_from_response(self._call("describe_transactions", [tid],
                                                                     keep=(TransactionalIdNotFoundError,))))
                except TransactionalIdNotFoundError:
                    continue
            return out

    def pids_to_ids(self, pids: Iterable[int]) -> dict[int, str]:
        pids = sorted(set(pids))
        if not pids:
            return {}
        return {t.producer_id: t.transactional_id for t in self._list_everywhere({"producer_id_filters": pids})}

    def groups_by_type(self) -> dict[str, list[str]]:
        """Every group the brokers list, by type (classic, consumer, share, streams, ...):
        ListGroups v5 (KIP-848) names each group's type. librdkafka lists only the consumer
        groups, whose offsets and lag the poller fetches; this tells the others apart (share
        groups, KIP-932, have no committed offsets). {} where the broker has no group types."""
        versions = api_versions(self._client())
        if versions.get(LIST_GROUPS, (0, 0))[1] < 5:
            return {}
        out: dict[str, list[str]] = {}
        for g in self._call("list_groups"):
            out.setdefault(str(g.get("group_type") or "unknown").lower(), []).append(g["group_id"])
        return {t: sorted(names) for t, names in out.items()}

    def describe_producers(self, partitions: list[tuple[str, int]]) -> list[ActiveProducer]:
        """Producer state of the partitions. Topics the principal may not READ (DescribeProducers
        needs it) are left out and named in `denied_topics`, so one such topic does not cost
        the hanging detection of all the others."""
        from kafka.errors import TopicAuthorizationFailedError
        from kafka.structs import TopicPartition
        out: list[ActiveProducer] = []
        denied: set[str] = set()
        for i in range(0, len(partitions), DESCRIBE_PRODUCERS_BATCH):
            batch = [TopicPartition(t, p) for t, p in partitions[i:i + DESCRIBE_PRODUCERS_BATCH]]
            try:
                out.extend(producers_from_response(self._call("describe_producers", batch, keep=(
                    TopicAuthorizationFailedError,))))
            except TopicAuthorizationFailedError:
                # kafka-python raises for the first refused partition: ask per topic to tell which
                for topic in sorted({tp.topic for tp in batch}):
                    try:
                        out.extend(producers_from_response(self._call(
                            "describe_producers", [tp for tp in batch if tp.topic == topic],
                            keep=(TopicAuthorizationFailedError,))))
                    except TopicAuthorizationFailedError:
                        denied.add(topic)
        self.denied_topics = tuple(sorted(denied))
        return out

    def denied_ids(self, ids: Iterable[str]) -> list[str]:
        """The ids DescribeTransactions refuses (TRANSACTIONAL_ID_AUTHORIZATION_FAILED), one
        request each: kafka-python raises for the first refused id of a request. Any other
        answer (not found: expired since the tap read it; a coordinator moving) says nothing
        about ACLs and must not cost the poll its KIP-664 view."""
        from kafka.errors import TransactionalIdAuthorizationFailedError
        out = []
        for tid in ids:
            try:
                self._call("describe_transactions", [tid], keep=(Exception,))
            except TransactionalIdAuthorizationFailedError:
                out.append(tid)
            except Exception as exc:  # noqa: BLE001 - see above
                log.debug("DescribeTransactions probe of an id failed: %s", type(exc).__name__)
        return out

    def _call(self, name: str, *args, keep: tuple[type[Exception], ...] = (), **kwargs):
        """Call the admin client; errors become PollError (and a new connection next time),
        except those in `keep`, which the caller handles (the connection stays)."""
        return self._guarded(name, lambda: getattr(self._client(), name)(*args, **kwargs), keep)

    def _guarded(self, name: str, call, keep: tuple[type[Exception], ...] = ()):
        try:
            return call()
        except PollError:
            raise
        except keep:
            raise
        except Exception as exc:
            self.close()  # reconnect next time
            raise PollError(f"kip664_{name}", f"{name}: {type(exc).__name__}: {exc}") from None

    def close(self) -> None:
        close_admin(self._admin)
        self._admin = None
