"""One 3-node Apache Kafka cluster (node 1 broker + the controller, nodes 2 and 3 brokers)
for what needs replication and dead brokers:

- a broker killed: its partitions (replication factor 1) are named offline while every
  other partition, group, transaction and the canary keep their data; `check` names the
  dead broker and the offline partitions;
- two brokers stopped: __transaction_state's partitions (RF 3, min ISR 2) fall below their
  minimum ISR: the finding names them, the alert fires, the canary fails at init or commit,
  a new producer cannot initialise; all recover by themselves;
- a frozen partition leader shows on its canary partition only; a reassigned leader is
  followed, not fought.
"""

from __future__ import annotations

import json
import os
import signal
import struct
import subprocess
import sys

import pytest
from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import AdminClient

from tests import compat
from tests.integration.helpers import cluster_config
from txnwatch.alerts.config import AlertConfig
from txnwatch.alerts.rules import generate_alerts
from txnwatch.apps import AppResolver
from txnwatch.exporter.model import OPEN_STATES
from txnwatch.kafka.kip664 import TransactionAPI
from txnwatch.producer import TransactionalProducer
from txnwatch_dev.kafka import KafkaCluster
from txnwatch_dev.net import wait_for
from txnwatch_dev.observability.prometheus import PrometheusProcess
from txnwatch_dev.transactions.workload import create_topics

pytestmark = [pytest.mark.integration]

INTERVAL = 3.0


@pytest.fixture(scope="module")
def three_nodes(tmp_path_factory):
    c = KafkaCluster(3, workdir=tmp_path_factory.mktemp("cluster")).start()
    # A new cluster creates __transaction_state at its first InitProducerId and loads it
    # (COORDINATOR_LOAD_IN_PROGRESS meanwhile): the canary would rightly count that as a
    # failed init. "Healthy" starts once a transactional producer can initialise.
    _producer(c.bootstrap, "cluster-ready").init_transactions(120)
    yield c
    c.cleanup()


@pytest.fixture
def cluster(three_nodes):
    """The module's cluster as each test starts: all nodes up, every ISR full
    (a test that stopped or killed a broker, or failed before restarting it, leaves it
    otherwise)."""
    return three_nodes.settle()


def _producer(bootstrap: str, tid: str) -> TransactionalProducer:
    return TransactionalProducer({"bootstrap.servers": bootstrap, "transactional.id": tid,
                                  "transaction.timeout.ms": 10000, "linger.ms": 0, "log_level": 3})


def assert_init_blocked(bootstrap: str, tid: str) -> None:
    """A new transactional id cannot be registered (its InitProducerId times out or is refused)."""
    blocked = _producer(bootstrap, tid)
    try:
        with pytest.raises(KafkaException) as ei:
            blocked.init_transactions(5)
        assert ei.value.args[0].name() in ("_TIMED_OUT", "NOT_ENOUGH_REPLICAS", "COORDINATOR_NOT_AVAILABLE")
    finally:
        blocked.close()


def _check(bootstrap: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "txnwatch.cli", "check", "--bootstrap-servers", bootstrap, "--json"],
                          capture_output=True, text=True, timeout=120)


def visible(m, partition: int) -> float:
    return m.get_value("txnwatch_canary_visibility_seconds_count", kafka_cluster="test", partition=partition) or 0


def failures(m) -> dict[tuple[str, str], float]:
    return {(lb["stage"], lb["error"]): v for lb, v in m.select("txnwatch_canary_failures_total", kafka_cluster="test")}


def init_or_commit_failures(m) -> float:
    return sum(v for (stage, _e), v in failures(m).items() if stage in ("init", "commit"))


def rounds_tried(m) -> float:
    """Rounds ended (committed or aborted) plus rounds failed (a visibility timeout is not a round)."""
    ended = sum(v for _lb, v in m.select("txnwatch_canary_rounds_total", kafka_cluster="test"))
    return ended + sum(v for (stage, _e), v in failures(m).items() if stage != "visibility_timeout")


