"""Why a Kafka call failed, in one vocabulary: the `cause` label of
txnwatch_poll_errors_total, for librdkafka's errors (`classify`) and kafka-python's
(`cause_of_code`, `cause_of_exception`) alike; and what a refused login or TLS handshake
tells the operator to check. A leaf: the Kafka room's calls raise with it, and the poller,
the tap and `txnwatch check` name causes with it; it imports nothing of txnwatch.

The causes: auth (credentials rejected), authorization (an ACL is missing), tls (handshake),
timeout, broker_unavailable, kafka_<error name> (any other broker or client error, named
by the error), unexpected (not a Kafka error at all)."""

from __future__ import annotations

import re
import ssl
from collections.abc import Mapping

from confluent_kafka import KafkaError, KafkaException

AUTH = "auth"
AUTHORIZATION_DENIED = "authorization"
TLS = "tls"
TIMEOUT = "timeout"
BROKER_UNAVAILABLE = "broker_unavailable"
UNEXPECTED = "unexpected"


def kafka_cause(error_name: str) -> str:
    """kafka_<name> for any other Kafka error, e.g. kafka_leader_not_available."""
    return "kafka_" + error_name.lstrip("_").lower()


class PollError(Exception):
    """A failed poll step; `cause` is a short label for txnwatch_poll_errors_total."""

    def __init__(self, cause: str, message: str) -> None:
        super().__init__(message)
        self.cause = cause


class BatchedUnsupported(Exception):
    """The batched group-offsets path cannot be used with this broker or client (the caller
    falls back to one request per group)."""


# ------------------------------------------------------------------ librdkafka
AUTHENTICATION = frozenset({KafkaError._AUTHENTICATION, KafkaError.SASL_AUTHENTICATION_FAILED})
AUTHORIZATION = frozenset({KafkaError.TOPIC_AUTHORIZATION_FAILED, KafkaError.GROUP_AUTHORIZATION_FAILED,
                           KafkaError.CLUSTER_AUTHORIZATION_FAILED,
                           KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED})
_TIMED_OUT = frozenset({KafkaError._TIMED_OUT, KafkaError.REQUEST_TIMED_OUT, KafkaError._TIMED_OUT_QUEUE})
_UNAVAILABLE = frozenset({KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN, KafkaError._RESOLVE,
                          KafkaError.BROKER_NOT_AVAILABLE, KafkaError.NETWORK_EXCEPTION})


def classify(exc: BaseException) -> str:
    """The cause of a failed poll step (librdkafka's errors, PollError, timeouts)."""
    if isinstance(exc, PollError):
        return exc.cause
    err = exc.args[0] if isinstance(exc, KafkaException) and exc.args else None
    if isinstance(err, KafkaError):
        code = err.code()
        if code in _TIMED_OUT:
            return TIMEOUT
        if code in _UNAVAILABLE:
            return BROKER_UNAVAILABLE
        if code in AUTHENTICATION:
            return AUTH
        if code in AUTHORIZATION:
            return AUTHORIZATION_DENIED
        if code == KafkaError._SSL:
            return TLS
        return kafka_cause(err.name() or str(code))
    if isinstance(exc, TimeoutError):
        return TIMEOUT
    return UNEXPECTED


def one_line(exc: BaseException) -> str:
    err = exc.args[0] if isinstance(exc, KafkaException) and exc.args else None
    if isinstance(err, KafkaError):
        return f"{err.name()}: {err.str()}"
    return str(exc).splitlines()[0] if str(exc) else type(exc).__name__


# ------------------------------------------------------------------ principals
def principal_of(props: Mapping[str, str]) -> str | None:
    """The Kafka principal the client properties authenticate as, where it follows from them:
    User:<sasl.username> for SASL/PLAIN and SCRAM. None otherwise (TLS client certificates
    map to their distinguished name by the broker's rules; Kerberos and OAuth to theirs)."""
    mechanism = (props.get("sasl.mechanism") or props.get("sasl.mechanisms") or "").upper()
    protocol = (props.get("security.protocol") or "PLAINTEXT").upper()
    if protocol.startswith("SASL") and mechanism in ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512") \
            and props.get("sasl.username"):
        return f"User:{props['sasl.username']}"
    return None



# ------------------------------------------------------------------ refused logins and handshakes
_TIMING = re.compile(r"\s*\(after \d+ms in state \w+\)")


