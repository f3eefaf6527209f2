"""The transaction-log tap against a real Apache Kafka broker.

Two kinds of tests:

* Synthetic coordinator histories, written by tests/txnlog_encoder.py, pin the decoder
  and the state machine exactly, also for what no broker writes on demand (undecodable
  records, every status and version in one log). No client can write to the
  real `__transaction_state`: these tests point the tap (its `topic=`) at a regular topic
  of their own on the session broker.
* The real `__transaction_state`, written by Kafka's transaction coordinator for real
  transactional producers: commits, client aborts, fencing by a new instance, coordinator
  timeouts of a killed producer, expiration of idle ids, broker and tap restarts, a
  cluster whose log appears after the tap started, and the exporter serving all of it.
  Every test's transactional ids belong to an app of its own (`app_name`), so per-app
  counts are exact also on the shared session broker; tests that need other broker
  settings, restarts or a cluster without a log start a broker of their own.
"""

from __future__ import annotations

import logging
import random
import string
import time
import uuid
import zlib

import pytest
from confluent_kafka import KafkaException, Producer
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import Collector

from tests.integration.helpers import cluster_config, tap_caught_up
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
from txnwatch.exporter.tap.decoder import decode_key, decode_value
from txnwatch.exporter.tap.render import render_tap
from txnwatch.exporter.tap.source import TransactionLogTap
from txnwatch.metrics import FamilyWriter
from txnwatch_dev.kafka import SINGLE_NODE_DEFAULTS, kafka_release
from txnwatch_dev.net import wait_for
from txnwatch_dev.transactions.scenario import FENCED
from txnwatch_dev.transactions.txn_client import TxnClient, TxnClientError
from txnwatch_dev.transactions.txnlog_dump import read_records
from txnwatch_dev.transactions.workload import create_topics

pytestmark = [pytest.mark.integration]

PARTITIONS = 3
LOG_PARTITIONS = SINGLE_NODE_DEFAULTS["transaction.state.log.num.partitions"]


@pytest.fixture
def taps():
    """Start TransactionLogTaps in this process (cluster name "c1"); stopped at teardown."""
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
    return ms.get((name, tuple(sorted({"kafka_cluster": "c1", **labels}.items()))))


# ====================================================================== synthetic histories
class Log:
    """Writes coordinator records to a topic standing in for __transaction_state (the
    partition is chosen from the id, the record timestamp is the record's update time)."""

    def __init__(self, bootstrap: str, topic: str, partitions: int = PARTITIONS) -> None:
        self.producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
        self.topic = topic
        self.partitions = partitions

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
        self.producer.produce(self.topic, key=encode_key(tid), value=value,
                              partition=zlib.crc32(tid.encode()) % self.partitions, timestamp=last)

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
        """Ongoing, then the coordinator aborts with a fence bump `after` ms later (one bump on
        every line since Kafka 4.0.1)."""
        v = 1 if tv else 0
        bump = 1
        self.put(tid, ONGOING, epoch, start=t, last=t, timeout=timeout, version=v, tv=tv)
        self.put(tid, PREPARE_ABORT, epoch + bump, start=t, last=t + after, timeout=timeout, version=v, tv=tv)
        self.put(tid, COMPLETE_ABORT, epoch + bump, start=t, last=t + after + 10, timeout=timeout,
                 version=v, tv=tv)
        return epoch + bump


@pytest.fixture
def log_topic(broker, unique):
    """A topic of the test's own standing in for __transaction_state (PARTITIONS partitions)."""
    topic = unique("txnlog")
    create_topics(broker.bootstrap, [topic], partitions=PARTITIONS)
    return topic


def test_histories_render_every_derived_metric(broker, log_topic, taps):
    tap = taps(broker.bootstrap, topic=log_topic, cap=500, expiration_ms=3_600_000)
    wait_for(lambda: tap.view().rebuilt and tap.view().partitions == PARTITIONS, 30, what="tap rebuilt")
    log = Log(broker.bootstrap, log_topic)
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
    # an idle id taken over (a restart): a re-initialisation, no fence
    log.put("restarts-1", EMPTY, 0, last=t - 1000)
    e = log.commit("restarts-1", t, epoch=0)
    log.put("restarts-1", EMPTY, e + 1, last=t + 30_000)
    # TV2 (value v1): commits and an abort bump the epoch each time, then a fence by a new instance
    log.put(streams_id, EMPTY, 0, last=t - 1000, version=1, tv=2)
    e = log.commit(streams_id, t, epoch=0, tv=2)
    e = log.commit(streams_id, t + 2000, epoch=e, tv=2)
    e = log.abort(streams_id, t + 4000, epoch=e, tv=2)
    e = log.fenced(streams_id, t + 6000, e, after=3000, tv=2)
    log.put(streams_id, EMPTY, e + 1, last=t + 9100, version=1, tv=2)   # the new instance's InitProducerId
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
    assert val(ms, "kafka_transactional_id_reinitializations_total", app="inventory") == 0
    assert val(ms, "kafka_transaction_fencing_events_total", app="restarts", reason="new_instance") == 0
    assert val(ms, "kafka_transactional_id_reinitializations_total", app="restarts") == 1

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


