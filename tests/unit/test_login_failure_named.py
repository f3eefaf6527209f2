"""A failing login is cause auth with its reason, whichever client and request run into it
first: kafka-python's GSSAPI error or the broker's SASL refusal on a request (kafka_python.py),
all groups of a batched fetch failing so (group_offsets.py), and a librdkafka request that only
timed out while librdkafka reported the refused login (admin.py named_failure, served then).
With the KDC out past the tickets' end, the poll that fails first never reads as a timeout or
an unexpected error."""

from __future__ import annotations

from confluent_kafka import KafkaError, KafkaException

from txnwatch.kafka.admin import KafkaIO
from txnwatch.kafka.errors import PollError, cause_of_exception, classify
from txnwatch.kafka.group_offsets import BatchedGroupOffsets
from txnwatch.kafka.kafka_python import KafkaPythonTransport

PRINCIPAL = "txnwatch@EX.COM"
PROPS = {"bootstrap.servers": "127.0.0.1:9", "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "GSSAPI",
         "sasl.kerberos.keytab": "/etc/unit.keytab", "sasl.kerberos.principal": PRINCIPAL}
WORDS = f"Kerberos login of {PRINCIPAL} failed: the ticket expired and none could be had from the keytab"


class GSSError(Exception):
    """python-gssapi's, as kafka-python's GSSAPI mechanism raises it (it is told by its module)."""


GSSError.__module__ = "gssapi.raw.misc"
EXPIRED = GSSError("Major (851968): Unspecified GSS failure.  Minor code may provide more information, "
                   "Minor (2529638944): Ticket expired")


def kafka_python_transport(answers) -> KafkaPythonTransport:
    """KafkaPythonTransport.send's naming of answers, without a kafka-python client."""
    t = object.__new__(KafkaPythonTransport)
    t._props = PROPS
    t.named = [t._login_named(a) for a in answers]
    return t


def test_kafka_pythons_gssapi_error_is_cause_auth():
    assert cause_of_exception(EXPIRED) == "auth"


def test_a_request_failed_at_the_login_is_named_by_it():
    t = kafka_python_transport([EXPIRED, TimeoutError("t"), "an answer"])
    named, timeout, answer = t.named
    assert isinstance(named, PollError) and named.cause == "auth"
    assert str(named).startswith(WORDS) and "Ticket expired" in str(named)
    assert (type(timeout), answer) == (TimeoutError, "an answer")


class Refusing:
    """A transport on which every request fails at the login."""

    def register_node(self, node) -> None:
        pass

    def send(self, calls, deadline):
        t = kafka_python_transport([EXPIRED] * len(calls))
        return t.named


def test_all_groups_failing_at_the_login_say_so_in_its_words():
    fetcher = BatchedGroupOffsets(Refusing(), max_rounds=2, backoff=0, sleep=lambda _s: None)
    try:
        fetcher.fetch(["g1", "g2"], deadline=float("inf"))
    except PollError as exc:
        assert exc.cause == "auth" and WORDS in str(exc), str(exc)
    else:
        raise AssertionError("the fetch did not fail")


class Admin:
    def __init__(self, io: KafkaIO, reports: list[KafkaError]) -> None:
        self.io, self.reports = io, reports

    def poll(self, _timeout) -> int:      # serves error_cb, as librdkafka's poll does
        for err in self.reports:
            self.io._on_client_error(err)
        self.reports = []
        return 0


def io_with(reports: list[KafkaError]) -> KafkaIO:
    io = KafkaIO(PROPS, 5.0)
    io._admin = Admin(io, reports)
    return io


REFUSED = KafkaError(KafkaError._AUTHENTICATION, "sasl_plaintext://127.0.0.1:9/1: Failed to initialize SASL "
                     "authentication: GSSAPI Error: Unspecified GSS failure (Ticket expired)")
TIMED_OUT = PollError("timeout", "Timed out: the poll did not finish within poll_timeout_seconds (5s)")


def test_a_timeout_while_librdkafka_reported_the_refused_login_is_that():
    named = io_with([REFUSED]).named_failure(TIMED_OUT)     # reported during the wait: served now
    assert classify(named) == "auth" and str(named).startswith(WORDS)
    down = KafkaException(KafkaError(KafkaError._TRANSPORT, "Failed to get metadata"))
    assert classify(io_with([REFUSED]).named_failure(down)) == "auth"


def test_other_failures_and_no_report_leave_the_failure_as_it_is():
    assert io_with([]).named_failure(TIMED_OUT) is TIMED_OUT
    denied = PollError("authorization", "ACL")
    assert io_with([REFUSED]).named_failure(denied) is denied
    no_client = KafkaIO(PROPS, 5.0)                         # never made: not made now either
    assert no_client.named_failure(TIMED_OUT) is TIMED_OUT and no_client._admin is None