def committed_rounds(m) -> float:
    return m.get_value("txnwatch_canary_rounds_total", kafka_cluster="test", outcome="committed") or 0


def commit_rows(bootstrap: str, tid: str, topic: str, partitions, n: int = 3) -> None:
    """One transaction of `n` records on each partition: its high watermark moves n + 1 (the
    commit marker takes an offset)."""
    p = _producer(bootstrap, tid)
    try:
        p.init_transactions(60)
        with p.transaction():
            for part in partitions:
                for i in range(n):
                    p.produce(topic, value=f"{i}".encode(), partition=part)
    finally:
        p.close()


def _java_hash(s: str) -> int:
    """Java's String.hashCode (UTF-16 code units), as the coordinator places an id."""
    h = 0
    for unit in struct.unpack(f">{len(s.encode('utf-16-be')) // 2}H", s.encode("utf-16-be")):
        h = (31 * h + unit) & 0xFFFFFFFF
    return h - 2**32 if h >= 2**31 else h


def test_open_transactions_are_listed_from_every_coordinator(cluster, unique):
    """ListTransactions goes to every broker at once: twelve open transactions whose ids the
    cluster coordinates on more than one broker are all listed, in their state, and their
    producer ids lead back to them."""
    topic = unique("listed")
    create_topics(cluster.bootstrap, [topic], partitions=3, replication_factor=3)
    ids = [f"{topic}-{i}" for i in range(12)]
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    log = admin.list_topics("__transaction_state", timeout=10).topics["__transaction_state"].partitions
    coordinators = {log[abs(_java_hash(tid)) % len(log)].leader for tid in ids}
    assert len(coordinators) > 1, coordinators       # else the test could not tell one broker from all
    producers = []
    try:
        for i, tid in enumerate(ids):
            p = Producer({"bootstrap.servers": cluster.bootstrap, "transactional.id": tid, "log_level": 3})
            p.init_transactions(60)
            p.begin_transaction()
            p.produce(topic, b"open", partition=i % 3)
            p.flush(30)
            producers.append(p)
        api = TransactionAPI({"bootstrap.servers": cluster.bootstrap}, 10)
        try:
            listed = {t.transactional_id: t for t in api.list_transactions(OPEN_STATES)}
            pids = api.pids_to_ids(listed[tid].producer_id for tid in ids if tid in listed)
        finally:
            api.close()
        assert {tid: listed[tid].state if tid in listed else None for tid in ids} == dict.fromkeys(ids, "Ongoing")
        assert pids == {listed[tid].producer_id: tid for tid in ids}
    finally:
        for p in producers:
            p.abort_transaction(30)


