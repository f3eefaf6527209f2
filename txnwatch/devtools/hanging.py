"""Make a real hanging transaction on Apache Kafka < 3.6, the way KAFKA-9144 does.

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

Once the partition's last write is older than the broker's transaction.max.timeout.ms,
`kafka-transactions.sh find-hanging` and txnwatch report it.

    python -m txnwatch.devtools.hanging --bootstrap H:P --topic T --partition 0 [--transactional-id ID]

The requests go over a plain socket, encoded and decoded by kafka-python's protocol
classes: no client library would send such a request.
"""

from __future__ import annotations

import argparse
import socket
import struct
import sys
import time
from dataclasses import dataclass

from kafka.protocol.metadata import (
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    MetadataRequest,
    MetadataResponse,
)
from kafka.protocol.producer import (
    InitProducerIdRequest,
    InitProducerIdResponse,
    ProduceRequest,
    ProduceResponse,
)
from kafka.record.memory_records import MemoryRecordsBuilder

CLIENT_ID = "txnwatch-hanging-maker"


@dataclass(frozen=True)
class HangingTransactionMade:
    topic: str
    partition: int
    offset: int               # the first offset of the open transaction (the frozen LSO)
    producer_id: int
    producer_epoch: int
    transactional_id: str
    leader: str               # host:port of the partition leader that took the batch


class _Connection:
    def __init__(self, host: str, port: int, timeout: float = 10.0) -> None:
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self._correlation = 0

    def call(self, request, response_cls, version: int):
        self._correlation += 1
        request.with_header(correlation_id=self._correlation, client_id=CLIENT_ID)
        self.sock.sendall(request.encode(version=version, header=True, framed=True))
        size = struct.unpack(">i", self._read(4))[0]
        return response_cls.decode(self._read(size), version=version, header=True)

    def _read(self, n: int) -> bytes:
        buf = bytearray()
        while len(buf) < n:
            chunk = self.sock.recv(n - len(buf))
            if not chunk:
                raise ConnectionError("the broker closed the connection")
            buf += chunk
        return bytes(buf)

    def close(self) -> None:
        self.sock.close()


def _split(hostport: str) -> tuple[str, int]:
    host, _, port = hostport.rpartition(":")
    return host, int(port)


def _broker(meta, node_id: int) -> tuple[str, int]:
    for b in meta.brokers:
        if b.node_id == node_id:
            return b.host, b.port
    raise RuntimeError(f"broker {node_id} is not in the metadata")


def _error_name(code: int) -> str:
    from kafka.errors import for_code

    return f"{for_code(code).__name__} ({code})"


def _retry(what: str, fn, timeout: float = 30.0):
    """Call fn until it returns a result without a retriable error code (0 = done)."""
    deadline = time.monotonic() + timeout
    while True:
        result, code = fn()
        if code == 0:
            return result
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what}: {_error_name(code)} after {timeout:.0f}s")
        time.sleep(0.2)


def make_hanging_transaction(bootstrap: str, topic: str, partition: int = 0,
                             transactional_id: str | None = None, value: bytes = b"late write",
                             transaction_timeout_ms: int = 1000) -> HangingTransactionMade:
    """Open a transaction on `topic`-`partition` that the coordinator never added (see the module doc)."""
    tid = transactional_id or f"txnwatch-hanging-{topic}-{partition}"
    first = _Connection(*_split(bootstrap.split(",")[0]))
    try:
        meta = first.call(MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=topic)],
                                          allow_auto_topic_creation=False), MetadataResponse, 4)
        leader = None
        for t in meta.topics:
            for p in t.partitions:
                if t.name == topic and p.partition_index == partition:
                    leader = p.leader_id
        if leader is None or leader < 0:
            raise RuntimeError(f"{topic}-{partition} has no leader (does the topic exist?)")

        def find_coordinator():
            r = first.call(FindCoordinatorRequest(key=tid, key_type=1), FindCoordinatorResponse, 2)
            return r, r.error_code
        coord = _retry("FindCoordinator", find_coordinator)
    finally:
        first.close()

    conn = _Connection(coord.host, coord.port)
    try:
        def init():
            r = conn.call(InitProducerIdRequest(transactional_id=tid, transaction_timeout_ms=transaction_timeout_ms),
                          InitProducerIdResponse, 1)
            return r, r.error_code
        pid = _retry("InitProducerId", init)
    finally:
        conn.close()

    builder = MemoryRecordsBuilder(magic=2, compression_type=0, batch_size=1 << 20, transactional=True,
                                   producer_id=pid.producer_id, producer_epoch=pid.producer_epoch,
                                   base_sequence=0)
    builder.append(timestamp=int(time.time() * 1000), key=None, value=value, headers=[])
    builder.close()
    records = builder.buffer()
    host, port = _broker(meta, leader)
    conn = _Connection(host, port)
    try:
        req = ProduceRequest(transactional_id=tid, acks=-1, timeout_ms=10_000, topic_data=[
            ProduceRequest.TopicProduceData(name=topic, partition_data=[
                ProduceRequest.TopicProduceData.PartitionProduceData(index=partition, records=records)])])
        resp = conn.call(req, ProduceResponse, 3)
    finally:
        conn.close()
    part = resp.responses[0].partition_responses[0]
    if part.error_code != 0:
        raise RuntimeError(f"Produce to {topic}-{partition} failed with {_error_name(part.error_code)} "
                           "(brokers from Kafka 3.6 verify transactions and refuse such writes)")
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
