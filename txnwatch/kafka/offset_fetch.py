"""OffsetFetch v8 (api key 9, KIP-709: many groups per request), encoded and decoded here.
kafka-python's schema-driven decoder builds three objects per committed partition; at 500
groups of 20 partitions that was most of the batched path's CPU. The answer is read
straight into the rows group_offsets.py needs, with one `struct.iter_unpack` per topic over
the fixed-width partition records where the commits carry no metadata (the common case),
field by field where they do. Pure (wire.py)."""

from __future__ import annotations

import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from .wire import I8, I16, I32, Reader, count, string

API_KEY = 9
VERSION = 8            # KIP-709, Kafka 3.0+; v10 names topics by id (KIP-848)
FLEXIBLE = True        # v6+

Row = tuple[str, str, int, int]   # (group, topic, partition, committed offset)

# partition answer with empty metadata (compact string of length 0: the byte 1) and no
# tagged fields: index, committed offset, leader epoch, metadata length, error, tags
_PART_PLAIN = struct.Struct(">iqiBhB")
_PART_HEAD = struct.Struct(">iqi")     # the fixed start of a partition answer


def encode_request(groups: Sequence[str], require_stable: bool = False) -> bytes:
    """The request body (no header) asking every committed partition of each group."""
    out = [count(len(groups), FLEXIBLE)]
    for g in groups:
        out.append(string(g, FLEXIBLE))
        out.append(count(-1, FLEXIBLE))          # Topics null: all the group's partitions
        out.append(b"\x00")
    out.append(I8.pack(1 if require_stable else 0))
    out.append(b"\x00")
    return b"".join(out)


@dataclass
class Answer:
    """An OffsetFetch v8 answer, read into what group_offsets.parse_offset_fetch returns:
    rows with a committed offset >= 0 in blocks (one per group's topic, sorted by partition),
    {group: error code}, the groups answered, and the partitions skipped for a partition
    error. `throttle_time_ms` is read by kafka-python's connection (quota throttling)."""

    throttle_time_ms: int = 0
    blocks: list[list[Row]] = field(default_factory=list)
    errors: dict[str, int] = field(default_factory=dict)
    answered: set[str] = field(default_factory=set)
    skipped: int = 0

    @property
    def rows(self) -> list[Row]:
        return [row for block in self.blocks for row in block]


class DecodedBlocks:
    """The rows decoded from each group's topic, by the bytes they came from, kept from one
    fetch to the next (`next_fetch`): a group whose commits did not move since the last poll
    (most of a big estate's) answers with the same bytes, and gets the same row objects
    without a decode. Decoding runs in the client's I/O thread: each entry is the pure result
    of its bytes, so an answer decoded late is still right."""

    def __init__(self) -> None:
        self._last: dict[tuple[str, str], tuple[bytes, list[Row], int]] = {}
        self._now: dict[tuple[str, str], tuple[bytes, list[Row], int]] = {}

    def next_fetch(self) -> None:
        """A new fetch: what the last one did not see again is forgotten after this one."""
        self._last, self._now = self._now, {}

    def get(self, key: tuple[str, str], raw: bytes) -> tuple[bytes, list[Row], int] | None:
        seen = self._now.get(key) or self._last.get(key)
        if seen is None or seen[0] != raw:
            return None
        self._now[key] = seen
        return seen

    def keep(self, key: tuple[str, str], raw: bytes, rows: list[Row], skipped: int) -> None:
        self._now[key] = (raw, rows, skipped)


def decode_response(version: int, body: bytes | memoryview, keep_topic: Callable[[str], bool] | None = None,
                    blocks: DecodedBlocks | None = None) -> Answer:
    """The answer's rows; with `keep_topic`, only those of the topics it keeps: the others'
    partitions are stepped over unread (a replica's share of a sharded cluster's groups).
    `blocks`: the last fetches' rows by their bytes (DecodedBlocks)."""
    if version != VERSION:
        raise ValueError(f"OffsetFetch v{version}: txnwatch reads v{VERSION} only")
    r = Reader("OffsetFetch", body)
    out = Answer(throttle_time_ms=r.fixed(I32, "ThrottleTimeMs")[0])
    for _ in range(r.count(FLEXIBLE, "the group count")):
        group = r.string(FLEXIBLE, "a group id")
        out.answered.add(group)
        found: list[list[Row]] = []
        for _ in range(r.count(FLEXIBLE, f"the topic count of group {group}")):
            topic = r.string(FLEXIBLE, f"a topic name of group {group}")
            n = r.count(FLEXIBLE, f"the partition count of {topic} in group {group}")
            if keep_topic is None or keep_topic(topic):
                out.skipped += _partitions(r, n, group, topic, found, blocks)
            else:
                _partitions(r, n, group, topic, None)
            r.skip_tags(f"the tagged fields of {topic} in group {group}")
        code = r.fixed(I16, f"the error code of group {group}")[0]
        r.skip_tags(f"the tagged fields of group {group}")
        if code:
            out.errors[group] = code
        else:
            out.blocks += found
    r.skip_tags("the answer's tagged fields")
    r.end()
    return out


def _partitions(r: Reader, n: int, group: str, topic: str, found: list[list[Row]] | None,
                blocks: DecodedBlocks | None = None) -> int:
    """Appends the committed partitions of `topic` to `found`, as one block sorted by
    partition (None: reads past them); returns those skipped for an error."""
    size = _PART_PLAIN.size * n
    if found is None and r.pos + size <= len(r.buf) and _plain(r.buf[r.pos:r.pos + size], n):
        r.pos += size
        return 0
    if r.pos + size <= len(r.buf):
        raw = bytes(r.buf[r.pos:r.pos + size])
        seen = None if blocks is None else blocks.get((group, topic), raw)
        if seen is not None:
            r.pos += size
            _add(found, seen[1])
            return seen[2]
        parts = sorted(_PART_PLAIN.iter_unpack(raw))
        if all(p[3] == 1 and p[5] == 0 for p in parts):
            r.pos += size
            skipped = sum(1 for p in parts if p[4])
            rows = [(group, topic, p[0], p[1]) for p in parts if not p[4] and p[1] >= 0]
            if blocks is not None:
                blocks.keep((group, topic), raw, rows, skipped)
            _add(found, rows)
            return skipped
    # commits with metadata (or tagged fields): field by field
    skipped = 0
    rows = []
    what = f"a partition of {topic} in group {group}"
    for _ in range(n):
        index, offset, _epoch = r.fixed(_PART_HEAD, what)
        r.string(FLEXIBLE, f"the commit metadata of {what}", nullable=True)
        code = r.fixed(I16, what)[0]
        r.skip_tags(f"the tagged fields of {what}")
        if code:
            skipped += 1
        elif offset >= 0:
            rows.append((group, topic, index, offset))
    _add(found, sorted(rows))
    return skipped


def _add(found: list[list[Row]] | None, rows: list[Row]) -> None:
    if found is not None and rows:
        found.append(rows)


def _plain(records: bytes | memoryview, n: int) -> bool:
    """Whether `n` partition answers are all of _PART_PLAIN's fixed width: each with empty
    commit metadata (length byte 1) and no tagged fields (0), checked on those bytes alone."""
    step = _PART_PLAIN.size
    return bytes(records[16::step]) == b"\x01" * n and bytes(records[19::step]) == bytes(n)
