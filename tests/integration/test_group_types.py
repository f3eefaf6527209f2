"""Consumer groups of every type on the session's Kafka 4.x broker: a classic group and a
KIP-848 `consumer` group (librdkafka, group.protocol=consumer) read_committed behind an open
transaction, each with its lag against the LSO and the HWM; and a KIP-932 share group (the
release's console share consumer), which has no committed offsets: left out of OffsetFetch,
counted in kafka_cluster_groups{group_type="share"} and named on the page, never an error per poll."""

from __future__ import annotations

import html

import pytest
from confluent_kafka import Consumer, Producer

from tests import compat
from tests.integration.helpers import cluster_config
from txnwatch_dev.kafka import finalized_features, share_consumer
from txnwatch_dev.net import wait_for
from txnwatch_dev.transactions.workload import create_topics

pytestmark = [pytest.mark.integration]


def consume_and_commit(bootstrap: str, topic: str, group: str, protocol: str, n: int) -> None:
    """Join `group` with `group.protocol`, read `n` records read_committed, commit, leave."""
    settings = {"bootstrap.servers": bootstrap, "group.id": group, "group.protocol": protocol,
                "auto.offset.reset": "earliest", "enable.auto.commit": False, "isolation.level": "read_committed",
                "log_level": 3}
    if protocol == "classic":
        settings["session.timeout.ms"] = 6000
    c = Consumer(settings)
    try:
        c.subscribe([topic])
        got = []
        wait_for(lambda: (m := c.poll(0.5)) is not None and not m.error() and got.append(m) is None
                 and len(got) >= n, 60, interval=0, what=f"{group} to read {n} records")
        c.commit(asynchronous=False)
    finally:
        c.close()


def test_classic_consumer_and_share_groups(broker, unique, exporter_factory, tmp_path, request):
    features = finalized_features(broker.bootstrap)
    assert features.get("group.version", 0) >= 1 and features.get("share.version", 0) >= 1, features
    topic = unique("grp-types")
    create_topics(broker.bootstrap, [topic])
    p = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": unique("grp-types-writer"),
                  "log_level": 3})
    p.init_transactions(30)
    p.begin_transaction()
    for i in range(4):
        p.produce(topic, f"c{i}".encode(), partition=0)
    p.commit_transaction(30)
    classic, kip848, share = unique("grp-classic"), unique("grp-848"), unique("grp-share")
    consume_and_commit(broker.bootstrap, topic, classic, "classic", 4)
    consume_and_commit(broker.bootstrap, topic, kip848, "consumer", 4)
    # an open transaction: the LSO stays at 5 (4 records + the commit marker), the HWM moves on
    p.begin_transaction()
    for i in range(3):
        p.produce(topic, f"o{i}".encode(), partition=0)
    p.flush(30)
    member = share_consumer(broker.bootstrap, topic, share, tmp_path / "share")
    try:
        exp = exporter_factory(cluster_config(broker.bootstrap, [topic], describe_configs_every=1))

        def lags(m, group: str) -> tuple:
            at = dict(topic=topic, partition=0)
            return (m.get_value("kafka_consumergroup_committed_offset", group=group, **at),
                    m.get_value("kafka_consumergroup_read_committed_lag_offsets", group=group, **at),
                    m.get_value("kafka_consumergroup_read_uncommitted_lag_offsets", group=group, **at))

        # each group read all 4 committed records: its committed offset is at the commit marker (4)
        # or past it (5); either way nothing but the marker lies below the LSO, a lag of 0 once read
        m = exp.wait_metric(lambda m: m.get_value("kafka_partition_high_watermark", topic=topic, partition=0) == 8
                            and all(None not in lags(m, g) and lags(m, g)[1] == 0 for g in (classic, kip848)), 60,
                            what="both groups' lags with the transaction open")
        lso = m.get_value("kafka_partition_last_stable_offset", topic=topic, partition=0)
        assert lso == 5          # 4 committed records and their marker; the open transaction starts at 5
        for g in (classic, kip848):
            committed, rc, ru = lags(m, g)
            assert committed in (4, 5) and (rc, ru) == (0, 8 - committed), (g, committed, rc, ru)
        m = exp.wait_metric(lambda m: (m.get_value("kafka_cluster_groups", group_type="share") or 0) >= 1, 60,
                            what="the share group counted")
        assert (m.get_value("kafka_cluster_groups", group_type="consumer") or 0) >= 1
        assert m.get_value("kafka_cluster_feature_level", feature="transaction.version") == 2
        assert m.get_value("kafka_cluster_feature_level", feature="share.version") == features["share.version"]
        assert (m.get_value("kafka_cluster_groups", group_type="classic") or 0) >= 1
        assert m.get_value("kafka_consumergroup_committed_offset", group=share, topic=topic, partition=0) is None
        page = html.unescape(exp.get("/")[1])
        assert "share groups (KIP-932)" in page and share in page
        # polls go on without a group error
        polls = m.get_value("txnwatch_poll_duration_seconds", source="poller")
        exp.wait_metric(lambda m: m.get_value("txnwatch_poll_duration_seconds", source="poller") != polls, 30,
                        what="more polls")
        errors = {lbl["cause"]: v for lbl, v in exp.metrics().select("txnwatch_poll_errors_total") if v}
        assert not [c for c in errors if "group" in c], errors
        compat.record(request.config, "features", "4.x", "Group types", "classic, consumer, share")
    finally:
        member.kill()
        member.wait(10)
        p.abort_transaction(30)
