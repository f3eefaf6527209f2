"""TransactionLogTap's offset bookkeeping with a fake consumer (no broker, no threads):
rebuild targets, counting, duplicates, new partitions, a topic that appears late,
undecodable records and truncated logs."""

from __future__ import annotations

import threading
import time
from types import SimpleNamespace

from confluent_kafka import KafkaError

from tests.txnlog_encoder import encode_key, encode_value
from txnwatch.apps import AppResolver
from txnwatch.exporter.tap.source import TOPIC, TransactionLogTap
from txnwatch_dev.net import wait_for

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
    def __init__(self, p, off, key=None, value=None, err=None, ts=T0):
        self._p, self._off, self._key, self._value, self._err = p, off, key, value, err
        self._ts = ts

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
        return (0, -1) if self._ts is None else (1, self._ts)


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


def rec(p, off, tid, status, last, epoch=0, ts=T0):
    parts = [("t", [0])] if status in (1, 2, 3) else None
    return Msg(p, off, encode_key(tid), encode_value(producer_id=1, producer_epoch=epoch, timeout_ms=60_000,
                                                     status=status, partitions=parts, last_update_ms=last,
                                                     start_ms=T0), ts=ts)


def commit(p, off, tid, t=T0, ts=T0):
    """A commit's three records; `ts` is the record timestamp (the coordinator's clock)."""
    return [rec(p, off, tid, 1, t, ts=ts), rec(p, off + 1, tid, 2, t + 10, ts=ts),
            rec(p, off + 2, tid, 4, t + 12, ts=ts)]


def new_tap(truncation_grace=0.0):
    return TransactionLogTap("c1", {"bootstrap.servers": "unused:9092", "sasl.password": "pw-S3cret"},
                             AppResolver(), cap=10, truncation_grace=truncation_grace)


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


def _wall_clock(monkeypatch, ms):
    from txnwatch.exporter.tap import source

    monkeypatch.setattr(source.time, "time", lambda: ms / 1000.0)


def test_topic_found_late_is_still_rebuilt_before_counting(monkeypatch):
    """A broker may say "unknown topic" for a while after it starts: the records of a log
    found after the tap started that are older than the moment the tap first saw the
    topic absent were there before the tap: rebuilt, never counted as new."""
    absent_at = T0 + 60_000
    _wall_clock(monkeypatch, absent_at)
    tap = new_tap()
    c = FakeConsumer(partitions=None)
    tap._refresh_partitions(c)
    h = tap.health()
    assert h.up and not h.errors   # waiting for the topic is not a failure
    assert tap.rebuilt and not c.assigned
    _wall_clock(monkeypatch, absent_at + 5000)
    c.partitions, c.highs = [0], {0: 3}
    tap._refresh_partitions(c)
    assert not tap.rebuilt
    tap._apply_batch(c, commit(0, 0, "late-1", ts=absent_at - 1))
    assert tap.rebuilt
    assert tap._state.view().transactions == {}
    tap._apply_batch(c, commit(0, 3, "late-1", T0 + 100, ts=absent_at - 1))   # after the rebuild: counted
    assert tap._state.view().transactions == {("late", "committed"): 1}


def test_records_written_after_the_topic_was_seen_absent_are_counted(monkeypatch):
    """A new cluster: the tap starts before any transactional producer, sees no
    __transaction_state, and the first transactions are written between the topic's
    creation and the tap's next metadata check. They happened after the tap started:
    counted (by their timestamp), although they are below the end offsets the tap found.
    Records stamped before the tap first saw the topic absent, and records without a
    timestamp, are rebuilt without counting; a truncated partition read again never
    counts, whatever the timestamps."""
    absent_at = T0 + 60_000
    _wall_clock(monkeypatch, absent_at)
    tap = new_tap(truncation_grace=0.0)
    c = FakeConsumer(partitions=None)
    tap._refresh_partitions(c)
    _wall_clock(monkeypatch, absent_at + 3000)
    tap._refresh_partitions(c)          # still absent: the first moment counts
    assert tap._absent_since_ms == absent_at
    c.partitions, c.highs = [0, 1, 2], {0: 6, 1: 3, 2: 0}
    tap._refresh_partitions(c)
    assert not tap.rebuilt
    tap._apply_batch(c, commit(0, 0, "old-1", ts=absent_at - 1)       # before: not counted
                     + commit(0, 3, "new-1", ts=absent_at))           # at the moment: counted
    tap._apply_batch(c, commit(1, 0, "nots-1", ts=None))            # no timestamp: not counted
    assert tap.rebuilt
    assert tap._state.view().transactions == {("new", "committed"): 1}
    tap._apply_batch(c, commit(2, 0, "new-2", ts=absent_at + 9000))   # past the rebuild: counted
    assert tap._state.view().transactions == {("new", "committed"): 2}
    # partition 0 truncated later: read again without counting, although stamped after
    c.highs = {0: 3, 1: 3, 2: 3}
    tap._apply_batch(c, [Msg(0, 6, err=FakeErr(KafkaError._AUTO_OFFSET_RESET, "_AUTO_OFFSET_RESET"))])
    assert tap.health().errors["log_truncated"] == 1
    tap._apply_batch(c, commit(0, 0, "new-1", ts=absent_at + 1))
    assert tap._state.view().transactions == {("new", "committed"): 2}


