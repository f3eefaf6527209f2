"""ListOffsets encoded and decoded by txnwatch (kafka/list_offsets.py), checked
against kafka-python's own schema-driven encoder for every version spoken (4 to 11), and
its planning and answer handling, without a broker (tests/integration/test_list_offsets.py
runs it against real brokers)."""

from __future__ import annotations

import struct

import pytest
from kafka.protocol.consumer.offsets import ListOffsetsRequest, ListOffsetsResponse

from txnwatch.kafka import list_offsets as lo
from txnwatch.kafka.answers import PartitionOffsets
from txnwatch.kafka.errors import BatchedUnsupported
from txnwatch.kafka.wire import ProtocolError, Reader

VERSIONS = range(lo.MIN_VERSION, lo.MAX_VERSION + 1)
_T = ListOffsetsRequest.ListOffsetsTopic
_RT = ListOffsetsResponse.ListOffsetsTopicResponse


def their_request(version: int, isolation: int, topics, timeout_ms: int) -> bytes:
    kw = dict(replica_id=-1, isolation_level=isolation,
              topics=[_T(name=t, partitions=[_T.ListOffsetsPartition(partition_index=p, current_leader_epoch=-1,
                                                                     timestamp=-1) for p in ps])
                      for t, ps in topics])
    if version >= lo.TIMEOUT_FROM:
        kw["timeout_ms"] = timeout_ms
    return ListOffsetsRequest(**kw).encode(version=version)


def their_answer(version: int, topics, throttle: int = 0) -> bytes:
    """topics: [(name, [(partition, error, offset)])]"""
    part = _RT.ListOffsetsPartitionResponse
    return ListOffsetsResponse(throttle_time_ms=throttle, topics=[
        _RT(name=t, partitions=[part(partition_index=p, error_code=e, timestamp=-1, offset=o, leader_epoch=5)
                                for p, e, o in rows]) for t, rows in topics]).encode(version=version)


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("isolation", [lo.READ_UNCOMMITTED, lo.READ_COMMITTED])
def test_requests_are_byte_for_byte_kafka_pythons(version, isolation):
    topics = [("orders", [0, 1, 7]), ("ünïcode-topic", [3]), ("empty", [])]
    assert lo.encode_request(version, isolation, topics, 4321) == their_request(version, isolation, topics, 4321)


@pytest.mark.parametrize("version", VERSIONS)
def test_answers_decode_as_kafka_python_encodes_them(version):
    topics = [("orders", [(0, 0, 10), (1, 6, -1), (2, 0, 0)]), ("b", [(5, 0, 2**40)]), ("none", [])]
    answer = lo.decode_response(version, their_answer(version, topics, throttle=250))
    assert answer.throttle_time_ms == 250
    got = [(t.topic, [(r[0], r[1], r[3], r[4]) for r in t.rows]) for t in answer.topics]
    assert got == [(t, [(p, e, o, 5) for p, e, o in rows]) for t, rows in topics]


@pytest.mark.parametrize("version", [v for v in VERSIONS if v >= lo.FLEXIBLE_FROM])
def test_common_topics_are_read_in_one_loop_and_the_unusual_ones_field_by_field(version):
    """A name of 130 bytes and a topic of 200 partitions need two-byte varints: the loop over
    the common shape stops there, the field-by-field read goes on, and every topic comes out
    as kafka-python encoded it, in order."""
    long_name = "t" * 130
    topics = [("a", [(0, 0, 1), (1, 0, 2)]), ("b", []), (long_name, [(0, 0, 3)]), ("c", [(0, 0, 4)]),
              ("many", [(p, 0, p) for p in range(200)]), ("d", [(3, 6, -1)])]
    body = their_answer(version, topics)
    answer = lo.decode_response(version, body)
    got = [(t.topic, [(r[0], r[1], r[3]) for r in t.rows]) for t in answer.topics]
    assert got == topics
    r = Reader("ListOffsets", body, 4)
    n = r.count(True, "the topic count")
    common: list = []
    assert lo._common_topics(r, n, common) == 2 and [t.topic for t in common] == ["a", "b"]


def _tagged() -> bytes:
    """A v6 answer of one topic and one partition whose partition carries a tagged field
    (none are defined today; a newer broker may add one): the slow path must skip it."""
    head = struct.pack(">i", 0) + b"\x02" + b"\x02t" + b"\x02"
    part = struct.pack(">ihqqi", 4, 0, -1, 99, 1) + b"\x01" + b"\x07" + b"\x03abc"
    return head + part + b"\x00" + b"\x00"


def test_tagged_fields_are_skipped():
    answer = lo.decode_response(6, _tagged())
    assert [(t.topic, [(r[0], r[3]) for r in t.rows]) for t in answer.topics] == [("t", [(4, 99)])]


