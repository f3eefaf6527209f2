"""Committed offsets of many consumer groups on the real broker: the batched path (OffsetFetch
v8 per coordinator, FindCoordinator v4 for uncached groups) answers exactly what librdkafka's
one-group-per-request path answers, in requests that grow with coordinators, not groups;
and its coordinator cache recovers when a coordinator moves or a broker goes."""

from __future__ import annotations

import time

import pytest

from txnwatch.kafka import admin
from txnwatch.kafka.admin import KafkaIO
from txnwatch_dev.kafka import KafkaCluster
from txnwatch_dev.net import wait_for
from txnwatch_dev.transactions.workload import commit_group_offsets, create_topics

pytestmark = [pytest.mark.integration]

GROUPS = 60


def commit_offsets(bootstrap: str, offsets: dict[str, list[tuple[str, int, int]]]) -> None:
    """Commit each group's offsets (an empty group: a consumer's commit, no member)."""
    for g, tps in offsets.items():
        commit_group_offsets(bootstrap, g, tps)


def workload(bootstrap: str, prefix: str, groups: int = GROUPS, replication_factor: int = 1):
    topics = [f"{prefix}-t{i}" for i in range(3)]
    create_topics(bootstrap, topics, partitions=4, replication_factor=replication_factor)
    offsets = {f"{prefix}-g{i:02d}": [(topics[i % 3], i % 4, 7 * i + 1), (topics[(i + 1) % 3], 0, i)]
               for i in range(groups)}
    commit_offsets(bootstrap, offsets)
    want = sorted((g, t, p, o) for g, tps in offsets.items() for t, p, o in tps)
    return offsets, want


def listed(io: KafkaIO, selected, n: int) -> None:
    wait_for(lambda: len(io.list_groups(selected, time.monotonic() + 10)) == n, 30,
             what=f"{n} groups in ListGroups")


def test_batched_equals_per_group_path_in_one_request_per_coordinator(broker, unique):
    prefix = unique("batched")
    offsets, want = workload(broker.bootstrap, prefix)
    io = KafkaIO({"bootstrap.servers": broker.bootstrap}, 15)
    try:
        def selected(g: str) -> bool:
            return g.startswith(prefix + "-g")
        io.metadata(lambda t: True)
        listed(io, selected, GROUPS)

        rows = io.group_offsets(selected)
        assert io.capabilities == {"offset_fetch_batched": True}
        assert rows == want
        report = io.group_offsets_report
        # 60 groups on one broker: one FindCoordinator for all, one OffsetFetch for all
        assert report.requests == {"FindCoordinator": 1, "OffsetFetch": 1}
        assert report.groups == GROUPS and report.failed == {} and report.rounds == 1

        # librdkafka's path (one request per group) answers the same
        deadline = time.monotonic() + 15
        assert io.group_offsets_per_group(io.list_groups(selected, deadline), deadline) == rows

        # warm cache: one OffsetFetch, nothing else
        assert io.group_offsets(selected) == rows
        assert io.group_offsets_report.requests == {"OffsetFetch": 1}
        # what went on the wire, counted by the transport itself
        # (and the one Metadata request of io.metadata(), which shares the connections)
        assert io._groups_batched.transport.sent == {"FindCoordinator": 1, "OffsetFetch": 2, "Metadata": 1}

        # smaller chunks: still per coordinator, ceil(60 / 25) requests
        io._groups_batched._groups_per_request = 25
        assert io.group_offsets(selected) == rows
        assert io.group_offsets_report.requests == {"OffsetFetch": 3}
    finally:
        io.close()


def test_per_group_path_where_the_broker_lacks_the_batched_versions(broker, unique, monkeypatch):
    prefix = unique("fallback")
    _, want = workload(broker.bootstrap, prefix, groups=8)
    monkeypatch.setattr(admin, "batched_supported", lambda versions: False)   # where KafkaIO calls it
    io = KafkaIO({"bootstrap.servers": broker.bootstrap}, 15)
    try:
        def selected(g: str) -> bool:
            return g.startswith(prefix + "-g")
        listed(io, selected, 8)
        assert io.group_offsets(selected) == want
        assert io.capabilities == {"offset_fetch_batched": False}
        assert io._groups_batched is None and io.group_offsets_report is None
    finally:
        io.close()


