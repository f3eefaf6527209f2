"""The transaction scenario (txnwatch_dev/transactions/scenario.py) on every broker line: the same
real producers, and txnwatch's counts equal to the broker's own view and to what the
scenario expects -- on Apache Kafka 4.x with a TV2 client (the Java client of the same
release) and with a TV0 client (librdkafka), and on Kafka 3.9 (transaction version 0).

Also on the real 4.x broker: an id whose producer epoch runs out moves on to a new
producer id in the middle of its commits (TV2), counted as neither a fence nor a new app.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest

from tests import compat
from txnwatch_dev.kafka import kafka_release, transaction_version
from txnwatch_dev.observability.exporter_proc import ExporterProcess
from txnwatch_dev.transactions.rawkafka import init_producer_id_until
from txnwatch_dev.transactions.scenario import exporter_config, log_counts, run_scenario
from txnwatch_dev.transactions.scenario_steps import EXPECTED
from txnwatch_dev.transactions.txn_client import TxnClient
from txnwatch_dev.transactions.workload import create_topics

pytestmark = [pytest.mark.integration]

# (kafka_version, client) -> the row of docs/compatibility.md's scenario table
LINES = {(None, "java"): "4.x TV2 client", (None, "librdkafka"): "4.x TV0 client", ("3.9", "librdkafka"): "3.9"}


def test_the_scenario_counts_equal_the_brokers_view(tmp_path, request):
    """Every line at once, each on a broker of its own: a line spends most of its minute
    waiting on the broker's clocks (a hanging transaction aging past the 30 s cap,
    transactional.id.expiration.ms), so the three overlap instead of queueing."""
    with ThreadPoolExecutor(max_workers=len(LINES)) as pool:
        futures = {line: pool.submit(run_scenario, line[0], line[1], tmp_path / f"{line[0] or '4'}-{line[1]}")
                   for line in LINES}
        results = {line: f.result() for line, f in futures.items()}
    for (kafka_version, _client), result in results.items():
        print(result.table())
        if kafka_version is None:
            assert result.release.startswith("4.") and result.transaction_version == 2, result.table()
        else:
            assert result.release.startswith("3.9.") and result.transaction_version == 0, result.table()
        assert not result.problems(), result.table()
        for step in result.steps:
            assert result.txnwatch[step] == result.broker[step] == EXPECTED[step], (step, result.table())
    for line, result in results.items():
        row, client = LINES[line], line[1]
        for column, value in (("Release run", result.release), ("transaction.version", result.transaction_version),
                              ("Client", client), ("Commits, client aborts", "counted"),
                              ("New instance cuts an open transaction off", "fence (new_instance)"),
                              ("New instance takes an idle id over", "re-init, no fence"),
                              ("Restart after its own abort", "re-init, no fence"),
                              ("Coordinator timeout", "counted"), ("Idle id expiry", "counted"),
                              ("forceTerminateTransaction",
                               "counted as operator" if "operator" in result.steps else "not in the release"),
                              ("Hanging transaction (KAFKA-9144)", "found, ended by abort")):
            compat.record(request.config, "scenario", row, column, value)


def test_an_exhausted_epoch_moves_to_a_new_producer_id_and_is_no_fence(own_broker, tmp_path, request):
    broker = own_broker()
    assert transaction_version(broker.bootstrap) == 2
    create_topics(broker.bootstrap, ["exh-data"])
    tid = "exh-orders-0"
    # 32764 InitProducerIds (the end of the epochs is 32767), then the Java client's own:
    # all before the exporter starts, so its tap rebuilds them without counting
    pid, epoch = init_producer_id_until(broker.bootstrap, tid, 32764)
    client = TxnClient("java", broker.bootstrap, tid, workdir=tmp_path, release=kafka_release()).start()
    client.init()
    exporter = ExporterProcess(exporter_config(broker.bootstrap), log_path=tmp_path / "exporter.log").start(60)
    try:
        exporter.wait_metric(lambda m: m.get_value("txnwatch_tap_rebuilt") == 1, 60, what="the tap's rebuild")
        inits_before = log_counts(broker.server_log(), tid)[0]
        for i in range(4):       # epochs 32765, 32766, then (new producer id) 0, 1
            client.begin()
            client.send("exh-data", 0, f"x{i}")
            client.commit()
        from kafka import KafkaAdminClient

        admin = KafkaAdminClient(bootstrap_servers=[broker.bootstrap])
        try:
            d = admin.describe_transactions([tid])[tid]
        finally:
            admin.close()
        assert d.producer_id != pid and d.producer_epoch < 5, (d.producer_id, d.producer_epoch)
        m = exporter.wait_metric(
            lambda m: m.get_value("kafka_transactions_total", app="exh-orders", outcome="committed") == 4, 60,
            what="four commits in the tap")
        assert log_counts(broker.server_log(), tid)[0] == inits_before    # no InitProducerId in between
        for reason in ("new_instance", "timeout", "operator"):
            assert m.get_value("kafka_transaction_fencing_events_total", app="exh-orders", reason=reason) == 0
        assert m.get_value("kafka_transactional_ids", app="exh-orders") == 1
        apps = {lbl["app"] for lbl, _ in m.select("kafka_transactional_ids")}
        assert apps <= {"exh-orders", "txnwatch-canary"}, apps
        compat.record(request.config, "scenario", "4.x TV2 client", "Epoch exhaustion", "no fence, same app")
    finally:
        client.close()
        exporter.stop()