def test_rebuild_does_not_count_history_then_counts_new_records(broker, log_topic, taps):
    log = Log(broker.bootstrap, log_topic)
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

    tap = taps(broker.bootstrap, topic=log_topic)
    wait_for(lambda: tap.view().rebuilt, 30, what="rebuild")
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


def test_waits_for_the_topic_then_counts_what_was_written_after_it_looked(broker, unique, taps, caplog, capfd):
    """The tap starts before its topic exists: it waits (up, no error) and, once the topic
    is there, counts the records stamped after the moment it first saw the topic absent,
    also those written before it noticed the topic (here: while its thread is paused, as
    a late metadata check would be), and rebuilds the older ones without counting."""
    caplog.set_level(logging.DEBUG, logger="txnwatch")
    topic = unique("txnlog-late")
    tap = taps(broker.bootstrap, topic=topic, client={"sasl.password": "s3cr3t-pw", "sasl.username": "someone"})
    # Waiting is not a failure: no transactional producer has run here yet.
    wait_for(lambda: tap.health().last_success is not None, 30, what="the tap to look for the topic")
    h = tap.health()
    assert h.up and not h.errors
    assert tap.view().topic_found is False and tap.view().partitions == 0
    assert tap.rebuilt   # nothing to rebuild
    tap.stop()           # the tap's next metadata check comes after the writes below

    create_topics(broker.bootstrap, [topic], partitions=PARTITIONS)
    log = Log(broker.bootstrap, topic)
    now = int(time.time() * 1000)
    log.commit("before-1", now - 600_000)       # stamped before the tap started: a log it found
    log.commit("late-1", now)                   # written after the tap looked: news
    log.abort("late-2", now + 10)
    log.flush()
    tap.start()
    wait_for(lambda: tap.view().partitions == PARTITIONS and tap.view().rebuilt and tap.view().lag_records == 0,
             30, what="partitions assigned and rebuilt")
    v = tap.view()
    assert dict(v.transactions) == {("late", "committed"): 1, ("late", "aborted"): 1}
    assert v.ids_per_app == {"before": 1, "late": 2}
    log.commit("late-1", now + 5000)
    log.flush()
    wait_for(lambda: tap.view().transactions.get(("late", "committed")) == 2, 30, what="commit counted")
    wait_for(lambda: tap.health().up and tap.view().lag_records == 0, 10, what="tap up at the end")
    assert dict(tap.view().transactions) == {("late", "committed"): 2, ("late", "aborted"): 1}
    assert "s3cr3t-pw" not in caplog.text
    assert "s3cr3t-pw" not in str(tap.health())
    out, err = capfd.readouterr()        # librdkafka logs to stderr
    assert "s3cr3t-pw" not in out + err


def test_a_recreated_log_is_read_again_without_counting(broker, log_topic, taps):
    """The log turns out shorter than the tap's position (deleted and recreated here; an
    unclean leader election truncates it likewise): after `truncation_grace` it is taken
    as truncated (counted in txnwatch_poll_errors_total{cause="log_truncated"}), read
    again without counting, and what comes after is counted once."""
    from confluent_kafka.admin import AdminClient

    tap = taps(broker.bootstrap, topic=log_topic, truncation_grace=1.0)
    wait_for(lambda: tap.view().rebuilt and tap.view().partitions == PARTITIONS, 30, what="tap rebuilt")
    log = Log(broker.bootstrap, log_topic, partitions=1)     # everything in partition 0
    t = int(time.time() * 1000)
    e = log.commit("rc-1", t)
    e = log.commit("rc-1", t + 2000, epoch=e)
    log.flush()
    wait_for(lambda: tap.view().transactions.get(("rc", "committed")) == 2, 30, what="two commits")
    assert tap._next[0] == 8

    tap.stop()   # the topic is deleted and recreated with a shorter log while the tap is away
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.delete_topics([log_topic], operation_timeout=30)[log_topic].result(30)
    wait_for(lambda: log_topic not in admin.list_topics(timeout=5).topics, 30, what="topic deleted")

    def recreate():
        create_topics(broker.bootstrap, [log_topic], partitions=PARTITIONS)
        return True

    wait_for(recreate, 30, what="topic recreated")
    log = Log(broker.bootstrap, log_topic, partitions=1)
    log.commit("rc-1", t)     # 4 records, the tap's position is 8
    log.flush()
    tap.start()
    wait_for(lambda: tap.health().errors.get("log_truncated") == 1 and tap.view().lag_records == 0, 60,
             what="truncation detected and the log read again")
    assert tap.view().transactions == {("rc", "committed"): 2}
    log.commit("rc-1", t + 10_000, epoch=e)
    log.flush()
    wait_for(lambda: tap.view().transactions.get(("rc", "committed")) == 3, 30, what="the new commit")
    wait_for(lambda: tap.view().lag_records == 0 and tap.health().up, 30, what="tap at the end of the log")
    assert tap.view().transactions == {("rc", "committed"): 3}
    assert tap.health().errors.get("log_truncated") == 1