def test_a_log_that_existed_when_the_tap_started_is_never_counted(monkeypatch):
    """Without having seen the topic absent the tap cannot tell news from history: the
    log as of its start is rebuilt without counting, whatever the records' timestamps."""
    _wall_clock(monkeypatch, T0)
    tap = new_tap()
    c = FakeConsumer(partitions=[0], highs={0: 3})
    tap._refresh_partitions(c)
    tap._apply_batch(c, commit(0, 0, "e-1", ts=T0 + 10_000))
    assert tap.rebuilt and tap._state.view().transactions == {}
    assert tap._absent_since_ms is None and not tap._count_from_ms


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


def test_a_log_short_for_a_moment_is_not_taken_as_truncated(monkeypatch):
    """A restarted broker can report a log shorter than our position while it is written
    back: re-reading it as truncated would count again the records written back
    meanwhile. Only a log that stays short for `truncation_grace` seconds is."""
    from txnwatch.exporter.tap import source

    clock = [1000.0]
    monkeypatch.setattr(source.time, "monotonic", lambda: clock[0])
    tap = new_tap(truncation_grace=5.0)
    c = FakeConsumer(partitions=[0, 1], highs={0: 0, 1: 0})
    tap._refresh_partitions(c)
    tap._apply_batch(c, commit(0, 0, "g-1") + commit(1, 0, "g-2"))
    assert tap._state.view().transactions == {("g", "committed"): 2}
    # after the restart: partition 0 is empty (fetches see no end), partition 1 says out of range
    c.highs = {0: 0, 1: 3}
    assert tap._lag(c) == 0 and set(tap._short) == {0}
    c.highs = {0: 0, 1: 1}
    tap._apply_batch(c, [Msg(1, 3, err=FakeErr(KafkaError._AUTO_OFFSET_RESET, "_AUTO_OFFSET_RESET"))])
    for p in list(tap._short):
        tap._resync(c, p)
    assert c.seeks == [] and set(tap._short) == {0, 1} and not tap.health().errors
    # the log is written back within the grace: followed on from our position, nothing re-read
    clock[0] += 3
    c.highs = {0: 3, 1: 3}
    for p in list(tap._short):
        tap._resync(c, p)
    assert sorted(c.seeks) == [(0, 3), (1, 3)] and not tap._short
    assert tap._next == {0: 3, 1: 3} and not tap.health().errors
    tap._apply_batch(c, commit(0, 0, "g-1") + commit(0, 3, "g-1", T0 + 100))   # replayed, then new
    assert tap._state.view().transactions == {("g", "committed"): 3}
    # a log that stays short past the grace is truncated: re-read without counting
    c.seeks.clear()
    c.highs = {0: 6, 1: 0}
    assert tap._lag(c) == 0 and set(tap._short) == {1}
    clock[0] += 4.9
    tap._resync(c, 1)
    assert c.seeks == []
    clock[0] += 0.2
    tap._resync(c, 1)
    assert c.seeks == [(1, 0)] and tap.health().errors["log_truncated"] == 1
    assert tap._next[1] == 0 and tap._rebuild_to[1] == 0 and not tap._short
    assert tap._stale_client   # the run loop goes on with a new client at the tap's positions


def test_librdkafka_logs_go_through_python_logging():
    import logging

    cfg = new_tap()._consumer_config()
    assert cfg["logger"] is logging.getLogger("txnwatch.librdkafka")


