"""OffsetFetch v8 encoded and decoded by txnwatch (kafka/offset_fetch.py), checked
against kafka-python's own schema-driven encoder: requests byte for byte, answers with and
without commit metadata, partition and group errors, cut answers."""

from __future__ import annotations

import pytest
from kafka.protocol.consumer import OffsetFetchRequest, OffsetFetchResponse

from txnwatch.kafka import offset_fetch as of
from txnwatch.kafka.wire import ProtocolError, RawRequest

_G = OffsetFetchResponse.OffsetFetchResponseGroup
_T = _G.OffsetFetchResponseTopics
_P = _T.OffsetFetchResponsePartitions


def their_answer(groups) -> bytes:
    """groups: [(group, error, [(topic, [(partition, offset, metadata, error)])])]"""
    return OffsetFetchResponse(throttle_time_ms=3, groups=[
        _G(group_id=g, error_code=e, topics=[
            _T(name=t, partitions=[_P(partition_index=p, committed_offset=o, committed_leader_epoch=4,
                                      metadata=m, error_code=pe) for p, o, m, pe in parts])
            for t, parts in topics]) for g, e, topics in groups]).encode(version=of.VERSION)


@pytest.mark.parametrize("stable", [False, True])
def test_requests_are_byte_for_byte_kafka_pythons(stable):
    groups = ["orders-app", "ünï-group", "g"]
    theirs = OffsetFetchRequest(groups=[OffsetFetchRequest.OffsetFetchRequestGroup(group_id=g, topics=None)
                                        for g in groups], require_stable=stable).encode(version=of.VERSION)
    assert of.encode_request(groups, require_stable=stable) == theirs


@pytest.mark.parametrize("metadata", ["", None, "consumer-7 rebalanced at 12:00"])
def test_answers_read_the_committed_partitions(metadata):
    body = their_answer([
        ("g1", 0, [("orders", [(0, 10, metadata, 0), (1, -1, metadata, 0), (2, 7, metadata, 0)]),
                   ("pay", [(5, 2**40, metadata, 0)])]),
        ("g2", 0, [("orders", [(0, 3, metadata, 3), (1, 4, metadata, 0)])]),   # partition 0 refused
        ("g3", 16, []),                                                          # NOT_COORDINATOR
        ("g4", 0, [])])
    a = of.decode_response(of.VERSION, body)
    assert a.throttle_time_ms == 3
    # no committed offset (-1) is no row; an errored partition is skipped and counted
    assert a.rows == [("g1", "orders", 0, 10), ("g1", "orders", 2, 7), ("g1", "pay", 5, 2**40),
                      ("g2", "orders", 1, 4)]
    assert a.errors == {"g3": 16} and a.answered == {"g1", "g2", "g3", "g4"} and a.skipped == 1


@pytest.mark.parametrize("metadata", ["", "consumer-7 rebalanced at 12:00"])
def test_a_replicas_topics_only_are_read(metadata):
    """keep_topic: the rows of the other topics are stepped over unread, plain or with
    metadata, and their refused partitions are not counted."""
    body = their_answer([
        ("g1", 0, [("orders", [(0, 10, metadata, 0), (1, 11, metadata, 3)]), ("pay", [(5, 9, metadata, 0)]),
                   ("refunds", [(0, 1, metadata, 0), (1, 2, "", 0)])]),
        ("g2", 0, [("pay", [(0, 3, metadata, 3), (1, 4, metadata, 0)])])])
    every = of.decode_response(of.VERSION, body)
    a = of.decode_response(of.VERSION, body, keep_topic=lambda t: t != "orders")
    assert a.rows == [r for r in every.rows if r[1] != "orders"] == [
        ("g1", "pay", 5, 9), ("g1", "refunds", 0, 1), ("g1", "refunds", 1, 2), ("g2", "pay", 1, 4)]
    assert (every.skipped, a.skipped) == (2, 1) and a.answered == {"g1", "g2"}
    assert of.decode_response(of.VERSION, body, keep_topic=lambda t: False).rows == []


def test_a_cut_answer_names_where_it_ends():
    body = their_answer([("g1", 0, [("orders", [(0, 10, "", 0), (1, 11, "", 0)])])])
    with pytest.raises(ProtocolError, match=r"OffsetFetch answer ends at byte \d+ inside .*group g1"):
        of.decode_response(of.VERSION, body[:-12])
    with pytest.raises(ValueError, match="reads v8 only"):
        of.decode_response(9, body)


def test_a_raw_request_returns_an_unreadable_answer_as_its_error():
    req = RawRequest("OffsetFetchRequest", of.API_KEY, of.VERSION, of.FLEXIBLE, of.encode_request(["g"]),
                     of.decode_response)
    assert isinstance(req.answer(b"\x00\x00"), ProtocolError)
    req.with_header(correlation_id=7, client_id="txnwatch")
    framed = req.encode()
    # size, api key 9, version 8, correlation id 7, client id, an empty tagged-field section, the body
    assert framed[4:12] == b"\x00\x09\x00\x08\x00\x00\x00\x07"
    assert framed[12:14] == b"\x00\x08" and framed[14:22] == b"txnwatch" and framed[22:23] == b"\x00"
    assert framed[23:] == req.body and int.from_bytes(framed[:4], "big") == len(framed) - 4


def test_unchanged_commits_are_not_decoded_again():
    """A group's topic whose bytes are the last fetch's gets the same row objects (and its
    refused partitions counted again); one whose commits moved is decoded afresh; a group's
    topic absent from a whole fetch is forgotten."""
    def answer(g1_orders_offset):
        return their_answer([
            ("g1", 0, [("orders", [(0, g1_orders_offset, "", 0), (1, 5, "", 3)]), ("pay", [(5, 9, "", 0)])]),
            ("g2", 0, [("orders", [(0, 3, "", 0)])])])

    blocks = of.DecodedBlocks()
    blocks.next_fetch()
    first = of.decode_response(of.VERSION, answer(10), blocks=blocks)
    blocks.next_fetch()
    again = of.decode_response(of.VERSION, answer(10), blocks=blocks)
    assert again.rows == first.rows and all(a is b for a, b in zip(again.rows, first.rows, strict=True))
    assert again.skipped == first.skipped == 1
    blocks.next_fetch()
    moved = of.decode_response(of.VERSION, answer(11), blocks=blocks)
    assert moved.rows == [("g1", "orders", 0, 11), ("g1", "pay", 5, 9), ("g2", "orders", 0, 3)]
    assert moved.rows[0] is not first.rows[0] and moved.rows[1] is first.rows[1]
    assert moved.rows == of.decode_response(of.VERSION, answer(11)).rows
    blocks.next_fetch()
    blocks.next_fetch()                          # a fetch that saw none of them
    later = of.decode_response(of.VERSION, answer(11), blocks=blocks)
    assert later.rows == moved.rows and not any(a is b for a, b in zip(later.rows, moved.rows, strict=True))
