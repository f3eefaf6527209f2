"""What txnwatch needs of kafka-python, in one place: the only module that touches it
beyond its public API. kafka-python implements the requests librdkafka lacks (KIP-664's
transaction APIs, batched OffsetFetch v8 and FindCoordinator v4); this module maps a
cluster's librdkafka client properties onto it, reads ApiVersions from its raw answer and
sends protocol requests through its connection manager."""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from types import SimpleNamespace

from .errors import AUTH, BatchedUnsupported, PollError, auth_failure_message, cause_of_exception
from .group_offsets import IN_FLIGHT_PER_NODE, Coordinator, waves
from .login import login_for
from .metadata import Endpoint

log = logging.getLogger(__name__)


# librdkafka property -> kafka-python KafkaAdminClient keyword
_PROP_MAP = {
    "security.protocol": "security_protocol",
    "sasl.mechanism": "sasl_mechanism",
    "sasl.mechanisms": "sasl_mechanism",
    "sasl.username": "sasl_plain_username",
    "sasl.password": "sasl_plain_password",
    "ssl.ca.location": "ssl_cafile",
    "ssl.certificate.location": "ssl_certfile",
    "ssl.key.location": "ssl_keyfile",
    "ssl.key.password": "ssl_password",
    "ssl.crl.location": "ssl_crlfile",
    "sasl.kerberos.service.name": "sasl_kerberos_service_name",
    "client.id": "client_id",
}
_UPPER = {"security_protocol", "sasl_mechanism"}   # librdkafka takes any case, kafka-python upper only


def kafka_python_config(props: Mapping[str, str], timeout: float) -> dict:
    """Map the cluster's librdkafka properties onto KafkaAdminClient keywords, with the
    credentials of their login (login/: tokens, the TLS context librdkafka's TLS settings
    describe, Kerberos). Properties without an equivalent are ignored (logged by name only,
    never by value)."""
    cfg: dict = {"bootstrap_servers": props["bootstrap.servers"].split(","),
                 "request_timeout_ms": int(timeout * 1000),
                 "bootstrap_timeout_ms": int(timeout * 1000),
                 "client_id": "txnwatch"}
    unmapped = []
    for k, v in props.items():
        if k == "bootstrap.servers":
            continue
        if k in _PROP_MAP:
            cfg[_PROP_MAP[k]] = str(v).upper() if _PROP_MAP[k] in _UPPER else v
        elif k == "ssl.endpoint.identification.algorithm":
            cfg["ssl_check_hostname"] = str(v).lower() == "https"
        elif not k.startswith(_LOGIN_PREFIXES) and not callable(v):
            unmapped.append(k)
    if cfg.get("ssl_cafile") == "probe":   # librdkafka: look for the system's CA store
        del cfg["ssl_cafile"]
    if unmapped:
        log.debug("kafka-python has no equivalent for: %s", ", ".join(sorted(unmapped)))
    deliver_answers_read_with_eof()
    cfg = login_for(props).kafka_python(props, cfg)
    if "sasl_oauth_token_provider" in cfg:
        cfg["sasl_oauth_token_provider"] = _token_provider(cfg["sasl_oauth_token_provider"])
    return cfg


def _token_provider(source):
    """The login's tokens as kafka-python takes them: an AbstractTokenProvider, which it checks."""
    try:
        from kafka.net.sasl.oauth import AbstractTokenProvider
    except ImportError:     # kafka-python before 3
        from kafka.sasl.oauth import AbstractTokenProvider

    class LoginTokens(AbstractTokenProvider):
        def token(self) -> str:
            return source.token()

        def extensions(self) -> dict[str, str]:
            return source.extensions()

        def __repr__(self) -> str:      # never the token
            return "LoginTokens(***)"

    return LoginTokens()


_LOGIN_PREFIXES = ("sasl.", "ssl.", "https.", "enable.ssl.", "enable.sasl.")

_eof_mended = False


