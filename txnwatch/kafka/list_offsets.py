"""ListOffsets (api key 2) for every partition of a cluster, one request per leader and
isolation level, encoded and decoded here.

librdkafka's ListOffsets and kafka-python's both build Python objects per partition: a
Future with its Condition, a TopicPartition, a result object. At 10,000 partitions that
was 900 ms of CPU per poll in both isolation levels, most of a poll's cost. The wire format
is simple and fixed-width per partition, so this module

* encodes one request per (leader, isolation level) once and reuses its bytes while the
  leader's partitions stay the same (`RequestCache`);
* decodes an answer with one `struct.iter_unpack` per topic over the fixed-width partition
  records, without an object per partition beyond the tuple it unpacks.

Versions 4 to 11 are spoken, the highest both sides have (Kafka 3.x and 4.x offer at least
4..8; 4.0 dropped v0): 4-5 are the classic encoding, 6+ the flexible one (compact arrays and
strings, tagged fields), 10+ add TimeoutMs to the request. Pure: no I/O; the transport is
kafka_python.KafkaPythonTransport (TLS, SASL and connections stay kafka-python's).
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import NamedTuple

from .answers import PartitionOffsets
from .errors import UNEXPECTED
from .wire import I8, I32, Reader, common_version, count, string

API_KEY = 2
MIN_VERSION, MAX_VERSION = 4, 11      # 4: leader epochs; 11: the newest a 4.x broker speaks
FLEXIBLE_FROM = 6
TIMEOUT_FROM = 10
LATEST = -1                            # the Timestamp that asks for the log end (HWM or LSO)
READ_UNCOMMITTED, READ_COMMITTED = 0, 1
ISOLATION_AT = 4            # the IsolationLevel byte's place in a request body, after ReplicaId

# partition answer: index, error, timestamp, offset, leader epoch (v4+)
_PART = struct.Struct(">ihqqi")
# flexible: the same and an empty tagged-field section (a single 0 byte, skipped: _topic
# reads a topic this way only when every record's section is empty): the common case
_PART_FLEX = struct.Struct(">ihqqix")
# request partition: index, current leader epoch (-1: unknown), timestamp
_REQ_PART = struct.Struct(">iiq")


def choose_version(broker_range: tuple[int, int] | None) -> int:
    """The highest ListOffsets version both this module and the broker speak."""
    return common_version("ListOffsets", broker_range, (MIN_VERSION, MAX_VERSION))


# ------------------------------------------------------------------ encoding
def encode_request(version: int, isolation: int, topics: Sequence[tuple[str, Sequence[int]]],
                   timeout_ms: int = 30_000) -> bytes:
    """The request body (no header) asking the latest offset of each (topic, partitions)."""
    flexible = version >= FLEXIBLE_FROM
    tag = b"\x00" if flexible else b""
    out = [I32.pack(-1), I8.pack(isolation), count(len(topics), flexible)]   # ReplicaId -1: a client
    for name, partitions in topics:
        out.append(string(name, flexible))
        out.append(count(len(partitions), flexible))
        out.extend(_REQ_PART.pack(p, -1, LATEST) + tag for p in partitions)
        out.append(tag)
    if version >= TIMEOUT_FROM:
        out.append(I32.pack(timeout_ms))
    out.append(tag)
    return b"".join(out)


# ------------------------------------------------------------------ decoding
class PartitionColumns(NamedTuple):
    """A topic's answers as columns, sorted by partition: entry i of each field is the i-th
    partition's. One tuple per field, made in C from the unpacked records, where a named
    tuple per partition would cost a third more than the records themselves."""

    partition: tuple[int, ...]
    error_code: tuple[int, ...]
    timestamp: tuple[int, ...]
    offset: tuple[int, ...]
    leader_epoch: tuple[int, ...]


_NO_PARTITIONS = PartitionColumns((), (), (), (), ())


class TopicAnswer:
    """One topic's answers: (partition, error code, timestamp, offset, leader epoch) tuples,
    PartitionColumns' fields, in the broker's order. A topic of fixed-width records keeps its
    bytes (`raw`) and unpacks them on first use of `rows`: a topic whose bytes equal the last
    poll's is never unpacked (combine's cache)."""

    __slots__ = ("topic", "raw", "_rows", "_rec")

    def __init__(self, topic: str, rows: Sequence[tuple] | None = None, raw: bytes | None = None,
                 rec: struct.Struct | None = None) -> None:
        self.topic, self.raw, self._rows, self._rec = topic, raw, rows, rec

    @property
    def rows(self) -> Sequence[tuple]:
        if self._rows is None:
            self._rows = list(self._rec.iter_unpack(self.raw))
        return self._rows

    def columns(self) -> PartitionColumns:
        """The answers by field, sorted by partition (a broker answers a topic's partitions in
        its own order, a hash map's)."""
        rows = sorted(self.rows)
        return PartitionColumns._make(zip(*rows, strict=True)) if rows else _NO_PARTITIONS

    def __repr__(self) -> str:
        return f"TopicAnswer({self.topic!r}, {len(self.rows)} partitions)"


@dataclass(frozen=True, slots=True)
class Answer:
    """A decoded ListOffsets answer (`throttle_time_ms` is read by kafka-python's connection:
    a broker's quota throttling still pauses it)."""

    throttle_time_ms: int
    topics: list[TopicAnswer]


def decode_response(version: int, body: bytes | memoryview) -> Answer:
    """A ListOffsets answer's body (after the response header) as per-topic rows."""
    flexible = version >= FLEXIBLE_FROM
    r = Reader("ListOffsets", bytes(body))
    throttle = r.fixed(I32, "ThrottleTimeMs")[0]
    out: list[TopicAnswer] = []
    left = r.count(flexible, "the topic count")
    if flexible:
        left -= _common_topics(r, left, out)
    for _ in range(left):
        name = r.string(flexible, "a topic name")
        n = r.count(flexible, f"the partition count of {name}")
        out.append(_topic(r, n, flexible, name))
        if flexible:
            r.skip_tags(f"the tagged fields of {name}")
    if flexible:
        r.skip_tags("the answer's tagged fields")
    r.end()
    return Answer(throttle, out)


def _common_topics(r: Reader, n: int, out: list[TopicAnswer]) -> int:
    """Up to `n` topics of a flexible answer read in one loop while each has the common shape
    (a name and a partition count under 127, so one-byte varints; fixed-width partition
    records; no tagged fields): at 100,000 partitions a poll decodes 14,000 topics, and the
    field-by-field reads cost 2.5 us a topic. Returns how many it read; the caller reads the
    rest field by field, where every unusual or cut answer gets its error."""
    buf, pos, end = r.buf, r.pos, len(r.buf)
    size = _PART_FLEX.size
    done = 0
    while done < n and pos < end:
        name_end = pos + buf[pos]                  # compact string: 1 + its length
        if not 0 < buf[pos] < 0x80 or name_end >= end or not 0 < buf[name_end] < 0x80:
            break
        records_end = name_end + 1 + size * (buf[name_end] - 1)
        if records_end >= end or buf[records_end] != 0:
            break
        raw = buf[name_end + 1:records_end]
        if raw[size - 1::size] != bytes(buf[name_end] - 1):       # a partition's tagged fields
            break
        out.append(TopicAnswer(buf[pos + 1:name_end].decode("utf-8", "replace"), raw=raw, rec=_PART_FLEX))
        pos = records_end + 1
        done += 1
    r.pos = pos
    return done


def _topic(r: Reader, n: int, flexible: bool, topic: str) -> TopicAnswer:
    rec = _PART_FLEX if flexible else _PART
    size = rec.size * n
    if r.pos + size <= len(r.buf):
        raw = bytes(r.buf[r.pos:r.pos + size])
        # every record's tagged-field section empty (its last byte 0): fixed width throughout
        if not flexible or raw[rec.size - 1::rec.size] == bytes(n):
            r.pos += size
            return TopicAnswer(topic, raw=raw, rec=rec)
    # a partition with tagged fields (none are defined today), or a short answer: field by field
    rows = []
    for _ in range(n):
        row = r.fixed(_PART, f"a partition of {topic}")
        if flexible:
            r.skip_tags(f"the tagged fields of a partition of {topic}")
        rows.append(row)
    return TopicAnswer(topic, rows)


# ------------------------------------------------------------------ planning
@dataclass(frozen=True, slots=True)
class LeaderRequest:
    """One leader's partitions, grouped by topic, with the encoded body per isolation level."""

    leader: int
    topics: tuple[tuple[str, tuple[int, ...]], ...]
    body: bytes                          # READ_UNCOMMITTED's

    @property
    def partitions(self) -> int:
        return sum(len(ps) for _, ps in self.topics)

    @property
    def bodies(self) -> tuple[bytes, bytes]:
        """The bodies for READ_UNCOMMITTED and READ_COMMITTED. Only the one is kept: they
        differ in the isolation byte alone (17 bytes a partition each: 1.7 MB at 100,000)."""
        at = ISOLATION_AT
        return self.body, self.body[:at] + bytes((READ_COMMITTED,)) + self.body[at + 1:]


def group_by_leader(leaders: Mapping[str, Sequence[int]], wanted: Mapping[str, Iterable[int]] | None = None,
                    ) -> dict[int, list[tuple[str, list[int]]]]:
    """{leader: [(topic, partitions)]} from each topic's leader per partition index (-1: none,
    left out). `wanted` ({topic: partitions}) limits it to those partitions (None: all)."""
    out: dict[int, dict[str, list[int]]] = {}
    if wanted is None:
        for topic, by_index in leaders.items():
            for p, leader in enumerate(by_index):
                if leader >= 0:
                    out.setdefault(leader, {}).setdefault(topic, []).append(p)
    else:
        for topic, ps in wanted.items():
            by_index = leaders.get(topic, ())
            for p in ps:
                if 0 <= p < len(by_index) and by_index[p] >= 0:
                    out.setdefault(by_index[p], {}).setdefault(topic, []).append(p)
    return {leader: list(topics.items()) for leader, topics in out.items()}


class RequestCache:
    """Encoded requests per leader, re-encoded only when a leader's partitions change
    (a new topic, a partition moved) or the version does."""

    def __init__(self, max_partitions: int = 20_000) -> None:
        self.max_partitions = max_partitions   # per request: answers stay well under a MB
        self._cache: dict[tuple, tuple[LeaderRequest, ...]] = {}
        self.encoded = 0                       # requests encoded since the start (tests, bench)
        self._plan_key: tuple | None = None
        self._plan: tuple[list[LeaderRequest], list[tuple[str, int]]] = ([], [])

    def plan(self, version: int, leaders: Mapping[str, Sequence[int]],
             wanted: Mapping[str, Sequence[int]] | None, timeout_ms: int,
             ) -> tuple[list[LeaderRequest], list[tuple[str, int]]]:
        """The requests for `leaders` (topic -> leader per partition index; `wanted`, {topic:
        partitions}, limits the partitions, None: all) and the wanted partitions without a
        leader. While the leaders and the wanted partitions are the same as last time
        (compared whole, at C speed: a shard's share is a range per topic), the last plan."""
        key = (version, timeout_ms, leaders, None if wanted is None else tuple(wanted.items()))
        if key != self._plan_key:
            leaderless = [(t, p) for t, by_index in leaders.items() for p, leader in enumerate(by_index)
                          if leader < 0] if wanted is None else \
                [(t, p) for t, ps in wanted.items() for p in ps
                 if not (0 <= p < len(leaders.get(t, ()))) or leaders[t][p] < 0]
            self._plan = (self.requests(version, group_by_leader(leaders, wanted), timeout_ms), leaderless)
            self._plan_key = key
        return self._plan

    def requests(self, version: int, by_leader: Mapping[int, list[tuple[str, list[int]]]],
                 timeout_ms: int) -> list[LeaderRequest]:
        out: list[LeaderRequest] = []
        fresh: dict[tuple, tuple[LeaderRequest, ...]] = {}
        for leader, topics in sorted(by_leader.items()):
            key = (version, leader, timeout_ms, tuple((t, tuple(ps)) for t, ps in topics))
            reqs = self._cache.get(key)
            if reqs is None:
                reqs = tuple(self._encode(version, leader, chunk, timeout_ms)
                             for chunk in _chunks(key[3], self.max_partitions))
                self.encoded += len(reqs)
            fresh[key] = reqs
            out.extend(reqs)
        self._cache = fresh      # only what this poll used: leaders that moved are forgotten
        return out

    @staticmethod
    def _encode(version: int, leader: int, topics: tuple[tuple[str, tuple[int, ...]], ...],
                timeout_ms: int) -> LeaderRequest:
        return LeaderRequest(leader, topics, encode_request(version, READ_UNCOMMITTED, topics, timeout_ms))


def _chunks(topics: tuple[tuple[str, tuple[int, ...]], ...], size: int):
    """Topics split into runs of at most `size` partitions (a topic may be split)."""
    chunk: list[tuple[str, tuple[int, ...]]] = []
    n = 0
    for name, ps in topics:
        i = 0
        while i < len(ps):
            take = ps[i:i + size - n]
            chunk.append((name, take))
            n += len(take)
            i += len(take)
            if n >= size:
                yield tuple(chunk)
                chunk, n = [], 0
    if chunk:
        yield tuple(chunk)


# ------------------------------------------------------------------ answers
INVALID_OFFSET = "invalid_offset"      # kafka_partition_unavailable's cause for an answer without offsets


def combine(requests: Sequence[LeaderRequest], answers: Sequence[object],
            cause_of_code: Callable[[int], str], cause_of_exception: Callable[[BaseException], str],
            cache: dict | None = None) -> tuple[list[PartitionOffsets], dict[tuple[str, int], str]]:
    """Each leader's two answers (READ_UNCOMMITTED then READ_COMMITTED, in `requests` order)
    as PartitionOffsets, and {partition: cause} for the partitions left without both: the
    request's failure, the partition's error code, a partition missing from the answer, or
    an answer without an offset.

    `cache` (a dict the caller keeps from one poll to the next): a topic whose two answers
    came back byte for byte as last time (their digest), for the same partitions, gets last time's
    PartitionOffsets objects, unpacked and built again for nothing (an idle topic's offsets
    do not move: most of a big cluster's)."""
    out: list[PartitionOffsets] = []
    failed: dict[tuple[str, int], str] = {}
    kept: dict = {}
    last = {} if cache is None else cache
    for i, req in enumerate(requests):
        hwm_answer, lso_answer = answers[2 * i], answers[2 * i + 1]
        broken = next((a for a in (hwm_answer, lso_answer) if not isinstance(a, Answer)), None)
        if broken is not None:
            cause = cause_of_exception(broken) if isinstance(broken, BaseException) else UNEXPECTED
            failed.update(dict.fromkeys([(topic, p) for topic, ps in req.topics for p in ps], cause))
            continue
        hwm_by = {t.topic: t for t in hwm_answer.topics}
        lso_by = {t.topic: t for t in lso_answer.topics}
        for topic, ps in req.topics:
            hwt, lst = hwm_by.get(topic), lso_by.get(topic)
            built = _whole_topic(topic, ps, hwt, lst, last, kept)
            if built is None:
                _partition_by_partition(topic, ps, hwt, lst, cause_of_code, out, failed)
            else:
                out.extend(built)
    if cache is not None:
        cache.clear()
        cache.update(kept)     # only this poll's topics: a topic gone or moved is forgotten
    return out, failed


def _whole_topic(topic: str, ps: Sequence[int], hwt: TopicAnswer | None, lst: TopicAnswer | None,
                 last: dict, kept: dict) -> list[PartitionOffsets] | None:
    """The topic's offsets in one piece: last poll's objects when its two answers came back
    byte for byte as then, else built from a clean answer (and kept for the next poll);
    None when the topic must be read partition by partition."""
    if hwt is None or lst is None:
        return None
    if hwt.raw is None or lst.raw is None:      # read field by field: nothing to compare
        return _clean_offsets(topic, ps, hwt, lst)
    key = (topic, ps[0] if ps else -1)
    seen = last.get(key)
    digest = _answers_digest(hwt.raw, lst.raw)
    if seen is not None and seen[0] == digest and seen[1] == ps:
        kept[key] = seen
        return seen[2]
    built = _clean_offsets(topic, ps, hwt, lst)
    if built is not None:
        kept[key] = (digest, ps, built)
    return built


def _answers_digest(hwm_raw: bytes, lso_raw: bytes) -> bytes:
    """What identifies a topic's two answers from one poll to the next: a 16-byte BLAKE2b
    digest, kept in place of the answers (26 or 27 bytes a partition each)."""
    h = hashlib.blake2b(len(hwm_raw).to_bytes(4, "big"), digest_size=16)   # where one ends
    h.update(hwm_raw)
    h.update(lso_raw)
    return h.digest()


def _clean_offsets(topic: str, ps: Sequence[int], hwt: TopicAnswer, lst: TopicAnswer,
                   ) -> list[PartitionOffsets] | None:
    """The offsets of the common answer, built in one pass: both answers list exactly the
    partitions asked, with no error and an offset each. None for any other answer: the
    topic is read partition by partition."""
    hw, ls, asked = hwt.columns(), lst.columns(), tuple(ps)
    if not (hw.partition == ls.partition == asked and not any(hw.error_code) and not any(ls.error_code)
            and min(hw.offset, default=0) >= 0 and min(ls.offset, default=0) >= 0):
        return None
    return [PartitionOffsets(topic, p, hwm, lso if lso < hwm else hwm)
            for p, hwm, lso in zip(asked, hw.offset, ls.offset, strict=True)]


def _partition_by_partition(topic: str, ps: Sequence[int], hwt: TopicAnswer | None, lst: TopicAnswer | None,
                            cause_of_code: Callable[[int], str], out: list[PartitionOffsets],
                            failed: dict[tuple[str, int], str]) -> None:
    """Each asked partition's offsets into `out`, or why it has none into `failed`."""
    hw, ls = _by_partition(hwt), _by_partition(lst)
    for p in ps:
        if p not in hw or p not in ls:
            failed[(topic, p)] = UNEXPECTED       # the broker left it out of its answer
            continue
        (hwm_error, hwm), (lso_error, lso) = hw[p], ls[p]
        if hwm_error or lso_error:
            failed[(topic, p)] = cause_of_code(hwm_error or lso_error)
        elif hwm < 0 or lso < 0:
            failed[(topic, p)] = INVALID_OFFSET
        else:
            out.append(PartitionOffsets(topic, p, hwm, min(lso, hwm)))


def _by_partition(answer: TopicAnswer | None) -> dict[int, tuple[int, int]]:
    """{partition: (error code, offset)} of an answer (none: {})."""
    if answer is None:
        return {}
    return {partition: (error_code, offset) for partition, error_code, _, offset, _ in sorted(answer.rows)}
