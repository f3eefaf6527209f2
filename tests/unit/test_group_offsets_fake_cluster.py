"""Batched committed offsets (group_offsets.py) against a fake cluster: the coordinator
cache, batching and chunking, invalidation, retries and error causes. The fake answers on
the wire format: every request is encoded and decoded at the version it asks for, and
every response is built from kafka-python's own classes, encoded and decoded."""

from __future__ import annotations

import pytest
from kafka import errors as E
from kafka.protocol.consumer import OffsetFetchRequest, OffsetFetchResponse
from kafka.protocol.metadata import FindCoordinatorRequest, FindCoordinatorResponse

from txnwatch.kafka.errors import BatchedUnsupported, PollError, cause_of_code, cause_of_exception
from txnwatch.kafka.group_offsets import (
    FIND_COORDINATOR_VERSION,
    OFFSET_FETCH_VERSION,
    BatchedGroupOffsets,
    CoordinatorCache,
    batched_supported,
    offset_fetch_plan,
    waves,
)
from txnwatch.kafka.wire import RawRequest

NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE, LOAD_IN_PROGRESS = 16, 15, 14
GROUP_AUTHORIZATION_FAILED, UNKNOWN_TOPIC_OR_PARTITION = 30, 3

_Group = OffsetFetchResponse.OffsetFetchResponseGroup
_Topic = _Group.OffsetFetchResponseTopics
_Partition = _Topic.OffsetFetchResponsePartitions
_Coordinator = FindCoordinatorResponse.Coordinator


class FakeCluster:
    """Brokers `nodes`, each group coordinated by `coordinator[group]`, committed offsets in
    `offsets[group]` = [(topic, partition, offset)]. Injected faults: `group_errors[group]`
    (codes returned once each by OffsetFetch), `find_errors[group]` (by FindCoordinator),
    `partition_errors` {(group, topic, partition): code}, `down` (nodes refusing connections)."""

    def __init__(self, coordinator: dict[str, int], offsets: dict[str, list[tuple[str, int, int]]],
                 nodes: tuple[int, ...] = (1, 2, 3)) -> None:
        self.coordinator = dict(coordinator)
        self.offsets = offsets
        self.nodes = set(nodes)
        self.group_errors: dict[str, list[int]] = {}
        self.find_errors: dict[str, list[int]] = {}
        self.partition_errors: dict[tuple[str, str, int], int] = {}
        self.down: set[int] = set()
        self.unsupported = False
        self.metadata = ""        # of every commit (consumers may attach a string)
        self.log: list[tuple[str, int | None, list[str]]] = []   # (api, node, groups)
        self.registered: dict[int, tuple[str, int]] = {}

    def register_node(self, node) -> None:
        self.registered[node.node_id] = (node.host, node.port)

    def send(self, calls, deadline):
        return [self._answer(node, req) for node, req in calls]

    def _answer(self, node, req):
        if isinstance(req, FindCoordinatorRequest):
            req = FindCoordinatorRequest.decode(req.encode(version=FIND_COORDINATOR_VERSION),
                                                version=FIND_COORDINATOR_VERSION)
            assert req.key_type == 0
            self.log.append(("FindCoordinator", node, list(req.coordinator_keys)))
            rows = []
            for key in req.coordinator_keys:
                errs = self.find_errors.get(key)
                if errs:
                    rows.append(_Coordinator(key=key, node_id=-1, host="", port=-1, error_code=errs.pop(0),
                                             error_message=None))
                elif key in self.coordinator:
                    n = self.coordinator[key]
                    rows.append(_Coordinator(key=key, node_id=n, host=f"b{n}", port=9090 + n, error_code=0,
                                             error_message=None))
                else:   # Kafka names a coordinator for any group id, listed or not
                    rows.append(_Coordinator(key=key, node_id=1, host="b1", port=9091, error_code=0,
                                             error_message=None))
            resp = FindCoordinatorResponse(throttle_time_ms=0, coordinators=rows)
            return FindCoordinatorResponse.decode(resp.encode(version=FIND_COORDINATOR_VERSION),
                                                  version=FIND_COORDINATOR_VERSION)
        assert isinstance(req, RawRequest) and req.API_KEY == 9 and req.API_VERSION == OFFSET_FETCH_VERSION
        if self.unsupported:
            return E.IncompatibleBrokerVersion("OffsetFetch v8")
        raw = req
        req = OffsetFetchRequest.decode(raw.body, version=OFFSET_FETCH_VERSION)
        asked = [g.group_id for g in req.groups]
        self.log.append(("OffsetFetch", node, asked))
        assert all(g.topics is None for g in req.groups) and not req.require_stable
        if node in self.down or node not in self.nodes:
            return E.KafkaConnectionError(f"node {node} refused the connection")
        groups = []
        for g in asked:
            errs = self.group_errors.get(g)
            if errs:
                groups.append(_Group(group_id=g, topics=[], error_code=errs.pop(0)))
            elif self.coordinator.get(g, 1) != node:
                groups.append(_Group(group_id=g, topics=[], error_code=NOT_COORDINATOR))
            else:
                by_topic: dict[str, list] = {}
                for t, p, o in self.offsets.get(g, []):
                    by_topic.setdefault(t, []).append(_Partition(
                        partition_index=p, committed_offset=o, committed_leader_epoch=-1, metadata=self.metadata,
                        error_code=self.partition_errors.get((g, t, p), 0)))
                groups.append(_Group(group_id=g, topics=[_Topic(name=t, partitions=ps) for t, ps in by_topic.items()],
                                     error_code=0))
        resp = OffsetFetchResponse(throttle_time_ms=0, groups=groups)
        return raw.answer(resp.encode(version=OFFSET_FETCH_VERSION))   # read as the broker's bytes

    def requests(self, api: str | None = None) -> list:
        return [e for e in self.log if api is None or e[0] == api]