def deliver_answers_read_with_eof() -> None:
    """Make kafka-python pass on what one socket read returned together with the peer's
    close before it fails the connection. Idempotent; a kafka-python whose transport looks
    otherwise is left as it is.

    kafka-python 3.0's transport reads a socket dry and, when that read ends at the peer's
    close, aborts the connection ("socket disconnected") and drops the bytes read before it.
    A broker refusing a login answers SaslAuthenticate with the reason and closes straight
    after (connection.failed.authentication.delay.ms later): whenever kafka-python's IO
    thread reads only after both arrived (a busy host), the reason is lost, and its log,
    which is all that explains a refused KIP-664 bootstrap (kip664.py), says "socket
    disconnected". Here the bytes reach the protocol first, and the abort waits one turn of
    kafka-python's IO loop: the task the answer woke (the SASL exchange raising the
    broker's refusal) closes the connection with its own error first."""
    global _eof_mended
    if _eof_mended:
        return
    _eof_mended = True
    try:
        from kafka import errors as kafka_errors
        from kafka.net.transport import KafkaTCPTransport
    except ImportError:      # kafka-python before 3: another transport
        return
    if not all(hasattr(KafkaTCPTransport, a) for a in ("_read_from_sock", "_sock_recv", "abort")):
        return

    async def _read_from_sock(self):
        while self._read and not self._closed:
            await self._net.wait_read(self._sock)
            data, err = self._sock_recv()
            if data or not err:
                self.last_read = time.monotonic()
                if self._protocol and self._protocol._sensors:
                    self._protocol._sensors.bytes_received.record(len(data))
                try:
                    self._protocol.data_received(data)
                except kafka_errors.KafkaProtocolError as exc:
                    return self.abort(error=exc)
            if err:
                if data:
                    await self._net.sleep(0)   # the tasks those answers woke run first
                return self.abort(error=err)   # nothing once one of them closed the transport

    KafkaTCPTransport._read_from_sock = _read_from_sock


def close_admin(admin) -> None:
    """Close a kafka-python admin client (None: none made), a broken one too: closing is
    what follows its failures."""
    if admin is None:
        return
    try:
        admin.close()
    except Exception:  # noqa: BLE001 - closing a broken client
        pass


def api_versions(admin) -> dict[int, tuple[int, int]]:
    """ApiVersions of the admin client's bootstrap broker: {api key: (min, max)}.

    Read from the raw answer: `KafkaAdminClient.api_versions()` maps every key to its
    ApiKey enum and raises ValueError for keys it does not know, which brokers newer than
    the library have (Kafka 4.4 lists key 93)."""
    data = getattr(getattr(admin, "_manager", None), "broker_version_data", None)
    raw = getattr(data, "api_versions", None)
    if raw is None:   # another kafka-python: its public call, with its limits
        raw = admin.api_versions()
    return {int(k): (int(v[0]), int(v[1])) for k, v in raw.items()}


_SENDS = ("send", "call_soon", "wait_for", "cluster")   # what send_to_nodes uses of the manager


def can_send_to_nodes(admin) -> bool:
    """Whether this kafka-python admin client has the connection manager send_to_nodes and
    send_to_every_broker send through (kafka-python 2.x's; an older one has none)."""
    manager = getattr(admin, "_manager", None)
    return manager is not None and all(hasattr(manager, a) for a in _SENDS)


def send_to_every_broker(admin, make_request: Callable[[], object], deadline: float, what: str) -> list[object]:
    """A request of `make_request`'s to every broker the admin client knows, at once (see
    send_to_nodes): each answer, or the exception it failed with, in the brokers' order."""
    manager = admin._manager
    calls = [(broker.node_id, make_request()) for broker in manager.cluster.brokers()]
    return send_to_nodes(manager, calls, deadline, what)