def test_new_partitions_are_picked_up(broker, unique, taps):
    from confluent_kafka.admin import AdminClient, NewPartitions

    topic = unique("txnlog-grow")
    create_topics(broker.bootstrap, [topic], partitions=1)
    tap = taps(broker.bootstrap, topic=topic)
    wait_for(lambda: tap.view().rebuilt and tap.view().partitions == 1, 30, what="tap rebuilt")
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_partitions([NewPartitions(topic, 3)])[topic].result(15)
    wait_for(lambda: tap.view().partitions == 3, 30, what="new partitions assigned")
    p = Producer({"bootstrap.servers": broker.bootstrap})
    t = int(time.time() * 1000)
    for status, last in ((ONGOING, t), (PREPARE_COMMIT, t + 100), (COMPLETE_COMMIT, t + 110)):
        p.produce(topic, key=encode_key("np-1"), partition=2, timestamp=last, value=encode_value(
            producer_id=1, producer_epoch=0, timeout_ms=60_000, status=status, partitions=None,
            last_update_ms=last, start_ms=t))
    assert p.flush(15) == 0
    wait_for(lambda: tap.view().transactions.get(("np", "committed")) == 1 and tap.view().lag_records == 0,
             30, what="commit on partition 2")
    assert tap.view().transactions == {("np", "committed"): 1}


# ====================================================================== the real __transaction_state
def app_name(prefix: str) -> str:
    """An app of the test's own: ids `<app>-<n>` map to it (trailing numbers are stripped)
    and no other test's ids do, so its counts are exact on a shared broker."""
    return f"{prefix}-{''.join(random.choices(string.ascii_lowercase, k=8))}"


def txn_producer(bootstrap: str, tid: str, timeout_ms: int = 60_000) -> Producer:
    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": tid, "transaction.timeout.ms": timeout_ms,
                  "linger.ms": 0, "log_level": 3})
    p.init_transactions(60)
    return p


def open_txn(p: Producer, topic: str) -> None:
    """Begin and write one record: once it is delivered the partition is in the
    transaction, so the coordinator holds it Ongoing (and an abort reaches it)."""
    p.begin_transaction()
    p.produce(topic, value=b"x")
    assert p.flush(30) == 0


def end_txn(p: Producer, commit: bool) -> None:
    """Commit or abort; a retriable error (the broker was away) is retried, as the API says."""
    for attempt in range(3):
        try:
            p.commit_transaction(60) if commit else p.abort_transaction(60)
            return
        except KafkaException as exc:
            if not exc.args[0].retriable() or attempt == 2:
                raise


def run(p: Producer, topic: str, commits: int = 0, aborts: int = 0) -> None:
    for commit in [True] * commits + [False] * aborts:
        open_txn(p, topic)
        end_txn(p, commit)


ZERO = {"committed": 0, "aborted": 0, "fenced_new_instance": 0, "fenced_timeout": 0, "timeouts": 0,
        "expired": 0, "reinit": 0}


def tally(tap: TransactionLogTap, app: str) -> dict[str, int]:
    v = tap.view()
    return {"committed": v.transactions.get((app, "committed"), 0),
            "aborted": v.transactions.get((app, "aborted"), 0),
            "fenced_new_instance": v.fencing.get((app, "new_instance"), 0),
            "fenced_timeout": v.fencing.get((app, "timeout"), 0),
            "timeouts": v.timeouts.get(app, 0),
            "expired": v.expirations.get(app, 0),
            "reinit": v.reinits.get(app, 0)}


def wait_until_following(tap: TransactionLogTap) -> None:
    """Until the tap has rebuilt the log as of its start (or seen there is none yet):
    every transaction from now on is counted."""
    wait_for(lambda: tap.view().rebuilt and tap.health().up, 30, what="tap rebuilt and up")