class ReplaceableClient(FakeConsumer):
    """A client the tap may replace: the first one made (of `made`, set by a subclass) has one
    committed transaction to read; its assignments are recorded; `unavailable()` makes its
    metadata calls fail at the transport."""

    made: list

    def __init__(self, config):
        super().__init__(partitions=[0], highs={0: 0})
        self.error_cb = config["error_cb"]
        self.assigned_at: list[tuple[int, int]] = []
        self.batches = [commit(0, 0, "l-1")] if not self.made else []
        self.closed = False
        self.made.append(self)

    def unavailable(self) -> bool:
        return False

    def list_topics(self, topic=None, timeout=None):
        import confluent_kafka

        if self.unavailable():
            raise confluent_kafka.KafkaException(confluent_kafka.KafkaError(confluent_kafka.KafkaError._TRANSPORT))
        return super().list_topics(topic, timeout)

    def incremental_assign(self, tps):
        super().incremental_assign(tps)
        self.assigned_at.extend((tp.partition, tp.offset) for tp in tps)

    def consume(self, n, timeout):
        time.sleep(0.01)
        return self.batches.pop(0) if self.batches else []

    def close(self):
        self.closed = True


def test_a_client_that_lost_the_cluster_is_replaced_at_the_tap_positions(monkeypatch):
    """All brokers down: once the cluster answers again the tap goes on with a new client
    assigned at its own next offsets (nothing of the old client's fetch state is kept)."""
    import confluent_kafka

    probes_while_down = []
    cluster_up = threading.Event()
    cluster_up.set()

    class Client(ReplaceableClient):
        made = []

        def unavailable(self) -> bool:
            if not cluster_up.is_set():
                probes_while_down.append(self)
            return not cluster_up.is_set()

        def consume(self, n, timeout):
            if self is self.made[0] and not cluster_up.is_set() and not getattr(self, "told", False):
                self.told = True
                self.error_cb(confluent_kafka.KafkaError(confluent_kafka.KafkaError._ALL_BROKERS_DOWN))
            return super().consume(n, timeout)

    made = Client.made
    monkeypatch.setattr(confluent_kafka, "Consumer", Client)
    tap = _following_tap(metadata_interval=30)
    try:
        cluster_up.clear()
        _wait(lambda: tap._lost_cluster and not tap.health().up)
        _wait(lambda: len(probes_while_down) >= 2)   # probes that find the cluster still away
        assert len(made) == 1 and tap._lost_cluster   # no client churn meanwhile
        cluster_up.set()
        _wait(lambda: len(made) == 2 and not tap._lost_cluster)
        assert made[0].closed and made[1].assigned_at == [(0, 3)]
    finally:
        tap.stop()


def test_a_client_stuck_without_the_cluster_is_replaced_even_without_all_brokers_down(monkeypatch):
    """Seen on a real broker restart: librdkafka reported no ALL_BROKERS_DOWN, and its
    metadata requests kept failing at the transport for a minute while the broker was up.
    A request of the tap's own failing at the transport marks the client lost; one that
    still does not answer after RENEW_LOST_CLIENT_AFTER is replaced at the tap's positions."""
    import confluent_kafka

    from txnwatch.exporter.tap import source

    monkeypatch.setattr(source, "RENEW_LOST_CLIENT_AFTER", 0.3)
    stuck = threading.Event()

    class Client(ReplaceableClient):
        made = []

        def unavailable(self) -> bool:
            return self is self.made[0] and stuck.is_set()

    made = Client.made
    monkeypatch.setattr(confluent_kafka, "Consumer", Client)
    tap = _following_tap(metadata_interval=0.05)
    try:
        stuck.set()
        _wait(lambda: len(made) == 2)
        assert made[1].assigned_at == [(0, 3)]
        _wait(lambda: tap.health().up and not tap._lost_cluster)
    finally:
        tap.stop()


def _following_tap(metadata_interval: float) -> TransactionLogTap:
    """A started tap that has read the first client's transaction (next offset 3)."""
    tap = TransactionLogTap("c1", {"bootstrap.servers": "unused:9092"}, AppResolver(), cap=10,
                            poll_timeout=0.01, view_interval=0.01, metadata_interval=metadata_interval)
    tap.start()
    _wait(lambda: tap._next.get(0) == 3)
    return tap


def _wait(cond, timeout=10.0):
    wait_for(cond, timeout, interval=0.01)