def make(n_groups: int = 60, nodes: tuple[int, ...] = (1, 2, 3)):
    groups = [f"g{i:04d}" for i in range(n_groups)]
    coordinator = {g: nodes[i % len(nodes)] for i, g in enumerate(groups)}
    offsets = {g: [("orders", i % 4, 10 * i), ("payments", 0, i)] for i, g in enumerate(groups)}
    return groups, FakeCluster(coordinator, offsets, nodes)


def expected(cluster: FakeCluster, groups) -> list:
    return sorted((g, t, p, o) for g in groups for t, p, o in cluster.offsets.get(g, []) if o >= 0)


class Clock:
    def __init__(self) -> None:
        self.now = 100.0
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, s: float) -> None:
        self.slept.append(s)
        self.now += s


def fetcher(cluster, **kw):
    clock = Clock()
    return BatchedGroupOffsets(cluster, clock=clock, sleep=clock.sleep, **kw), clock


DEADLINE = 1e9


# ------------------------------------------------------------------ pure helpers
def test_batched_supported_needs_both_versions():
    assert batched_supported({9: (0, 8), 10: (0, 4)})
    assert batched_supported({9: (1, 9), 10: (0, 6)})
    assert not batched_supported({9: (0, 7), 10: (0, 4)})     # Kafka 2.8
    assert not batched_supported({9: (0, 8), 10: (0, 3)})
    assert not batched_supported({9: (0, 8)})
    assert not batched_supported({})