@pytest.mark.parametrize("version", [5, 9])
def test_a_cut_answer_names_where_it_ends(version):
    body = their_answer(version, [("orders", [(0, 0, 10), (1, 0, 11)])])
    with pytest.raises(ProtocolError, match=r"ends at byte \d+ inside a partition of orders"):
        lo.decode_response(version, body[:-9])
    with pytest.raises(ProtocolError, match="bytes left after its last field"):
        lo.decode_response(version, body + b"\x00\x00")


@pytest.mark.parametrize("broker, want", [((1, 11), 11), ((0, 8), 8), ((4, 4), 4), ((1, 12), 11)])
def test_the_highest_common_version_is_spoken(broker, want):
    assert lo.choose_version(broker) == want


@pytest.mark.parametrize("broker", [None, (0, 3), (12, 13)])
def test_no_common_version_is_unsupported(broker):
    with pytest.raises(BatchedUnsupported, match="ListOffsets"):
        lo.choose_version(broker)


def test_partitions_go_to_their_leaders_and_leaderless_ones_nowhere():
    leaders = {"a": (1, 2, -1, 1), "b": (2,)}
    assert lo.group_by_leader(leaders) == {1: [("a", [0, 3])], 2: [("a", [1]), ("b", [0])]}
    assert lo.group_by_leader(leaders, {"a": [3, 2, 9], "b": [0], "c": [0]}) == {
        1: [("a", [3])], 2: [("b", [0])]}


def test_requests_are_encoded_once_while_the_leaders_stay():
    cache = lo.RequestCache(max_partitions=3)
    plan = {1: [("a", [0, 1, 2, 3])], 2: [("b", [0])]}
    first = cache.requests(9, plan, 1000)
    # leader 1's four partitions split at 3 per request; each request has both isolation levels
    assert [(r.leader, r.topics) for r in first] == [(1, (("a", (0, 1, 2)),)), (1, (("a", (3,)),)),
                                                     (2, (("b", (0,)),))]
    assert cache.encoded == 3
    assert first[0].bodies == (lo.encode_request(9, 0, [("a", [0, 1, 2])], 1000),
                               lo.encode_request(9, 1, [("a", [0, 1, 2])], 1000))
    assert cache.requests(9, plan, 1000) == first and cache.encoded == 3
    moved = {1: [("a", [0, 1, 2, 3])], 3: [("b", [0])]}
    assert [r.leader for r in cache.requests(9, moved, 1000)] == [1, 1, 3] and cache.encoded == 4
    cache.requests(10, moved, 1000)
    assert cache.encoded == 7     # a new version: everything again


def _answer(version: int, rows) -> lo.Answer:
    return lo.decode_response(version, their_answer(version, rows))


def test_answers_combine_into_offsets_and_causes():
    req = lo.RequestCache().requests(9, {1: [("a", [0, 1, 2, 3, 4])]}, 1000)
    hwm = _answer(9, [("a", [(0, 0, 10), (1, 0, 10), (2, 0, -1), (3, 6, -1)])])     # 4 missing
    lso = _answer(9, [("a", [(0, 0, 7), (1, 0, 12), (2, 0, 5), (3, 0, 1), (4, 0, 1)])])
    out, failed = lo.combine(req, [hwm, lso], lambda code: f"code_{code}", lambda exc: "exc")
    # the LSO never reads above the HWM (the two answers are a moment apart)
    assert out == [PartitionOffsets("a", 0, 10, 7), PartitionOffsets("a", 1, 10, 10)]
    assert failed == {("a", 2): lo.INVALID_OFFSET, ("a", 3): "code_6", ("a", 4): "unexpected"}


def test_a_failed_request_costs_only_its_leaders_partitions():
    reqs = lo.RequestCache().requests(9, {1: [("a", [0])], 2: [("b", [0, 1])]}, 1000)
    ok = _answer(9, [("a", [(0, 0, 3)])])
    out, failed = lo.combine(reqs, [ok, ok, TimeoutError(), ok], lambda code: "code",
                             lambda exc: type(exc).__name__)
    assert out == [PartitionOffsets("a", 0, 3, 3)]
    assert failed == {("b", 0): "TimeoutError", ("b", 1): "TimeoutError"}
    # an answer the decoder refused comes back as the error, named the same way
    out, failed = lo.combine(reqs[:1], [ProtocolError("cut"), ok], lambda code: "code",
                             lambda exc: "protocol")
    assert out == [] and failed == {("a", 0): "protocol"}


