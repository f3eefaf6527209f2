"""KIP-939 two-phase-commit transactions on a real Kafka 4.x broker: recognised by their
timeout (Integer.MAX_VALUE), never paged as past their timeout, above the broker's cap or
hanging, exported as two-phase series of their own, judged against a maximum age.

How one is opened here: Kafka 4.4's Java client has `transaction.two.phase.commit.enable`
but does not send InitProducerId's Enable2Pc flag yet (tried: the coordinator gave the
producer its ordinary timeout), so the test opens the transaction the way a 2PC client will
(InitProducerId v6 with Enable2Pc, AddPartitionsToTxn, a transactional write:
txnwatch_dev/transactions/rawkafka.py) on a broker with unstable.api.versions.enable=true (v6 is
still marked unstable) and transaction.two.phase.commit.enable=true.
"""

from __future__ import annotations

import html
import time

import pytest

from tests import compat
from tests.integration.helpers import cluster_config
from txnwatch_dev.net import wait_for
from txnwatch_dev.transactions.rawkafka import RawTransaction
from txnwatch_dev.transactions.workload import create_topics

pytestmark = [pytest.mark.integration]

TWO_PC_BROKER = {"unstable.api.versions.enable": "true", "transaction.two.phase.commit.enable": "true",
                 "transaction.max.timeout.ms": 4000}


def test_a_two_phase_commit_transaction_is_told_apart(own_broker, exporter_factory, request):
    b = own_broker(properties=TWO_PC_BROKER)
    create_topics(b.bootstrap, ["xa-orders"])
    exp = exporter_factory(cluster_config(b.bootstrap, ["xa-orders"], transaction_log_tap=True,
                                          two_phase_commit_max_age_seconds=3))
    txn = RawTransaction(b.bootstrap, "xa-ledger-0", two_phase=True).open("xa-orders", 0)
    opened = time.monotonic()

    def shown(m) -> bool:
        return m.get_value("kafka_transaction_two_phase_open", app="xa-ledger") == 1
    exp.wait_metric(shown, 30, what="the two-phase transaction in /metrics")
    # older than the broker's transaction.max.timeout.ms (4 s) and than the max age (3 s):
    # the coordinator leaves it open, txnwatch does not call it hanging or past its timeout
    wait_for(lambda: time.monotonic() - opened > 10, 15, interval=0.5, what="the transaction to age")
    m = exp.wait_metric(lambda m: (m.get_value("kafka_transaction_two_phase_oldest_age_seconds",
                                               app="xa-ledger") or 0) > 8, 30, what="its age past 8 s")
    assert m.get_value("kafka_transaction_open", app="xa-ledger") == 1
    assert m.get_value("kafka_transaction_timeout_headroom_seconds", app="xa-ledger",
                       transactional_id="xa-ledger-0") is None
    assert not m.get_value("kafka_transaction_hanging", topic="xa-orders", partition=0)
    assert m.get_value("kafka_transaction_timeouts_total", app="xa-ledger") == 0
    page = html.unescape(exp.get("/")[1])
    assert "two-phase-commit transaction (KIP-939) open" in page and "xa-ledger-0" in page
    assert "past its" not in page and "transaction.max.timeout.ms=" not in page
    # the transaction manager decides: commit
    txn.end(commit=True)
    m = exp.wait_metric(lambda m: m.get_value("kafka_transactions_total", app="xa-ledger", outcome="committed") == 1,
                        30, what="the commit in the tap")
    assert not m.get_value("kafka_transaction_two_phase_open", app="xa-ledger")
    compat.record(request.config, "features", "4.x", "Two-phase-commit transactions (KIP-939)", "told apart")