def test_causes_are_named_like_librdkafka_errors():
    assert cause_of_code(NOT_COORDINATOR) == "kafka_not_coordinator"
    assert cause_of_code(LOAD_IN_PROGRESS) == "kafka_coordinator_load_in_progress"
    assert cause_of_code(GROUP_AUTHORIZATION_FAILED) == "authorization"
    assert cause_of_code(7) == "timeout"
    assert cause_of_code(8) == "broker_unavailable"
    assert cause_of_code(58) == "auth"
    assert cause_of_code(9999).startswith("kafka_")
    assert cause_of_exception(E.KafkaConnectionError("refused")) == "broker_unavailable"
    assert cause_of_exception(E.NodeNotReadyError(3)) == "broker_unavailable"
    assert cause_of_exception(E.KafkaTimeoutError()) == "timeout"
    assert cause_of_exception(E.GroupAuthorizationFailedError()) == "authorization"
    assert cause_of_exception(E.SaslAuthenticationFailedError()) == "auth"
    assert cause_of_exception(PollError("tls", "x")) == "tls"
    assert cause_of_exception(ValueError("?")) == "unexpected"


def test_plan_chunks_each_coordinators_groups():
    by_node = {2: [f"b{i}" for i in range(1100)], 1: ["a1", "a2"]}
    plan = offset_fetch_plan(by_node, 500)
    assert [(n, len(gs)) for n, gs in plan] == [(1, 2), (2, 500), (2, 500), (2, 100)]
    assert [g for _, gs in plan for g in gs] == by_node[1] + by_node[2]


def test_waves_limit_requests_in_flight_per_node():
    assert waves([1, 1, 1, 1, 2, None], 3) == [[0, 1, 2, 4, 5], [3]]
    assert waves([], 3) == []
    assert waves([7] * 7, 3) == [[0, 1, 2], [3, 4, 5], [6]]


def test_cache_upkeep():
    c = CoordinatorCache()
    for g, n in {"a": 1, "b": 2, "c": 2, "d": 3}.items():
        c.put(g, n)
    assert c.by_node(["a", "b", "c", "x"]) == {1: ["a"], 2: ["b", "c"]}
    assert sorted(c.keep_nodes([1, 2])) == ["d"]
    assert sorted(c.drop_node(2)) == ["b", "c"]
    c.put("e", 1)
    c.keep_groups(["e"])
    assert c.as_dict() == {"e": 1}


# ------------------------------------------------------------------ batching and caching
def test_requests_grow_with_coordinators_not_groups():
    groups, cluster = make(1200, nodes=(1, 2, 3))
    f, _ = fetcher(cluster)
    rows = f.fetch(groups, DEADLINE)
    assert rows == expected(cluster, groups)
    # one FindCoordinator for all 1,200 groups; OffsetFetch: 400 groups on each of 3 coordinators
    assert [len(k) for _, _, k in cluster.requests("FindCoordinator")] == [1200]
    assert sorted((n, len(gs)) for _, n, gs in cluster.requests("OffsetFetch")) == [(1, 400), (2, 400), (3, 400)]
    assert f.last.requests == {"FindCoordinator": 1, "OffsetFetch": 3}
    assert f.last.rounds == 1 and f.last.failed == {} and f.last.coordinators == {1, 2, 3}
    assert set(cluster.registered) == {1, 2, 3}

    # warm cache: no FindCoordinator, the same three OffsetFetch
    cluster.log.clear()
    assert f.fetch(groups, DEADLINE) == rows
    assert f.last.requests == {"OffsetFetch": 3}


@pytest.mark.parametrize("metadata", ["", "consumer-7 rebalanced at 12:00"])
def test_rows_come_sorted_whatever_order_the_coordinators_answer_in(metadata):
    """A coordinator lists a group's topics and partitions in its own order (hash maps): the
    rows come sorted by group, topic and partition, from every coordinator, with or without
    commit metadata, and again so when the same bytes come back (the decoded blocks kept)."""
    groups = ["g-b", "g-a", "g-c"]
    offsets = {g: [("payments", 3, 1), ("orders", 2, 5), ("orders", 0, 7), ("payments", 1, 2), ("orders", 1, -1)]
               for g in groups}
    cluster = FakeCluster({"g-b": 2, "g-a": 1, "g-c": 3}, offsets, (1, 2, 3))
    cluster.metadata = metadata
    f, _ = fetcher(cluster)
    rows = f.fetch(groups, DEADLINE)
    assert rows == expected(cluster, groups) and rows[:4] == [
        ("g-a", "orders", 0, 7), ("g-a", "orders", 2, 5), ("g-a", "payments", 1, 2), ("g-a", "payments", 3, 1)]
    assert f.fetch(groups, DEADLINE) == rows


