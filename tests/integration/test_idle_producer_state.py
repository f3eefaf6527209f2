"""An idle transactional producer whose partition state the broker has dropped: its next
transaction commits, on every line and client (so txnwatch exports no headroom and pages
nothing for it).

A partition leader keeps each producer's state (epoch, last sequences) in memory. Retention
deleting the producer's last records does not drop it (KIP-360, KAFKA-7190: the state stays
cached until producer.id.expiration.ms, KIP-854, default 1 day); a restart does, once the
log is empty (the producer snapshot at the log start offset is deleted with the segments),
and producer.id.expiration.ms does. Since KIP-360 (Kafka 2.5) a leader accepts any first
sequence of a producer it holds no state for (ProducerAppendInfo.checkSequence), so the
next transaction of a TV0 client (sequence continued) is accepted; a TV2 client (4.x on a
4.x cluster) restarts its sequences at 0 with the epoch every commit bumps, which is what 4.x
asks of a TV2 producer without state. What does fail an idle producer is the coordinator
expiring its transactional id (transactional.id.expiration.ms): InvalidPidMapping, which
KafkaTransactionalIdNearExpiration covers."""

from __future__ import annotations

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

from tests import compat
from txnwatch.kafka.kip664 import TransactionAPI
from txnwatch_dev.kafka import kafka_release, transaction_version
from txnwatch_dev.net import wait_for
from txnwatch_dev.transactions.txn_client import TxnClient
from txnwatch_dev.transactions.workload import create_topics

pytestmark = [pytest.mark.integration]

CLIENTS = ("java", "librdkafka")
# Retention and producer-id expiry checked every second instead of every 5 and 10 minutes.
FAST_CHECKS = {"log.retention.check.interval.ms": 1000, "log.initial.task.delay.ms": 1000,
               "producer.id.expiration.check.interval.ms": 1000}
# A low-traffic topic whose records retention deletes within seconds.
SHORT_RETENTION = {"retention.ms": "6000", "segment.ms": "2000", "file.delete.delay.ms": "1000"}
FAILURE_WORDS = ("UnknownProducerId", "UNKNOWN_PRODUCER_ID", "OutOfOrderSequence", "Out of order sequence",
                 "Invalid sequence number")
COLUMN = "Idle producer's partition state dropped (retention + restart, producer.id.expiration.ms)"


def watermarks(bootstrap: str, topic: str) -> tuple[int, int]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "txnwatch-test-watermarks", "log_level": 3})
    try:
        return c.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
    finally:
        c.close()


def producer_ids(api: TransactionAPI, topic: str) -> list[int]:
    """The producers the partition's leader holds state for (DescribeProducers)."""
    return [p.producer_id for p in api.describe_producers([(topic, 0)])]


def committed(bootstrap: str, topic: str, end: int) -> None:
    """The record and its commit marker past `end` (the coordinator writes the marker after
    it answered the commit)."""
    wait_for(lambda: watermarks(bootstrap, topic)[1] == end + 2, 30, interval=0.5,
             what=f"the record and the commit marker in {topic}")


def commit_one(client: TxnClient, topic: str, value: str) -> None:
    client.begin()
    client.send(topic, 0, value)
    client.commit()


@pytest.mark.parametrize("line", ["4.x", "3.9"])
def test_the_next_transaction_commits_after_the_producer_state_is_dropped(line, own_broker, unique, tmp_path,
                                                                          request):
    b = own_broker(release=None if line == "4.x" else kafka_release("3.9"), properties=FAST_CHECKS)
    tv = transaction_version(b.bootstrap)
    assert tv == (2 if line == "4.x" else 0)
    topics = {kind: unique(f"idle-{kind}") for kind in CLIENTS}
    create_topics(b.bootstrap, topics.values(), config=SHORT_RETENTION)
    clients = {kind: TxnClient(kind, b.bootstrap, unique(f"idle-{kind}"), workdir=tmp_path, release=b.release).start()
               for kind in CLIENTS}
    api = TransactionAPI({"bootstrap.servers": b.bootstrap}, 15)
    try:
        for kind, c in clients.items():
            c.init()
            for i in range(3):      # a TV0 client's next sequence is 3 by now, a TV2 client's epoch 3
                commit_one(c, topics[kind], f"before-{i}")
        # 1. retention deletes every record of the producer: the leader keeps its state
        for kind, topic in topics.items():
            wait_for(lambda t=topic: (w := watermarks(b.bootstrap, t))[0] == w[1] > 0, 120, interval=1,
                     what=f"retention to delete every record of {topic}")
            assert len(producer_ids(api, topic)) == 1, f"{kind}: retention alone dropped the producer state"
        # 2. a restart on the emptied log drops it; the next transaction commits
        b.stop()
        b.start()
        log_from = len(b.server_log())
        api.close()
        for kind, topic in topics.items():
            ends = wait_for(lambda t=topic: watermarks(b.bootstrap, t), 60, interval=1, what=f"{topic} led again")
            assert ends[0] == ends[1], ends
            (held,) = wait_for(lambda t=topic: (producer_ids(api, t),), 60, interval=1,
                               what=f"DescribeProducers of {topic}")
            assert held == [], f"{kind}: the restart kept the producer state"
            commit_one(clients[kind], topic, "after-restart")
            committed(b.bootstrap, topic, ends[1])
            assert len(producer_ids(api, topic)) == 1
        # 3. producer.id.expiration.ms (a dynamic broker setting) drops it in memory; the next commits
        admin = AdminClient({"bootstrap.servers": b.bootstrap})
        entry = ConfigEntry("producer.id.expiration.ms", "3000", incremental_operation=AlterConfigOpType.SET)
        for fut in admin.incremental_alter_configs([ConfigResource(ResourceType.BROKER, str(b.node_id),
                                                                   incremental_configs=[entry])]).values():
            fut.result(30)
        for kind, topic in topics.items():
            wait_for(lambda t=topic: producer_ids(api, t) == [], 60, interval=1,
                     what=f"producer.id.expiration.ms to drop the producer of {topic}")
            end = watermarks(b.bootstrap, topic)[1]
            commit_one(clients[kind], topic, "after-expiry")
            committed(b.bootstrap, topic, end)
        refused = [ln for ln in b.server_log()[log_from:].splitlines() if any(w in ln for w in FAILURE_WORDS)]
        assert not refused, refused
    finally:
        api.close()
        for c in clients.values():
            c.close()
    compat.record(request.config, "features", line, COLUMN,
                  f"next transaction commits (java TV{tv}, librdkafka TV0)")
