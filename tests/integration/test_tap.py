"""The transaction-log tap against a real (Tansu) broker.

Tansu has no coordinator log of its own, so each test gets a fresh broker, creates a
topic named `__transaction_state` and writes records encoded by the test-side encoder
(tests/txnlog_encoder.py) for realistic coordinator histories.
"""

from __future__ import annotations

import logging
import time
import uuid
import zlib

import pytest
from confluent_kafka import Producer
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import Collector

from tests.txnlog_encoder import (
    COMPLETE_ABORT,
    COMPLETE_COMMIT,
    EMPTY,
    ONGOING,
    PREPARE_ABORT,
    PREPARE_COMMIT,
    encode_key,
    encode_value,
)
from txnwatch.apps import AppResolver
from txnwatch.devtools.broker import TansuBroker
from txnwatch.devtools.net import wait_for
from txnwatch.devtools.workload import create_topics
from txnwatch.exporter.tap.render import render_tap
from txnwatch.exporter.tap.source import TransactionLogTap
from txnwatch.metrics import FamilyWriter

pytestmark = pytest.mark.integration

TOPIC = "__transaction_state"
PARTITIONS = 3


@pytest.fixture
def tansu(tmp_path):
    """A broker of the test's own: each test needs its own `__transaction_state`."""
    b = TansuBroker(log_path=tmp_path / "tansu.log").start()
    yield b
    b.stop()


@pytest.fixture
def taps():
    started: list[TransactionLogTap] = []

    def start(bootstrap: str, **kw) -> TransactionLogTap:
        kw.setdefault("idle_scan_interval", 0.2)
        kw.setdefault("metadata_interval", 1.0)
        kw.setdefault("view_interval", 0.1)
        kw.setdefault("poll_timeout", 0.2)
        client = {"bootstrap.servers": bootstrap, **kw.pop("client", {})}
        tap = TransactionLogTap("c1", client, AppResolver(), kw.pop("cap", 500), **kw)
        tap.start()
        started.append(tap)
        return tap

    yield start
    for t in started:
        t.stop()


class Log:
    """Writes coordinator records to __transaction_state (partition chosen from the id)."""

    def __init__(self, bootstrap: str, partitions: int = PARTITIONS, flush_each: bool = False) -> None:
        self.producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
        self.partitions = partitions
        # Tansu answers ListOffsets(latest) with the last *batch's* base offset + 1, so the
        # tap's "end offsets as of start" are only exact when every record is its own batch
        # (Kafka answers with the log end offset). Histories written before a tap starts
        # use one batch per record.
        self.flush_each = flush_each

    def put(self, tid: str, status: int | None = None, epoch: int = 0, *, start: int = -1, last: int,
            timeout: int = 60_000, pid: int = 4000, version: int = 0, tv: int = 0, raw: bytes | None = None):
        if raw is not None:
            value = raw
        elif status is None:
            value = None   # tombstone
        else:
            parts = [("orders", [0, 1])] if status in (ONGOING, PREPARE_COMMIT, PREPARE_ABORT) else None
            value = encode_value(version=version, producer_id=pid, producer_epoch=epoch, timeout_ms=timeout,
                                 status=status, partitions=parts, last_update_ms=last, start_ms=start,
                                 client_transaction_version=tv)
        self.producer.produce(TOPIC, key=encode_key(tid), value=value,
                              partition=zlib.crc32(tid.encode()) % self.partitions, timestamp=last)
        if self.flush_each:
            self.flush()

    def flush(self) -> None:
        assert self.producer.flush(15) == 0

    # realistic histories -------------------------------------------------------------
    def commit(self, tid, t, epoch=0, tv=0, took=1200, complete=15):
        v = 1 if tv else 0
        b = 1 if tv >= 2 else 0
        self.put(tid, ONGOING, epoch, start=t, last=t, version=v, tv=tv)
        self.put(tid, ONGOING, epoch, start=t, last=t + 5, version=v, tv=tv)
        self.put(tid, PREPARE_COMMIT, epoch + b, start=t, last=t + took, version=v, tv=tv)
        self.put(tid, COMPLETE_COMMIT, epoch + b, start=t, last=t + took + complete, version=v, tv=tv)
        return epoch + b

    def abort(self, tid, t, epoch=0, tv=0, took=300, complete=8):
        v = 1 if tv else 0
        b = 1 if tv >= 2 else 0
        self.put(tid, ONGOING, epoch, start=t, last=t, version=v, tv=tv)
        self.put(tid, PREPARE_ABORT, epoch + b, start=t, last=t + took, version=v, tv=tv)
        self.put(tid, COMPLETE_ABORT, epoch + b, start=t, last=t + took + complete, version=v, tv=tv)
        return epoch + b

    def fenced(self, tid, t, epoch, after, timeout=60_000, tv=0):
        """Ongoing, then the coordinator aborts with a fence bump `after` ms later."""
        v = 1 if tv else 0
        bump = 2 if tv >= 2 else 1
        self.put(tid, ONGOING, epoch, start=t, last=t, timeout=timeout, version=v, tv=tv)
        self.put(tid, PREPARE_ABORT, epoch + bump, start=t, last=t + after, timeout=timeout, version=v, tv=tv)
        self.put(tid, COMPLETE_ABORT, epoch + bump, start=t, last=t + after + 10, timeout=timeout,
                 version=v, tv=tv)
        return epoch + bump