def test_chunks_of_500_groups_per_request():
    groups, cluster = make(5000, nodes=(1,))
    f, _ = fetcher(cluster)
    assert len(f.fetch(groups, DEADLINE)) == 10_000
    assert [len(gs) for _, _, gs in cluster.requests("OffsetFetch")] == [500] * 10
    assert f.last.requests == {"FindCoordinator": 1, "OffsetFetch": 10}


def test_new_groups_are_looked_up_alone_and_gone_groups_forgotten():
    groups, cluster = make(100)
    f, _ = fetcher(cluster)
    f.fetch(groups[:90], DEADLINE)
    cluster.log.clear()
    f.fetch(groups[10:], DEADLINE)
    assert [k for _, _, k in cluster.requests("FindCoordinator")] == [groups[90:]]
    assert set(f.cache.as_dict()) == set(groups[10:])


def test_no_groups_no_requests():
    _, cluster = make(3)
    f, _ = fetcher(cluster)
    assert f.fetch([], DEADLINE) == []
    assert cluster.log == [] and f.last.total_requests == 0


# ------------------------------------------------------------------ invalidation and retries
def move_coordinators(cluster, groups: list[str], src: int, dst: int) -> list[str]:
    """The groups whose coordinator was `src` now have `dst` (leadership of their
    __consumer_offsets partitions moved); the request log starts afresh."""
    moved = [g for g in groups if cluster.coordinator[g] == src]
    for g in moved:
        cluster.coordinator[g] = dst
    cluster.log.clear()
    return moved


def test_moved_coordinator_is_found_again_in_the_same_poll():
    groups, cluster = make(30)
    f, clock = fetcher(cluster)
    f.fetch(groups, DEADLINE)
    moved = move_coordinators(cluster, groups, 2, 3)
    assert f.fetch(groups, DEADLINE) == expected(cluster, groups)
    assert [sorted(k) for _, _, k in cluster.requests("FindCoordinator")] == [sorted(moved)]
    assert f.last.rounds == 2 and f.last.failed == {}
    assert f.cache.by_node(moved) == {3: moved}
    assert clock.slept == [pytest.approx(0.1)]


def test_load_in_progress_and_not_available_are_retried():
    groups, cluster = make(9)
    f, _ = fetcher(cluster)
    cluster.group_errors = {groups[0]: [LOAD_IN_PROGRESS, LOAD_IN_PROGRESS], groups[1]: [COORDINATOR_NOT_AVAILABLE]}
    cluster.find_errors = {groups[2]: [COORDINATOR_NOT_AVAILABLE]}
    assert f.fetch(groups, DEADLINE) == expected(cluster, groups)
    assert f.last.rounds == 3 and f.last.failed == {}


def test_node_gone_from_metadata_drops_its_groups():
    groups, cluster = make(30)
    f, _ = fetcher(cluster)
    f.fetch(groups, DEADLINE)
    on_3 = move_coordinators(cluster, groups, 3, 1)
    cluster.nodes.discard(3)
    assert f.fetch(groups, DEADLINE, live_nodes=[1, 2]) == expected(cluster, groups)
    assert [sorted(k) for _, _, k in cluster.requests("FindCoordinator")] == [sorted(on_3)]
    assert {n for _, n, _ in cluster.requests("OffsetFetch")} == {1, 2}   # node 3 never asked
    assert f.last.rounds == 1


