"""The requests txnwatch encodes and decodes itself (kafka/metadata.py,
list_offsets.py and offset_fetch.py) against real brokers of both supported lines: Metadata
reads what librdkafka's metadata says (partition counts, leaders, __transaction_state's
replicas and ISR, the live brokers); ListOffsets per leader
equals librdkafka's answers for plain, committed-transactional, open-transactional and
empty partitions, is encoded once while the leaders stay, and a partition the broker
refuses costs only itself; OffsetFetch v8 reads a group's commits, with and without commit
metadata, as librdkafka's per-group path does."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import Producer

from tests import compat
from txnwatch.kafka.admin import KafkaIO
from txnwatch.kafka.answers import PartitionOffsets
from txnwatch_dev.kafka import kafka_release
from txnwatch_dev.net import wait_for
from txnwatch_dev.transactions.workload import commit_group_offsets, create_topics

pytestmark = [pytest.mark.integration]


def produce(bootstrap: str, topic: str, tid: str) -> Producer:
    """p0: 3 plain records; p1: a committed transaction of 2 records (and its marker);
    p2: a transaction of 1 record left open; p3: nothing. Returns the open producer."""
    plain = Producer({"bootstrap.servers": bootstrap, "log_level": 3})
    for _ in range(3):
        plain.produce(topic, b"p", partition=0)
    plain.flush(30)
    txn = Producer({"bootstrap.servers": bootstrap, "transactional.id": tid, "log_level": 3})
    txn.init_transactions(30)
    txn.begin_transaction()
    txn.produce(topic, b"c", partition=1)
    txn.produce(topic, b"c", partition=1)
    txn.commit_transaction(30)
    txn.begin_transaction()
    txn.produce(topic, b"o", partition=2)
    txn.flush(30)
    return txn


@pytest.mark.parametrize("line, version, md_version", [("4.x", 11, 13), ("3.9", 9, 12)])
def test_offsets_per_leader_on_a_real_broker(line, version, md_version, broker, own_broker, unique, request):
    b = broker if line == "4.x" else own_broker(release=kafka_release("3.9"))
    topic = unique("list-offsets")
    create_topics(b.bootstrap, [topic], partitions=4)
    open_txn = produce(b.bootstrap, topic, unique("lo-txn"))
    io = KafkaIO({"bootstrap.servers": b.bootstrap}, 15)
    want = [PartitionOffsets(topic, 0, 3, 3),
            PartitionOffsets(topic, 1, 3, 3),      # two records and the commit marker
            PartitionOffsets(topic, 2, 1, 0),      # the open transaction holds the LSO
            PartitionOffsets(topic, 3, 0, 0)]
    try:
        md = io.metadata(lambda t: t == topic)
        # txnwatch's own Metadata request reads what librdkafka's metadata says
        assert io.metadata_path.on is True and io.metadata_path.version == md_version
        theirs = io._metadata_librdkafka(lambda t: t == topic, 15)
        assert md == theirs and md.topics == {topic: 4} and md.txn_log, (md, theirs)

        def read() -> tuple[list[PartitionOffsets], dict]:
            got, failed = io.offsets(md.topics, leaders=md.leaders)
            return sorted(got, key=lambda o: o.partition), failed
        # the coordinator writes the commit marker after it answered EndTxn: wait for it
        wait_for(lambda: read() == (want, {}), 30, interval=0.2, what=f"the offsets {want}")
        assert io.list_offsets_path.on is True and io.list_offsets_path.version == version
        got = want
        # librdkafka's ListOffsets says the same
        assert sorted(got, key=lambda o: o.partition) == sorted(
            io._offsets_librdkafka(md.topics, None)[0], key=lambda o: o.partition)
        # one request per isolation level to the one leader, encoded once
        sent = io._kp.sent["ListOffsets"]
        assert sent % 2 == 0 and io._offsets_requests.encoded == 1
        assert read() == (got, {})
        assert io._kp.sent["ListOffsets"] == sent + 2 and io._offsets_requests.encoded == 1

        # two partitions the topic does not have, on the same leader: refused one by one
        leader = md.leaders[topic][0]
        got2, failed2 = io.offsets({topic: 6}, leaders={topic: md.leaders[topic] + (leader, leader)})
        assert sorted(got2, key=lambda o: o.partition) == sorted(got, key=lambda o: o.partition)
        assert failed2 == {(topic, 4): "kafka_unknown_topic_or_partition",
                           (topic, 5): "kafka_unknown_topic_or_partition"}

        open_txn.commit_transaction(30)
        wait_for(lambda: PartitionOffsets(topic, 2, 2, 2) in read()[0], 30, interval=0.2,
                 what="the record and its commit marker on partition 2")

        # committed offsets through OffsetFetch v8, a commit with metadata and one without
        group = unique("lo-group")
        # (through the helper that waits out a coordinator still loading __consumer_offsets: a
        # bare commit on the new 3.9 broker once met NOT_COORDINATOR)
        commit_group_offsets(b.bootstrap, group, [(topic, 0, 3, "instance-7"), (topic, 1, 2)], {"log_level": 3})
        want_rows = [(group, topic, 0, 3), (group, topic, 1, 2)]
        wait_for(lambda: io.group_offsets(lambda g: g == group) == want_rows, 30, interval=0.2,
                 what=f"the commits of {group} (listed and fetched)")
        assert io.capabilities == {"offset_fetch_batched": True}
        rows = want_rows
        deadline = time.monotonic() + 15
        assert io.group_offsets_per_group([group], deadline) == rows     # librdkafka's path
    finally:
        io.close()
    compat.record(request.config, "features", line, "Requests txnwatch encodes and reads itself",
                  f"Metadata v{md_version}, ListOffsets v{version}, OffsetFetch v8")
