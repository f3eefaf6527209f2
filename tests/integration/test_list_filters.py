"""What Kafka 3.8+ and 4.1+ added to ListTransactions, used where the broker has it: KIP-994's
duration filter (open_transaction_min_age_seconds) and KIP-1152's transactional-id pattern
(transactional_ids.include). On the 4.x release both filters run in the brokers: they list
only the old transactions of the included app. On 3.9 the duration filter runs in the
brokers and the pattern here. The exporter shows the same on both lines."""

from __future__ import annotations

import pytest
from confluent_kafka import Producer

from tests import compat
from tests.integration.helpers import cluster_config
from txnwatch.exporter.model import OPEN_STATES
from txnwatch.kafka.kip664 import TransactionAPI
from txnwatch_dev.kafka import kafka_release
from txnwatch_dev.net import wait_for
from txnwatch_dev.transactions.workload import create_topics

pytestmark = [pytest.mark.integration]


def open_transaction(bootstrap: str, tid: str, topic: str) -> Producer:
    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": tid, "transaction.timeout.ms": 120_000,
                  "log_level": 3})
    p.init_transactions(30)
    p.begin_transaction()
    p.produce(topic, b"x")
    p.flush(30)
    return p


@pytest.mark.parametrize("line", ["4.x", "3.9"])
def test_duration_and_id_pattern_filters(line, broker, own_broker, exporter_factory, unique, request):
    b = broker if line == "4.x" else own_broker(release=kafka_release("3.9"))
    topic = unique("filters")
    create_topics(b.bootstrap, [topic])
    keep, other = unique("keep"), unique("other")
    old = [open_transaction(b.bootstrap, f"{app}-old", topic) for app in (keep, other)]
    young: list[Producer] = []
    api = TransactionAPI({"bootstrap.servers": b.bootstrap}, 10)
    try:
        api.detect()
        assert api.duration_filter                       # KIP-994: 3.8+
        assert api.id_pattern_filter == (line == "4.x")  # KIP-1152: 4.1+
        wait_for(lambda: len([t for t in api.list_transactions(OPEN_STATES, 3000) if t.transactional_id in
                              (f"{keep}-old", f"{other}-old")]) == 2, 30, interval=0.5, what="both older than 3 s")
        young += [open_transaction(b.bootstrap, f"{app}-young", topic) for app in (keep, other)]
        listed = api.list_transactions(OPEN_STATES, 3000, f"{keep}-.*")
        mine = sorted(t.transactional_id for t in listed if t.transactional_id.startswith((keep, other)))
        # the brokers dropped the young ones (KIP-994); on 4.x also the other app's (KIP-1152)
        assert mine == ([f"{keep}-old"] if line == "4.x" else [f"{keep}-old", f"{other}-old"])
        exp = exporter_factory(cluster_config(b.bootstrap, [topic], open_transaction_min_age_seconds=3,
                                              transactional_ids={"include": [f"{keep}-.*"]}))
        m = exp.wait_metric(lambda m: m.get_value("kafka_transaction_open", app=f"{keep}-old") == 1, 30,
                            what="the included app's old transaction")
        for app in (f"{other}-old", f"{other}-young"):
            assert m.get_value("kafka_transaction_open", app=app) is None, app
        assert m.get_value("txnwatch_capability", api="list_transactions_duration_filter") == 1
        assert m.get_value("txnwatch_capability", api="list_transactions_id_pattern") == (1 if line == "4.x" else 0)
        row = f"{line}"
        compat.record(request.config, "features", row, "Release run", b.release.version)
        compat.record(request.config, "features", row, "ListTransactions duration filter (KIP-994)", "in the broker")
        compat.record(request.config, "features", row, "ListTransactions id pattern (KIP-1152)",
                      "in the broker" if api.id_pattern_filter else "in txnwatch")
    finally:
        api.close()
        for p in old + young:
            p.abort_transaction(30)