def scrape(tap: TransactionLogTap, now: float | None = None) -> dict:
    """Render the tap's view through FamilyWriter and prometheus_client's text format."""
    w = FamilyWriter()
    render_tap(w, "c1", tap.view(), now=now, health=tap.health())
    assert not w.invalid, w.invalid

    class _C(Collector):
        def collect(self):
            return w.families()

    reg = CollectorRegistry(auto_describe=False)
    reg.register(_C())
    out = {}
    for fam in text_string_to_metric_families(generate_latest(reg).decode()):
        for s in fam.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def val(ms: dict, name: str, **labels):
    return ms.get((name, tuple(sorted({"cluster": "c1", **labels}.items()))))


def test_histories_render_every_derived_metric(tansu, taps):
    create_topics(tansu.bootstrap, [TOPIC], partitions=PARTITIONS)
    tap = taps(tansu.bootstrap, cap=500, expiration_ms=3_600_000)
    wait_for(lambda: tap.rebuilt and tap.view().partitions == PARTITIONS, 30, what="tap rebuilt")
    log = Log(tansu.bootstrap)
    now = int(time.time() * 1000)
    t = now - 120_000
    streams_id = f"streams-app-{uuid.uuid4()}-1"

    # commits and an abort (TV0, value v0)
    log.put("orders-1", EMPTY, 0, last=t - 1000)
    e = log.commit("orders-1", t, took=1200, complete=15)
    e = log.commit("orders-1", t + 2000, epoch=e, took=800, complete=25)
    log.put("orders-2", EMPTY, 0, last=t - 1000)
    log.abort("orders-2", t, took=300, complete=8)
    # timeout abort: 10 s timeout, the coordinator aborts 14 s after start (TV0)
    log.put("payments-1", EMPTY, 3, last=t - 1000)
    log.fenced("payments-1", t, 3, after=14_000, timeout=10_000)
    # fence by a new instance under TV0 (v0 values): 5 s after start, timeout 60 s
    log.put("inventory-1", EMPTY, 7, last=t - 1000)
    e = log.fenced("inventory-1", t, 7, after=5000)
    log.put("inventory-1", EMPTY, e + 1, last=t + 5100)     # the new instance's InitProducerId retry
    # TV2 (value v1): commits and an abort bump the epoch each time, then a fence by a new instance
    log.put(streams_id, EMPTY, 0, last=t - 1000, version=1, tv=2)
    e = log.commit(streams_id, t, epoch=0, tv=2)
    e = log.commit(streams_id, t + 2000, epoch=e, tv=2)
    e = log.abort(streams_id, t + 4000, epoch=e, tv=2)
    e = log.fenced(streams_id, t + 6000, e, after=3000, tv=2)
    # an expiration, an open transaction, and undecodable records
    log.put("old-1", EMPTY, 0, last=t - 10_000)
    log.put("old-1", None, last=t)
    log.put("hang-1", EMPTY, 0, last=now - 50_000)
    log.put("hang-1", ONGOING, 0, start=now - 40_000, last=now - 40_000, timeout=90_000)
    log.put("bad-1", raw=b"\x00\x09" + b"\x00" * 40, last=now)    # value version 9
    log.put("bad-2", raw=b"\x00\x00\x00", last=now)             # truncated v0
    log.flush()

    wait_for(lambda: tap.view().applied >= 40 and tap.view().lag_records == 0, 30, what="records applied")
    wait_for(lambda: tap.view().idle.scanned_at_ms and tap.view().idle.scanned_at_ms > now, 10,
             what="an idle scan after the writes")
    scrape_now = time.time()
    ms = scrape(tap, now=scrape_now)
    now_ms = scrape_now * 1000

    assert val(ms, "kafka_transactions_total", app="orders", outcome="committed") == 2
    assert val(ms, "kafka_transactions_total", app="orders", outcome="aborted") == 1
    assert val(ms, "kafka_transaction_duration_seconds_count", app="orders", outcome="committed") == 2
    assert val(ms, "kafka_transaction_duration_seconds_sum", app="orders", outcome="committed") == \
        pytest.approx(1.215 + 0.825)
    assert val(ms, "kafka_transaction_duration_seconds_bucket", app="orders", outcome="committed",
               le="1.0") == 1
    assert val(ms, "kafka_transaction_completion_seconds_sum", app="orders", outcome="committed") == \
        pytest.approx(0.040)
    assert val(ms, "kafka_transaction_completion_seconds_sum", app="orders", outcome="aborted") == \
        pytest.approx(0.008)
    assert val(ms, "kafka_transaction_completion_seconds_bucket", app="orders", outcome="aborted",
               le="0.01") == 1

    assert val(ms, "kafka_transaction_fencing_events_total", app="payments", reason="timeout") == 1
    assert val(ms, "kafka_transaction_fencing_events_total", app="payments", reason="new_instance") == 0
    assert val(ms, "kafka_transaction_timeouts_total", app="payments") == 1
    assert val(ms, "kafka_transactions_total", app="payments", outcome="aborted") == 1

    assert val(ms, "kafka_transaction_fencing_events_total", app="inventory", reason="new_instance") == 1
    assert val(ms, "kafka_transaction_fencing_events_total", app="inventory", reason="timeout") == 0
    assert val(ms, "kafka_transaction_timeouts_total", app="inventory") == 0

    # TV2: three completions with epoch bumps are no fences; the real fence counts once
    assert val(ms, "kafka_transactions_total", app="streams-app", outcome="committed") == 2
    assert val(ms, "kafka_transactions_total", app="streams-app", outcome="aborted") == 2
    assert val(ms, "kafka_transaction_fencing_events_total", app="streams-app", reason="new_instance") == 1
    assert val(ms, "kafka_transaction_fencing_events_total", app="streams-app", reason="timeout") == 0

    assert val(ms, "kafka_transactional_id_expirations_total", app="old") == 1
    assert val(ms, "kafka_transactional_ids", app="old") is None
    assert val(ms, "kafka_transactional_ids", app="orders") == 2
    assert val(ms, "kafka_transactional_ids", app="streams-app") == 1

    assert val(ms, "kafka_transaction_open", app="hang") == 1
    assert val(ms, "kafka_transaction_open", app="orders") == 0
    assert val(ms, "kafka_transaction_oldest_open_age_seconds", app="hang") == \
        pytest.approx((now_ms - (now - 40_000)) / 1000, abs=0.01)
    assert val(ms, "kafka_transaction_timeout_headroom_seconds", app="hang", transactional_id="hang-1") == \
        pytest.approx((now - 40_000 + 90_000 - now_ms) / 1000, abs=0.01)
    # idle ids against transactional.id.expiration.ms (1 h here): orders-2 idle since t + 308
    assert val(ms, "kafka_transactional_id_expiration_headroom_seconds", app="orders",
               transactional_id="orders-2") == pytest.approx(3600 - (now_ms - (t + 308)) / 1000, abs=0.01)
    assert val(ms, "kafka_transactional_id_expiration_headroom_seconds", app="hang",
               transactional_id="hang-1") is None   # open: not idle

    assert val(ms, "txnwatch_tap_records_skipped_total", reason="unknown_value_version") == 1
    assert val(ms, "txnwatch_tap_records_skipped_total", reason="truncated") == 1
    assert val(ms, "txnwatch_tap_records_applied_total") == tap.view().applied
    assert val(ms, "txnwatch_tap_lag_records") == 0
    assert val(ms, "txnwatch_tap_partitions") == PARTITIONS
    assert val(ms, "txnwatch_tap_rebuilt") == 1
    assert val(ms, "txnwatch_up", source="tap") == 1


