"""Decoder for the records of `__transaction_state`, the transaction coordinator's log.

Written from the message schemas in Apache Kafka (transaction-coordinator module,
`TransactionLogKey.json` and `TransactionLogValue.json`), not from Kafka's code:

Key (not flexible, only version 0)::

    int16  version                 0 (the coordinator record type of the transaction log)
    string TransactionalId         int16 length + UTF-8 bytes

Value, version 0 (not flexible)::

    int16  version
    int64  ProducerId
    int16  ProducerEpoch
    int32  TransactionTimeoutMs
    int8   TransactionStatus
    []PartitionsSchema TransactionPartitions   int32 count, -1 = null (nullable)
        string  Topic                           int16 length + bytes
        []int32 PartitionIds                    int32 count + int32s
    int64  TransactionLastUpdateTimestampMs
    int64  TransactionStartTimestampMs

Value, version 1 (first flexible version): the same fields, but arrays and strings are
"compact" (unsigned varint of length + 1, 0 = null), every struct -- the nested
partitions struct included -- ends with a tagged-field section (uvarint count, then
per field uvarint tag, uvarint size, bytes), and the top-level section may carry
tag 0 PreviousProducerId int64 (default -1), tag 1 NextProducerId int64 (default -1),
tag 2 ClientTransactionVersion int16 (default 0). Unknown tags are skipped (their
numbers are kept in `unknown_tags`): Kafka's trunk already writes one more tagged field
(NextProducerEpoch, set in TransactionLog.valueToBytes) whose tag this decoder does not
interpret.

A null value (tombstone) means the coordinator expired the transactional id; that is
not the decoder's business (`decode_value(None)` is not allowed) -- callers check.

Every malformed input raises `TxnLogDecodeError` (never IndexError, struct.error,
UnicodeDecodeError...), with a `reason` usable as a metric label.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from enum import IntEnum

__all__ = [
    "TxnLogDecodeError", "TxnLogKey", "TxnLogValue", "TxnStatus",
    "decode_key", "decode_value", "KEY_VERSION", "VALUE_VERSIONS",
]

KEY_VERSION = 0
VALUE_VERSIONS = (0, 1)

# Reasons (metric label values of txnwatch_tap_records_skipped_total).
UNKNOWN_KEY_VERSION = "unknown_key_version"
UNKNOWN_VALUE_VERSION = "unknown_value_version"
UNKNOWN_STATUS = "unknown_status"
TRUNCATED = "truncated"
MALFORMED = "malformed"


class TxnLogDecodeError(ValueError):
    """A record of __transaction_state that cannot be decoded; `reason` is a short label."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(f"{reason}: {message}")
        self.reason = reason


class TxnStatus(IntEnum):
    """TransactionStatus codes as written in the log."""

    EMPTY = 0
    ONGOING = 1
    PREPARE_COMMIT = 2
    PREPARE_ABORT = 3
    COMPLETE_COMMIT = 4
    COMPLETE_ABORT = 5
    DEAD = 6
    PREPARE_EPOCH_FENCE = 7


_STATUSES = tuple(TxnStatus)


@dataclass(frozen=True, slots=True)
class TxnLogKey:
    transactional_id: str
    version: int = 0


@dataclass(frozen=True, slots=True)
class TxnLogValue:
    version: int
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    status: TxnStatus
    # ((topic, (partition, ...)), ...) or None when the log holds a null array
    partitions: tuple[tuple[str, tuple[int, ...]], ...] | None
    last_update_ms: int
    start_ms: int
    previous_producer_id: int = -1      # v1 tag 0
    next_producer_id: int = -1          # v1 tag 1
    client_transaction_version: int = 0  # v1 tag 2
    unknown_tags: tuple[int, ...] = ()  # tags skipped (v1), for diagnostics


_H = struct.Struct(">h")
_I = struct.Struct(">i")
_Q = struct.Struct(">q")
_HEAD = struct.Struct(">hqhib")      # version, producer id, epoch, timeout, status
_TAIL = struct.Struct(">qq")         # last update, start
_HEAD_SIZE = _HEAD.size
_TAIL_SIZE = _TAIL.size


