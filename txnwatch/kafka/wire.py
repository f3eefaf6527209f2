"""Kafka's wire format, the little txnwatch encodes and decodes itself: varints,
strings and arrays in both the classic and the flexible encoding, a bounds-checked reader
whose errors name where an answer ends, and RawRequest, a request of pre-encoded bytes that
kafka-python's connections send as they send their own (kafka_python.KafkaPythonTransport).
Pure: imports nothing of kafka-python; list_offsets.py and offset_fetch.py build on it."""

from __future__ import annotations

import struct
from collections.abc import Callable
from types import SimpleNamespace

from .errors import BatchedUnsupported

I8, I16, I32 = struct.Struct(">b"), struct.Struct(">h"), struct.Struct(">i")


class ProtocolError(ValueError):
    """An answer txnwatch cannot read: names the API, the offset and what was expected."""


# ------------------------------------------------------------------ versions
def common_version(api: str, broker_range: tuple[int, int] | None, ours: tuple[int, int]) -> int:
    """The highest version of `api` both txnwatch (`ours`: lowest, highest) and the broker
    speak; BatchedUnsupported when none (a broker too old, or without `api` in ApiVersions)."""
    if broker_range is None:
        raise BatchedUnsupported(f"the broker does not list {api} in ApiVersions")
    low, high = max(ours[0], int(broker_range[0])), min(ours[1], int(broker_range[1]))
    if low > high:
        raise BatchedUnsupported(f"the broker speaks {api} v{broker_range[0]}-{broker_range[1]}, "
                                 f"txnwatch v{ours[0]}-{ours[1]}")
    return high


# ------------------------------------------------------------------ encoding
def uvarint(n: int) -> bytes:
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def string(s: str, flexible: bool) -> bytes:
    raw = s.encode()
    return (uvarint(len(raw) + 1) if flexible else I16.pack(len(raw))) + raw


def count(n: int, flexible: bool) -> bytes:
    """An array's length (-1: null)."""
    return uvarint(n + 1) if flexible else I32.pack(n)


# ------------------------------------------------------------------ decoding
class Reader:
    """A bounds-checked cursor over an answer's body; `api` names it in errors."""

    __slots__ = ("api", "buf", "pos")

    def __init__(self, api: str, buf: bytes | memoryview, pos: int = 0) -> None:
        self.api, self.buf, self.pos = api, buf, pos

    def fail(self, why: str) -> ProtocolError:
        return ProtocolError(f"{self.api} answer: {why}")

    def need(self, n: int, what: str) -> None:
        if self.pos + n > len(self.buf):
            raise ProtocolError(f"{self.api} answer ends at byte {len(self.buf)} inside {what} "
                                f"(at byte {self.pos}, {n} more expected)")

    def fixed(self, s: struct.Struct, what: str):
        self.need(s.size, what)
        v = s.unpack_from(self.buf, self.pos)
        self.pos += s.size
        return v

    def uvarint(self, what: str) -> int:
        shift = value = 0
        while True:
            self.need(1, what)
            b = self.buf[self.pos]
            self.pos += 1
            value |= (b & 0x7F) << shift
            if not b & 0x80:
                return value
            shift += 7
            if shift > 35:
                raise self.fail(f"a varint longer than 5 bytes in {what}")

    def count(self, flexible: bool, what: str, nullable: bool = False) -> int:
        """An array's length; -1 for null where `nullable`."""
        n = self.uvarint(what) - 1 if flexible else self.fixed(I32, what)[0]
        if n < 0 and not (nullable and n == -1):
            raise self.fail(f"null or negative {what}")
        return n

    def string(self, flexible: bool, what: str, nullable: bool = False) -> str | None:
        n = self.uvarint(what) - 1 if flexible else self.fixed(I16, what)[0]
        if n < 0:
            if nullable and n == -1:
                return None
            raise self.fail(f"null {what}")
        self.need(n, what)
        s = bytes(self.buf[self.pos:self.pos + n]).decode("utf-8", "replace")
        self.pos += n
        return s

    def skip_tags(self, what: str) -> None:
        for _ in range(self.uvarint(what)):
            self.uvarint(what)                 # tag
            size = self.uvarint(what)
            self.need(size, what)
            self.pos += size

    def end(self) -> None:
        if self.pos != len(self.buf):
            raise self.fail(f"{len(self.buf) - self.pos} bytes left after its last field")


# ------------------------------------------------------------------ requests
class RawRequest:
    """A request whose body txnwatch encoded and whose answer it decodes itself, sent through
    kafka-python's connection as its own request classes are: the same duck type
    (API_VERSION, with_header, encode, header, expect_response), so connections, TLS, SASL,
    in-flight limits and quota throttling stay kafka-python's. The answer is whatever
    `decode(version, body)` returns for the bytes after the response header, or the
    ValueError it raised (kafka-python would log the whole frame and close the connection)."""

    def __init__(self, name: str, api_key: int, version: int, flexible: bool, body: bytes,
                 decode: Callable[[int, bytes], object]) -> None:
        self.name, self.API_KEY, self.API_VERSION = name, api_key, version
        self.flexible, self.body, self.decode = flexible, body, decode
        self.header: _RawHeader | None = None

    def expect_response(self) -> bool:
        return True

    def with_header(self, correlation_id: int = 0, client_id: str = "txnwatch") -> None:
        self.header = _RawHeader(self, correlation_id, client_id)

    def encode(self, framed: bool = True, header: bool = True) -> bytes:
        parts = []
        if header:
            h = self.header
            raw_id = None if h.client_id is None else h.client_id.encode()
            parts.append(struct.pack(">hhi", self.API_KEY, self.API_VERSION, h.correlation_id) +
                         (I16.pack(-1) if raw_id is None else I16.pack(len(raw_id)) + raw_id))
            if self.flexible:
                parts.append(b"\x00")     # request header v2: no tagged fields
        parts.append(self.body)
        data = b"".join(parts)
        return I32.pack(len(data)) + data if framed else data

    def answer(self, body: bytes) -> object:
        """The decoded answer of `body` (the bytes after the response header)."""
        try:
            return self.decode(self.API_VERSION, body)
        except ValueError as exc:
            return exc

    def __repr__(self) -> str:
        return f"{self.name}(v{self.API_VERSION}, {len(self.body)} bytes)"


class _RawHeader:
    """What kafka-python's parser keeps of an in-flight request: its correlation id and the
    class that reads the answer (itself)."""

    def __init__(self, request: RawRequest, correlation_id: int, client_id: str | None) -> None:
        self.request, self.correlation_id, self.client_id = request, correlation_id, client_id
        self.api_key, self.api_version = request.API_KEY, request.API_VERSION

    def get_response_class(self):
        return self

    def parse_header(self, buf) -> SimpleNamespace:
        raw = buf.read(4)
        if len(raw) != 4:
            raise struct.error("a response shorter than its header")
        if self.request.flexible:   # response header v1: tagged fields
            for _ in range(_read_uvarint(buf)):
                _read_uvarint(buf)
                buf.read(_read_uvarint(buf))
        return SimpleNamespace(correlation_id=I32.unpack(raw)[0])

    def decode(self, buf):
        return self.request.answer(buf.read())


def _read_uvarint(buf) -> int:
    shift = value = 0
    while True:
        b = buf.read(1)
        if not b:
            raise struct.error("a varint cut short")
        value |= (b[0] & 0x7F) << shift
        if not b[0] & 0x80:
            return value
        shift += 7