def test_the_plan_is_kept_while_the_leaders_are_the_same():
    cache = lo.RequestCache()
    leaders = {"a": (1, -1, 2), "b": (2, 2)}
    first = cache.plan(9, leaders, None, 1000)
    assert [(r.leader, r.topics) for r in first[0]] == [(1, (("a", (0,)),)), (2, (("a", (2,)), ("b", (0, 1))))]
    assert first[1] == [("a", 1)]
    assert cache.plan(9, dict(leaders), None, 1000) is first          # equal leaders, a new dict
    moved = cache.plan(9, {"a": (1, 1, 2), "b": (2, 2)}, None, 1000)
    assert moved is not first and moved[1] == []
    # a shard's partitions only; one it wants that has no leader, one the topic does not have
    mine = cache.plan(9, leaders, {"a": (1, 7), "b": range(1, 2)}, 1000)
    assert [(r.leader, r.topics) for r in mine[0]] == [(2, (("b", (1,)),))]
    assert mine[1] == [("a", 1), ("a", 7)]


def test_answers_in_the_brokers_own_order_combine_alike():
    """Brokers list a topic's partitions in hash-map order, not the order asked."""
    req = lo.RequestCache().requests(11, {1: [("a", [0, 1, 2, 3])]}, 1000)
    hwm = _answer(11, [("a", [(2, 0, 30), (0, 0, 10), (3, 0, 40), (1, 0, 20)])])
    lso = _answer(11, [("a", [(3, 0, 39), (1, 0, 20), (2, 0, 30), (0, 0, 9)])])
    out, failed = lo.combine(req, [hwm, lso], lambda code: "code", lambda exc: "exc")
    assert sorted(out) == [PartitionOffsets("a", 0, 10, 9), PartitionOffsets("a", 1, 20, 20),
                           PartitionOffsets("a", 2, 30, 30), PartitionOffsets("a", 3, 40, 39)]
    assert failed == {}


@pytest.mark.parametrize("version", [5, 11])
def test_a_topic_answered_as_last_time_is_not_unpacked_again(version, monkeypatch):
    """combine's cache: a topic whose two answers are byte for byte last poll's gets last
    poll's PartitionOffsets objects, without unpacking its records; one that moved is read
    afresh; a topic no longer asked is forgotten."""
    req = lo.RequestCache().requests(version, {1: [("idle", [0, 1]), ("busy", [0])]}, 1000)
    rows = {"idle": [(1, 0, 20), (0, 0, 10)], "busy": [(0, 0, 5)]}
    cache: dict = {}

    def poll(busy_hwm: int):
        hwm = _answer(version, [("idle", rows["idle"]), ("busy", [(0, 0, busy_hwm)])])
        lso = _answer(version, [("idle", rows["idle"]), ("busy", [(0, 0, 5)])])
        return lo.combine(req, [hwm, lso], lambda code: "code", lambda exc: "exc", cache)

    first, _ = poll(5)
    unpacked = []
    real = lo.TopicAnswer.rows

    def counted(self):
        unpacked.append(self.topic)
        return real.fget(self)
    monkeypatch.setattr(lo.TopicAnswer, "rows", property(counted))
    second, failed = poll(9)
    assert failed == {} and sorted(second) == [PartitionOffsets("busy", 0, 9, 5), PartitionOffsets("idle", 0, 10, 10),
                                               PartitionOffsets("idle", 1, 20, 20)]
    assert unpacked == ["busy", "busy"]          # its two answers; idle's never
    assert [o for o in second if o.topic == "idle"][0] is [o for o in first if o.topic == "idle"][0]
    assert {k[0] for k in cache} == {"idle", "busy"}
    # the LSO answer alone moving (a transaction committed, no new record): read afresh
    third = lo.combine(req, [_answer(version, [("idle", rows["idle"]), ("busy", [(0, 0, 9)])]),
                             _answer(version, [("idle", rows["idle"]), ("busy", [(0, 0, 9)])])],
                       lambda code: "code", lambda exc: "exc", cache)[0]
    assert PartitionOffsets("busy", 0, 9, 9) in third and unpacked == ["busy"] * 4
    only_busy = lo.RequestCache().requests(version, {1: [("busy", [0])]}, 1000)
    lo.combine(only_busy, [_answer(version, [("busy", [(0, 0, 9)])])] * 2, lambda c: "c", lambda e: "e", cache)
    assert {k[0] for k in cache} == {"busy"}


@pytest.mark.parametrize("version", range(lo.MIN_VERSION, lo.MAX_VERSION + 1))
def test_one_body_kept_gives_both_isolation_levels_byte_for_byte(version):
    topics = (("a", (0, 1, 2)), ("b", (7,)))
    (request,) = lo.RequestCache().requests(version, {1: list(topics)}, 1000)
    assert request.bodies == tuple(lo.encode_request(version, iso, topics, 1000)
                                   for iso in (lo.READ_UNCOMMITTED, lo.READ_COMMITTED))
