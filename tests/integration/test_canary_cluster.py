"""The canary on a 3-node Apache Kafka cluster: healthy, then __transaction_state below its
min ISR (two brokers stopped), then back; and one canary partition's leader stopped."""

from __future__ import annotations

import pytest

from tests.integration.helpers import cluster_config
from txnwatch.alerts.config import AlertConfig
from txnwatch.alerts.rules import generate_alerts
from txnwatch_dev.kafka import KafkaCluster
from txnwatch_dev.net import wait_for
from txnwatch_dev.prometheus import PrometheusProcess

pytestmark = [pytest.mark.integration]

INTERVAL = 3.0


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = KafkaCluster(3, workdir=tmp_path_factory.mktemp("canary-cluster")).start()
    # A new cluster creates __transaction_state at its first InitProducerId and loads it
    # (COORDINATOR_LOAD_IN_PROGRESS meanwhile): the canary would rightly count that as a
    # failed init. "Healthy" starts once a transactional producer can initialise.
    from confluent_kafka import Producer

    Producer({"bootstrap.servers": c.bootstrap, "transactional.id": "cluster-ready"}).init_transactions(120)
    yield c
    c.cleanup()


def visible(m, partition: int) -> float:
    return m.get_value("txnwatch_canary_visibility_seconds_count", cluster="test", partition=partition) or 0


def failures(m) -> dict[tuple[str, str], float]:
    return {(lb["stage"], lb["error"]): v for lb, v in m.select("txnwatch_canary_failures_total", cluster="test")}


def rounds_tried(m) -> float:
    """Rounds ended (committed or aborted) plus rounds failed (a visibility timeout is not a round)."""
    ended = sum(v for _lb, v in m.select("txnwatch_canary_rounds_total", cluster="test"))
    return ended + sum(v for (stage, _e), v in failures(m).items() if stage != "visibility_timeout")


def test_canary_fails_below_min_isr_alerts_and_recovers_by_itself(cluster, tmp_path, unique, exporter_factory):
    cfg = cluster_config(cluster.bootstrap, [unique("none")],
                         canary={"interval_seconds": INTERVAL, "abort_every": 4, "topic": unique("canary")})
    exp = exporter_factory(cfg)
    rules = generate_alerts(tmp_path / "rules", AlertConfig(canary_failing_seconds=3 * INTERVAL,
                                                            canary_failure_window="30s"))[0]
    prom = PrometheusProcess([f"127.0.0.1:{exp.port}"], [rules], interval="1s",
                             data_dir=tmp_path / "prometheus").start()
    try:
        # healthy: one canary partition per broker, each visible
        m = exp.wait_metric(lambda m: all(visible(m, p) >= 2 for p in (0, 1, 2)), 90,
                            what="canary records visible on all three partitions")
        assert not failures(m) and m.get_value("txnwatch_canary_visibility_violations_total", cluster="test") == 0

        cluster.node(3).stop()
        cluster.node(2).stop()   # returns once node 2 has exited: __transaction_state's ISR shrank before
        at_stop = rounds_tried(exp.metrics())
        m = exp.wait_metric(lambda m: any(stage in ("init", "commit") for stage, _ in failures(m)), 60,
                            what="the canary failing at init or commit")
        # within two intervals, counted in rounds (each round ends within its interval): the
        # round in flight when the broker stopped and the next one
        assert rounds_tried(m) - at_stop <= 2, (at_stop, rounds_tried(m), failures(m))
        wait_for(lambda: prom.firing("TxnwatchCanaryFailing"), 90, what="TxnwatchCanaryFailing to fire")
        firing = prom.firing("TxnwatchCanaryFailing")
        assert {a["labels"]["stage"] for a in firing} & {"init", "commit"}, firing

        cluster.start()
        before = m.get_value("txnwatch_canary_rounds_total", cluster="test", outcome="committed") or 0
        exp.wait_metric(lambda m: (m.get_value("txnwatch_canary_rounds_total", cluster="test", outcome="committed")
                                   or 0) >= before + 2, 120, what="the canary committing again by itself")
        wait_for(lambda: not prom.firing("TxnwatchCanaryFailing"), 90, what="the alert to resolve")
        # an aborted round too (one in 4), whose records never become visible
        m = exp.wait_metric(lambda m: (m.get_value("txnwatch_canary_rounds_total", cluster="test", outcome="aborted")
                                       or 0) >= 1, 60, what="an aborted canary round")
        assert m.get_value("txnwatch_canary_visibility_violations_total", cluster="test") == 0
    finally:
        prom.stop()