def _truncated(what: str, need: int, pos: int, size: int) -> TxnLogDecodeError:
    return TxnLogDecodeError(TRUNCATED, f"{what}: need {need} byte(s) at offset {pos}, only {size - pos} left")


def decode_key(data: bytes | None) -> TxnLogKey:
    """Decode a record key. Raises TxnLogDecodeError."""
    if data is None:
        raise TxnLogDecodeError(MALFORMED, "record without a key")
    size = len(data)
    if size < 2:
        raise _truncated("key version", 2, 0, size)
    version = _H.unpack_from(data, 0)[0]
    if version != KEY_VERSION:
        raise TxnLogDecodeError(UNKNOWN_KEY_VERSION,
                                f"key version {version} (this decoder knows {KEY_VERSION})")
    if size < 4:
        raise _truncated("transactional id length", 2, 2, size)
    n = _H.unpack_from(data, 2)[0]
    if n < 0:
        raise TxnLogDecodeError(MALFORMED, f"transactional id length {n}")
    if 4 + n > size:
        raise _truncated("transactional id", n, 4, size)
    try:
        tid = data[4:4 + n].decode("utf-8")
    except UnicodeDecodeError as exc:
        raise TxnLogDecodeError(MALFORMED, f"transactional id is not UTF-8 ({exc.reason})") from None
    return TxnLogKey(tid, version)


