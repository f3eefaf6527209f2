"""Metadata (api key 3) for every topic, encoded and decoded here.

librdkafka's metadata reaches Python as a TopicMetadata and a PartitionMetadata per
partition, with lists of replicas and ISR: about 5 us of CPU per partition, the largest
single cost of a poll of a big cluster once offsets were batched. A poll needs little of
it: each selected topic's partition count and leader per partition, the partitions that are
offline or under-replicated, and __transaction_state's replicas. So this module

* asks for all topics with one request body encoded once (versions 9 to 13: the flexible
  ones, which every supported broker speaks: Kafka 3.7 to 4.x offer up to v12 or v13);
* reads each topic's partitions with one `struct.iter_unpack` when they all have the same
  shape (replica, ISR and offline-replica counts, no tagged fields): the healthy case,
  checked over the whole topic with strided slices of the answer's bytes; other topics
  (an ISR that shrank, a replica offline) are read field by field;
* keeps only what the poll uses: `TopicMetadata` per topic, with the replicas and ISR of
  the partitions that are degraded (and of every partition of the topics in `full`).

Pure: no I/O; the transport is kafka_python.KafkaPythonTransport.
"""

from __future__ import annotations

import struct
from collections.abc import Collection
from dataclasses import dataclass
from functools import partial
from typing import NamedTuple

from .wire import I16, I32, Reader, common_version

API_KEY = 3
MIN_VERSION, MAX_VERSION = 9, 13      # 9: the first flexible version; 13: the newest 4.x speaks
TOPIC_ID_FROM = 10                    # a 16-byte topic id after the name
CLUSTER_OPS_UNTIL = 10                # Include/ClusterAuthorizedOperations: v8 to v10
TOP_LEVEL_ERROR_FROM = 13

# partition head: error code, index, leader, leader epoch
_HEAD = struct.Struct(">hiii")
# a uniform partition record per (replica count, offline count)
_SHAPES: dict[tuple[int, int], struct.Struct] = {}


@dataclass(frozen=True, slots=True)
class Replicas:
    """One partition's leader, replicas and ISR (only kept where they matter)."""

    partition: int
    leader: int                  # -1: no leader
    replicas: tuple[int, ...]
    isr: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class TopicMetadata:
    name: str
    error_code: int
    leaders: tuple[int, ...]                # leader of each partition by index (-1: none)
    degraded: tuple[Replicas, ...]          # no leader, or an ISR smaller than the replicas
    replicas: tuple[Replicas, ...] | None   # every partition's, for the topics asked `full`


class Endpoint(NamedTuple):
    """Where a live broker listens, as the cluster advertises it."""
    node_id: int
    host: str
    port: int


@dataclass(frozen=True, slots=True)
class Answer:
    throttle_time_ms: int
    brokers: tuple[int, ...]                # live broker ids, sorted
    controller: int
    topics: dict[str, TopicMetadata]
    error_code: int = 0                     # v13+: an error for the whole request
    endpoints: tuple[Endpoint, ...] = ()    # the live brokers' host and port, by id


def choose_version(broker_range: tuple[int, int] | None) -> int:
    """The highest Metadata version both this module and the broker speak."""
    return common_version("Metadata", broker_range, (MIN_VERSION, MAX_VERSION))


def encode_request(version: int) -> bytes:
    """Every topic (a null topic array), no topic auto-created, no authorized operations."""
    if not MIN_VERSION <= version <= MAX_VERSION:
        raise ValueError(f"Metadata v{version}: txnwatch speaks v{MIN_VERSION}-{MAX_VERSION}")
    out = bytearray(b"\x00")                  # Topics: null (compact: 0) -> all topics
    out += b"\x00"                            # AllowAutoTopicCreation: false
    if version <= CLUSTER_OPS_UNTIL:
        out += b"\x00"                        # IncludeClusterAuthorizedOperations: false
    out += b"\x00"                            # IncludeTopicAuthorizedOperations: false
    out += b"\x00"                            # no tagged fields
    return bytes(out)


def decoder(full: Collection[str] = ()):
    """decode(version, body) for RawRequest, keeping every partition's replicas for `full`."""
    return partial(decode_response, full=frozenset(full))


