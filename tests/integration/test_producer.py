"""The instrumented producer against the real broker: a fence is recorded wherever it
surfaces (issue 12: the demo's old instance met it in produce/flush, and it was never counted)."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaException

from txnwatch.producer import ProducerMetricsCollector, TransactionalProducer, TransactionError
from txnwatch_dev.transactions.workload import create_topics

pytestmark = pytest.mark.integration


def _producer(bootstrap: str, tid: str, on_record) -> TransactionalProducer:
    p = TransactionalProducer({"bootstrap.servers": bootstrap, "transactional.id": tid,
                               "transaction.timeout.ms": 20000, "linger.ms": 0}, on_record=on_record)
    p.init_transactions(30)
    return p


def test_a_fenced_instance_records_its_fence_once_wherever_it_surfaces(broker, unique):
    topic, tid = unique("fence"), unique("refunds-writer")
    create_topics(broker.bootstrap, [topic])
    collector = ProducerMetricsCollector()
    records: list[dict] = []

    def on_record(rec):
        records.append(rec)
        collector.record(rec)

    first = _producer(broker.bootstrap, tid, on_record)
    first.begin()
    first.produce(topic, value=b"from the zombie")
    assert first.flush(10) == 0
    second = _producer(broker.bootstrap, tid, on_record)   # InitProducerId bumps the epoch: first is fenced
    surfaced_in = None
    try:
        first.produce(topic, value=b"the zombie keeps writing")
        first.flush(10)
        surfaced_in = "commit"
        first.commit(10)
    except TransactionError as exc:
        assert exc.fenced, exc.error
    except KafkaException:
        surfaced_in = surfaced_in or "produce/flush"
    assert first.broken is not None, "the fence never surfaced"
    # a later commit or abort of the dead transaction adds nothing
    with pytest.raises(TransactionError):
        first.commit(5)
    first.abort(5)
    with second.transaction():
        second.produce(topic, value=b"from the new instance")
    second.close()
    first.close()
    mine = [r for r in records if r["error"]]
    assert len(mine) == 1, (surfaced_in, records)
    assert mine[0]["error"] in ("PRODUCER_FENCED", "INVALID_PRODUCER_EPOCH", "_FENCED")
    assert [r["outcome"] for r in records] == ["aborted", "committed"], records