def test_a_frozen_partition_leader_shows_on_its_canary_partition_only(cluster, unique, exporter_factory):
    import os
    import signal

    from confluent_kafka.admin import AdminClient
    from kafka.admin import KafkaAdminClient

    topic, instance = unique("canary"), unique("i")
    cfg = cluster_config(cluster.bootstrap, [unique("none")],
                         canary={"interval_seconds": INTERVAL, "abort_every": 0, "topic": topic,
                                 "instance": instance})
    exp = exporter_factory(cfg)
    exp.wait_metric(lambda m: all(visible(m, p) >= 2 for p in (0, 1, 2)), 90,
                    what="canary records visible on all three partitions")
    leaders = {p: md.leader for p, md in AdminClient({"bootstrap.servers": cluster.bootstrap})
               .list_topics(topic, timeout=10).topics[topic].partitions.items()}
    admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap)
    try:
        coordinator = admin.describe_transactions([f"txnwatch-canary-test-{instance}"])[
            f"txnwatch-canary-test-{instance}"].coordinator_id
    finally:
        admin.close()
    # a broker that is neither the controller (node 1) nor the canary's transaction coordinator
    [(partition, node)] = [(p, n) for p, n in sorted(leaders.items()) if n not in (1, coordinator)][:1]
    pid = cluster.node(node).proc.pid
    os.kill(pid, signal.SIGSTOP)
    try:
        m = exp.wait_metric(lambda m: (m.get_value("txnwatch_canary_visibility_timeouts_total", cluster="test",
                                                   partition=partition) or 0) >= 1, 60,
                            what=f"canary partition {partition} (leader {node} frozen) not visible in time")
    finally:
        os.kill(pid, signal.SIGCONT)
    others = {lb["partition"]: v for lb, v in m.select("txnwatch_canary_visibility_timeouts_total", cluster="test")
              if lb["partition"] != str(partition)}
    assert not any(others.values()), others            # that partition only
    assert {stage for (stage, _e) in failures(m)} <= {"produce"}, failures(m)
    assert m.get_value("txnwatch_canary_visibility_violations_total", cluster="test") == 0


def test_a_reassigned_leader_is_followed_not_fought(cluster, tmp_path, unique, exporter_factory):
    import json

    from confluent_kafka.admin import AdminClient

    from txnwatch_dev.kafka import kafka_tool

    topic = unique("canary")
    cfg = cluster_config(cluster.bootstrap, [unique("none")],
                         canary={"interval_seconds": INTERVAL, "abort_every": 0, "topic": topic})
    exp = exporter_factory(cfg)
    exp.wait_metric(lambda m: all(visible(m, p) >= 1 for p in (0, 1, 2)), 90,
                    what="canary records visible on all three partitions")
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})

    def partition0():
        return admin.list_topics(topic, timeout=10).topics[topic].partitions[0]

    before = partition0()
    new_leader = next(r for r in before.replicas if r != before.leader)
    # the same replicas, another one first (no data moves), then a preferred-leader election
    plan = tmp_path / "reassign.json"
    plan.write_text(json.dumps({"version": 1, "partitions": [
        {"topic": topic, "partition": 0, "replicas": [new_leader] + [r for r in before.replicas if r != new_leader]}]}))
    kafka_tool("kafka-reassign-partitions", "--bootstrap-server", cluster.bootstrap, "--execute",
               "--reassignment-json-file", str(plan), log_dir=tmp_path / "tools")
    wait_for(lambda: partition0().replicas[0] == new_leader, 60, what="the reassignment to complete")
    kafka_tool("kafka-leader-election", "--bootstrap-server", cluster.bootstrap, "--election-type", "preferred",
               "--topic", topic, "--partition", "0", log_dir=tmp_path / "tools")
    wait_for(lambda: partition0().leader == new_leader, 60, what=f"node {new_leader} to lead {topic}-0")
    seen = visible(exp.metrics(), 0)
    m = exp.wait_metric(lambda m: visible(m, 0) >= seen + 3, 90,
                        what=f"canary records on partition 0 visible from its new leader {new_leader}")
    assert partition0().leader == new_leader          # the canary never moves leadership back
    assert m.get_value("txnwatch_canary_visibility_violations_total", cluster="test") == 0