def test_failed_request_drops_the_nodes_groups_and_finds_them_again():
    groups, cluster = make(30)
    f, _ = fetcher(cluster)
    f.fetch(groups, DEADLINE)
    on_2 = [g for g in groups if cluster.coordinator[g] == 2]
    cluster.down.add(2)
    for g in on_2:
        cluster.coordinator[g] = 1      # the new coordinator took over
    assert f.fetch(groups, DEADLINE) == expected(cluster, groups)
    assert f.last.rounds == 2 and f.last.failed == {}


def test_groups_of_a_dead_coordinator_are_left_out_and_the_rest_served():
    groups, cluster = make(30)
    f, clock = fetcher(cluster)
    cluster.down.add(2)        # and FindCoordinator keeps naming it (not fenced yet)
    rows = f.fetch(groups, DEADLINE)
    on_2 = {g for g in groups if cluster.coordinator[g] == 2}
    assert rows == expected(cluster, [g for g in groups if g not in on_2])
    assert f.last.failed == dict.fromkeys(sorted(on_2), "broker_unavailable")
    assert f.last.rounds == 4 and len(clock.slept) == 3
    assert len(cluster.requests("FindCoordinator")) == 4    # 30 groups, then the 10 again thrice


def test_retries_stop_at_the_deadline():
    groups, cluster = make(6)
    f, clock = fetcher(cluster)
    cluster.group_errors = {groups[0]: [LOAD_IN_PROGRESS] * 10}
    rows = f.fetch(groups, clock.now + 0.05)
    assert rows == expected(cluster, groups[1:])
    assert f.last.failed == {groups[0]: "kafka_coordinator_load_in_progress"}
    assert clock.now <= 100.05 + 1e-9


def test_refused_group_is_left_out_and_partition_errors_skipped():
    groups, cluster = make(6)
    f, _ = fetcher(cluster)
    cluster.group_errors = {groups[1]: [GROUP_AUTHORIZATION_FAILED]}
    cluster.find_errors = {groups[2]: [GROUP_AUTHORIZATION_FAILED]}
    cluster.partition_errors = {(groups[3], "payments", 0): UNKNOWN_TOPIC_OR_PARTITION}
    cluster.offsets[groups[4]].append(("orders", 9, -1))    # no committed offset
    rows = f.fetch(groups, DEADLINE)
    assert f.last.failed == {groups[1]: "authorization", groups[2]: "authorization"}
    assert f.last.skipped_partitions == 1
    want = [r for r in expected(cluster, groups) if r[0] not in groups[1:3] and r[:3] != (groups[3], "payments", 0)]
    assert rows == want
    assert groups[1] not in f.cache and groups[2] not in f.cache


def test_all_groups_failing_fails_the_step_with_the_cause():
    groups, cluster = make(6, nodes=(1,))
    f, _ = fetcher(cluster)
    cluster.down.add(1)
    with pytest.raises(PollError) as ei:
        f.fetch(groups, DEADLINE)
    assert ei.value.cause == "broker_unavailable"
    cluster.down.clear()
    cluster.group_errors = {g: [GROUP_AUTHORIZATION_FAILED] for g in groups}
    with pytest.raises(PollError) as ei:
        f.fetch(groups, DEADLINE)
    assert ei.value.cause == "authorization"


def test_transport_timeout_propagates():
    class Silent(FakeCluster):
        def send(self, calls, deadline):
            raise PollError("timeout", "no answer within the poll timeout")

    groups, cluster = make(3)
    f, _ = fetcher(Silent(cluster.coordinator, cluster.offsets))
    with pytest.raises(PollError) as ei:
        f.fetch(groups, DEADLINE)
    assert ei.value.cause == "timeout"


def test_a_broker_without_offset_fetch_v8_is_unsupported():
    groups, cluster = make(3)
    f, _ = fetcher(cluster)
    cluster.unsupported = True
    with pytest.raises(BatchedUnsupported):
        f.fetch(groups, DEADLINE)
