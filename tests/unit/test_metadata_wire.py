"""Metadata encoded and decoded by txnwatch (kafka/metadata.py), checked against
kafka-python's own schema-driven encoder for every version spoken (9 to 13), without a
broker (tests/integration/test_list_offsets.py runs it against real brokers)."""

from __future__ import annotations

import uuid

import pytest
from kafka.protocol.metadata import MetadataRequest, MetadataResponse

from txnwatch.kafka import metadata as md
from txnwatch.kafka.errors import BatchedUnsupported
from txnwatch.kafka.wire import ProtocolError

VERSIONS = range(md.MIN_VERSION, md.MAX_VERSION + 1)
_B = MetadataResponse.MetadataResponseBroker
_T = MetadataResponse.MetadataResponseTopic
_P = _T.MetadataResponsePartition


def their_request(version: int) -> bytes:
    kw = dict(topics=None, allow_auto_topic_creation=False, include_topic_authorized_operations=False)
    if version <= md.CLUSTER_OPS_UNTIL:
        kw["include_cluster_authorized_operations"] = False
    return MetadataRequest(**kw).encode(version=version)


def their_answer(version: int, topics, brokers=(1, 2, 3), throttle: int = 0) -> bytes:
    """topics: [(name, error, [(partition, leader, replicas, isr, offline)])]"""
    kw = dict(throttle_time_ms=throttle, cluster_id="c-1", controller_id=2,
              brokers=[_B(node_id=b, host=f"h{b}.example", port=9092, rack="r1" if b % 2 else None)
                       for b in brokers],
              topics=[_T(error_code=e, name=name, topic_id=uuid.UUID(int=i + 1), is_internal=name.startswith("__"),
                         partitions=[_P(error_code=0 if leader >= 0 else 5, partition_index=p, leader_id=leader,
                                        leader_epoch=7, replica_nodes=list(rep), isr_nodes=list(isr),
                                        offline_replicas=list(off))
                                     for p, leader, rep, isr, off in parts])
                      for i, (name, e, parts) in enumerate(topics)])
    if version >= md.TOP_LEVEL_ERROR_FROM:
        kw["error_code"] = 0
    return MetadataResponse(**kw).encode(version=version)


def healthy(n: int, rf: int, brokers=(1, 2, 3)):
    """n partitions in hash-like order, each fully in sync."""
    order = sorted(range(n), key=lambda p: (p * 7919) % n)
    return [(p, brokers[p % len(brokers)], tuple(brokers[(p + k) % len(brokers)] for k in range(rf)),
             tuple(brokers[(p + k) % len(brokers)] for k in range(rf)), ()) for p in order]


@pytest.mark.parametrize("version", VERSIONS)
def test_the_request_is_byte_for_byte_kafka_pythons(version):
    assert md.encode_request(version) == their_request(version)


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("rf", [1, 3])
def test_healthy_topics_decode_in_one_pass_as_kafka_python_encodes_them(version, rf):
    topics = [("orders", 0, healthy(50, rf)), ("empty", 0, []), ("__transaction_state", 0, healthy(5, rf))]
    answer = md.decode_response(version, their_answer(version, topics, throttle=30), full={"__transaction_state"})
    assert (answer.throttle_time_ms, answer.brokers, answer.controller, answer.error_code) == (30, (1, 2, 3), 2, 0)
    # where each broker listens, for the transport to reach a broker its own metadata dropped
    assert answer.endpoints == tuple(md.Endpoint(b, f"h{b}.example", 9092) for b in (1, 2, 3))
    orders = answer.topics["orders"]
    assert orders.leaders == tuple((1, 2, 3)[p % 3] for p in range(50))
    assert orders.degraded == () and orders.replicas is None
    assert answer.topics["empty"].leaders == ()
    log = answer.topics["__transaction_state"]
    assert [(r.partition, r.leader, r.replicas, r.isr) for r in log.replicas] == \
        [(p, leader, rep, isr) for p, leader, rep, isr, _o in sorted(healthy(5, rf))]


@pytest.mark.parametrize("version", VERSIONS)
def test_unlike_partitions_are_read_one_by_one_and_the_degraded_kept(version):
    parts = healthy(10, 3)
    parts[2] = (parts[2][0], 2, (2, 3, 1), (2,), (3,))          # ISR shrunk, a replica offline
    parts[5] = (parts[5][0], -1, (1, 2, 3), (), (1, 2, 3))       # offline
    parts[7] = (parts[7][0], 1, (1, 2, 3), (1, 2), ())           # under-replicated
    answer = md.decode_response(version, their_answer(version, [("t", 0, parts), ("ok", 0, healthy(4, 3))]))
    t = answer.topics["t"]
    leaders = {p: leader for p, leader, *_ in parts}
    assert t.leaders == tuple(leaders[p] for p in range(10))
    assert {(r.partition, r.leader, r.replicas, r.isr) for r in t.degraded} == {
        (parts[2][0], 2, (2, 3, 1), (2,)), (parts[5][0], -1, (1, 2, 3), ()), (parts[7][0], 1, (1, 2, 3), (1, 2))}
    assert answer.topics["ok"].degraded == ()


@pytest.mark.parametrize("version", VERSIONS)
def test_a_uniform_topic_without_leaders_is_all_degraded(version):
    parts = [(p, -1, (1, 2), (1, 2), ()) for p in range(4)]
    t = md.decode_response(version, their_answer(version, [("t", 0, parts)])).topics["t"]
    assert t.leaders == (-1,) * 4
    assert sorted((r.partition, r.replicas, r.isr) for r in t.degraded) == [(p, (1, 2), (1, 2)) for p in range(4)]


def test_a_topic_error_is_kept_for_the_caller():
    answer = md.decode_response(12, their_answer(12, [("denied", 29, [])]))
    assert answer.topics["denied"].error_code == 29


@pytest.mark.parametrize("version", VERSIONS)
def test_a_short_answer_is_a_protocol_error_naming_where(version):
    body = their_answer(version, [("orders", 0, healthy(20, 3))])
    for cut in (3, len(body) // 2, len(body) - 1):
        with pytest.raises(ProtocolError, match="Metadata answer"):
            md.decode_response(version, body[:cut])


def test_versions_both_sides_speak():
    assert md.choose_version((0, 13)) == 13 and md.choose_version((0, 12)) == 12
    with pytest.raises(BatchedUnsupported, match="v0-8"):
        md.choose_version((0, 8))
    with pytest.raises(BatchedUnsupported, match="does not list Metadata"):
        md.choose_version(None)


@pytest.mark.parametrize("rf", [1, 2, 3])
def test_a_healthy_topic_is_read_without_a_step_per_partition(monkeypatch, rf):
    """The fast path really is taken: no field-by-field read of any partition."""
    def field_by_field(*_a):
        raise AssertionError("a partition read field by field")
    monkeypatch.setattr(md, "_int_array", field_by_field)
    answer = md.decode_response(13, their_answer(13, [("a", 0, healthy(30, rf)), ("b", 0, healthy(1, rf))]))
    assert answer.topics["a"].leaders == tuple((1, 2, 3)[p % 3] for p in range(30))
    assert answer.topics["b"].leaders == (1,)