def wait_tally(tap: TransactionLogTap, app: str, within: float = 60, **expected: int) -> None:
    """Until the tap, at the end of the log, shows exactly `expected` (the rest 0) for `app`."""
    want = {**ZERO, **expected}
    try:
        wait_for(lambda: tally(tap, app) == want and tap.view().lag_records == 0, within,
                 what=f"{app}: {expected}")
    except TimeoutError:
        pass
    v, h = tap.view(), tap.health()
    assert tally(tap, app) == want, f"lag {v.lag_records}, partitions {v.partitions}, health {h}"
    assert v.lag_records == 0, f"lag {v.lag_records}, partitions {v.partitions}, health {h}"


def hist_counts(tap: TransactionLogTap, app: str) -> dict[tuple[str, str], int]:
    """{(histogram, outcome): observations} for `app`."""
    v = tap.view()
    out = {}
    for name, hists in (("duration", v.duration), ("completion", v.completion)):
        for (a, outcome), h in hists.items():
            if a == app:
                out[(name, outcome)] = h.count
    return out


def history(bootstrap: str, tid: str) -> list[tuple[str, int, int]]:
    """(status, producer epoch, value version) of every record of `tid` in the real
    __transaction_state up to its end as of now (other producers may keep writing it), in
    order; tombstones as ("TOMBSTONE", -1, -1)."""
    out = []
    # one id lives in one partition: its records in offset order
    for _p, _offset, _ts, key, value in sorted(read_records(bootstrap), key=lambda r: (r[0], r[1])):
        if decode_key(key).transactional_id == tid:
            v = None if value is None else decode_value(value)
            out.append(("TOMBSTONE", -1, -1) if v is None else (v.status.name, v.producer_epoch, v.version))
    return out


def wait_completed(bootstrap: str, tid: str) -> None:
    """Until the coordinator has written the Complete* record of `tid`'s last transaction.
    It answers the client's EndTxn once Prepare* is written and writes Complete* after the
    markers: a tap started in between rightly counts that completion (it happens after the
    tap started), so a test that wants it to be history waits for it."""
    wait_for(lambda: history(bootstrap, tid)[-1][0] in ("COMPLETE_COMMIT", "COMPLETE_ABORT"), 30,
             what=f"{tid}'s transaction to be complete in the log")


def value_version(broker) -> int:
    """The value version the coordinator writes: 1 (flexible) from Kafka 4.0, 0 before."""
    return 1 if broker.release.major >= 4 else 0


def test_real_commits_and_aborts_are_counted_exactly(broker, unique, taps):
    """Commits and client aborts by real producers (librdkafka, a TV0 client): exact counts by
    outcome, one duration and one completion observation per transaction, and the history
    the broker writes is the one the state machine expects (no epoch change for a TV0
    client, even on a TV2 cluster; value version 1 from Kafka 4.0)."""
    topic = unique("tap-data")
    create_topics(broker.bootstrap, [topic])
    app = app_name("orders")
    p1 = txn_producer(broker.bootstrap, f"{app}-1")
    run(p1, topic, commits=1)                       # before the tap: state, not news
    wait_completed(broker.bootstrap, f"{app}-1")
    tap = taps(broker.bootstrap)
    wait_for(lambda: tap.view().rebuilt and tap.view().topic_found, 30, what="tap rebuilt")
    assert tally(tap, app) == ZERO and tap.view().ids_per_app.get(app) == 1

    p2 = txn_producer(broker.bootstrap, f"{app}-2")
    run(p1, topic, commits=3, aborts=1)
    run(p2, topic, commits=1, aborts=1)
    wait_tally(tap, app, committed=4, aborted=2)
    assert hist_counts(tap, app) == {("duration", "committed"): 4, ("duration", "aborted"): 2,
                                     ("completion", "committed"): 4, ("completion", "aborted"): 2}
    v = tap.view()
    assert v.ids_per_app[app] == 2 and not [t for t in v.open_txns if t.app == app]
    h = history(broker.bootstrap, f"{app}-2")
    v = value_version(broker)
    assert h == [("EMPTY", 0, v), ("ONGOING", 0, v), ("PREPARE_COMMIT", 0, v), ("COMPLETE_COMMIT", 0, v),
                 ("ONGOING", 0, v), ("PREPARE_ABORT", 0, v), ("COMPLETE_ABORT", 0, v)]