def send_to_nodes(manager, calls: Sequence[tuple[int | None, object]], deadline: float,
                  what: str) -> list[object]:
    """Each (node, request)'s answer, or the exception it failed with, in order: sent through
    kafka-python's connection manager at once to every node, at most IN_FLIGHT_PER_NODE at a
    time to one node, each with what is left of `deadline` (monotonic). PollError timeout when
    the deadline passes with answers missing."""
    calls = list(calls)
    if not calls:
        return []

    def left_ms() -> int:
        return max(int((deadline - time.monotonic()) * 1000), 1)

    async def run() -> list[object]:
        out: list[object] = [None] * len(calls)
        for wave in waves([n for n, _ in calls], IN_FLIGHT_PER_NODE):
            sent = []
            for i in wave:
                node, request = calls[i]
                try:
                    sent.append((i, manager.send(request, node_id=node, request_timeout_ms=left_ms())))
                except Exception as exc:  # noqa: BLE001 - e.g. UnknownBrokerIdError, a sticky auth failure
                    out[i] = exc
            for i, f in sent:
                try:
                    out[i] = await manager.wait_for(f, left_ms())
                except Exception as exc:  # noqa: BLE001 - the request's own failure, judged by the caller
                    out[i] = exc
        return out

    done = threading.Event()
    future = manager.call_soon(run)
    future.add_both(lambda _: done.set())
    if not done.wait(max(deadline - time.monotonic(), 0) + 0.5):
        raise PollError("timeout", f"{what}: no answer within the poll timeout")
    if future.exception is not None:
        raise future.exception
    from kafka.errors import KafkaTimeoutError

    results = list(future.value)
    if time.monotonic() >= deadline and any(isinstance(r, KafkaTimeoutError) for r in results):
        raise PollError("timeout", f"{what}: no answer within the poll timeout")
    return results


_NODE_KEY = "__txnwatch_coordinator_node_{}"   # one kafka-python coordinator entry per node, not per group


class KafkaPythonTransport:
    """Sends protocol requests through a kafka-python KafkaAdminClient's connection manager:
    its connections, TLS, SASL and version negotiation. Counts what it sends (`sent`)."""

    def __init__(self, client_props: Mapping[str, str], timeout: float, connect_timeout: float | None = None) -> None:
        from kafka.admin import KafkaAdminClient

        cfg = kafka_python_config(client_props, timeout)
        if connect_timeout is not None:
            cfg["bootstrap_timeout_ms"] = max(int(connect_timeout * 1000), 1)
        self._admin = KafkaAdminClient(**cfg)
        if not can_send_to_nodes(self._admin):
            self.close()
            raise BatchedUnsupported("this kafka-python has no connection manager to send requests through")
        self._manager = self._admin._manager
        self.sent: Counter = Counter()   # API name -> requests sent since the start
        self._props = client_props

    def api_versions(self) -> dict[int, tuple[int, int]]:
        """ApiVersions of the bootstrap broker: {api key: (min, max)}."""
        return api_versions(self._admin)

    def know_brokers(self, endpoints: Iterable[Endpoint]) -> None:
        """Teach kafka-python the live brokers of a Metadata answer txnwatch read itself.

        kafka-python refreshes its own view only on its own triggers (an error, or every
        metadata_max_age_ms): a broker it dropped while that broker was down stayed unknown
        after the broker came back, and every request to it failed with UnknownBrokerIdError."""
        for endpoint in endpoints:
            self.register_node(endpoint)

    def register_node(self, node: Coordinator | Endpoint) -> None:
        """Make `node` reachable by id, where kafka-python's own metadata does not name it."""
        cluster = self._manager.cluster
        if cluster.broker_metadata(node.node_id) is None:
            from kafka.protocol.metadata import CoordinatorType

            row = SimpleNamespace(error_code=0, error_message=None, node_id=node.node_id, host=node.host,
                                  port=node.port)
            cluster.add_coordinator(row, CoordinatorType.GROUP, _NODE_KEY.format(node.node_id),
                                    synthesize_node_id=False)

    def send(self, calls: Sequence[tuple[int | None, object]], deadline: float,
             what: str = "committed offsets") -> list[object]:
        """Each (node, request)'s answer, or the exception it failed with, in order."""
        calls = list(calls)
        for _, request in calls:
            self.sent[str(request.name).removesuffix("Request")] += 1
        return [self._login_named(r) for r in send_to_nodes(self._manager, calls, deadline, what)]

    def _login_named(self, answer):
        """A request that failed at the login (kafka-python's GSSAPI error, the broker's SASL
        refusal) as PollError auth in the login's words, as librdkafka's path names it."""
        if isinstance(answer, BaseException) and not isinstance(answer, PollError) \
                and cause_of_exception(answer) == AUTH:
            return PollError(AUTH, auth_failure_message(self._props, f"{type(answer).__name__}: {answer}"))
        return answer

    def close(self) -> None:
        close_admin(self._admin)