def test_rebuild_does_not_count_history_then_counts_new_records(tansu, taps):
    create_topics(tansu.bootstrap, [TOPIC], partitions=PARTITIONS)
    log = Log(tansu.bootstrap, flush_each=True)
    t = int(time.time() * 1000) - 60_000
    # history written before the tap starts
    e = log.commit("billing-1", t)
    log.commit("billing-1", t + 2000, epoch=e)
    log.fenced("billing-2", t, 0, after=20_000, timeout=10_000)
    log.put("billing-3", EMPTY, 0, last=t)
    log.put("billing-3", None, last=t + 1)
    log.put("billing-4", EMPTY, 0, last=t)
    log.put("billing-4", ONGOING, 0, start=t + 10, last=t + 10)
    log.put("billing-4", PREPARE_COMMIT, 0, start=t + 10, last=t + 900)   # completes after start
    log.flush()

    tap = taps(tansu.bootstrap)
    wait_for(lambda: tap.rebuilt, 30, what="rebuild")
    ms = scrape(tap)
    assert val(ms, "txnwatch_tap_rebuilt") == 1
    assert val(ms, "kafka_transactions_total", app="billing", outcome="committed") == 0
    assert val(ms, "kafka_transactions_total", app="billing", outcome="aborted") == 0
    assert val(ms, "kafka_transaction_fencing_events_total", app="billing", reason="timeout") == 0
    assert val(ms, "kafka_transactional_id_expirations_total", app="billing") == 0
    assert val(ms, "kafka_transactional_ids", app="billing") == 3
    assert val(ms, "kafka_transaction_open", app="billing") == 1

    # records after start are counted
    log.put("billing-4", COMPLETE_COMMIT, 0, start=t + 10, last=t + 950)
    log.commit("billing-1", t + 30_000, epoch=e)
    log.put("billing-2", None, last=t + 40_000)
    log.flush()
    wait_for(lambda: tap.view().transactions.get(("billing", "committed")) == 2, 30, what="new commits")
    wait_for(lambda: tap.view().expirations.get("billing") == 1, 30, what="expiration")
    ms = scrape(tap)
    assert val(ms, "kafka_transactions_total", app="billing", outcome="committed") == 2
    assert val(ms, "kafka_transaction_completion_seconds_sum", app="billing", outcome="committed") == \
        pytest.approx(0.05 + 0.015)
    assert val(ms, "kafka_transaction_open", app="billing") == 0
    assert val(ms, "kafka_transactional_ids", app="billing") == 2