def test_real_fence_by_a_new_instance(broker, unique, taps):
    """A second producer with the same transactional.id initialises while the first has a
    transaction open: the coordinator aborts it with an epoch bump (fencing the first),
    counted once as reason="new_instance", not as a timeout. A third that takes the idle id
    over is a re-initialisation, not a fence."""
    topic = unique("tap-data")
    create_topics(broker.bootstrap, [topic])
    app = app_name("inventory")
    tid = f"{app}-1"
    tap = taps(broker.bootstrap)
    wait_until_following(tap)
    first = txn_producer(broker.bootstrap, tid)
    run(first, topic, commits=1)
    open_txn(first, topic)
    wait_for(lambda: [t for t in tap.view().open_txns if t.transactional_id == tid], 30,
             what="the open transaction in the tap")
    second = txn_producer(broker.bootstrap, tid)     # fences the first
    wait_tally(tap, app, committed=1, aborted=1, fenced_new_instance=1)
    with pytest.raises(KafkaException) as err:
        first.commit_transaction(30)
    assert err.value.args[0].fatal() or "fenced" in str(err.value).lower()
    run(second, topic, commits=1)
    wait_tally(tap, app, committed=2, aborted=1, fenced_new_instance=1)
    assert hist_counts(tap, app) == {("duration", "committed"): 2, ("duration", "aborted"): 1,
                                     ("completion", "committed"): 2, ("completion", "aborted"): 1}
    # Ongoing(e) -> PrepareAbort(e+1) -> CompleteAbort(e+1), then the new instance's
    # InitProducerId retry bumps once more: Empty(e+2) (every line since Kafka 4.0.1)
    h = history(broker.bootstrap, tid)
    v = value_version(broker)
    assert h == [("EMPTY", 0, v), ("ONGOING", 0, v), ("PREPARE_COMMIT", 0, v), ("COMPLETE_COMMIT", 0, v),
                 ("ONGOING", 0, v), ("PREPARE_ABORT", 1, v), ("COMPLETE_ABORT", 1, v), ("EMPTY", 2, v),
                 ("ONGOING", 2, v), ("PREPARE_COMMIT", 2, v), ("COMPLETE_COMMIT", 2, v)], h
    third = txn_producer(broker.bootstrap, tid)      # takes the idle id over
    wait_tally(tap, app, committed=2, aborted=1, fenced_new_instance=1, reinit=1)
    third.flush(1)


@pytest.mark.parametrize("line", ["4.x", "3.9"])
def test_real_restart_after_the_clients_own_abort_is_a_reinit_and_only_the_cut_is_a_fence(
        line, broker, own_broker, unique, taps, tmp_path):
    """The Java client of the broker's release (TV2 on 4.x, TV0 on 3.9) commits 3 times,
    aborts 2 of its own transactions and exits; a new process starts at once: a re-init, also
    under TV2, where its own abort bumped the epoch as a fence's does. A second instance then
    cuts the restarted one's open transaction off: the one new_instance fence."""
    b = broker if line == "4.x" else own_broker(release=kafka_release("3.9"))
    topic = unique("tap-data")
    create_topics(b.bootstrap, [topic])
    app = app_name("crashloop")
    tid = f"{app}-1"
    tap = taps(b.bootstrap)
    wait_until_following(tap)
    started: list[TxnClient] = []

    def instance() -> TxnClient:
        c = TxnClient("java", b.bootstrap, tid, workdir=tmp_path, release=b.release, transaction_timeout_ms=20_000)
        started.append(c)
        return c.start()

    try:
        first = instance()
        first.init()
        for outcome in ("commit", "commit", "abort", "commit", "abort"):
            first.begin()
            first.send(topic, 0, outcome)
            (first.commit if outcome == "commit" else first.abort)()
        first.close()
        restarted = instance()
        restarted.init()
        wait_tally(tap, app, committed=3, aborted=2, reinit=1)
        restarted.begin()
        restarted.send(topic, 0, "zombie")
        wait_for(lambda: [t for t in tap.view().open_txns if t.transactional_id == tid], 30,
                 what="the open transaction in the tap")
        second = instance()
        second.init()
        with pytest.raises(TxnClientError) as err:
            restarted.commit()
        assert err.value.error in FENCED
        second.begin()
        second.send(topic, 0, "second")
        second.commit()
        wait_tally(tap, app, committed=4, aborted=3, fenced_new_instance=1, reinit=1)
    finally:
        for c in started:
            c.kill()
    # the client's own aborts bump the epoch only under TV2; the fence's abort does on every line
    tv2 = b.release.major >= 4
    epochs = [(s, e) for s, e, _v in history(b.bootstrap, tid)]
    own_abort, restart, fence = epochs[13:16], epochs[16], epochs[17:21]
    e = 5 if tv2 else 0
    assert own_abort == [("ONGOING", e - 1 if tv2 else e), ("PREPARE_ABORT", e), ("COMPLETE_ABORT", e)], epochs
    assert restart == ("EMPTY", e + 1), epochs
    assert fence == [("ONGOING", e + 1), ("PREPARE_ABORT", e + 2), ("COMPLETE_ABORT", e + 2), ("EMPTY", e + 3)], epochs


