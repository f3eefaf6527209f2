"""Lag that is only markers is zero, against the real Apache Kafka broker.

A commit or abort marker takes an offset that no consumer receives: a read_committed consumer
that commits the offset after its last record sits below the LSO by its marker for good (the
lag "stuck at 1"). txnwatch reads such a small, unmoving gap once and shows lag 0 with the
reason; a gap holding a committed record keeps its lag, and a group behind an open transaction
is shown as before."""

from __future__ import annotations

import re

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition

from tests.integration.helpers import cluster_config
from txnwatch.check import check_cluster, format_text
from txnwatch.config import parse_config
from txnwatch.exporter.poll.poller import ClusterPoller
from txnwatch_dev.net import wait_for
from txnwatch_dev.transactions.workload import commit_group_offset, create_topics

pytestmark = [pytest.mark.integration]

NOTE = "lag 0: only transaction markers between the committed offset and the LSO"


def commit_after_last_record(bootstrap: str, group: str, topic: str, partition: int) -> int:
    """A read_committed consumer of `group` reads the partition to its end and commits the
    offset after the last record it received (not its position past the markers); returns it."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "isolation.level": "read_committed",
                  "enable.partition.eof": True, "enable.auto.commit": False})
    c.assign([TopicPartition(topic, partition, 0)])
    last = []
    try:
        def at_end() -> bool:
            for m in c.consume(100, 0.5):
                if m.error() is None:
                    last.append(m.offset())
                elif m.error().code() == KafkaError._PARTITION_EOF:
                    return True
            return False
        wait_for(at_end, 30, interval=0, what=f"a read_committed consumer to reach the end of {topic}-{partition}")
    finally:
        c.close()
    commit_group_offset(bootstrap, group, topic, partition, last[-1] + 1)
    return last[-1] + 1


@pytest.mark.parametrize("line", ["4.x", "3.9"])
def test_a_gap_of_markers_reads_as_lag_zero_with_its_reason(line, broker, own_broker, producers, unique,
                                                           exporter_factory, request):
    from tests import compat
    from txnwatch_dev.kafka import kafka_release

    b = broker.bootstrap if line == "4.x" else own_broker(release=kafka_release("3.9")).bootstrap
    topic = unique("markers")
    create_topics(b, [topic], partitions=4)
    g = {k: unique(k) for k in ("after-commit", "after-abort", "unread", "at-open")}
    # p0: one committed transaction (records 0-2, commit marker 3)
    producers(b, topic, unique("tx0"), action="commit", records=3, partition=0).wait()
    # p1: the same, then an aborted one (records 4-5, abort marker 6): markers and aborted records
    producers(b, topic, unique("tx1"), action="commit", records=3, partition=1).wait()
    producers(b, topic, unique("tx1"), action="abort", records=2, partition=1).wait()
    # p2: a committed transaction (0-1, marker 2), then a plain record at 3 that its group has not read
    producers(b, topic, unique("tx2"), action="commit", records=2, partition=2).wait()
    plain = Producer({"bootstrap.servers": b})
    plain.produce(topic, value=b"plain", partition=2)
    assert plain.flush(30) == 0
    # p3: a committed transaction (0-1, marker 2), then one left open from offset 3 (LSO 3, HWM 5)
    open_txn = producers(b, topic, unique("tx3"), action="commit", records=2, partition=3, then_hang=True,
                         timeout_ms=300_000)
    open_txn.wait_line("open")

    assert commit_after_last_record(b, g["after-commit"], topic, 0) == 3
    assert commit_after_last_record(b, g["after-abort"], topic, 1) == 3
    commit_group_offset(b, g["unread"], topic, 2, 3)
    commit_group_offset(b, g["at-open"], topic, 3, 3)   # its position: past the marker, at the LSO

    # The poller: each gap is read once, and not again while nothing moves.
    cfg = parse_config(cluster_config(b, [topic])).clusters[0]
    poller = ClusterPoller(cfg)
    reads = []
    read = poller.io.read_marker_gaps

    def counted(gaps, timeout):
        answer = read(gaps, timeout)
        reads.append((sorted(gaps), answer))
        return answer
    poller.io.read_marker_gaps = counted
    gaps = {(topic, 0, 3, 4): True, (topic, 1, 3, 7): True, (topic, 2, 3, 4): False}

    def decided() -> dict:
        return {gap: v for _, (verdicts, _failed) in reads for gap, v in verdicts.items()}
    try:
        wait_for(lambda: poller.poll_once() and decided().keys() == gaps.keys(), 60, interval=0,
                 what="the three gaps below the LSO to be read")
        reads_then = len(reads)
        for _ in range(3):
            snap = poller.poll_once()
        errors = poller.health.view().errors
    finally:
        poller.stop()
    lag = {r.group: r for r in snap.groups if r.topic == topic}
    assert [(r.committed, r.lag_read_committed, r.lag_read_uncommitted, r.marker_offsets)
            for r in (lag[g[k]] for k in ("after-commit", "after-abort", "unread", "at-open"))] == [
        (3, 0, 1, 1),     # the commit marker
        (3, 0, 4, 4),     # commit marker, two aborted records, abort marker
        (3, 1, 1, 0),     # a committed record: a real lag of 1
        (3, 0, 2, 0)]     # at the LSO, behind the open transaction: as before, nothing to read
    # each gap was read to a verdict once (one read of three partitions, unless one ran out of
    # time and was read again at the next poll), and the polls after that read nothing
    assert decided() == gaps
    assert sorted(gap for _, (verdicts, _failed) in reads for gap in verdicts) == sorted(gaps)
    assert len(reads) == reads_then
    assert not [c for c in errors if c.startswith("marker_gaps_") and c != "marker_gaps_timeout"], errors

    # The exporter: lag 0 on /metrics, and the page says why; the read_uncommitted lag is as before.
    exp = exporter_factory(cluster_config(b, [topic], granularity="partition"))
    m = exp.wait_metric(lambda m: m.get_value("kafka_consumergroup_read_committed_lag_offsets",
                                              group=g["after-commit"], topic=topic, partition=0) == 0
                        and m.get_value("kafka_consumergroup_read_committed_lag_offsets",
                                        group=g["after-abort"], topic=topic, partition=1) == 0,
                        what="the read_committed lags of the gaps of markers to be 0")

    def lags(group, partition):
        return tuple(m.get_value(f"kafka_consumergroup_read_{k}_lag_offsets", group=group, topic=topic,
                                 partition=partition) for k in ("committed", "uncommitted"))
    assert lags(g["after-commit"], 0) == (0, 1)
    assert lags(g["after-abort"], 1) == (0, 4)
    assert lags(g["unread"], 2) == (1, 1)
    assert lags(g["at-open"], 3) == (0, 2)
    status, page = exp.get("/")
    assert status == 200

    def row(group):
        [found] = re.findall(rf"<tr><td>test</td><td>{re.escape(group)}</td>.*?</tr>", page)
        return found
    assert f"not blocked; {NOTE}" in row(g["after-commit"])
    assert f"not blocked; {NOTE}" in row(g["after-abort"])
    assert "only transaction markers" not in row(g["unread"])
    assert "open transaction of" in row(g["at-open"]) and "only transaction markers" not in row(g["at-open"])

    # txnwatch check: its two polls see the gap unmoved, read it, and say why per group and partition.
    text = format_text([check_cluster(cfg, 0.0)])
    assert f"  {g['after-commit']} on {topic}-0 (committed 3, LSO 4): {NOTE}" in text
    assert f"  {g['after-abort']} on {topic}-1 (committed 3, LSO 7): {NOTE}" in text
    assert g["unread"] not in text
    compat.record(request.config, "features", line, "Lag that is only markers", "0, with the reason")