def decode_response(version: int, body: bytes | memoryview, full: Collection[str] = ()) -> Answer:
    """A Metadata answer's body (after the response header)."""
    r = Reader("Metadata", body)
    throttle = r.fixed(I32, "ThrottleTimeMs")[0]
    endpoints = []
    for _ in range(r.count(True, "the broker count")):
        node = r.fixed(I32, "a broker's NodeId")[0]
        host = r.string(True, "a broker's host")
        endpoints.append(Endpoint(node, host, r.fixed(I32, "a broker's port")[0]))
        r.string(True, "a broker's rack", nullable=True)
        r.skip_tags("a broker's tagged fields")
    r.string(True, "the ClusterId", nullable=True)
    controller = r.fixed(I32, "the ControllerId")[0]
    topics: dict[str, TopicMetadata] = {}
    for _ in range(r.count(True, "the topic count")):
        error = r.fixed(I16, "a topic's ErrorCode")[0]
        name = r.string(True, "a topic name", nullable=True)
        if version >= TOPIC_ID_FROM:
            r.need(16, f"the TopicId of {name}")
            r.pos += 16
        r.need(1, f"IsInternal of {name}")
        r.pos += 1
        n = r.count(True, f"the partition count of {name}")
        keep_all = name in full
        leaders, degraded, rows = _partitions(r, n, name, keep_all)
        r.fixed(I32, f"TopicAuthorizedOperations of {name}")
        r.skip_tags(f"the tagged fields of {name}")
        if name is not None:
            topics[name] = TopicMetadata(name, error, leaders, degraded, rows if keep_all else None)
    if version <= CLUSTER_OPS_UNTIL:
        r.fixed(I32, "ClusterAuthorizedOperations")
    top_error = r.fixed(I16, "the answer's ErrorCode")[0] if version >= TOP_LEVEL_ERROR_FROM else 0
    r.skip_tags("the answer's tagged fields")
    r.end()
    endpoints.sort()
    return Answer(throttle, tuple(e.node_id for e in endpoints), controller, topics, top_error, tuple(endpoints))


def _partitions(r: Reader, n: int, topic: str | None, keep_all: bool,
                ) -> tuple[tuple[int, ...], tuple[Replicas, ...], tuple[Replicas, ...]]:
    """(leader by index, degraded partitions, every partition's replicas if `keep_all`)."""
    uniform = None if keep_all else _uniform(r, n)
    if uniform is not None:
        rows, nr = uniform
        by_index = [-1] * n
        degraded = []
        for row in rows:
            p, leader = row[1], row[2]
            if 0 <= p < n:
                by_index[p] = leader
            if leader < 0:
                degraded.append(_from_row(row, nr))
        return tuple(by_index), tuple(degraded), ()
    # field by field: partitions of unlike shapes (a shrunk ISR, an offline replica)
    by_index = [-1] * n
    degraded, every = [], []
    for _ in range(n):
        _err, p, leader, _epoch = r.fixed(_HEAD, f"a partition of {topic}")
        replicas = _int_array(r, f"the replicas of {topic}[{p}]")
        isr = _int_array(r, f"the ISR of {topic}[{p}]")
        _int_array(r, f"the offline replicas of {topic}[{p}]")
        r.skip_tags(f"the tagged fields of {topic}[{p}]")
        if 0 <= p < n:
            by_index[p] = leader
        rep = Replicas(p, leader, replicas, isr)
        if leader < 0 or len(isr) < len(replicas):
            degraded.append(rep)
        if keep_all:
            every.append(rep)
    return tuple(by_index), tuple(degraded), tuple(sorted(every, key=lambda x: x.partition))


def _uniform(r: Reader, n: int) -> tuple[list[tuple], int] | None:
    """(rows, replica count): all `n` partitions at once when they share the first one's shape (its replica, ISR
    and offline counts, all single-byte, ISR = replicas, no tagged fields); else None, the
    reader left where it was."""
    if n == 0:
        return [], 0
    buf, pos = r.buf, r.pos
    try:
        nr = buf[pos + 14] - 1
        ni = buf[pos + 15 + 4 * nr] - 1
        no = buf[pos + 16 + 4 * nr + 4 * ni] - 1
    except IndexError:
        return None
    if not (0 <= nr < 127 and ni == nr and 0 <= no < 127):
        return None
    size = 18 + 4 * (nr + ni + no)        # 14 + three counts + the tag byte
    end = pos + size * n
    if end > len(buf):
        return None
    block = bytes(buf[pos:end])
    marks = ((14, nr + 1), (15 + 4 * nr, ni + 1), (16 + 4 * (nr + ni), no + 1), (size - 1, 0))
    for offset, value in marks:
        if block[offset::size] != bytes((value,)) * n:
            return None
    rec = _SHAPES.get((nr, no))
    if rec is None:
        rec = _SHAPES[(nr, no)] = struct.Struct(f">hiiiB{nr}iB{ni}iB{no}iB")
    r.pos = end
    return list(rec.iter_unpack(block)), nr


def _from_row(row: tuple, nr: int) -> Replicas:
    """A uniform row: head, replica count, replicas, ISR count, ISR (as many), offline..."""
    replicas = tuple(row[5:5 + nr])
    isr = tuple(row[6 + nr:6 + 2 * nr])
    return Replicas(row[1], row[2], replicas, isr)


def _int_array(r: Reader, what: str) -> tuple[int, ...]:
    n = r.count(True, what)
    if n == 0:
        return ()
    r.need(4 * n, what)
    values = struct.unpack_from(f">{n}i", r.buf, r.pos)
    r.pos += 4 * n
    return values