def test_a_dead_broker_costs_its_own_partitions_only(cluster, unique, exporter_factory):
    """Node 3 SIGKILLed: the partition of a replication-factor-1 topic it led is offline. The
    poller names it (offline, its last offsets kept) and broker 3 (missing), and every other
    partition, the groups, the tap and the canary stay current; /readyz stays ready."""
    single, replicated = unique("rf1"), unique("rf3")
    create_topics(cluster.bootstrap, [single], partitions=3, replication_factor=1)
    create_topics(cluster.bootstrap, [replicated], partitions=3, replication_factor=3)
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    leaders = {p: md.leader for p, md in admin.list_topics(single, timeout=10).topics[single].partitions.items()}
    (dead,) = [p for p, node in leaders.items() if node == 3]
    alive = [p for p in leaders if p != dead]
    commit_rows(cluster.bootstrap, unique("before"), single, range(3))
    commit_rows(cluster.bootstrap, unique("before"), replicated, range(3))
    cfg = cluster_config(cluster.bootstrap, [single, replicated], transaction_log_tap=True, granularity="partition",
                         canary={"interval_seconds": INTERVAL, "abort_every": 0, "topic": unique("canary")})
    exp = exporter_factory(cfg)
    m = exp.wait_metric(lambda m: m.get_value("kafka_partition_high_watermark", topic=single, partition=dead) == 4
                        and m.get_value("txnwatch_up", source="tap") == 1 and committed_rounds(m) >= 1, 90,
                        what="offsets of every partition, the tap and the canary")

    cluster.node(3).kill()
    m = exp.wait_metric(lambda m: m.get_value("kafka_partition_unavailable", topic=single, partition=dead,
                                              cause="offline") == 1, 60,
                        what=f"{single}-{dead} named offline")
    assert m.get_value("txnwatch_up", source="poller") == 1
    assert (m.get_value("kafka_broker_missing_replicas", broker=3) or 0) >= 1
    assert m.get_value("kafka_partition_high_watermark", topic=single, partition=dead) == 4   # as last read
    assert exp.get("/readyz")[0] == 200

    # the rest is current: new commits on the live partitions, counted by the tap, and the canary goes on
    tid = unique("after")
    app = AppResolver()(f"{tid}-1")
    commit_rows(cluster.nodes[0].bootstrap, f"{tid}-1", single, alive)
    commit_rows(cluster.nodes[0].bootstrap, f"{tid}-2", replicated, range(3))
    rounds = committed_rounds(exp.metrics())

    def hwm(m, topic, p):
        return m.get_value("kafka_partition_high_watermark", topic=topic, partition=p)
    exp.wait_metric(lambda m: all(hwm(m, single, p) == 8 for p in alive), 60,
                    what=f"the new offsets of {single}'s live partitions {alive}")
    exp.wait_metric(lambda m: all(hwm(m, replicated, p) == 8 for p in range(3)), 60,
                    what=f"the new offsets of {replicated}")
    exp.wait_metric(lambda m: m.get_value("kafka_transactions_total", app=app, outcome="committed") == 2, 60,
                    what="the tap counting the two new commits")
    m = exp.wait_metric(lambda m: committed_rounds(m) >= rounds + 2, 60, what="two more canary rounds")
    assert m.get_value("txnwatch_up", source="tap") == 1 and m.get_value("txnwatch_up", source="poller") == 1
    assert not [lb for lb, _ in m.select("kafka_partition_unavailable") if lb["topic"] == replicated]

    out = _check(cluster.nodes[0].bootstrap)
    assert out.returncode == 2, out.stdout + out.stderr
    assert "cannot reach" not in out.stdout, out.stdout
    findings = {f["kind"]: f for f in json.loads(out.stdout)["clusters"][0]["findings"]}
    assert findings["broker_missing"]["message"].startswith("broker(s) 3 absent from the cluster metadata")
    assert f"{single}-{dead}" in findings["partition_unavailable"]["message"]

    cluster.start()
    exp.wait_metric(lambda m: not m.select("kafka_partition_unavailable") and not m.select("kafka_broker_missing_replicas"),
                    90, what="the broker back: nothing unavailable")