def test_waits_for_the_topic_then_follows_it(tansu, taps, caplog, capfd):
    caplog.set_level(logging.DEBUG, logger="txnwatch")
    tap = taps(tansu.bootstrap, client={"sasl.password": "s3cr3t-pw", "sasl.username": "someone"})
    # Waiting is not a failure: no transactional producer has run here yet.
    wait_for(lambda: tap.health().last_success is not None, 30, what="the tap to look for the topic")
    h = tap.health()
    assert h.up and not h.errors
    assert tap.view().topic_found is False and tap.view().partitions == 0
    assert tap.rebuilt   # nothing to rebuild
    create_topics(tansu.bootstrap, [TOPIC], partitions=PARTITIONS)
    wait_for(lambda: tap.view().partitions == PARTITIONS and tap.rebuilt, 30, what="partitions assigned")
    log = Log(tansu.bootstrap)
    log.commit("late-1", int(time.time() * 1000))
    log.flush()
    wait_for(lambda: tap.view().transactions.get(("late", "committed")) == 1, 30, what="commit counted")
    wait_for(lambda: tap.health().up, 10, what="tap up")
    assert tap.view().partitions == PARTITIONS
    assert "s3cr3t-pw" not in caplog.text
    assert "s3cr3t-pw" not in str(tap.health())
    out, err = capfd.readouterr()        # librdkafka logs to stderr
    assert "s3cr3t-pw" not in out + err


