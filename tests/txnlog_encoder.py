"""Test-side encoder for __transaction_state records, written from the Kafka message
schemas (TransactionLogKey.json, TransactionLogValue.json), independently of the
decoder: byte-level helpers built from scratch, used to produce test vectors and the
records the integration tests write to a regular topic standing in for
`__transaction_state` (no client can write to the real one).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence


def int8(v: int) -> bytes:
    return int(v).to_bytes(1, "big", signed=True)


def int16(v: int) -> bytes:
    return int(v).to_bytes(2, "big", signed=True)


def int32(v: int) -> bytes:
    return int(v).to_bytes(4, "big", signed=True)


def int64(v: int) -> bytes:
    return int(v).to_bytes(8, "big", signed=True)


def uvarint(v: int) -> bytes:
    if v < 0:
        raise ValueError("unsigned varint of a negative number")
    out = bytearray()
    while True:
        b = v & 0x7F
        v >>= 7
        if v:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def string(s: str) -> bytes:                 # non-flexible string
    raw = s.encode("utf-8")
    return int16(len(raw)) + raw


def compact_string(s: str) -> bytes:         # flexible string
    raw = s.encode("utf-8")
    return uvarint(len(raw) + 1) + raw


def tagged_fields(fields: Sequence[tuple[int, bytes]] = ()) -> bytes:
    out = uvarint(len(fields))
    for tag, payload in sorted(fields):
        out += uvarint(tag) + uvarint(len(payload)) + payload
    return out


def encode_key(transactional_id: str, version: int = 0) -> bytes:
    return int16(version) + string(transactional_id)


def encode_value(*, producer_id: int, producer_epoch: int, timeout_ms: int, status: int,
                 partitions: Iterable[tuple[str, Sequence[int]]] | None,
                 last_update_ms: int, start_ms: int, version: int = 0,
                 previous_producer_id: int = -1, next_producer_id: int = -1,
                 client_transaction_version: int = 0,
                 extra_tags: Sequence[tuple[int, bytes]] = (),
                 nested_extra_tags: Sequence[tuple[int, bytes]] = ()) -> bytes:
    """Encode TransactionLogValue in `version` 0 or 1. Tagged fields (v1) are written,
    as Kafka does, only when they differ from their defaults."""
    parts = list(partitions) if partitions is not None else None
    out = int16(version) + int64(producer_id) + int16(producer_epoch) + int32(timeout_ms) + int8(status)
    if version == 0:
        if parts is None:
            out += int32(-1)
        else:
            out += int32(len(parts))
            for topic, ids in parts:
                out += string(topic) + int32(len(ids)) + b"".join(int32(i) for i in ids)
        out += int64(last_update_ms) + int64(start_ms)
        return out
    if version != 1:
        raise ValueError(f"cannot encode value version {version}")
    if parts is None:
        out += uvarint(0)
    else:
        out += uvarint(len(parts) + 1)
        for topic, ids in parts:
            out += compact_string(topic) + uvarint(len(ids) + 1) + b"".join(int32(i) for i in ids)
            out += tagged_fields(nested_extra_tags)
    out += int64(last_update_ms) + int64(start_ms)
    tags: list[tuple[int, bytes]] = []
    if previous_producer_id != -1:
        tags.append((0, int64(previous_producer_id)))
    if next_producer_id != -1:
        tags.append((1, int64(next_producer_id)))
    if client_transaction_version != 0:
        tags.append((2, int16(client_transaction_version)))
    tags.extend(extra_tags)
    out += tagged_fields(tags)
    return out


# Status codes, from the schema's documentation of TransactionStatus.
EMPTY, ONGOING, PREPARE_COMMIT, PREPARE_ABORT, COMPLETE_COMMIT, COMPLETE_ABORT, DEAD, \
    PREPARE_EPOCH_FENCE = range(8)
