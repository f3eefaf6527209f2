"""The demo's Kafka Streams app (BalanceApp: exactly_once_v2, a persistent RocksDB store) of the
release under test, on its transaction-version-2 cluster, watched by the transaction-log tap.

- Stopped cleanly and started again on its state directory, it resumes from its local store
  without restoring it (no changelog record restored) and keeps its transactional id.
- SIGKILLed mid-transaction and started again on its state directory, it keeps its process id,
  so its transactional id: its InitProducerId fences the killed instance's transaction, which
  the tap counts as a fence by a new instance (not a coordinator timeout) under the app's
  application.id. Kafka Streams 4.4 then wipes and restores the store (a store killed mid-run
  under exactly-once, even with enable.transactional.statestores); the test prints how much.
- Either way the balances stay exactly once: each account's last balance is the sum of its
  payments.
"""

from __future__ import annotations

import json
import time

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from tests import compat
from tests.integration.helpers import cluster_config
from txnwatch_dev.demo.faults import restart_streams
from txnwatch_dev.demo.streams_app import StreamsApp
from txnwatch_dev.kafka import transaction_version
from txnwatch_dev.net import wait_for
from txnwatch_dev.transactions.workload import create_topics

pytestmark = [pytest.mark.integration]
APP = "balance-rocks"


def pay(bootstrap: str, topic: str, n: int, accounts: int = 5) -> dict[str, float]:
    p = Producer({"bootstrap.servers": bootstrap, "log_level": 3})
    sums: dict[str, float] = {}
    for i in range(n):
        acct, amount = f"acct-{i % accounts}", float(i % 7 + 1)
        sums[acct] = sums.get(acct, 0.0) + amount
        p.produce(topic, key=acct.encode(), value=json.dumps({"account": acct, "amount": amount}).encode())
    assert p.flush(30) == 0
    return sums


def last_balances(bootstrap: str, topic: str, partitions: int) -> dict[str, float]:
    """Each account's last balance in `topic`, read_committed to its end."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "balances-check", "isolation.level": "read_committed",
                  "enable.auto.commit": False, "log_level": 3})
    out: dict[str, float] = {}
    try:
        ends = {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in range(partitions)}
        c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is not None and not m.error():
                v = json.loads(m.value())
                out[v["account"]] = v["balance"]
            if all(c.position([TopicPartition(topic, p)])[0].offset >= e for p, e in ends.items()):
                break
    finally:
        c.close()
    return out


def test_rocksdb_app_restarts_on_its_state_directory(broker, unique, tmp_path, exporter_factory, request):
    assert transaction_version(broker.bootstrap) == 2
    payments, balances, alerts = unique("rocks-pay"), unique("rocks-bal"), unique("rocks-alerts")
    create_topics(broker.bootstrap, [payments, balances, alerts], partitions=3)
    exp = exporter_factory(cluster_config(broker.bootstrap, [payments], transaction_log_tap=True))
    exp.wait_metric(lambda m: m.get_value("txnwatch_tap_rebuilt") == 1, 60, what="the tap following the log")
    app = StreamsApp(broker.bootstrap, tmp_path / "streams", application_id=APP, input_topic=payments,
                     balances_topic=balances, alerts_topic=alerts, transaction_timeout_ms=30_000)
    try:
        app.start()
        tid = app.transactional_id
        sums = pay(broker.bootstrap, payments, 300)
        wait_for(lambda: last_balances(broker.bootstrap, balances, 3) == sums, 90, interval=1,
                 what="every payment in the balances")

        # 1. a clean stop, then the same state directory: nothing to restore
        app.stop()
        app.start(keep_state=True)
        assert app.transactional_id == tid
        assert app.restores() and all(restored == 0 for _, _, restored in app.restores()), app.restores()
        more = pay(broker.bootstrap, payments, 100)
        sums = {a: sums.get(a, 0) + more.get(a, 0) for a in set(sums) | set(more)}
        wait_for(lambda: last_balances(broker.bootstrap, balances, 3) == sums, 90, interval=1,
                 what="the new payments on top of the local state")

        # 2. killed mid-transaction, then the same state directory: its own restart fences it
        report = restart_streams(app, broker.bootstrap, payments, account="acct-0", hold_ms=60_000)
        print(report)
        assert app.transactional_id == tid, report
        assert "its InitProducerId fenced the killed instance's transaction" in report, report
        # the clean restart took its idle id over (a re-initialisation); the killed one's restart
        # cut its open transaction off (a fence)
        m = exp.wait_metric(lambda m: m.get_value("kafka_transaction_fencing_events_total", app=APP,
                                                  reason="new_instance") == 1
                            and m.get_value("kafka_transactional_id_reinitializations_total", app=APP) == 1, 60,
                            what="the killed instance's fence (new_instance) and the clean restart's re-init")
        assert m.get_value("kafka_transaction_timeouts_total", app=APP) == 0
        assert m.get_value("kafka_transactional_ids", app=APP) == 1
        print("after the kill, restored:", app.restores())
        more = pay(broker.bootstrap, payments, 50)
        sums = {a: sums.get(a, 0) + more.get(a, 0) for a in set(sums) | set(more)}
        wait_for(lambda: last_balances(broker.bootstrap, balances, 3) == sums, 90, interval=1,
                 what="exactly-once balances after the kill")
        compat.record(request.config, "features", "4.x", "Kafka Streams EOS-v2 with RocksDB",
                      "restart fences its own transaction")
    finally:
        app.close()
