"""Decoder of __transaction_state records: byte vectors, edge cases, property tests."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.txnlog_encoder import encode_key, encode_value
from txnwatch.exporter.tap.decoder import (
    TxnLogDecodeError,
    TxnLogKey,
    TxnLogValue,
    TxnStatus,
    decode_key,
    decode_value,
)

# --- hand-written byte vectors (from the schema, independent of both encoder and decoder)

KEY_V0 = bytes.fromhex("0000" "0003" "616263")  # version 0, "abc"

# v0: pid 1000, epoch 5, timeout 60000, Ongoing, [("t", [0, 7])], last 2000, start 1500
VALUE_V0 = bytes.fromhex(
    "0000"                      # version 0
    "00000000000003e8"          # producer id 1000
    "0005"                      # epoch 5
    "0000ea60"                  # timeout 60000
    "01"                        # Ongoing
    "00000001"                  # 1 partition entry
    "0001" "74"                 # topic "t"
    "00000002" "00000000" "00000007"   # partition ids [0, 7]
    "00000000000007d0"          # last update 2000
    "00000000000005dc"          # start 1500
)

# v1: same, compact encodings, nested tag section, tags 0/1/2 and an unknown tag 9
VALUE_V1 = bytes.fromhex(
    "0001"
    "00000000000003e8" "0005" "0000ea60" "02"   # PrepareCommit
    "02"                        # compact array: 1 entry
    "02" "74"                   # compact string "t"
    "03" "00000000" "00000007"  # compact array [0, 7]
    "00"                        # nested tagged fields: none
    "00000000000007d0" "00000000000005dc"
    "04"                        # 4 tagged fields
    "00" "08" "00000000000003e7"    # tag 0 PreviousProducerId 999
    "01" "08" "00000000000003e9"    # tag 1 NextProducerId 1001
    "02" "02" "0002"                # tag 2 ClientTransactionVersion 2
    "09" "03" "aabbcc"              # tag 9 unknown, 3 bytes
)


def test_key_v0_vector():
    assert decode_key(KEY_V0) == TxnLogKey("abc", 0)


def test_key_unicode():
    assert decode_key(encode_key("app-ü-1")).transactional_id == "app-ü-1"


def test_value_v0_vector():
    v = decode_value(VALUE_V0)
    assert v == TxnLogValue(0, 1000, 5, 60000, TxnStatus.ONGOING, (("t", (0, 7)),), 2000, 1500)
    assert v.previous_producer_id == -1 and v.next_producer_id == -1
    assert v.client_transaction_version == 0


def test_value_v1_vector_with_tags_and_unknown_tag():
    v = decode_value(VALUE_V1)
    assert v.version == 1
    assert v.status is TxnStatus.PREPARE_COMMIT
    assert v.partitions == (("t", (0, 7)),)
    assert (v.last_update_ms, v.start_ms) == (2000, 1500)
    assert (v.previous_producer_id, v.next_producer_id, v.client_transaction_version) == (999, 1001, 2)
    assert v.unknown_tags == (9,)


def test_vectors_match_test_encoder():
    """The encoder (used by other tests) agrees with the hand-written bytes."""
    assert encode_key("abc") == KEY_V0
    assert encode_value(producer_id=1000, producer_epoch=5, timeout_ms=60000, status=1,
                        partitions=[("t", [0, 7])], last_update_ms=2000, start_ms=1500) == VALUE_V0
    assert encode_value(version=1, producer_id=1000, producer_epoch=5, timeout_ms=60000, status=2,
                        partitions=[("t", [0, 7])], last_update_ms=2000, start_ms=1500,
                        previous_producer_id=999, next_producer_id=1001, client_transaction_version=2,
                        extra_tags=[(9, b"\xaa\xbb\xcc")]) == VALUE_V1


@pytest.mark.parametrize("version", [0, 1])
def test_null_partitions(version):
    raw = encode_value(version=version, producer_id=1, producer_epoch=0, timeout_ms=1000, status=0,
                       partitions=None, last_update_ms=5, start_ms=-1)
    v = decode_value(raw)
    assert v.partitions is None and v.status is TxnStatus.EMPTY and v.start_ms == -1


@pytest.mark.parametrize("version", [0, 1])
def test_empty_partitions(version):
    raw = encode_value(version=version, producer_id=1, producer_epoch=0, timeout_ms=1000, status=4,
                       partitions=[], last_update_ms=5, start_ms=3)
    assert decode_value(raw).partitions == ()


def test_v1_nested_unknown_tags_are_skipped():
    raw = encode_value(version=1, producer_id=7, producer_epoch=1, timeout_ms=10, status=1,
                       partitions=[("a", [1]), ("b", [2, 3])], last_update_ms=9, start_ms=8,
                       nested_extra_tags=[(3, b"xyz"), (40, b"")])
    v = decode_value(raw)
    assert v.partitions == (("a", (1,)), ("b", (2, 3)))
    assert (v.last_update_ms, v.start_ms) == (9, 8)


def test_v1_tagged_fields_default_when_absent():
    raw = encode_value(version=1, producer_id=7, producer_epoch=1, timeout_ms=10, status=4,
                       partitions=None, last_update_ms=9, start_ms=8)
    v = decode_value(raw)
    assert (v.previous_producer_id, v.next_producer_id, v.client_transaction_version) == (-1, -1, 0)


def test_all_statuses():
    for code in range(8):
        raw = encode_value(producer_id=1, producer_epoch=0, timeout_ms=1, status=code,
                           partitions=None, last_update_ms=1, start_ms=1)
        assert decode_value(raw).status == TxnStatus(code)
    assert [s.name for s in TxnStatus] == [
        "EMPTY", "ONGOING", "PREPARE_COMMIT", "PREPARE_ABORT", "COMPLETE_COMMIT", "COMPLETE_ABORT",
        "DEAD", "PREPARE_EPOCH_FENCE"]


@pytest.mark.parametrize("raw,reason", [
    (bytes.fromhex("0001" "0001" "61"), "unknown_key_version"),
    (bytes.fromhex("ffff" "0001" "61"), "unknown_key_version"),
    (bytes.fromhex("00"), "truncated"),
    (bytes.fromhex("0000"), "truncated"),
    (bytes.fromhex("0000" "0005" "6162"), "truncated"),
    (bytes.fromhex("0000" "ffff"), "malformed"),
    (bytes.fromhex("0000" "0002" "c328"), "malformed"),
    (None, "malformed"),
])
def test_bad_keys(raw, reason):
    with pytest.raises(TxnLogDecodeError) as ei:
        decode_key(raw)
    assert ei.value.reason == reason
    assert reason in str(ei.value)


def test_unknown_value_version():
    raw = bytes.fromhex("0002") + VALUE_V0[2:]
    with pytest.raises(TxnLogDecodeError) as ei:
        decode_value(raw)
    assert ei.value.reason == "unknown_value_version"
    assert "value version 2" in str(ei.value)


def test_unknown_status():
    raw = encode_value(producer_id=1, producer_epoch=0, timeout_ms=1, status=8,
                       partitions=None, last_update_ms=1, start_ms=1)
    with pytest.raises(TxnLogDecodeError) as ei:
        decode_value(raw)
    assert ei.value.reason == "unknown_status"


@pytest.mark.parametrize("vector", [VALUE_V0, VALUE_V1])
def test_every_truncation_raises_truncated(vector):
    for cut in range(len(vector)):
        with pytest.raises(TxnLogDecodeError) as ei:
            decode_value(vector[:cut])
        assert ei.value.reason == "truncated", (cut, ei.value)


def test_malformed_values():
    with pytest.raises(TxnLogDecodeError) as ei:   # v0 count < -1
        decode_value(VALUE_V0[:17] + bytes.fromhex("fffffffe") + VALUE_V0[21:])
    assert ei.value.reason == "malformed"
    with pytest.raises(TxnLogDecodeError) as ei:   # v1 known tag with a wrong size
        decode_value(encode_value(version=1, producer_id=1, producer_epoch=0, timeout_ms=1, status=1,
                                  partitions=None, last_update_ms=1, start_ms=1) [:-1]
                     + bytes.fromhex("01" "02" "04" "00000000"))
    assert ei.value.reason == "malformed"
    with pytest.raises(TxnLogDecodeError) as ei:   # overlong varint
        decode_value(VALUE_V1[:17] + b"\xff" * 6)
    assert ei.value.reason == "malformed"
    with pytest.raises(TxnLogDecodeError) as ei:   # null value
        decode_value(None)
    assert ei.value.reason == "malformed"


# --- property tests

@settings(max_examples=500, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=200))
def test_random_bytes_only_raise_decode_error(raw):
    for fn in (decode_key, decode_value):
        try:
            fn(raw)
        except TxnLogDecodeError as exc:
            assert exc.reason in {"unknown_key_version", "unknown_value_version", "unknown_status",
                                  "truncated", "malformed"}


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from([0, 1]), st.binary(max_size=120))
def test_random_bodies_behind_valid_versions_only_raise_decode_error(version, body):
    try:
        decode_value(version.to_bytes(2, "big") + body)
    except TxnLogDecodeError:
        pass


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=150), st.integers(0, 149))
def test_mutated_valid_records_only_raise_decode_error(noise, at):
    base = VALUE_V1 if at % 2 else VALUE_V0
    at = at % len(base)
    raw = base[:at] + noise + base[at + len(noise):]
    try:
        decode_value(raw)
    except TxnLogDecodeError:
        pass


i16 = st.integers(-(2 ** 15), 2 ** 15 - 1)
i32 = st.integers(-(2 ** 31), 2 ** 31 - 1)
i64 = st.integers(-(2 ** 63), 2 ** 63 - 1)
partitions_st = st.one_of(st.none(), st.lists(
    st.tuples(st.text(max_size=30), st.lists(i32, max_size=8).map(tuple)), max_size=6).map(tuple))


@settings(max_examples=300)
@given(st.text(max_size=100))
def test_key_round_trip(tid):
    assert decode_key(encode_key(tid)) == TxnLogKey(tid, 0)


@settings(max_examples=400)
@given(version=st.sampled_from([0, 1]), pid=i64, epoch=i16, timeout=i32, status=st.integers(0, 7),
       partitions=partitions_st, last=i64, start=i64, prev=i64, nxt=i64, ctv=i16)
def test_value_round_trip(version, pid, epoch, timeout, status, partitions, last, start, prev, nxt, ctv):
    if version == 0:
        prev = nxt = -1
        ctv = 0
    raw = encode_value(version=version, producer_id=pid, producer_epoch=epoch, timeout_ms=timeout,
                       status=status, partitions=partitions, last_update_ms=last, start_ms=start,
                       previous_producer_id=prev, next_producer_id=nxt, client_transaction_version=ctv)
    assert decode_value(raw) == TxnLogValue(version, pid, epoch, timeout, TxnStatus(status), partitions,
                                            last, start, prev, nxt, ctv)


# --- every check of the decoder, pinned (scripts/mutate_rules.py deletes or moves each)

def test_a_negative_status_is_unknown():
    """int8 on the wire: 0xff is -1, not the last status counted from the end."""
    raw = encode_value(producer_id=1, producer_epoch=0, timeout_ms=1, status=-1,
                       partitions=None, last_update_ms=1, start_ms=1)
    with pytest.raises(TxnLogDecodeError) as ei:
        decode_value(raw)
    assert ei.value.reason == "unknown_status"


@pytest.mark.parametrize("at, field, what", [
    (21, "ffff", "topic length -1"),               # v0: topic is not nullable
    (24, "ffffffff", "partition ids count -1"),     # v0: nor are the partition ids
])
def test_v0_null_topics_and_partition_ids_are_malformed(at, field, what):
    raw = VALUE_V0[:at] + bytes.fromhex(field) + VALUE_V0[at + len(field) // 2:]
    with pytest.raises(TxnLogDecodeError) as ei:
        decode_value(raw)
    assert ei.value.reason == "malformed" and what in str(ei.value)


@pytest.mark.parametrize("at, what", [(18, "null topic"), (20, "null partition ids")])
def test_v1_null_topics_and_partition_ids_are_malformed(at, what):
    raw = VALUE_V1[:at] + b"\x00" + VALUE_V1[at + 1:]     # compact length 0: null
    with pytest.raises(TxnLogDecodeError) as ei:
        decode_value(raw)
    assert ei.value.reason == "malformed" and what in str(ei.value)


@pytest.mark.parametrize("tag", [0, 1])
def test_v1_producer_id_tags_of_another_size_are_malformed(tag):
    raw = encode_value(version=1, producer_id=1, producer_epoch=0, timeout_ms=1, status=1,
                       partitions=None, last_update_ms=1, start_ms=1)[:-1] + bytes([1, tag, 4]) + bytes(4)
    with pytest.raises(TxnLogDecodeError) as ei:
        decode_value(raw)
    assert ei.value.reason == "malformed"


def test_a_varint_longer_than_five_bytes_is_malformed_even_when_it_ends():
    """Kafka's unsigned varints hold 32 bits: five bytes at most, whatever follows."""
    with pytest.raises(TxnLogDecodeError) as ei:
        decode_value(VALUE_V1[:17] + b"\xff" * 5 + b"\x01" + VALUE_V1[18:])
    assert ei.value.reason == "malformed"
