"""TransactionLogTap's offset bookkeeping with a fake consumer (no broker, no threads):
rebuild targets, counting, duplicates, new partitions, a topic that appears late,
undecodable records and truncated logs."""

from __future__ import annotations

from types import SimpleNamespace

from confluent_kafka import KafkaError

from tests.txnlog_encoder import encode_key, encode_value
from txnwatch.apps import AppResolver
from txnwatch.exporter.tap.source import TOPIC, TransactionLogTap

T0 = 1_700_000_000_000


class FakeErr:
    def __init__(self, code, name):
        self._code, self._name = code, name

    def code(self):
        return self._code

    def name(self):
        return self._name

    def str(self):
        return self._name


class Msg:
    def __init__(self, p, off, key=None, value=None, err=None):
        self._p, self._off, self._key, self._value, self._err = p, off, key, value, err

    def error(self):
        return self._err

    def partition(self):
        return self._p

    def offset(self):
        return self._off

    def key(self):
        return self._key

    def value(self):
        return self._value

    def timestamp(self):
        return (1, T0)


class FakeConsumer:
    def __init__(self, partitions=None, highs=None):
        self.partitions = partitions       # None: no such topic
        self.highs = dict(highs or {})
        self.assigned: list[int] = []
        self.seeks: list[tuple[int, int]] = []

    def list_topics(self, topic=None, timeout=None):
        if self.partitions is None:
            return SimpleNamespace(topics={})
        t = SimpleNamespace(error=None, partitions={p: None for p in self.partitions})
        return SimpleNamespace(topics={TOPIC: t})

    def get_watermark_offsets(self, tp, timeout=None, cached=False):
        return (0, self.highs.get(tp.partition, 0))

    def incremental_assign(self, tps):
        self.assigned.extend(tp.partition for tp in tps)

    def seek(self, tp):
        self.seeks.append((tp.partition, tp.offset))


def rec(p, off, tid, status, last, epoch=0):
    parts = [("t", [0])] if status in (1, 2, 3) else None
    return Msg(p, off, encode_key(tid), encode_value(producer_id=1, producer_epoch=epoch, timeout_ms=60_000,
                                                     status=status, partitions=parts, last_update_ms=last,
                                                     start_ms=T0))


def commit(p, off, tid, t=T0):
    return [rec(p, off, tid, 1, t), rec(p, off + 1, tid, 2, t + 10), rec(p, off + 2, tid, 4, t + 12)]


def new_tap():
    return TransactionLogTap("c1", {"bootstrap.servers": "unused:9092", "sasl.password": "pw-S3cret"},
                             AppResolver(), cap=10)


def test_rebuild_targets_counting_duplicates_and_new_partitions():
    tap = new_tap()
    c = FakeConsumer(partitions=[0, 1], highs={0: 3, 1: 0})
    tap._refresh_partitions(c)
    assert sorted(c.assigned) == [0, 1]
    assert not tap.rebuilt
    tap._apply_batch(c, commit(0, 0, "a-1"))          # offsets 0..2: history, not counted
    assert tap.rebuilt
    assert tap._state.view().transactions == {}
    tap._apply_batch(c, commit(0, 3, "a-1", T0 + 1000) + commit(0, 3, "a-1", T0 + 1000))  # + a re-delivery
    assert tap._state.view().transactions == {("a", "committed"): 1}
    # a partition added later holds only new records: counted from its first offset
    c.partitions = [0, 1, 2]
    tap._refresh_partitions(c)
    assert sorted(c.assigned) == [0, 1, 2]
    tap._apply_batch(c, commit(2, 0, "b-1"))
    assert tap._state.view().transactions == {("a", "committed"): 1, ("b", "committed"): 1}


def test_topic_found_late_is_still_rebuilt_before_counting():
    """A broker may say "unknown topic" for a while after it starts: a log found after
    the tap started is rebuilt up to its end at discovery, never counted as new."""
    tap = new_tap()
    c = FakeConsumer(partitions=None)
    tap._refresh_partitions(c)
    h = tap.health()
    assert h.up and not h.errors   # waiting for the topic is not a failure
    assert tap.rebuilt and not c.assigned
    c.partitions, c.highs = [0], {0: 3}
    tap._refresh_partitions(c)
    assert not tap.rebuilt
    tap._apply_batch(c, commit(0, 0, "late-1"))
    assert tap.rebuilt
    assert tap._state.view().transactions == {}
    tap._apply_batch(c, commit(0, 3, "late-1", T0 + 100))
    assert tap._state.view().transactions == {("late", "committed"): 1}