def test_real_timeout_of_a_killed_producer(broker, unique, taps, producers):
    """A producer SIGKILLed with a transaction open: after its transaction.timeout.ms (3 s)
    the coordinator aborts it with an epoch bump: one coordinator timeout, one fence with
    reason="timeout", one aborted transaction that lasted longer than the timeout."""
    topic = unique("tap-data")
    create_topics(broker.bootstrap, [topic])
    app = app_name("payments")
    tid = f"{app}-1"
    tap = taps(broker.bootstrap)
    wait_until_following(tap)
    p = producers(broker.bootstrap, topic, tid, action="commit", count=2, then_hang=True, timeout_ms=3000)
    p.wait_line("open")
    p.kill()
    wait_tally(tap, app, committed=2, aborted=1, fenced_timeout=1, timeouts=1)
    v = tap.view()
    # the coordinator aborts only once start + timeout is past: longer than the timeout
    aborted = v.duration[(app, "aborted")]
    assert aborted.count == 1 and aborted.sum > 3.0
    assert v.completion[(app, "aborted")].count == 1
    assert not [t for t in v.open_txns if t.app == app]
    h = history(broker.bootstrap, tid)
    v = value_version(broker)
    assert h[-3:] == [("ONGOING", 0, v), ("PREPARE_ABORT", 1, v), ("COMPLETE_ABORT", 1, v)], h


def test_real_expiration_of_idle_ids(own_broker, unique, taps):
    """The coordinator writes a tombstone for an id idle (Empty or Complete*) for longer than
    transactional.id.expiration.ms (5 s here): counted once, and the id leaves the tap's
    state. An id with a transaction open meanwhile is not idle: it stays."""
    b = own_broker(properties={"transactional.id.expiration.ms": 5000,
                               "transaction.remove.expired.transaction.cleanup.interval.ms": 1000})
    topic = unique("tap-data")
    create_topics(b.bootstrap, [topic])
    app = app_name("idle")
    idle, busy = txn_producer(b.bootstrap, f"{app}-1"), txn_producer(b.bootstrap, f"{app}-2")
    tap = taps(b.bootstrap, expiration_ms=5000)
    wait_until_following(tap)
    assert tap.view().ids_per_app.get(app) == 2
    run(idle, topic, commits=1)
    open_txn(busy, topic)
    wait_tally(tap, app, committed=1, expired=1, within=60)
    assert tap.view().ids_per_app.get(app) == 1
    assert [t.transactional_id for t in tap.view().open_txns if t.app == app] == [f"{app}-2"]
    v = value_version(b)
    assert history(b.bootstrap, f"{app}-1")[-3:] == [("PREPARE_COMMIT", 0, v), ("COMPLETE_COMMIT", 0, v),
                                                     ("TOMBSTONE", -1, -1)]


def test_real_log_created_after_the_tap_started_is_counted(own_broker, unique, taps):
    """A new cluster: the tap starts before any transactional producer and waits for
    __transaction_state. The first producer creates it and commits N transactions before
    the tap's next metadata check (its thread is paused meanwhile, so that this happens
    every time): all N are counted, none twice."""
    b = own_broker()
    topic = unique("tap-data")
    create_topics(b.bootstrap, [topic])
    app = app_name("first")
    tap = taps(b.bootstrap)
    wait_for(lambda: tap.health().last_success is not None and tap.view().rebuilt, 30,
             what="the tap to look for the log")
    assert tap.health().up and not tap.view().topic_found
    tap.stop()
    p = txn_producer(b.bootstrap, f"{app}-1")
    run(p, topic, commits=5, aborts=1)
    tap.start()
    wait_tally(tap, app, committed=5, aborted=1)
    assert tap.view().topic_found and tap.view().partitions == LOG_PARTITIONS
    run(p, topic, commits=1)
    wait_tally(tap, app, committed=6, aborted=1)