def test_coordinator_cache_recovers_from_moved_coordinators_and_a_lost_broker(tmp_path, unique):
    """Two brokers, __consumer_offsets replicated on both: the groups' coordinators are spread
    over both. A stale cache (every group pointed at the other broker) is corrected within the
    same poll through NOT_COORDINATOR; when broker 2 goes, its groups are found on broker 1."""
    cluster = KafkaCluster(2, workdir=tmp_path / "cluster").start()
    io = KafkaIO({"bootstrap.servers": cluster.bootstrap}, 15)
    try:
        prefix = unique("moved")
        _, want = workload(cluster.bootstrap, prefix, groups=40, replication_factor=2)

        def selected(g: str) -> bool:
            return g.startswith(prefix + "-g")
        io.metadata(lambda t: True)
        listed(io, selected, 40)

        assert io.group_offsets(selected) == want
        report = io.group_offsets_report
        assert report.coordinators == {1, 2}
        assert report.requests == {"FindCoordinator": 1, "OffsetFetch": 2}

        cache = io._groups_batched.cache
        for g, node in cache.as_dict().items():
            cache.put(g, 3 - node)
        assert io.group_offsets(selected) == want
        report = io.group_offsets_report
        assert report.rounds == 2 and report.failed == {}
        assert report.requests == {"OffsetFetch": 4, "FindCoordinator": 1}

        cluster.node(2).stop()

        def all_on_node_1() -> bool:
            io.metadata(lambda t: True)
            rows = io.group_offsets(selected)
            return rows == want and io.group_offsets_report.coordinators == {1}
        wait_for(all_on_node_1, 60, interval=0.5, what="the groups of broker 2 served by broker 1")
        assert set(cache.as_dict().values()) == {1}
        assert io.group_offsets(selected) == want
        assert io.group_offsets_report.requests == {"OffsetFetch": 1}
    finally:
        io.close()
        cluster.cleanup()


def test_batched_path_over_sasl_ssl_and_mtls_with_acls(tmp_path, unique):
    """A secured broker (ZooKeeper mode, AclAuthorizer): the batched path connects with the
    KIP-664 client's mapping of the librdkafka settings (SASL/SCRAM over TLS; mutual TLS) and
    answers what the per-group path answers. A group the principal may not DESCRIBE is not
    listed; asked for anyway, it is refused (FindCoordinator and OffsetFetch say
    GROUP_AUTHORIZATION_FAILED) and left out with cause 'authorization', the others served."""
    from txnwatch_dev.kafka.secure import MTLS, SASL_SSL, Grant, SecureKafka

    kafka = SecureKafka(tmp_path / "secure").start()
    try:
        password = "scram-Secret-1d2c3b"
        kafka.add_scram_users({"groups": password})
        grants = [Grant("TOPIC", "sec-", "DESCRIBE", "PREFIXED"), Grant("GROUP", "sec-seen-", "DESCRIBE", "PREFIXED")]
        kafka.grant("User:groups", grants)
        kafka.grant(kafka.tls.client_principal, grants)
        seen, _ = workload(kafka.bootstrap, "sec-seen", groups=12)
        hidden, _ = workload(kafka.bootstrap, "sec-hidden", groups=2)
        want = sorted((g, t, p, o) for g, tps in seen.items() for t, p, o in tps)

        for listener, settings in (
                (SASL_SSL, kafka.client_settings(SASL_SSL, "SCRAM-SHA-512", "groups", password)),
                (MTLS, kafka.client_settings(MTLS))):
            io = KafkaIO({"bootstrap.servers": kafka.bootstrap_of(listener), **settings}, 15)
            try:
                io.metadata(lambda t: True)
                listed(io, lambda g: g.startswith("sec-"), 12)     # the hidden groups are not listed
                assert io.group_offsets(lambda g: g.startswith("sec-")) == want, listener
                assert io.capabilities == {"offset_fetch_batched": True}, listener
                deadline = time.monotonic() + 15
                assert io.group_offsets_per_group(io.list_groups(lambda g: True, deadline), deadline) == want

                fetcher = io._groups_batched
                rows = fetcher.fetch(sorted(seen) + sorted(hidden), time.monotonic() + 15)
                assert rows == want
                assert fetcher.last.failed == dict.fromkeys(sorted(hidden), "authorization")
                # with a stale cache entry the refusal comes from OffsetFetch instead
                fetcher.cache.put(sorted(hidden)[0], next(iter(fetcher.last.coordinators)))
                assert fetcher.fetch(sorted(seen) + sorted(hidden), time.monotonic() + 15) == want
                assert fetcher.last.failed == dict.fromkeys(sorted(hidden), "authorization")
                assert fetcher.last.requests == {"FindCoordinator": 1, "OffsetFetch": 1}
            finally:
                io.close()
    finally:
        kafka.cleanup()