def test_undecodable_records_are_counted_and_skipped():
    tap = new_tap()
    c = FakeConsumer(partitions=[0], highs={0: 0})
    tap._refresh_partitions(c)
    tap._apply_batch(c, [Msg(0, 0, encode_key("x-1"), b"\x00\x07abc"), Msg(0, 1, b"\x00\x01\x00\x00", b""),
                         Msg(0, 2, encode_key("x-1"), b"\x00\x00\x00")] + commit(0, 3, "x-1"))
    v = tap._state.view()
    assert dict(v.skipped) == {"unknown_value_version": 1, "unknown_key_version": 1, "truncated": 1}
    assert v.transactions == {("x", "committed"): 1}
    assert tap._next[0] == 6


def test_truncated_log_is_reread_without_counting():
    tap = new_tap()
    c = FakeConsumer(partitions=[0], highs={0: 0})
    tap._refresh_partitions(c)
    tap._apply_batch(c, commit(0, 0, "t-1") + commit(0, 3, "t-1", T0 + 100))
    assert tap._state.view().transactions == {("t", "committed"): 2}
    # the log now ends at 3 (< our position 6): re-read from 0 without counting up to 3
    c.highs = {0: 3}
    tap._apply_batch(c, [Msg(0, 0, err=FakeErr(KafkaError._AUTO_OFFSET_RESET, "_AUTO_OFFSET_RESET"))])
    assert c.seeks == [(0, 0)]
    assert tap.health().errors["log_truncated"] == 1
    tap._apply_batch(c, commit(0, 0, "t-1"))
    assert tap._state.view().transactions == {("t", "committed"): 2}
    tap._apply_batch(c, commit(0, 3, "t-1", T0 + 5000))
    assert tap._state.view().transactions == {("t", "committed"): 3}


def test_partition_eof_moves_the_position_and_completes_the_rebuild():
    tap = new_tap()
    c = FakeConsumer(partitions=[0], highs={0: 5})
    tap._refresh_partitions(c)
    # compaction removed offsets 3..4: the EOF at 5 finishes the rebuild
    tap._apply_batch(c, commit(0, 0, "e-1") + [Msg(0, 5, err=FakeErr(KafkaError._PARTITION_EOF, "_PARTITION_EOF"))])
    assert tap.rebuilt and tap._next[0] == 5


def test_consumer_config_forces_safe_settings_and_keeps_user_properties():
    tap = new_tap()
    cfg = tap._consumer_config()
    assert cfg["enable.auto.commit"] is False and cfg["isolation.level"] == "read_uncommitted"
    assert cfg["sasl.password"] == "pw-S3cret" and cfg["group.id"] == "txnwatch-tap-c1"
    assert "pw-S3cret" not in repr(tap.health()) and "pw-S3cret" not in repr(tap.view())


def test_a_replacement_client_resumes_at_the_next_offsets():
    from confluent_kafka import OFFSET_BEGINNING

    tap = new_tap()
    c = FakeConsumer(partitions=[0, 1], highs={0: 0, 1: 0})
    tap._refresh_partitions(c)
    tap._apply_batch(c, commit(0, 0, "r-1") + commit(1, 0, "r-2") + commit(1, 3, "r-2", T0 + 50))

    class Recorder(FakeConsumer):
        def incremental_assign(self, tps):
            self.tps = [(tp.partition, tp.offset) for tp in tps]

    c2 = Recorder(partitions=[0, 1])
    tap._assign_known(c2)
    assert c2.tps == [(0, 3), (1, 6)]
    assert OFFSET_BEGINNING not in dict(c2.tps).values()
    tap._apply_batch(c2, commit(1, 3, "r-2", T0 + 50) + commit(1, 6, "r-2", T0 + 90))   # overlap ignored
    assert tap._state.view().transactions == {("r", "committed"): 4}