def test_broker_outage_keeps_state_and_never_double_counts(tansu, taps):
    create_topics(tansu.bootstrap, [TOPIC], partitions=1)
    tap = taps(tansu.bootstrap)
    wait_for(lambda: tap.rebuilt and tap.view().partitions == 1, 30, what="tap rebuilt")
    log = Log(tansu.bootstrap, partitions=1)
    t = int(time.time() * 1000)
    e = log.commit("svc-1", t)
    log.put("svc-2", EMPTY, 0, last=t)
    log.put("svc-2", ONGOING, 0, start=t, last=t)
    log.flush()
    wait_for(lambda: tap.view().transactions.get(("svc", "committed")) == 1, 30, what="commit")

    tansu.kill()
    wait_for(lambda: not tap.health().up, 30, what="tap reports the outage")
    # Tansu's memory storage comes back empty: the log is shorter than the tap's position
    tansu.start()
    create_topics(tansu.bootstrap, [TOPIC], partitions=1)
    wait_for(lambda: tap.health().errors.get("log_truncated"), 60, what="truncation detected")
    assert tap.view().ids_per_app.get("svc") == 2          # state kept
    assert tap.view().transactions[("svc", "committed")] == 1
    log = Log(tansu.bootstrap, partitions=1)
    log.commit("svc-1", t + 10_000, epoch=e)
    log.flush()
    wait_for(lambda: tap.view().transactions.get(("svc", "committed")) == 2, 60, what="commit after outage")
    wait_for(lambda: tap.health().up, 30, what="tap up again")
    assert tap.view().transactions[("svc", "committed")] == 2
    assert len(tap.view().open_txns) == 1


