"""Kafka requests no client library would send, over a plain socket, encoded and decoded by
kafka-python's protocol classes: the harness's hanging transactions and epoch loops."""

from __future__ import annotations

import socket
import struct
import time

from kafka.protocol.metadata import FindCoordinatorRequest, FindCoordinatorResponse

CLIENT_ID = "txnwatch-devtools-raw"


class Connection:
    """One broker connection; `call` sends a request and decodes its answer."""

    def __init__(self, host: str, port: int, timeout: float = 10.0) -> None:
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self._correlation = 0

    def call(self, request, response_cls, version: int):
        return self.call_many(request, 1, response_cls, version)[0]

    def call_many(self, request, n: int, response_cls, version: int) -> list:
        """The same request n times, all sent before the first answer is read (a broker
        answers a connection's requests in order): no round trip per request."""
        frames = []
        for _ in range(n):
            self._correlation += 1
            request.with_header(correlation_id=self._correlation, client_id=CLIENT_ID)
            frames.append(request.encode(version=version, header=True, framed=True))
        self.sock.sendall(b"".join(frames))
        answers = []
        for _ in range(n):
            size = struct.unpack(">i", self._read(4))[0]
            answers.append(response_cls.decode(self._read(size), version=version, header=True))
        return answers

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

    def __enter__(self) -> Connection:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def split(hostport: str) -> tuple[str, int]:
    host, _, port = hostport.rpartition(":")
    return host, int(port)


def error_name(code: int) -> str:
    from kafka.errors import for_code

    return f"{for_code(code).__name__} ({code})"


def retry(what: str, fn, timeout: float = 30.0):
    """Call fn until it returns a result without a retriable error code (0 = done)."""
    deadline = time.monotonic() + timeout
    while True:
        result, code = fn()
        if code == 0:
            return result
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what}: {error_name(code)} after {timeout:.0f}s")
        time.sleep(0.2)


def transaction_coordinator(bootstrap: str, transactional_id: str) -> tuple[str, int]:
    """host, port of the transaction coordinator of `transactional_id`."""
    with Connection(*split(bootstrap.split(",")[0])) as first:
        def find():
            r = first.call(FindCoordinatorRequest(key=transactional_id, key_type=1), FindCoordinatorResponse, 2)
            return r, r.error_code
        coord = retry("FindCoordinator", find)
    return coord.host, coord.port


def init_producer_id_until(bootstrap: str, transactional_id: str, epoch: int,
                           transaction_timeout_ms: int = 60_000, window: int = 64) -> tuple[int, int]:
    """InitProducerId for `transactional_id` again and again until its producer epoch is
    `epoch` (each call bumps it by one, as a new instance's initTransactions does): the fast
    way to the end of an id's epochs (32767) on a real broker. Up to `window` calls go out
    before their answers are read, never past `epoch`. Returns (producer id, epoch)."""
    from kafka.protocol.producer import InitProducerIdRequest, InitProducerIdResponse

    req = InitProducerIdRequest(transactional_id=transactional_id, transaction_timeout_ms=transaction_timeout_ms)
    with Connection(*transaction_coordinator(bootstrap, transactional_id)) as conn:
        def init():
            r = conn.call(req, InitProducerIdResponse, 1)
            return r, r.error_code

        r = retry("InitProducerId", init)
        while r.producer_epoch < epoch:
            answers = conn.call_many(req, min(window, epoch - r.producer_epoch), InitProducerIdResponse, 1)
            if all(a.error_code == 0 for a in answers):
                r = answers[-1]
            else:       # a coordinator loading or moving: one at a time until it answers
                r = retry("InitProducerId", init)
        return r.producer_id, r.producer_epoch


