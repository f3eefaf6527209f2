"""kafka-python as txnwatch runs it (kafka/kafka_python.py, deliver_answers_read_with_eof):
what one socket read returns together with the peer's close reaches the protocol, and a
task that answer wakes ends the connection with its own error before the close's "socket
disconnected" does (a broker refusing a login answers and closes at once). On a socketpair
and kafka-python's own IO loop and transport."""

from __future__ import annotations

import socket

from kafka import errors as E
from kafka.future import Future
from kafka.net.selector import NetworkSelector
from kafka.net.transport import KafkaTCPTransport

from txnwatch.kafka.kafka_python import deliver_answers_read_with_eof

REFUSAL = b'{"status":"invalid_token"}'


class Protocol:
    """KafkaConnection's side of a transport: answers resolve a future a task awaits."""

    _sensors = None

    def __init__(self) -> None:
        self.events: list[tuple[str, object]] = []
        self.answer = Future()

    def data_received(self, data: bytes) -> None:
        self.events.append(("data", data))
        if data and not self.answer.is_done:
            self.answer.success(data)

    def connection_lost(self, exc) -> None:
        self.events.append(("lost", exc))


def read_then_closed(awaiting: bool) -> list[tuple[str, object]]:
    """The protocol's events after the peer sent REFUSAL and closed before the first read;
    `awaiting`: a task waits for the answer and aborts with the error it names (as
    KafkaConnection._sasl_authenticate raises the broker's refusal)."""
    deliver_answers_read_with_eof()
    net = NetworkSelector()
    ours, theirs = socket.socketpair()
    ours.setblocking(False)
    transport = KafkaTCPTransport(net, ours)
    proto = Protocol()
    transport.set_protocol(proto)
    if awaiting:
        async def exchange() -> None:
            answer = await proto.answer
            transport.abort(E.SaslAuthenticationFailedError(answer.decode()))
        net.call_soon(exchange)
        net.poll(timeout_ms=0)           # the task waits on the answer
    theirs.sendall(REFUSAL)
    theirs.close()                       # the close arrives with the answer: one read gets both
    transport.resume_reading()
    for _ in range(50):
        if any(kind == "lost" for kind, _ in proto.events):
            break
        net.poll(timeout_ms=20)
    net.close()
    return proto.events


def test_an_answer_read_with_the_close_reaches_the_protocol_before_the_close():
    events = read_then_closed(awaiting=False)
    assert [kind for kind, _ in events] == ["data", "lost"]
    assert events[0][1] == REFUSAL
    assert isinstance(events[1][1], E.KafkaConnectionError) and "socket disconnected" in str(events[1][1])


def test_the_task_the_answer_woke_closes_with_its_own_error():
    events = read_then_closed(awaiting=True)
    assert [kind for kind, _ in events] == ["data", "lost"]
    lost = events[1][1]
    assert isinstance(lost, E.SaslAuthenticationFailedError) and REFUSAL.decode() in str(lost)
