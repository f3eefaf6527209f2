"""Kafka requests no client library would send, over a plain socket, encoded and decoded by
kafka-python's protocol classes: the harness's hanging transactions and epoch loops."""

from __future__ import annotations

import socket
import struct
import time

from kafka.protocol.metadata import FindCoordinatorRequest, FindCoordinatorResponse

CLIENT_ID = "txnwatch-devtools-raw"


class Connection:
    """One broker connection; `call` sends a request and decodes its answer."""

    def __init__(self, host: str, port: int, timeout: float = 10.0) -> None:
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self._correlation = 0

    def call(self, request, response_cls, version: int):
        self._correlation += 1
        request.with_header(correlation_id=self._correlation, client_id=CLIENT_ID)
        self.sock.sendall(request.encode(version=version, header=True, framed=True))
        size = struct.unpack(">i", self._read(4))[0]
        return response_cls.decode(self._read(size), version=version, header=True)

    def _read(self, n: int) -> bytes:
        buf = bytearray()
        while len(buf) < n:
            chunk = self.sock.recv(n - len(buf))
            if not chunk:
                raise ConnectionError("the broker closed the connection")
            buf += chunk
        return bytes(buf)

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> Connection:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def split(hostport: str) -> tuple[str, int]:
    host, _, port = hostport.rpartition(":")
    return host, int(port)


def error_name(code: int) -> str:
    from kafka.errors import for_code

    return f"{for_code(code).__name__} ({code})"


def retry(what: str, fn, timeout: float = 30.0):
    """Call fn until it returns a result without a retriable error code (0 = done)."""
    deadline = time.monotonic() + timeout
    while True:
        result, code = fn()
        if code == 0:
            return result
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what}: {error_name(code)} after {timeout:.0f}s")
        time.sleep(0.2)


def transaction_coordinator(bootstrap: str, transactional_id: str) -> tuple[str, int]:
    """host, port of the transaction coordinator of `transactional_id`."""
    with Connection(*split(bootstrap.split(",")[0])) as first:
        def find():
            r = first.call(FindCoordinatorRequest(key=transactional_id, key_type=1), FindCoordinatorResponse, 2)
            return r, r.error_code
        coord = retry("FindCoordinator", find)
    return coord.host, coord.port


def init_producer_id_until(bootstrap: str, transactional_id: str, epoch: int,
                           transaction_timeout_ms: int = 60_000) -> tuple[int, int]:
    """InitProducerId for `transactional_id` again and again until its producer epoch is
    `epoch` (each call bumps it by one, as a new instance's initTransactions does): the fast
    way to the end of an id's epochs (32767) on a real broker, some thousand calls a second.
    Returns (producer id, epoch)."""
    from kafka.protocol.producer import InitProducerIdRequest, InitProducerIdResponse

    req = InitProducerIdRequest(transactional_id=transactional_id, transaction_timeout_ms=transaction_timeout_ms)
    with Connection(*transaction_coordinator(bootstrap, transactional_id)) as conn:
        def init():
            r = conn.call(req, InitProducerIdResponse, 1)
            return r, r.error_code

        while True:
            r = retry("InitProducerId", init)
            if r.producer_epoch >= epoch:
                return r.producer_id, r.producer_epoch