def test_transaction_log_below_min_isr(cluster, tmp_path, unique, exporter_factory, request):
    """Two of three brokers stopped: __transaction_state (RF 3, min ISR 2) below its minimum
    ISR on every partition; the finding names the partitions, the alert fires, the canary
    fails at init or commit within two intervals and TxnwatchCanaryFailing fires, a new
    producer cannot initialise; back with the brokers, all of it recovers by itself."""
    topic = unique("replicated")
    create_topics(cluster.bootstrap, [topic], partitions=3, replication_factor=3)
    cfg = cluster_config(cluster.bootstrap, [topic], describe_configs_every=1,
                         canary={"interval_seconds": INTERVAL, "abort_every": 4, "topic": unique("canary")})
    exp = exporter_factory(cfg)
    rules = generate_alerts(tmp_path / "rules", AlertConfig(min_isr_for="2s", canary_failing_seconds=3 * INTERVAL,
                                                            canary_failure_window="30s"))[0]
    prom = PrometheusProcess([f"127.0.0.1:{exp.port}"], [rules], interval="1s",
                             data_dir=tmp_path / "prometheus").start()
    try:
        m = exp.wait_metric(lambda m: all(visible(m, p) >= 2 for p in (0, 1, 2))
                            and m.get_value("kafka_transaction_state_log_partitions_below_min_isr") == 0
                            and m.get_value("kafka_transaction_state_log_partition_min_isr_replicas",
                                            partition=0) == 2, 90,
                            what="canary records visible on all three partitions, the log's ISR healthy")
        # Before the fault a busy machine (Spark on the other worker) can make a canary step
        # outlast its 3 s interval (counted, as it should be): the fault must add failed inits
        # or commits to those.
        base = init_or_commit_failures(m)
        assert m.get_value("txnwatch_canary_visibility_violations_total", kafka_cluster="test") == 0
        assert m.get_value("kafka_transaction_state_log_partition_isr_replicas", partition=0) == 3

        cluster.node(3).stop()
        cluster.node(2).stop()   # returns once node 2 has exited: __transaction_state's ISR shrank before
        at_stop = rounds_tried(exp.metrics())
        m = exp.wait_metric(lambda m: init_or_commit_failures(m) > base, 60,
                            what="the canary failing at init or commit", describe=lambda: failures(exp.metrics()))
        # within two intervals, counted in rounds (each round ends within its interval): the
        # round in flight when the brokers stopped and the next one
        assert rounds_tried(m) - at_stop <= 2, (at_stop, rounds_tried(m), failures(m))
        m = exp.wait_metric(lambda m: (m.get_value("kafka_transaction_state_log_partitions_below_min_isr") or 0) > 0,
                            60, what="log partitions below min ISR")
        assert m.get_value("txnwatch_up", source="poller") == 1
        status, page = exp.get("/")
        assert status == 200 and "__transaction_state partition(s) below their minimum ISR" in page
        out = _check(cluster.nodes[0].bootstrap)
        assert out.returncode == 2, out.stdout
        (f,) = [f for f in json.loads(out.stdout)["clusters"][0]["findings"] if f["kind"] == "min_isr"]
        assert f["severity"] == "critical" and "(ISR 1 < 2)" in f["message"], f
        wait_for(lambda: prom.firing("KafkaTransactionStateLogBelowMinIsr"), 60,
                 what="KafkaTransactionStateLogBelowMinIsr to fire in Prometheus")
        # (which stage it fires for depends on which request a busy machine times out first:
        # the failed inits or commits themselves were seen above)
        wait_for(lambda: prom.firing("TxnwatchCanaryFailing"), 90, what="TxnwatchCanaryFailing to fire")

        # What an application sees meanwhile: a new transactional id cannot be registered.
        assert_init_blocked(cluster.nodes[0].bootstrap, unique("blocked-app"))

        # The brokers return: the finding, the alerts and the canary recover by themselves.
        cluster.start()
        before = committed_rounds(exp.metrics())
        exp.wait_metric(lambda m: m.get_value("kafka_transaction_state_log_partitions_below_min_isr") == 0
                        and committed_rounds(m) >= before + 2, 120,
                        what="the log's ISR back and the canary committing again by itself")
        wait_for(lambda: not prom.firing("KafkaTransactionStateLogBelowMinIsr")
                 and not prom.firing("TxnwatchCanaryFailing"), 90, what="the alerts to resolve")
        m = exp.wait_metric(lambda m: (m.get_value("txnwatch_canary_rounds_total", kafka_cluster="test", outcome="aborted")
                                       or 0) >= 1, 60, what="an aborted canary round")
        assert m.get_value("txnwatch_canary_visibility_violations_total", kafka_cluster="test") == 0
        again = _producer(cluster.bootstrap, unique("recovered-app"))
        again.init_transactions(60)
        with again.transaction():
            again.produce(topic, value=b"y")
        again.close()
    finally:
        prom.stop()
    compat.record(request.config, "features", "4.x", MIN_ISR_COLUMN, MIN_ISR_SHOWN)


MIN_ISR_COLUMN = "Three nodes, __transaction_state RF 3 and min.isr=2, two brokers stopped"
MIN_ISR_SHOWN = "finding names the partitions, init blocked, recovers"