def test_real_broker_restart_during_traffic_never_double_counts(own_broker, unique, taps, caplog, capfd):
    """The broker is SIGKILLed after some transactions and with one open: the tap reports
    the outage, keeps its state, resumes at its own positions when the broker is back
    (Kafka keeps the log: what it read is not counted again), and counts exactly the
    transactions completed after, the one open across the restart included."""
    caplog.set_level(logging.INFO, logger="txnwatch")
    b = own_broker()
    topic = unique("tap-data")
    create_topics(b.bootstrap, [topic])
    app = app_name("restart")
    # the open transaction must outlive the outage (up to 30 + 90 + 90 s of waits below): with
    # a 60 s timeout a slow restart let the coordinator abort it, which the tap rightly counted
    p = txn_producer(b.bootstrap, f"{app}-1", timeout_ms=600_000)
    tap = taps(b.bootstrap)
    wait_until_following(tap)
    run(p, topic, commits=2, aborts=1)
    open_txn(p, topic)
    wait_tally(tap, app, committed=2, aborted=1)
    wait_for(lambda: [t for t in tap.view().open_txns if t.app == app], 30, what="the open transaction")

    b.kill()
    wait_for(lambda: not tap.health().up, 30, what="the tap to report the outage")
    b.start()
    wait_for(lambda: tap.health().up and tap.view().lag_records == 0, 90, what="the tap to follow again")
    wait_tally(tap, app, committed=2, aborted=1)       # nothing counted again, state kept
    assert len([t for t in tap.view().open_txns if t.app == app]) == 1
    end_txn(p, commit=True)                              # the transaction open across the restart
    run(p, topic, commits=1)
    wait_tally(tap, app, committed=4, aborted=1)
    assert hist_counts(tap, app) == {("duration", "committed"): 4, ("duration", "aborted"): 1,
                                     ("completion", "committed"): 4, ("completion", "aborted"): 1}
    assert not tap.health().errors.get("log_truncated")
    # librdkafka's lines about the outage come through Python logging, not its own stderr
    assert any(r.name == "txnwatch.librdkafka" for r in caplog.records)
    _out, err = capfd.readouterr()
    assert "txnwatch-tap-c1#consumer" not in err


def test_readyz_once_every_source_has_reported(own_broker, exporter_factory):
    """/readyz says 200 only once /metrics has every source's first attempt (txnwatch_up of
    the poller and the tap, and txnwatch_tap_rebuilt). Checked over the startup window of an
    exporter on a cluster whose __transaction_state exists but is empty."""
    from kafka.admin import KafkaAdminClient
    from kafka.errors import TransactionalIdNotFoundError

    b = own_broker()
    admin = KafkaAdminClient(bootstrap_servers=b.bootstrap)
    def coordinator_answers() -> bool:
        # FindCoordinator for a transactional id creates __transaction_state; nothing is written
        try:
            admin.describe_transactions(["nobody"])
        except TransactionalIdNotFoundError:
            pass   # the coordinator answered: its log exists
        return True

    try:
        wait_for(coordinator_answers, 30, what="the transaction coordinator")
    finally:
        admin.close()
    exp = exporter_factory(cluster_config(b.bootstrap, transaction_log_tap=True))
    seen_ready = 0
    deadline = time.monotonic() + 60
    while seen_ready < 20 and time.monotonic() < deadline:
        # both polled all the time, as a scraper and a readiness probe would
        status, _ = exp.get("/readyz")
        m = exp.metrics()
        if status != 200:
            continue
        # a first attempt shows as a success's timestamp or a counted error
        shown = {s: (m.get_value("txnwatch_last_success_timestamp_seconds", kafka_cluster="test", source=s),
                     sum(v for _lb, v in m.select("txnwatch_poll_errors_total", kafka_cluster="test", source=s)))
                 for s in ("poller", "tap")}
        assert all(ts is not None or errors for ts, errors in shown.values()), \
            f"/readyz said 200, /metrics then said {shown}"
        seen_ready += 1
    assert seen_ready == 20, "the exporter never became ready"
    m = exp.wait_metric(lambda m: m.get_value("txnwatch_up", kafka_cluster="test", source="tap") == 1
                        and m.get_value("txnwatch_tap_rebuilt", kafka_cluster="test") == 1, 60, what="the tap up")
    m = exp.metrics()
    assert m.get_value("txnwatch_tap_partitions", kafka_cluster="test") == LOG_PARTITIONS
    assert m.get_value("txnwatch_tap_records_applied_total", kafka_cluster="test") == 0