def test_broker_restart_with_the_log_written_back_never_double_counts(tansu, taps, caplog, capfd):
    """A broker with persistent storage comes back with the log the tap already read
    (Tansu's memory storage forgets it: the test writes it back, same offsets). The tap
    reconnects while only part of it is back: a log short of the tap's position for a
    moment is not a truncation, so the records written back are not counted again, and
    the next new record is counted once. librdkafka's lines go through Python logging."""
    caplog.set_level(logging.INFO, logger="txnwatch")
    create_topics(tansu.bootstrap, [TOPIC], partitions=1)
    tap = taps(tansu.bootstrap, truncation_grace=30.0)
    wait_for(lambda: tap.rebuilt and tap.view().partitions == 1, 30, what="tap rebuilt")
    t = int(time.time() * 1000)

    def counts():
        tx = tap.view().transactions
        return tx.get(("svc", "committed"), 0), tx.get(("svc", "aborted"), 0)

    Log(tansu.bootstrap, partitions=1, flush_each=True).commit("svc-1", t)
    Log(tansu.bootstrap, partitions=1, flush_each=True).abort("svc-2", t + 1000)
    wait_for(lambda: counts() == (1, 1), 30, what="a commit and an abort")
    position = tap._next[0]

    tansu.kill()
    wait_for(lambda: not tap.health().up, 30, what="tap reports the outage")
    tansu.start()
    create_topics(tansu.bootstrap, [TOPIC], partitions=1)
    Log(tansu.bootstrap, partitions=1, flush_each=True).commit("svc-1", t)      # part of the log is back
    wait_for(lambda: 0 in tap._short, 60, what="the tap to see the log short of its position")
    Log(tansu.bootstrap, partitions=1, flush_each=True).abort("svc-2", t + 1000)   # the rest
    wait_for(lambda: not tap._short and tap.health().up and tap.view().lag_records == 0, 60,
             what="the tap to follow on from its position")
    assert tap._next[0] == position
    assert counts() == (1, 1)                               # nothing counted again
    Log(tansu.bootstrap, partitions=1, flush_each=True).commit("svc-1", t + 10_000)   # new
    wait_for(lambda: counts()[0] == 2, 30, what="the new commit")
    wait_for(lambda: tap.view().lag_records == 0, 30, what="the tap at the end of the log")
    assert counts() == (2, 1)
    assert not tap.health().errors.get("log_truncated")
    # librdkafka's lines about the outage (disconnects, refused connects: which ones depends
    # on timing) come through Python logging...
    assert any(r.name == "txnwatch.librdkafka" for r in caplog.records)
    _out, err = capfd.readouterr()
    assert "txnwatch-tap-c1#consumer" not in err             # not printed by librdkafka itself


def test_new_partitions_are_picked_up(tansu, taps):
    from confluent_kafka.admin import AdminClient, NewPartitions

    create_topics(tansu.bootstrap, [TOPIC], partitions=1)
    tap = taps(tansu.bootstrap)
    wait_for(lambda: tap.rebuilt and tap.view().partitions == 1, 30, what="tap rebuilt")
    admin = AdminClient({"bootstrap.servers": tansu.bootstrap})
    try:
        admin.create_partitions([NewPartitions(TOPIC, 3)])[TOPIC].result(15)
    except Exception as exc:  # noqa: BLE001
        pytest.skip(f"the test broker cannot add partitions: {exc}")
    wait_for(lambda: tap.view().partitions == 3, 30, what="new partitions assigned")
    p = Producer({"bootstrap.servers": tansu.bootstrap})
    t = int(time.time() * 1000)
    for status, last in ((ONGOING, t), (PREPARE_COMMIT, t + 100), (COMPLETE_COMMIT, t + 110)):
        p.produce(TOPIC, key=encode_key("np-1"), partition=2, timestamp=last, value=encode_value(
            producer_id=1, producer_epoch=0, timeout_ms=60_000, status=status, partitions=None,
            last_update_ms=last, start_ms=t))
    assert p.flush(15) == 0
    wait_for(lambda: tap.view().transactions.get(("np", "committed")) == 1, 30, what="commit on partition 2")