def test_a_refused_tls_handshake_stays_the_reported_cause_of_later_transport_failures(monkeypatch):
    """Seen on Kafka 4.4: librdkafka reports a failed TLS handshake once, through error_cb, and
    the tap's later metadata calls fail with a bare _TRANSPORT. The page must keep saying what
    to fix (the TLS cause and its advice), not the consequence, until the tap succeeds again."""
    import confluent_kafka

    refused = threading.Event()

    class Client(ReplaceableClient):
        made = []

        def list_topics(self, topic=None, timeout=None):
            if refused.is_set() and not getattr(self, "told", False):
                self.told = True
                self.error_cb(confluent_kafka.KafkaError(confluent_kafka.KafkaError._SSL,
                                                         "SSL handshake failed: certificate verify failed"))
            if refused.is_set():
                raise confluent_kafka.KafkaException(confluent_kafka.KafkaError(confluent_kafka.KafkaError._TRANSPORT))
            return super().list_topics(topic, timeout)

    monkeypatch.setattr(confluent_kafka, "Consumer", Client)
    tap = _following_tap(metadata_interval=0.02)
    try:
        refused.set()
        _wait(lambda: tap.health().errors.get("transport", 0) + tap.health().errors.get("tls", 0) >= 4)
        h = tap.health()
        assert not h.up and "TLS handshake failed" in h.last_error, h
        assert h.errors.get("tls", 0) >= 2 and not h.errors.get("transport"), h.errors
        refused.clear()
        _wait(lambda: tap.health().up)
        assert tap._refusal is None
    finally:
        tap.stop()


def test_one_broker_lost_is_counted_not_a_failure(monkeypatch):
    """One broker of several gone: librdkafka reports its connection through error_cb while
    the tap reads on from the others. That is counted; txnwatch_up (and so /readyz) stays up.
    (Seen on a 3-node cluster with node 3 killed: /readyz flapped to 503 on each reconnect.)"""
    import confluent_kafka

    class Client(ReplaceableClient):
        made = []

        def consume(self, n, timeout):
            self.error_cb(confluent_kafka.KafkaError(confluent_kafka.KafkaError._TRANSPORT,
                                                     "127.0.0.1:9094/3: Connect failed: Connection refused"))
            return super().consume(n, timeout)

    monkeypatch.setattr(confluent_kafka, "Consumer", Client)
    tap = _following_tap(metadata_interval=30)
    try:
        _wait(lambda: tap.health().errors.get("transport", 0) >= 3)
        h = tap.health()
        assert h.up and not tap._lost_cluster, h
    finally:
        tap.stop()


def _refusing_client(refuse_metadata: threading.Event):
    """A client whose consume, once `refused` is set on it, reports a refused login once through
    error_cb, as librdkafka does when a re-authentication meets a token it has not yet
    replaced; while `refuse_metadata` is set its metadata requests find no broker to answer."""
    import confluent_kafka

    class Client(ReplaceableClient):
        made = []
        refused = threading.Event()
        refusals = 0

        def consume(self, n, timeout):
            if Client.refused.is_set() and Client.refusals == 0:
                Client.refusals += 1
                self.error_cb(confluent_kafka.KafkaError(confluent_kafka.KafkaError._AUTHENTICATION,
                                                         "SASL authentication error: token expired"))
            return super().consume(n, timeout)

        def unavailable(self) -> bool:
            return refuse_metadata.is_set()

    return Client


def test_a_login_refused_once_while_the_cluster_answers_is_counted_not_a_failure(monkeypatch):
    """An OAUTHBEARER session re-authenticated with the token librdkafka held a moment past
    its end: that one connection is refused, the next logs in with the fresh token. The tap
    asks the cluster before it calls itself down; it answers, so the refusal is counted."""
    import confluent_kafka

    Client = _refusing_client(threading.Event())
    monkeypatch.setattr(confluent_kafka, "Consumer", Client)
    tap = _following_tap(metadata_interval=30)
    try:
        Client.refused.set()
        _wait(lambda: tap.health().errors.get("auth", 0) == 1 and not tap._refusal_unconfirmed)
        h = tap.health()
        assert h.up and h.last_error is None and Client.refusals == 1, h
    finally:
        tap.stop()


def test_a_login_the_cluster_goes_on_refusing_makes_the_tap_down_in_its_words(monkeypatch):
    import confluent_kafka

    from txnwatch.exporter.tap import source

    monkeypatch.setattr(source, "REFUSAL_CHECK_SECONDS", 0.01)
    refusing = threading.Event()
    Client = _refusing_client(refusing)
    monkeypatch.setattr(confluent_kafka, "Consumer", Client)
    tap = _following_tap(metadata_interval=30)
    try:
        refusing.set()
        Client.refused.set()
        _wait(lambda: tap.health().errors.get("auth", 0) >= 1 and not tap._refusal_unconfirmed)
        h = tap.health()
        assert not h.up and "token expired" in h.last_error and tap._down, h
        refusing.clear()
        Client.made[0].batches.append(commit(0, 3, "l-1"))   # the cluster lets it in: records again
        _wait(lambda: tap.health().up)
    finally:
        tap.stop()