def test_exporter_serves_the_real_tap_and_a_restarted_one_counts_only_new_completions(
        broker, unique, exporter_factory):
    """`txnwatch serve` with `transaction_log_tap: true` on the real __transaction_state:
    the tap's series on /metrics for commits, aborts, a fence, an open transaction and idle
    ids. Then the exporter is SIGKILLed and started again: its tap rebuilds the log without
    counting (counters start again at 0, ids and the open transaction are known at once)
    and counts exactly the completions after it."""
    topic = unique("tap-data")
    create_topics(broker.bootstrap, [topic])
    orders, inventory, hang = app_name("orders"), app_name("inventory"), app_name("hang")
    o1 = txn_producer(broker.bootstrap, f"{orders}-1")
    run(o1, topic, commits=1)                          # history: rebuilt, never counted
    wait_completed(broker.bootstrap, f"{orders}-1")
    config = cluster_config(broker.bootstrap, [topic], transaction_log_tap=True,
                            default_transactional_id_expiration_ms=3_600_000)
    exp = exporter_factory(config)
    exp.wait_metric(tap_caught_up, 60, what="the poller and the tap up, the tap rebuilt")

    def g(m, name, **labels):
        return m.get_value(name, kafka_cluster="test", **labels)

    m = exp.metrics()
    assert g(m, "kafka_transactional_ids", app=orders) == 1
    assert g(m, "kafka_transactions_total", app=orders, outcome="committed") == 0

    o2 = txn_producer(broker.bootstrap, f"{orders}-2")
    run(o1, topic, commits=2)
    run(o2, topic, aborts=1)
    fenced = txn_producer(broker.bootstrap, f"{inventory}-1")
    open_txn(fenced, topic)
    m = exp.wait_metric(lambda m: g(m, "kafka_transaction_open", app=inventory) == 1, 30,
                        what="the transaction to be fenced, open")
    newer = txn_producer(broker.bootstrap, f"{inventory}-1")
    h = txn_producer(broker.bootstrap, f"{hang}-1", timeout_ms=300_000)
    open_txn(h, topic)                                   # stays open (aborted at the end)

    def settled(m):
        return (g(m, "kafka_transactions_total", app=orders, outcome="committed") == 2
                and g(m, "kafka_transactions_total", app=orders, outcome="aborted") == 1
                and g(m, "kafka_transaction_fencing_events_total", app=inventory, reason="new_instance") == 1
                and g(m, "kafka_transactions_total", app=inventory, outcome="aborted") == 1
                and g(m, "kafka_transaction_open", app=hang) == 1
                and g(m, "txnwatch_tap_lag_records") == 0)

    m = exp.wait_metric(settled, 60, what="the tap series on /metrics")
    assert g(m, "kafka_transaction_duration_seconds_count", app=orders, outcome="committed") == 2
    assert g(m, "kafka_transaction_duration_seconds_count", app=orders, outcome="aborted") == 1
    assert g(m, "kafka_transaction_completion_seconds_count", app=orders, outcome="committed") == 2
    assert g(m, "kafka_transaction_fencing_events_total", app=inventory, reason="timeout") == 0
    assert g(m, "kafka_transaction_timeouts_total", app=inventory) == 0
    assert g(m, "kafka_transaction_open", app=orders) == 0
    # seconds old with a 5 min timeout, it carries no signal: its app's "__other__" (the per-id budget)
    assert 0 < g(m, "kafka_transaction_timeout_headroom_seconds", app=hang, transactional_id="__other__") <= 300
    assert g(m, "kafka_transaction_timeout_headroom_seconds", app=hang, transactional_id=f"{hang}-1") is None
    assert 0 < g(m, "kafka_transactional_id_expiration_headroom_seconds", app=orders,
                 transactional_id=f"{orders}-2") <= 3600
    assert g(m, "kafka_transactional_ids", app=orders) == 2
    assert g(m, "txnwatch_tap_partitions") == LOG_PARTITIONS
    assert g(m, "txnwatch_up", source="tap") == 1

    exp.kill()                                            # SIGKILL; a new exporter starts from scratch
    exp = exporter_factory(config)
    exp.wait_metric(tap_caught_up, 60, what="the poller and the tap up again, the tap rebuilt")
    m = exp.metrics()
    for outcome in ("committed", "aborted"):
        assert g(m, "kafka_transactions_total", app=orders, outcome=outcome) == 0
        assert g(m, "kafka_transactions_total", app=inventory, outcome=outcome) == 0
    assert g(m, "kafka_transaction_fencing_events_total", app=inventory, reason="new_instance") == 0
    assert g(m, "kafka_transactional_ids", app=orders) == 2
    assert g(m, "kafka_transaction_open", app=hang) == 1       # known from the log at once
    run(o2, topic, commits=1)
    run(newer, topic, commits=1)
    m = exp.wait_metric(lambda m: g(m, "kafka_transactions_total", app=orders, outcome="committed") == 1
                        and g(m, "kafka_transactions_total", app=inventory, outcome="committed") == 1
                        and g(m, "txnwatch_tap_lag_records") == 0, 60, what="the new commits only")
    assert g(m, "kafka_transactions_total", app=orders, outcome="aborted") == 0
    assert g(m, "kafka_transaction_duration_seconds_count", app=orders, outcome="committed") == 1
    assert g(m, "kafka_transaction_fencing_events_total", app=inventory, reason="new_instance") == 0
    end_txn(h, commit=False)
    assert "Traceback" not in exp.log()