def test_exporter_serves_tap_metrics(tansu, exporter_factory):
    """`txnwatch serve` with `transaction_log_tap: true`: every derived series on /metrics."""
    from tests.integration.conftest import cluster_config

    create_topics(tansu.bootstrap, [TOPIC], partitions=PARTITIONS)
    pre = Log(tansu.bootstrap, flush_each=True)
    t_pre = int(time.time() * 1000) - 300_000
    pre.commit("legacy-1", t_pre)                      # history: rebuilt, never counted
    exp = exporter_factory(cluster_config(tansu.bootstrap, transaction_log_tap=True,
                                          default_transactional_id_expiration_ms=3_600_000))
    exp.wait_metric(lambda m: m.get_value("txnwatch_tap_rebuilt", cluster="test") == 1, 60,
                    what="tap rebuilt")

    log = Log(tansu.bootstrap)
    now = int(time.time() * 1000)
    t = now - 120_000
    e = log.commit("orders-1", t, took=1200, complete=15)
    log.commit("orders-1", t + 2000, epoch=e, took=800, complete=25)
    log.abort("orders-2", t, took=300, complete=8)
    log.fenced("payments-1", t, 3, after=14_000, timeout=10_000)            # timeout (TV0)
    log.fenced("inventory-1", t, 7, after=5000)                             # new instance (TV0)
    sid = f"streams-app-{uuid.uuid4()}-1"
    e = log.commit(sid, t, tv=2)
    e = log.abort(sid, t + 2000, epoch=e, tv=2)
    log.fenced(sid, t + 4000, e, after=2000, tv=2)                          # new instance (TV2)
    log.put("legacy-1", None, last=now - 1000)                              # expiration
    log.put("hang-1", ONGOING, 0, start=now - 40_000, last=now - 40_000, timeout=90_000)
    log.put("bad-1", raw=b"\x00\x05\x00", last=now)
    log.flush()

    def ready(m):
        return (m.get_value("kafka_transactional_id_expirations_total", cluster="test", app="legacy") == 1
                and m.get_value("txnwatch_tap_records_skipped_total", cluster="test") == 1
                and m.get_value("kafka_transaction_fencing_events_total", cluster="test", app="streams-app",
                                reason="new_instance") == 1
                and m.get_value("kafka_transactional_id_expiration_headroom_seconds", cluster="test",
                                transactional_id="orders-2") is not None)

    m = exp.wait_metric(ready, 60, what="tap metrics on /metrics")
    g = lambda name, **lb: m.get_value(name, cluster="test", **lb)  # noqa: E731
    assert g("kafka_transactions_total", app="orders", outcome="committed") == 2
    assert g("kafka_transactions_total", app="orders", outcome="aborted") == 1
    assert g("kafka_transactions_total", app="legacy", outcome="committed") in (None, 0)
    assert g("kafka_transaction_duration_seconds_sum", app="orders", outcome="committed") == \
        pytest.approx(2.04)
    assert g("kafka_transaction_completion_seconds_count", app="orders", outcome="committed") == 2
    assert g("kafka_transaction_completion_seconds_sum", app="orders", outcome="committed") == \
        pytest.approx(0.04)
    assert g("kafka_transaction_fencing_events_total", app="payments", reason="timeout") == 1
    assert g("kafka_transaction_timeouts_total", app="payments") == 1
    assert g("kafka_transaction_fencing_events_total", app="inventory", reason="new_instance") == 1
    assert g("kafka_transaction_fencing_events_total", app="inventory", reason="timeout") == 0
    assert g("kafka_transactions_total", app="streams-app", outcome="committed") == 1
    assert g("kafka_transactions_total", app="streams-app", outcome="aborted") == 2
    assert g("kafka_transaction_open", app="hang") == 1
    assert g("kafka_transaction_timeout_headroom_seconds", app="hang", transactional_id="hang-1") == \
        pytest.approx(50, abs=15)
    assert g("kafka_transaction_oldest_open_age_seconds", app="hang") == pytest.approx(40, abs=15)
    assert g("kafka_transactional_id_expiration_headroom_seconds", app="orders",
             transactional_id="orders-2") == pytest.approx(3600 - 120, abs=20)
    assert g("kafka_transactional_ids", app="orders") == 2
    assert g("txnwatch_tap_records_skipped_total", reason="unknown_value_version") == 1
    assert g("txnwatch_tap_partitions") == PARTITIONS
    assert g("txnwatch_up", source="tap") == 1