def _uvarint(data: bytes, pos: int, size: int) -> tuple[int, int]:
    """Unsigned varint (at most 5 bytes, 32 bits) -> (value, new position)."""
    result = 0
    shift = 0
    while True:
        if pos >= size:
            raise _truncated("varint", 1, pos, size)
        b = data[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7
        if shift >= 35:
            raise TxnLogDecodeError(MALFORMED, f"varint longer than 5 bytes ending at offset {pos}")


def _skip_tags(data: bytes, pos: int, size: int) -> tuple[int, tuple[int, ...]]:
    """Skip a tagged-field section of a nested struct (no known tags there)."""
    count, pos = _uvarint(data, pos, size)
    tags: list[int] = []
    for _ in range(count):
        tag, pos = _uvarint(data, pos, size)
        n, pos = _uvarint(data, pos, size)
        if pos + n > size:
            raise _truncated(f"tagged field {tag}", n, pos, size)
        pos += n
        tags.append(tag)
    return pos, tuple(tags)


def _status(code: int) -> TxnStatus:
    if 0 <= code < len(_STATUSES):
        return _STATUSES[code]
    raise TxnLogDecodeError(UNKNOWN_STATUS, f"transaction status {code}")


def _utf8(raw: bytes, what: str) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise TxnLogDecodeError(MALFORMED, f"{what} is not UTF-8 ({exc.reason})") from None


def decode_value(data: bytes) -> TxnLogValue:
    """Decode a non-null record value (v0 or v1). Raises TxnLogDecodeError."""
    if data is None:
        raise TxnLogDecodeError(MALFORMED, "null value passed to decode_value (a tombstone)")
    size = len(data)
    if size < 2:
        raise _truncated("value version", 2, 0, size)
    version = _H.unpack_from(data, 0)[0]
    if version == 0:
        return _decode_v0(data, size)
    if version == 1:
        return _decode_v1(data, size)
    raise TxnLogDecodeError(UNKNOWN_VALUE_VERSION,
                            f"value version {version} (this decoder knows {VALUE_VERSIONS})")


def _decode_v0(data: bytes, size: int) -> TxnLogValue:
    if size < _HEAD_SIZE:
        raise _truncated("value header", _HEAD_SIZE, 0, size)
    _, pid, epoch, timeout, status = _HEAD.unpack_from(data, 0)
    pos = _HEAD_SIZE
    if pos + 4 > size:
        raise _truncated("partitions count", 4, pos, size)
    count = _I.unpack_from(data, pos)[0]
    pos += 4
    partitions: tuple | None
    if count == -1:
        partitions = None
    elif count < -1:
        raise TxnLogDecodeError(MALFORMED, f"partitions count {count}")
    else:
        # each entry needs at least 6 bytes: guards against absurd counts
        if pos + 6 * count > size:
            raise _truncated("partitions", 6 * count, pos, size)
        items = []
        for _ in range(count):
            if pos + 2 > size:
                raise _truncated("topic length", 2, pos, size)
            n = _H.unpack_from(data, pos)[0]
            pos += 2
            if n < 0:
                raise TxnLogDecodeError(MALFORMED, f"topic length {n} (topic is not nullable)")
            if pos + n > size:
                raise _truncated("topic", n, pos, size)
            topic = _utf8(data[pos:pos + n], "topic")
            pos += n
            if pos + 4 > size:
                raise _truncated("partition ids count", 4, pos, size)
            m = _I.unpack_from(data, pos)[0]
            pos += 4
            if m < 0:
                raise TxnLogDecodeError(MALFORMED, f"partition ids count {m} (not nullable)")
            if pos + 4 * m > size:
                raise _truncated("partition ids", 4 * m, pos, size)
            ids = struct.unpack_from(f">{m}i", data, pos)
            pos += 4 * m
            items.append((topic, ids))
        partitions = tuple(items)
    if pos + _TAIL_SIZE > size:
        raise _truncated("timestamps", _TAIL_SIZE, pos, size)
    last_update, start = _TAIL.unpack_from(data, pos)
    return TxnLogValue(0, pid, epoch, timeout, _status(status), partitions, last_update, start)


def _decode_v1(data: bytes, size: int) -> TxnLogValue:
    if size < _HEAD_SIZE:
        raise _truncated("value header", _HEAD_SIZE, 0, size)
    _, pid, epoch, timeout, status = _HEAD.unpack_from(data, 0)
    pos = _HEAD_SIZE
    count, pos = _uvarint(data, pos, size)
    partitions: tuple | None
    unknown: list[int] = []
    if count == 0:
        partitions = None
    else:
        count -= 1
        # each entry needs at least 3 bytes (topic length, ids length, tags count)
        if pos + 3 * count > size:
            raise _truncated("partitions", 3 * count, pos, size)
        items = []
        for _ in range(count):
            n, pos = _uvarint(data, pos, size)
            if n == 0:
                raise TxnLogDecodeError(MALFORMED, "null topic (topic is not nullable)")
            n -= 1
            if pos + n > size:
                raise _truncated("topic", n, pos, size)
            topic = _utf8(data[pos:pos + n], "topic")
            pos += n
            m, pos = _uvarint(data, pos, size)
            if m == 0:
                raise TxnLogDecodeError(MALFORMED, "null partition ids (not nullable)")
            m -= 1
            if pos + 4 * m > size:
                raise _truncated("partition ids", 4 * m, pos, size)
            ids = struct.unpack_from(f">{m}i", data, pos)
            pos += 4 * m
            pos, tags = _skip_tags(data, pos, size)
            unknown.extend(tags)
            items.append((topic, ids))
        partitions = tuple(items)
    if pos + _TAIL_SIZE > size:
        raise _truncated("timestamps", _TAIL_SIZE, pos, size)
    last_update, start = _TAIL.unpack_from(data, pos)
    pos += _TAIL_SIZE
    prev_pid = next_pid = -1
    ctv = 0
    ntags, pos = _uvarint(data, pos, size)
    for _ in range(ntags):
        tag, pos = _uvarint(data, pos, size)
        n, pos = _uvarint(data, pos, size)
        if pos + n > size:
            raise _truncated(f"tagged field {tag}", n, pos, size)
        if tag == 0 or tag == 1:
            if n != 8:
                raise TxnLogDecodeError(MALFORMED, f"tagged field {tag} (int64) has {n} bytes")
            v = _Q.unpack_from(data, pos)[0]
            if tag == 0:
                prev_pid = v
            else:
                next_pid = v
        elif tag == 2:
            if n != 2:
                raise TxnLogDecodeError(MALFORMED, f"tagged field 2 (int16) has {n} bytes")
            ctv = _H.unpack_from(data, pos)[0]
        else:
            unknown.append(tag)
        pos += n
    return TxnLogValue(1, pid, epoch, timeout, _status(status), partitions, last_update, start,
                       prev_pid, next_pid, ctv, tuple(unknown))
