"""A 3-node Kafka cluster: replication and dead brokers, with DescribeConfigs facts.

`__transaction_state` is replicated 3 times with transaction.state.log.min.isr=2. With two
brokers stopped the coordinator cannot write its log: initTransactions blocks. The exporter
must say why (finding, alert, `txnwatch check` exit 2) while it happens, and recover by
itself when the brokers return."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from confluent_kafka import KafkaException

from tests.integration.helpers import cluster_config
from txnwatch.alerts.config import AlertConfig
from txnwatch.alerts.rules import generate_alerts
from txnwatch.producer import TransactionalProducer
from txnwatch_dev.kafka import KafkaCluster
from txnwatch_dev.net import wait_for
from txnwatch_dev.prometheus import PrometheusProcess
from txnwatch_dev.workload import create_topics

pytestmark = [pytest.mark.integration]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = KafkaCluster(3, workdir=tmp_path_factory.mktemp("cluster")).start()
    yield c
    c.cleanup()


def _producer(bootstrap: str, tid: str) -> TransactionalProducer:
    return TransactionalProducer({"bootstrap.servers": bootstrap, "transactional.id": tid,
                                  "transaction.timeout.ms": 10000, "linger.ms": 0, "log_level": 3})


def test_transaction_state_log_below_min_isr(cluster, tmp_path, unique, exporter_factory):
    topic = unique("replicated")
    create_topics(cluster.bootstrap, [topic], partitions=3, replication_factor=3)
    p = _producer(cluster.bootstrap, unique("warm-up"))
    p.init_transactions(30)          # creates __transaction_state (RF 3, min ISR 2)
    with p.transaction():
        p.produce(topic, value=b"x")
    p.close()

    exp = exporter_factory(cluster_config(cluster.bootstrap, [topic], describe_configs_every=1))
    rules = generate_alerts(tmp_path / "rules", AlertConfig(min_isr_for="2s"))[0]
    prom = PrometheusProcess([f"127.0.0.1:{exp.port}"], [rules], interval="1s",
                             data_dir=tmp_path / "prometheus").start()
    try:
        m = exp.wait_metric(lambda m: m.get_value("kafka_brokers") == 3
                            and m.get_value("kafka_transaction_state_log_min_isr") == 2,
                            what="live brokers and min ISR from DescribeConfigs")
        assert m.get_value("kafka_transaction_state_log_replication_factor") in (3, None)
        assert not [f for f in json.loads(_check(cluster.nodes[0].bootstrap).stdout)["clusters"][0]["findings"]
                    if f["kind"] == "min_isr"]

        cluster.node(3).stop()
        cluster.node(2).stop()
        exp.wait_metric(lambda m: m.get_value("kafka_brokers") == 1 and m.get_value("txnwatch_up", source="poller") == 1,
                        what="one live broker")
        status, page = exp.get("/")
        assert status == 200 and "transaction.state.log.min.isr=2" in page and "1 live broker" in page
        out = _check(cluster.nodes[0].bootstrap)
        assert out.returncode == 2, out.stdout
        findings = json.loads(out.stdout)["clusters"][0]["findings"]
        assert any(f["kind"] == "min_isr" and f["severity"] == "critical" for f in findings), findings
        wait_for(lambda: prom.firing("KafkaTransactionStateLogBelowMinIsr"), 60,
                 what="KafkaTransactionStateLogBelowMinIsr to fire in Prometheus")

        # What an application sees meanwhile: a new transactional id cannot be registered.
        blocked = _producer(cluster.nodes[0].bootstrap, unique("blocked-app"))
        with pytest.raises(KafkaException) as ei:
            blocked.init_transactions(5)
        assert ei.value.args[0].name() in ("_TIMED_OUT", "NOT_ENOUGH_REPLICAS", "COORDINATOR_NOT_AVAILABLE")
        blocked.close()

        # The brokers return: the finding and the alert clear by themselves, and so does the producer.
        cluster.start()
        exp.wait_metric(lambda m: m.get_value("kafka_brokers") == 3, timeout=60, what="three live brokers again")
        wait_for(lambda: not prom.firing("KafkaTransactionStateLogBelowMinIsr"), 60, what="the alert to resolve")
        assert _check(cluster.nodes[0].bootstrap, "--json").returncode in (0, 1)
        again = _producer(cluster.bootstrap, unique("recovered-app"))
        again.init_transactions(60)
        with again.transaction():
            again.produce(topic, value=b"y")
        again.close()
    finally:
        prom.stop()


def _check(bootstrap: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "txnwatch.cli", "check", "--bootstrap-servers", bootstrap,
                           "--json", *[a for a in args if a != "--json"]],
                          capture_output=True, text=True, timeout=120)
