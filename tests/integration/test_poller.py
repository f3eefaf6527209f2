"""Issue 2: the admin poller against the real (Tansu) broker."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.integration.conftest import cluster_config
from txnwatch.devtools.broker import TansuBroker
from txnwatch.devtools.net import wait_for
from txnwatch.devtools.workload import commit_group_offset, create_topics

pytestmark = pytest.mark.integration


def test_committed_and_aborted_transactions_leave_lso_at_hwm(broker, producers, unique, exporter_factory):
    topic = unique("done")
    create_topics(broker.bootstrap, [topic], partitions=1)
    producers(broker.bootstrap, topic, unique("tx-commit"), action="commit", count=3, records=2).wait()
    producers(broker.bootstrap, topic, unique("tx-abort"), action="abort", count=2, records=2).wait()
    exp = exporter_factory(cluster_config(broker.bootstrap, [topic]))
    m = exp.wait_metric(lambda m: (m.get_value("kafka_partition_high_watermark", topic=topic) or 0) > 0,
                        what="HWM of the topic")
    hwm = m.get_value("kafka_partition_high_watermark", topic=topic, partition=0)
    assert hwm >= 6  # 3 committed transactions of 2 records (+ markers on real Kafka)
    assert m.get_value("kafka_partition_last_stable_offset", topic=topic, partition=0) == hwm
    assert m.get_value("kafka_partition_lso_lag_messages", topic=topic, partition=0) == 0
    assert m.get_value("kafka_partition_lso_stalled_seconds", topic=topic, partition=0) == 0
    assert m.get_value("kafka_transaction_hanging", topic=topic, partition=0) == 0


def test_killed_producer_stalls_lso_and_blocks_read_committed_group(broker, producers, unique, exporter_factory):
    topic = unique("hang")
    group = unique("reader")
    create_topics(broker.bootstrap, [topic], partitions=2)
    # Two committed transactions, then one left open and the producer SIGKILLed.
    p = producers(broker.bootstrap, topic, unique("tx-hang"), action="commit", count=2, records=3,
                  partition=1, then_hang=True)
    p.wait_line("open")
    p.kill()
    commit_group_offset(broker.bootstrap, group, topic, 1, 0)
    exp = exporter_factory(cluster_config(broker.bootstrap, [topic], hanging_threshold_seconds=2))
    first = exp.wait_metric(lambda m: (m.get_value("kafka_partition_lso_lag_messages", topic=topic,
                                                   partition=1) or 0) > 0, what="positive LSO lag")
    # Tansu reports LSO 0 while any transaction is open on the partition; real Kafka reports
    # the first offset of the oldest open transaction. Either way it sits below the HWM.
    hwm = first.get_value("kafka_partition_high_watermark", topic=topic, partition=1)
    lso = first.get_value("kafka_partition_last_stable_offset", topic=topic, partition=1)
    assert lso < hwm and first.get_value("kafka_partition_lso_lag_messages", topic=topic, partition=1) == hwm - lso
    assert first.get_value("kafka_partition_lso_lag_messages", topic=topic, partition=0) == 0
    stalled0 = first.get_value("kafka_partition_lso_stalled_seconds", topic=topic, partition=1)
    assert stalled0 > 0
    later = exp.wait_metric(lambda m: m.get_value("kafka_partition_lso_stalled_seconds", topic=topic,
                                                  partition=1) > stalled0 + 1, what="stalled seconds to grow")
    # The group committed offset 0: against the HWM it looks like it has records to read,
    # against the LSO it can read only what is below the open transaction.
    rc = later.get_value("kafka_consumergroup_lag_messages", group=group, topic=topic, partition=1,
                         isolation="read_committed")
    ru = later.get_value("kafka_consumergroup_lag_messages", group=group, topic=topic, partition=1,
                         isolation="read_uncommitted")
    assert rc == lso and ru == hwm and rc < ru
    hung = exp.wait_metric(lambda m: m.get_value("kafka_transaction_hanging", topic=topic, partition=1) == 1,
                           what="the partition to count as hanging (LSO-stall fallback)")
    assert hung.get_value("kafka_transaction_hanging", topic=topic, partition=0) == 0
    # Tansu lacks KIP-664: the capability switch says so and the page explains the fallback.
    for api in ("list_transactions", "describe_transactions", "describe_producers"):
        assert hung.get_value("txnwatch_capability", api=api) == 0
    status, page = exp.get("/")
    assert status == 200 and "stalled last stable offsets" in page and f"{topic}-1" in page

    # txnwatch check reports the partition and the group behind it, and exits 2.
    out = subprocess.run([sys.executable, "-m", "txnwatch.cli", "check", "--bootstrap-servers", broker.bootstrap,
                          "--hanging-threshold", "1", "--json"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 2, out.stderr
    report = json.loads(out.stdout)
    cluster = report["clusters"][0]
    stalled = {(p["topic"], p["partition"]): p for p in cluster["stalled_partitions"]}
    assert (topic, 1) in stalled and (topic, 0) not in stalled
    assert [g["group"] for g in stalled[(topic, 1)]["groups_behind"]] == [group]
    assert any(h["topic"] == topic and h["partition"] == 1 for h in cluster["hanging"])
    text = subprocess.run([sys.executable, "-m", "txnwatch.cli", "check", "--bootstrap-servers", broker.bootstrap,
                           "--hanging-threshold", "1"], capture_output=True, text=True, timeout=60)
    assert text.returncode == 2 and f"{topic}-1" in text.stdout and group in text.stdout


def test_check_exits_2_when_cluster_unreachable():
    from txnwatch.devtools.net import free_port

    out = subprocess.run([sys.executable, "-m", "txnwatch.cli", "check", "--bootstrap-servers",
                          f"127.0.0.1:{free_port()}", "--poll-timeout", "2"], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 2
    assert "cannot reach" in out.stdout


def test_broker_down_at_start_then_dies_mid_run_is_survived(tmp_path, unique, exporter_factory):
    b = TansuBroker(log_path=tmp_path / "tansu.log")
    # Down at start: serving, not ready, up=0, errors counted.
    exp = exporter_factory(cluster_config(b.bootstrap, poll_timeout_seconds=1))
    m = exp.wait_metric(lambda m: m.get_value("txnwatch_poll_errors_total", source="poller") or 0,
                        what="poll errors while the broker is down")
    assert m.get_value("txnwatch_up", source="poller") == 0
    assert exp.get("/readyz")[0] == 503
    b.start()
    try:
        topic = unique("survive")
        create_topics(b.bootstrap, [topic])
        exp.wait_metric(lambda m: m.get_value("txnwatch_up", source="poller") == 1, what="recovery")
        wait_for(lambda: exp.get("/readyz")[0] == 200, 30, what="ready")
        for round_ in range(2):  # dies mid-run, twice
            b.kill()
            before = exp.metrics().get_value("txnwatch_poll_errors_total", source="poller") or 0
            m = exp.wait_metric(lambda m: m.get_value("txnwatch_up", source="poller") == 0,
                                what=f"up=0 after kill #{round_ + 1}")
            assert exp.get("/readyz")[0] == 503
            assert exp.get("/healthz")[0] == 200
            status, page = exp.get("/")
            assert status == 200 and "down" in page and "stale since" in page
            m = exp.wait_metric(lambda m, before=before: (m.get_value("txnwatch_poll_errors_total",
                                                                      source="poller") or 0) > before,
                                what="errors to be counted")
            b.start()
            create_topics(b.bootstrap, [topic])
            exp.wait_metric(lambda m: m.get_value("txnwatch_up", source="poller") == 1
                            and m.get_value("kafka_partition_high_watermark", topic=topic) is not None,
                            timeout=60, what=f"recovery after restart #{round_ + 1}")
            wait_for(lambda: exp.get("/readyz")[0] == 200, 30, what="ready again")
        assert exp.proc.poll() is None
        log = exp.log()
        assert "Traceback" not in log
    finally:
        b.stop()
