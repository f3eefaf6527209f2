"""Horizontal sharding on the session's Kafka broker: three `txnwatch serve --shard N
--total-shards 3` replicas and one unsharded exporter watch the same cluster. The replicas'
per-partition series are disjoint and together equal the single exporter's; the cluster's
facts come from shard 0 only; the tap's per-app counters, split by `__transaction_state`
partition, sum to the single exporter's; killing one replica loses only its share.
"""

from __future__ import annotations

import pytest

from tests.integration.helpers import cluster_config
from txnwatch_dev.transactions.workload import create_topics, watermarks

pytestmark = [pytest.mark.integration]

PARTITION_SERIES = ("kafka_partition_high_watermark", "kafka_partition_last_stable_offset",
                    "kafka_partition_lso_lag_offsets", "kafka_transaction_hanging")


def partition_series(m, topic: str) -> dict:
    return {(n, lb): v for (n, lb), v in m.items() if n in PARTITION_SERIES and dict(lb).get("topic") == topic}


def shows_offsets(m, topic: str, truth: dict[int, tuple[int, int]]) -> bool:
    """Every HWM / LSO series of `topic` in `m` equals the broker's (`truth`: partition -> (LSO, HWM))."""
    series = partition_series(m, topic)
    want = {"kafka_partition_last_stable_offset": 0, "kafka_partition_high_watermark": 1}
    return bool(series) and all(v == truth[int(dict(lb)["partition"])][want[n]]
                                for (n, lb), v in series.items() if n in want)


def commits(m, app: str) -> float:
    return sum(v for _, v in m.select("kafka_transactions_total", app=app, outcome="committed"))


def test_three_replicas_export_what_one_does_and_a_dead_one_loses_only_its_share(broker, unique, producers,
                                                                                   exporter_factory):
    topic, tid = unique("shard"), unique("shard-tx")
    app = "shard-app"
    create_topics(broker.bootstrap, [topic], partitions=9)
    cfg = cluster_config(broker.bootstrap, [topic], transaction_log_tap=True, granularity="partition",
                         app_rules=[{"match": f"^{tid}-", "app": app}])
    single = exporter_factory(cfg)
    shards = [exporter_factory(cfg, extra_args=["--shard", str(i), "--total-shards", "3"]) for i in range(3)]
    everyone = [single, *shards]
    for e in everyone:
        e.wait_metric(lambda m: m.get_value("txnwatch_tap_rebuilt") == 1 and m.get_value("txnwatch_up",
                                                                                          source="poller") == 1,
                      60, what="the tap rebuilt and the poller up")
    for i in range(6):   # ids spread over __transaction_state partitions, records over the topic's
        producers(broker.bootstrap, topic, f"{tid}-{i}", action="commit", count=2, records=9).wait()
    # each exporter polls on its own clock: compare them once each shows the broker's final offsets
    truth = watermarks(broker.bootstrap, topic, 9)
    want = single.wait_metric(lambda m: commits(m, app) == 12 and len(partition_series(m, topic)) == 36
                              and shows_offsets(m, topic, truth), 60, what="the single exporter's view")

    got = [s.wait_metric(lambda m: shows_offsets(m, topic, truth), 60, what="a shard's partitions")
           for s in shards]
    parts = [partition_series(m, topic) for m in got]
    for i, a in enumerate(parts):
        for b in parts[i + 1:]:
            assert not a.keys() & b.keys()                 # disjoint
    union = {k: v for p in parts for k, v in p.items()}
    assert union == partition_series(want, topic)          # together: what one exporter exports
    assert all(len(p) >= 4 for p in parts)                 # 9 partitions spread over 3 replicas

    # cluster-level facts: shard 0 only
    assert [m.get_value("kafka_cluster_brokers") for m in got] == [want.get_value("kafka_cluster_brokers"), None, None]
    assert [m.get_value("txnwatch_shard_info", shard=i, total_shards=3) for i, m in enumerate(got)] == [1, 1, 1]
    assert want.get_value("txnwatch_shard_info") is None

    # the tap's per-app counters split by log partition: they sum to the single exporter's
    def shard_commits() -> float:
        return sum(commits(s.metrics(), app) for s in shards)

    from txnwatch_dev.net import wait_for

    wait_for(lambda: shard_commits() == 12, 60, what="the shards' commits to add up to 12")

    # one replica dies: the others keep exporting exactly their shares
    shards[1].kill()
    for i in (0, 2):
        m = shards[i].metrics()
        assert partition_series(m, topic).keys() == parts[i].keys()


def test_at_signal_granularity_each_topic_comes_whole_from_one_replica(broker, unique, exporter_factory):
    """The default granularity sums a topic's quiet partitions into one series per topic:
    split by topic, each topic's series (and its groups') come from one replica, and the
    replicas together export exactly the single exporter's series, none twice."""
    from confluent_kafka import Producer

    from txnwatch_dev.transactions.workload import commit_group_offsets

    topics = [unique(f"whole{i}") for i in range(6)]
    create_topics(broker.bootstrap, topics, partitions=3)
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    for i, t in enumerate(topics):
        for p in range(3):
            for _ in range(i + p + 1):
                producer.produce(t, b"x", partition=p)
    producer.flush(30)
    group = unique("whole-group")
    commit_group_offsets(broker.bootstrap, group, [(t, p, 1) for t in topics for p in range(3)])
    cfg = cluster_config(broker.bootstrap, topics, groups={"include": [group]})
    single = exporter_factory(cfg)
    shards = [exporter_factory(cfg, extra_args=["--shard", str(i), "--total-shards", "3"]) for i in range(3)]
    truth = {t: watermarks(broker.bootstrap, t, 3) for t in topics}
    families = PARTITION_SERIES + ("kafka_consumergroup_committed_offset",)

    def series(m) -> dict:
        return {(n, lb): v for (n, lb), v in m.items() if n in families and dict(lb).get("topic") in truth}

    def shows_all(m, of: set[str]) -> bool:
        found = series(m)
        hwm = {dict(lb)["topic"]: v for (n, lb), v in found.items() if n == "kafka_partition_high_watermark"}
        lag = {dict(lb)["topic"] for (n, lb), v in found.items() if n == "kafka_consumergroup_committed_offset"}
        return hwm == {t: sum(h for _, h in truth[t].values()) for t in of} and lag == of

    want = series(single.wait_metric(lambda m: shows_all(m, set(topics)), 60, what="the single exporter's topics"))
    assert {dict(lb)["partition"] for _, lb in want} == {"__other__"}    # quiet: one series per topic
    got = []
    for s in shards:
        m = s.wait_metric(lambda m: m.get_value("txnwatch_up", source="poller") == 1
                          and shows_all(m, {dict(lb)["topic"] for _, lb in series(m)}), 60, what="a shard's topics")
        got.append(series(m))
    owned = [{dict(lb)["topic"] for _, lb in g} for g in got]
    assert sum(len(o) for o in owned) == len(topics) and set().union(*owned) == set(topics)   # each once
    assert {k: v for g in got for k, v in g.items()} == want
