"""Make a real hanging transaction on Apache Kafka, the way KAFKA-9144 does.

A hanging transaction is an open transaction on a partition that the coordinator does
not know about, so no commit or abort marker will ever end it and the partition's last
stable offset stays frozen for good (the reason for KIP-890). In production it comes from
a producer's late or retried write landing after the coordinator ended its transaction.
Here it is made on purpose: a transactional id gets a producer id and epoch from its
coordinator (InitProducerId, as any transactional producer does), then a transactional
record batch with that producer id and epoch is appended to a partition by a raw Produce
request, without AddPartitionsToTxn. Brokers before KIP-890 part 1 (Kafka 3.6) do not
verify that the partition is in a transaction, so the batch opens one that the
coordinator never sees: only `kafka-transactions.sh abort` (or txnwatch's runbook
command) can end it.

From Kafka 3.6 the partition leader asks the coordinator first and refuses the write
(INVALID_TXN_STATE) while `transaction.partition.verification.enable` is on, the default.
That setting is a dynamic broker config, and where an operator turns it off (it costs a
round trip to the coordinator per new partition of a transaction) the class of bug is back
on 3.6+ and 4.x alike. `make_hanging_transaction` does just that on the partition leader:
verification off (AlterConfigs), the late write, then the leader's own setting restored
(`verification="keep"` leaves the broker as it is, and a verifying broker refuses).

Once the partition's last write is older than the broker's transaction.max.timeout.ms,
`kafka-transactions.sh find-hanging` and txnwatch report it.

    python -m txnwatch_dev.transactions.hanging --bootstrap H:P --topic T --partition 0 \
        [--transactional-id ID]

The requests go over a plain socket, encoded and decoded by kafka-python's protocol
classes: no client library would send such a request.
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass

from kafka.protocol.metadata import MetadataRequest, MetadataResponse
from kafka.protocol.producer import (
    InitProducerIdRequest,
    InitProducerIdResponse,
    ProduceRequest,
    ProduceResponse,
)
from kafka.record.memory_records import MemoryRecordsBuilder

from .rawkafka import Connection, error_name, retry, split, transaction_coordinator

INVALID_TXN_STATE = 48
TRANSACTION_ABORTABLE = 120   # KIP-890: what a 4.x leader answers new clients instead of the above


@dataclass(frozen=True)
class HangingTransactionMade:
    topic: str
    partition: int
    offset: int               # the first offset of the open transaction (the frozen LSO)
    producer_id: int
    producer_epoch: int
    transactional_id: str
    leader: str               # host:port of the partition leader that took the batch


def _broker(meta, node_id: int) -> tuple[str, int]:
    for b in meta.brokers:
        if b.node_id == node_id:
            return b.host, b.port
    raise RuntimeError(f"broker {node_id} is not in the metadata")


VERIFICATION = "transaction.partition.verification.enable"


def _set_verification(bootstrap: str, broker_id: int, value: str | None) -> None:
    """Turn the partition leader's transaction verification off ('false'), or drop that
    override again (None: back to its static or default setting)."""
    from confluent_kafka.admin import (
        AdminClient,
        AlterConfigOpType,
        ConfigEntry,
        ConfigResource,
        ResourceType,
    )

    op = AlterConfigOpType.SET if value is not None else AlterConfigOpType.DELETE
    res = ConfigResource(ResourceType.BROKER, str(broker_id),
                         incremental_configs=[ConfigEntry(VERIFICATION, value or "", incremental_operation=op)])
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 3})
    for f in admin.incremental_alter_configs([res], request_timeout=15).values():
        f.result()


def make_hanging_transaction(bootstrap: str, topic: str, partition: int = 0,
                             transactional_id: str | None = None, value: bytes = b"late write",
                             transaction_timeout_ms: int = 1000,
                             verification: str = "off-for-the-write") -> HangingTransactionMade:
    """Open a transaction on `topic`-`partition` that the coordinator never added (see the
    module doc). `verification`: 'off-for-the-write' turns the leader's transaction
    verification off around the write (brokers 3.6+), 'keep' leaves it as it is."""
    # not of the form <prefix>-<n>-<n>, which reads as a Flink sink's id (app rules)
    tid = transactional_id or f"txnwatch-hanging.{topic}.{partition}"
    with Connection(*split(bootstrap.split(",")[0])) as first:
        meta = first.call(MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=topic)],
                                          allow_auto_topic_creation=False), MetadataResponse, 4)
    leader = None
    for t in meta.topics:
        for p in t.partitions:
            if t.name == topic and p.partition_index == partition:
                leader = p.leader_id
    if leader is None or leader < 0:
        raise RuntimeError(f"{topic}-{partition} has no leader (does the topic exist?)")

    with Connection(*transaction_coordinator(bootstrap, tid)) as conn:
        def init():
            r = conn.call(InitProducerIdRequest(transactional_id=tid, transaction_timeout_ms=transaction_timeout_ms),
                          InitProducerIdResponse, 1)
            return r, r.error_code
        pid = retry("InitProducerId", init)

    builder = MemoryRecordsBuilder(magic=2, compression_type=0, batch_size=1 << 20, transactional=True,
                                   producer_id=pid.producer_id, producer_epoch=pid.producer_epoch,
                                   base_sequence=0)
    builder.append(timestamp=int(time.time() * 1000), key=None, value=value, headers=[])
    builder.close()
    records = builder.buffer()
    host, port = _broker(meta, leader)
    req = ProduceRequest(transactional_id=tid, acks=-1, timeout_ms=10_000, topic_data=[
        ProduceRequest.TopicProduceData(name=topic, partition_data=[
            ProduceRequest.TopicProduceData.PartitionProduceData(index=partition, records=records)])])

    def produce():
        with Connection(host, port) as conn:
            part = conn.call(req, ProduceResponse, 3).responses[0].partition_responses[0]
        # The leader still verifies (a config change takes a moment): INVALID_TXN_STATE, or
        # TRANSACTION_ABORTABLE from a 4.x broker to a client of the new error set (KIP-890)
        retriable = verification != "keep" and part.error_code in (INVALID_TXN_STATE, TRANSACTION_ABORTABLE)
        return part, (part.error_code if retriable else 0)

    if verification == "keep":
        part = produce()[0]
    else:
        _set_verification(bootstrap, leader, "false")
        try:
            part = retry(f"a late write to {topic}-{partition} with verification off", produce, timeout=15)
        finally:
            _set_verification(bootstrap, leader, None)
    if part.error_code != 0:
        raise RuntimeError(f"Produce to {topic}-{partition} failed with {error_name(part.error_code)} "
                           "(brokers from Kafka 3.6 verify transactions and refuse such writes while "
                           f"{VERIFICATION} is on)")
    return HangingTransactionMade(topic, partition, int(part.base_offset), pid.producer_id, pid.producer_epoch,
                                  tid, f"{host}:{port}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--bootstrap", required=True)
    p.add_argument("--topic", required=True)
    p.add_argument("--partition", type=int, default=0)
    p.add_argument("--transactional-id", default=None)
    a = p.parse_args(argv)
    made = make_hanging_transaction(a.bootstrap, a.topic, a.partition, a.transactional_id)
    print(f"open transaction at {made.topic}-{made.partition} offset {made.offset} "
          f"(producer id {made.producer_id}, epoch {made.producer_epoch}, transactional id {made.transactional_id})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