def auth_failure_message(props: Mapping[str, str], detail: str) -> str:
    """What the page and the log say when the broker rejects the credentials. Never the
    password: only the mechanism, the user name and what the broker said."""
    mechanism = (props.get("sasl.mechanism") or props.get("sasl.mechanisms") or "GSSAPI").upper()
    detail = _TIMING.sub("", detail).strip()
    if mechanism == "GSSAPI":
        return kerberos_failure_message(props, detail)
    if mechanism == "OAUTHBEARER":
        return (f"authentication failed: the broker rejected the SASL/OAUTHBEARER token ({detail}). It refuses a "
                "token whose audience, issuer or subject claim is not what the listener expects "
                "(sasl.oauthbearer.expected.audience, .expected.issuer, .sub.claim.name), whose signature it "
                "cannot verify (sasl.oauthbearer.jwks.endpoint.url), or that ran out before the client took a new "
                "one (the clocks, sasl.oauthbearer.clock.skew.seconds)")
    user = props.get("sasl.username")
    who = f" of user {user!r}" if user else ""
    hint = {"PLAIN": "PLAIN users are those of the listener's JAAS configuration on the broker",
            "SCRAM-SHA-256": "SCRAM users exist per mechanism: kafka-configs.sh --describe "
                             f"--entity-type users --entity-name {user or '<user>'} shows them",
            "SCRAM-SHA-512": "SCRAM users exist per mechanism: kafka-configs.sh --describe "
                             f"--entity-type users --entity-name {user or '<user>'} shows them"}.get(
        mechanism, "check the mechanism's own settings")
    return (f"authentication failed: the broker rejected the SASL/{mechanism} credentials{who} "
            f"({detail}). Check sasl.username and sasl.password in this "
            f"cluster's client settings (a ${{file:}} or ${{env:}} secret may hold an old password) and "
            f"that sasl.mechanism is one the listener enables; {hint}")


# What MIT Kerberos says, and what an operator does about it
_KERBEROS_WORDS = (
    ("clock skew too great", "clock skew against the KDC is more than it allows (its clockskew, 5 min by "
                             "default): set the clocks right (NTP) on the exporter's host"),
    ("cannot contact any kdc", "no KDC answers: check the realm's kdc entries in krb5.conf (KRB5_CONFIG) "
                               "and that the KDC is up and reachable"),
    ("preauthentication failed", "the KDC refused the keytab's key: the principal's key changed since the "
                                 "keytab was made (a new kvno); export a new keytab"),
    ("key version", "the keytab holds another version of the principal's key: export a new keytab"),
    ("not found in kerberos database", "the KDC does not know the principal (sasl.kerberos.principal), or the "
                                       "broker's service principal (sasl.kerberos.service.name/host)"),
    ("ticket expired", "the ticket expired and none could be had from the keytab: is the KDC reachable?"),
)


def kerberos_failure_message(props: Mapping[str, str], detail: str) -> str:
    """A refused or failed Kerberos login, in an operator's words where MIT's are known."""
    principal = props.get("sasl.kerberos.principal") or "(the ticket cache's)"
    lowered = detail.lower()
    advice = next((words for phrase, words in _KERBEROS_WORDS if phrase in lowered),
                  "check sasl.kerberos.principal, sasl.kerberos.keytab, krb5.conf (KRB5_CONFIG) and "
                  "sasl.kerberos.service.name (the broker's service principal)")
    return f"Kerberos login of {principal} failed: {advice} ({detail})"


def tls_failure_message(props: Mapping[str, str], detail: str) -> str:
    ca = props.get("ssl.ca.location")
    where = f"ssl.ca.location ({ca})" if ca else "ssl.ca.location (not set: the system CAs are used)"
    return (f"TLS handshake failed ({_TIMING.sub('', detail).strip()}). Check {where} holds the CA that "
            "signed the broker's certificate, that the certificate names the host in bootstrap_servers "
            "(ssl.endpoint.identification.algorithm), and for client certificates ssl.certificate.location, "
            "ssl.key.location and ssl.key.password")


# ------------------------------------------------------------------ kafka-python
# kafka-python is imported inside these functions: the tap and the serving side import this
# module and never need kafka-python loaded.
def cause_of_code(code: int) -> str:
    """The cause of a Kafka protocol error code, named as `classify` names librdkafka's."""
    from kafka import errors as E

    err = E.for_code(code)
    if code == E.RequestTimedOutError.errno:
        return TIMEOUT
    if code in (E.BrokerNotAvailableError.errno, E.NetworkExceptionError.errno):
        return BROKER_UNAVAILABLE
    if code == E.SaslAuthenticationFailedError.errno:
        return AUTH
    if issubclass(err, E.AuthorizationError):
        return AUTHORIZATION_DENIED
    name = getattr(err, "message", None)
    return kafka_cause(name if isinstance(name, str) and name else f"error_{code}")


def cause_of_exception(exc: BaseException) -> str:
    """The cause of a failed request sent through kafka-python."""
    from kafka import errors as E

    if isinstance(exc, PollError):
        return exc.cause
    if isinstance(exc, ssl.SSLError):
        return TLS
    if type(exc).__module__.partition(".")[0] == "gssapi":   # kafka-python's GSSAPI login failed (GSSError)
        return AUTH
    if isinstance(exc, (E.KafkaTimeoutError, TimeoutError)):
        return TIMEOUT
    if isinstance(exc, E.BrokerResponseError) and isinstance(getattr(exc, "errno", None), int):
        return cause_of_code(exc.errno)
    if isinstance(exc, (E.KafkaConnectionError, E.NodeNotReadyError, E.UnknownBrokerIdError, ConnectionError)):
        return BROKER_UNAVAILABLE
    return UNEXPECTED