def test_transaction_log_below_min_isr_on_3_9(tmp_path, unique, request):
    """The same fault on the 3.9 line (its own three nodes): with two brokers stopped,
    `check` names every __transaction_state partition below its minimum ISR and exits 2, a
    new producer cannot initialise; with the brokers back, the finding is gone and a
    transaction commits. (The exporter, the alert and the canary read the same finding: the
    4.x test above runs them.)"""
    from txnwatch_dev.kafka import kafka_release

    c = KafkaCluster(3, workdir=tmp_path / "cluster", release=kafka_release("3.9")).start()
    try:
        _producer(c.bootstrap, unique("first")).init_transactions(120)   # creates __transaction_state
        c.settle()
        out = _check(c.nodes[0].bootstrap)
        assert not [f for f in json.loads(out.stdout)["clusters"][0]["findings"] if f["kind"] == "min_isr"], out.stdout

        c.node(3).stop()
        c.node(2).stop()

        def below() -> dict | None:
            out = _check(c.nodes[0].bootstrap)
            found = [f for f in json.loads(out.stdout)["clusters"][0]["findings"] if f["kind"] == "min_isr"]
            return found and {"code": out.returncode, **found[0]}
        f = wait_for(below, 60, what="the min_isr finding with two brokers stopped")
        assert f["code"] == 2 and f["severity"] == "critical" and "(ISR 1 < 2)" in f["message"], f
        assert_init_blocked(c.nodes[0].bootstrap, unique("blocked-app"))

        c.settle()
        assert not below()
        topic = unique("t")
        create_topics(c.bootstrap, [topic], partitions=1, replication_factor=3)
        commit_rows(c.bootstrap, unique("recovered-app"), topic, [0])
    finally:
        c.cleanup()
    compat.record(request.config, "features", "3.9", MIN_ISR_COLUMN, MIN_ISR_SHOWN)


def test_a_frozen_partition_leader_shows_on_its_canary_partition_only(cluster, unique, exporter_factory):
    from kafka.admin import KafkaAdminClient

    topic, instance = unique("canary"), unique("i")
    # Replication factor 1: a frozen broker that follows another partition (still in its
    # ISR until replica.lag.time.max.ms) holds that partition's high watermark back too, a
    # real delay the canary rightly shows there; one partition per broker is what this pins.
    # The frozen broker does follow the canary's __transaction_state partition (RF 3 on three
    # nodes): every write to that log (AddPartitionsToTxn, EndTxn) waits until the ISR drops
    # it, up to 1.5 x replica.lag.time.max.ms (5 s here). A round shorter than that stall can
    # run out of time on a healthy partition whose record waited for the coordinator (a fresh
    # run saw one); a round longer than it (and than the 2 s a metadata refresh may spend on
    # the frozen broker first) shows the frozen leader alone.
    interval = 12.0
    cfg = cluster_config(cluster.bootstrap, [unique("none")],
                         canary={"interval_seconds": interval, "abort_every": 0, "topic": topic,
                                 "instance": instance, "replication_factor": 1})
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
        m = exp.wait_metric(lambda m: (m.get_value("txnwatch_canary_visibility_timeouts_total", kafka_cluster="test",
                                                   partition=partition) or 0) >= 1, 60,
                            what=f"canary partition {partition} (leader {node} frozen) not visible in time")
    finally:
        os.kill(pid, signal.SIGCONT)
    others = {lb["partition"]: v for lb, v in m.select("txnwatch_canary_visibility_timeouts_total", kafka_cluster="test")
              if lb["partition"] != str(partition)}
    assert not any(others.values()), others            # that partition only
    assert {stage for (stage, _e) in failures(m)} <= {"produce"}, failures(m)
    assert m.get_value("txnwatch_canary_visibility_violations_total", kafka_cluster="test") == 0


def test_a_reassigned_leader_is_followed_not_fought(cluster, tmp_path, unique, exporter_factory):
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
    exp.wait_metric(lambda m: visible(m, 0) >= seen + 3, 90,
                        what=f"canary records on partition 0 visible from its new leader {new_leader}")
    assert partition0().leader == new_leader          # the canary never moves leadership back