class RawTransaction:
    """A transaction opened request by request, without a client library: InitProducerId,
    AddPartitionsToTxn, one transactional write; ended by EndTxn. Cheap enough to hold
    hundreds open from one process (benchmarks).

    `two_phase=True` opens a KIP-939 two-phase-commit transaction the way a 2PC client will:
    InitProducerId v6 with Enable2Pc (the coordinator then gives it the timeout
    Integer.MAX_VALUE and never aborts it), ended by EndTxn as the external transaction
    manager's decision would. Kafka 4.4's Java client has the setting
    (transaction.two.phase.commit.enable) but does not send the flag yet, and the broker
    answers InitProducerId v6 only with unstable.api.versions.enable=true and
    transaction.two.phase.commit.enable=true."""

    def __init__(self, bootstrap: str, transactional_id: str, *, two_phase: bool = False,
                 timeout_ms: int = 60_000) -> None:
        self.bootstrap, self.transactional_id = bootstrap, transactional_id
        self.two_phase, self.timeout_ms = two_phase, timeout_ms
        self.producer_id = self.producer_epoch = -1

    def _coordinator(self) -> Connection:
        return Connection(*transaction_coordinator(self.bootstrap, self.transactional_id))

    def open(self, topic: str, partition: int, value: bytes = b"open") -> RawTransaction:
        from kafka.protocol.metadata import MetadataRequest, MetadataResponse
        from kafka.protocol.producer import (
            AddPartitionsToTxnRequest,
            AddPartitionsToTxnResponse,
            InitProducerIdRequest,
            InitProducerIdResponse,
            ProduceRequest,
            ProduceResponse,
        )
        from kafka.record.memory_records import MemoryRecordsBuilder

        tid = self.transactional_id
        with self._coordinator() as conn:
            def init():
                if self.two_phase:
                    req, version = InitProducerIdRequest(
                        transactional_id=tid, transaction_timeout_ms=self.timeout_ms, producer_id=-1,
                        producer_epoch=-1, enable2_pc=True, keep_prepared_txn=False), 6
                else:
                    req, version = InitProducerIdRequest(transactional_id=tid,
                                                         transaction_timeout_ms=self.timeout_ms), 1
                r = conn.call(req, InitProducerIdResponse, version)
                return r, r.error_code
            r = retry("InitProducerId", init)
            self.producer_id, self.producer_epoch = r.producer_id, r.producer_epoch

            def add():
                a = conn.call(AddPartitionsToTxnRequest(
                    v3_and_below_transactional_id=tid, v3_and_below_producer_id=self.producer_id,
                    v3_and_below_producer_epoch=self.producer_epoch,
                    v3_and_below_topics=[AddPartitionsToTxnRequest.AddPartitionsToTxnTopic(
                        name=topic, partitions=[partition])]), AddPartitionsToTxnResponse, 3)
                code = a.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code
                return a, code
            retry("AddPartitionsToTxn", add)
        builder = MemoryRecordsBuilder(magic=2, compression_type=0, batch_size=1 << 20, transactional=True,
                                       producer_id=self.producer_id, producer_epoch=self.producer_epoch,
                                       base_sequence=0)
        builder.append(timestamp=int(time.time() * 1000), key=None, value=value, headers=[])
        builder.close()
        req = ProduceRequest(transactional_id=tid, acks=-1, timeout_ms=10_000, topic_data=[
            ProduceRequest.TopicProduceData(name=topic, partition_data=[
                ProduceRequest.TopicProduceData.PartitionProduceData(index=partition, records=builder.buffer())])])

        def produce():
            # to the partition's leader as the metadata names it now: a new topic's leader may
            # not serve it yet (NOT_LEADER_OR_FOLLOWER), as a client would, ask again and retry
            with Connection(*split(self.bootstrap.split(",")[0])) as first:
                meta = first.call(MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=topic)],
                                                  allow_auto_topic_creation=False), MetadataResponse, 4)
            leader = next(p.leader_id for t in meta.topics if t.name == topic for p in t.partitions
                          if p.partition_index == partition)
            host, port = next((b.host, b.port) for b in meta.brokers if b.node_id == leader)
            with Connection(host, port) as conn:
                part = conn.call(req, ProduceResponse, 3).responses[0].partition_responses[0]
            return part, part.error_code
        retry(f"the transaction's write to {topic}-{partition}", produce)
        return self

    def end(self, commit: bool) -> None:
        """The transaction manager's decision: EndTxn commit or abort."""
        from kafka.protocol.producer import EndTxnRequest, EndTxnResponse

        with self._coordinator() as conn:
            def end():
                r = conn.call(EndTxnRequest(transactional_id=self.transactional_id, producer_id=self.producer_id,
                                            producer_epoch=self.producer_epoch, committed=commit), EndTxnResponse, 3)
                return r, r.error_code
            retry("EndTxn", end)
