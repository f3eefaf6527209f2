"""Committed offsets of many consumer groups in few requests.

librdkafka's ListConsumerGroupOffsets takes one group per call and looks up the group's
coordinator for it: about two requests per group and poll (1,000 at 500 groups). Since
Kafka 3.0 a broker answers FindCoordinator for many keys at once (v4, KIP-699) and
OffsetFetch for many groups at once (v8, KIP-709). This module keeps

* a coordinator cache (group -> node id), filled by batched FindCoordinator for the
  groups it does not know; an entry goes on NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE
  and COORDINATOR_LOAD_IN_PROGRESS, when its node leaves the cluster metadata, when a
  request to its node fails, and when the group is no longer listed;
* OffsetFetch v8 per coordinator with up to OFFSET_FETCH_GROUPS groups per request and
  all partitions of each group (topics null),

so a warm poll costs one OffsetFetch per coordinator (and per 500 groups on it), plus
FindCoordinator only for groups that are new or moved.

kafka-python (>= 3.0.12) has both request versions, and its list_group_offsets() batches
too, but it raises for the first group or partition with an error, retries nothing and
keeps no deadline. So the requests are built here from kafka-python's protocol classes
and sent through its connection manager (TLS and SASL mapped as for the KIP-664 client) by
kafka_python.KafkaPythonTransport: kafka-python has no public call to send one request.
This module is pure and tested with a fake transport (tests/unit/test_group_offsets_fake_cluster.py).

Errors: a group whose coordinator moved is looked up again and asked again in the same
poll (up to MAX_ROUNDS rounds, within the poll's deadline). A group that still fails, or
that the broker refuses (GROUP_AUTHORIZATION_FAILED, ...), is left out of this poll and
reported in `FetchReport.failed` with its cause; partition errors skip the partition (as
the per-group path always did). When every group fails, the step fails with the cause
(PollError), so the poller's up/health say what the per-group path would have said.
"""

from __future__ import annotations

import functools
import itertools
import logging
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from . import offset_fetch
from .errors import BatchedUnsupported, PollError, cause_of_code, cause_of_exception
from .wire import RawRequest

log = logging.getLogger(__name__)

Row = tuple[str, str, int, int]   # (group, topic, partition, committed offset)

OFFSET_FETCH_API, FIND_COORDINATOR_API = 9, 10
OFFSET_FETCH_VERSION = 8        # KIP-709: many groups per request (Kafka 3.0+)
FIND_COORDINATOR_VERSION = 4    # KIP-699: many keys per request (Kafka 3.0+)
OFFSET_FETCH_GROUPS = 500       # groups per OffsetFetch request
FIND_COORDINATOR_KEYS = 5000    # groups per FindCoordinator request
IN_FLIGHT_PER_NODE = 3          # kafka-python refuses requests past 5 in flight on a connection
MAX_ROUNDS = 4                  # find + fetch rounds per poll for groups whose coordinator moved
RETRY_BACKOFF_SECONDS = 0.1     # before round n: (n - 1) * this, within the deadline

COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR = 14, 15, 16
MOVED = frozenset({COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR})


# ------------------------------------------------------------------ capabilities
def batched_supported(api_versions: Mapping[int, tuple[int, int]]) -> bool:
    """True when ApiVersions advertises OffsetFetch v8 and FindCoordinator v4 (Kafka 3.0+)."""
    def has(key: int, version: int) -> bool:
        rng = api_versions.get(key)
        return rng is not None and int(rng[0]) <= version <= int(rng[1])
    return has(OFFSET_FETCH_API, OFFSET_FETCH_VERSION) and has(FIND_COORDINATOR_API, FIND_COORDINATOR_VERSION)


def _unsupported(exc: BaseException) -> bool:
    from kafka import errors as E

    return isinstance(exc, E.UnsupportedVersionError)


# ------------------------------------------------------------------ coordinator cache
class CoordinatorCache:
    """group -> node id of its coordinator."""

    def __init__(self) -> None:
        self._node: dict[str, int] = {}

    def __len__(self) -> int:
        return len(self._node)

    def __contains__(self, group: object) -> bool:
        return group in self._node

    def get(self, group: str) -> int | None:
        return self._node.get(group)

    def put(self, group: str, node: int) -> None:
        self._node[group] = node

    def drop(self, groups: Iterable[str]) -> None:
        for g in groups:
            self._node.pop(g, None)

    def drop_node(self, node: int) -> list[str]:
        """Forget every group of `node` (a request to it failed); returns them."""
        gone = [g for g, n in self._node.items() if n == node]
        self.drop(gone)
        return gone

    def keep_nodes(self, live: Iterable[int]) -> list[str]:
        """Forget the groups of nodes not in `live` (they left the cluster metadata)."""
        live = set(live)
        gone = [g for g, n in self._node.items() if n not in live]
        self.drop(gone)
        return gone

    def keep_groups(self, groups: Iterable[str]) -> None:
        """Forget groups no longer listed (the cache never outgrows the cluster's groups)."""
        keep = set(groups)
        self.drop([g for g in self._node if g not in keep])

    def by_node(self, groups: Iterable[str]) -> dict[int, list[str]]:
        out: dict[int, list[str]] = {}
        for g in groups:
            n = self._node.get(g)
            if n is not None:
                out.setdefault(n, []).append(g)
        return out

    def as_dict(self) -> dict[str, int]:
        return dict(self._node)


# ------------------------------------------------------------------ requests and responses
def chunks(items: Sequence[str], size: int) -> list[list[str]]:
    return [list(items[i:i + size]) for i in range(0, len(items), max(size, 1))]


def offset_fetch_plan(by_node: Mapping[int, Sequence[str]], size: int) -> list[tuple[int, list[str]]]:
    """(node, groups) per OffsetFetch request: each coordinator's groups in chunks of `size`."""
    return [(node, chunk) for node in sorted(by_node) for chunk in chunks(by_node[node], size)]


def waves(nodes: Sequence[object], per_node: int) -> list[list[int]]:
    """Indexes of requests (to `nodes[i]`) in waves with at most `per_node` requests to one
    node in flight: a wave is sent, answered, then the next goes."""
    seen: Counter = Counter()
    out: list[list[int]] = []
    for i, node in enumerate(nodes):
        w = seen[node] // max(per_node, 1)
        seen[node] += 1
        while len(out) <= w:
            out.append([])
        out[w].append(i)
    return out


def find_coordinator_request(groups: Sequence[str]):
    from kafka.protocol.metadata import CoordinatorType, FindCoordinatorRequest

    return FindCoordinatorRequest(key_type=int(CoordinatorType.GROUP), coordinator_keys=list(groups),
                                  min_version=FIND_COORDINATOR_VERSION, max_version=FIND_COORDINATOR_VERSION)


def offset_fetch_request(groups: Sequence[str], keep_topic: Callable[[str], bool] | None = None,
                         blocks: offset_fetch.DecodedBlocks | None = None) -> RawRequest:
    """OffsetFetch v8 for every committed partition of `groups`, encoded and decoded by
    offset_fetch.py (kafka-python's decoder built three objects per partition); the answer's
    rows only of the topics `keep_topic` keeps (None: all); `blocks`, the rows of the last
    fetches by their bytes."""
    decode = functools.partial(offset_fetch.decode_response, keep_topic=keep_topic, blocks=blocks)
    return RawRequest("OffsetFetchRequest", offset_fetch.API_KEY, OFFSET_FETCH_VERSION, offset_fetch.FLEXIBLE,
                      offset_fetch.encode_request(groups), decode)


@dataclass(frozen=True)
class Coordinator:
    node_id: int
    host: str
    port: int


def parse_find_coordinator(response) -> tuple[dict[str, Coordinator], dict[str, int]]:
    """({group: coordinator}, {group: error code}) of a FindCoordinator v4 response."""
    found: dict[str, Coordinator] = {}
    errors: dict[str, int] = {}
    for c in response.coordinators or ():
        if c.error_code:
            errors[c.key] = int(c.error_code)
        else:
            found[c.key] = Coordinator(int(c.node_id), c.host, int(c.port))
    return found, errors


def parse_offset_fetch(answer: offset_fetch.Answer) -> tuple[list[list[Row]], dict[str, int], set[str], int]:
    """(rows with a committed offset >= 0, a block per group's topic sorted by partition,
    {group: error code}, groups answered, partitions skipped for a partition error) of an
    OffsetFetch v8 answer."""
    return answer.blocks, answer.errors, answer.answered, answer.skipped


# ------------------------------------------------------------------ the batched fetch
def _block_key(block: list[Row]) -> tuple[str, str]:
    """A block's (group, topic): the first row's."""
    return block[0][0], block[0][1]


class Transport(Protocol):
    def send(self, calls: Sequence[tuple[int | None, object]], deadline: float) -> list[object]:
        """Send each request (to the node, or None: any node) and return its response or the
        exception it failed with, in order; PollError('timeout') past `deadline`."""

    def register_node(self, node: Coordinator) -> None:
        """Make `node` reachable by id (a coordinator the client's metadata may not list yet)."""


@dataclass
class FetchReport:
    """What one fetch did: requests by API, rounds, groups left out (group -> cause)."""

    groups: int = 0
    rows: int = 0
    rounds: int = 0
    requests: Counter = field(default_factory=Counter)
    coordinators: set[int] = field(default_factory=set)
    skipped_partitions: int = 0
    failed: dict[str, str] = field(default_factory=dict)

    @property
    def total_requests(self) -> int:
        return sum(self.requests.values())


class BatchedGroupOffsets:
    """Committed offsets of many groups: FindCoordinator v4 for uncached groups, then one
    OffsetFetch v8 per coordinator (and per `groups_per_request` groups)."""

    def __init__(self, transport: Transport, *, groups_per_request: int = OFFSET_FETCH_GROUPS,
                 keys_per_request: int = FIND_COORDINATOR_KEYS, max_rounds: int = MAX_ROUNDS,
                 backoff: float = RETRY_BACKOFF_SECONDS, clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self.transport = transport
        self.cache = CoordinatorCache()
        self.decoded = offset_fetch.DecodedBlocks()    # unchanged commits are not decoded again
        self.last: FetchReport | None = None
        self._groups_per_request = groups_per_request
        self._keys_per_request = keys_per_request
        self._max_rounds = max(max_rounds, 1)
        self._backoff = backoff
        self._clock = clock
        self._sleep = sleep
        self._first_failure: dict[str, BaseException] = {}   # cause -> the first request failing so (this fetch)

    def fetch(self, groups: Iterable[str], deadline: float, live_nodes: Iterable[int] | None = None,
              keep_topic: Callable[[str], bool] | None = None) -> list[Row]:
        """Rows of every group that answered (of the topics `keep_topic` keeps; None: all),
        sorted. Raises PollError when all groups fail (or the deadline passes),
        BatchedUnsupported when a broker lacks the versions."""
        groups = list(dict.fromkeys(groups))
        report = self.last = FetchReport(groups=len(groups))
        self._first_failure = {}
        self.decoded.next_fetch()
        self.cache.keep_groups(groups)
        if live_nodes is not None:
            dropped = self.cache.keep_nodes(live_nodes)
            if dropped:
                log.debug("coordinator cache: %d groups of nodes that left the metadata", len(dropped))
        blocks: list[list[Row]] = []
        last_cause: dict[str, str] = {}
        pending = groups
        while pending and report.rounds < self._max_rounds:
            if report.rounds:
                left = deadline - self._clock()
                if left <= 0:
                    break
                self._sleep(min(self._backoff * report.rounds, left / 2))
            report.rounds += 1
            retry = self._find([g for g in pending if g not in self.cache], deadline, report, last_cause)
            plan = offset_fetch_plan(self.cache.by_node([g for g in pending if g in self.cache]),
                                     self._groups_per_request)
            results = self._send("OffsetFetch", [(n, offset_fetch_request(gs, keep_topic, self.decoded)) for n, gs in plan],
                                 deadline, report)
            for (node, asked), res in zip(plan, results, strict=True):
                report.coordinators.add(node)
                if isinstance(res, BaseException):
                    # The node may be gone or no longer coordinate: look its groups up again
                    self.cache.drop_node(node)
                    cause = cause_of_exception(res)
                    last_cause.update(dict.fromkeys(asked, cause))
                    retry += asked
                    continue
                got, errors, answered, skipped = parse_offset_fetch(res)
                blocks += got
                report.skipped_partitions += skipped
                for g, code in errors.items():
                    if code in MOVED:
                        self.cache.drop([g])
                        last_cause[g] = cause_of_code(code)
                        retry.append(g)
                    else:
                        report.failed[g] = cause_of_code(code)
                        self.cache.drop([g])
                missing = [g for g in asked if g not in answered]
                if missing:   # a broker that answers for fewer groups than asked: ask again
                    self.cache.drop(missing)
                    last_cause.update(dict.fromkeys(missing, "kafka_group_missing_from_response"))
                    retry += missing
            pending = retry
        for g in pending:
            report.failed[g] = last_cause.get(g, "timeout")
        # sorted as whole blocks (each sorted by partition as decoded): a few hundred keys, not
        # every committed partition
        blocks.sort(key=_block_key)
        rows = list(itertools.chain.from_iterable(blocks))
        report.rows = len(rows)
        if groups and len(report.failed) == len(groups):
            cause, n = Counter(report.failed.values()).most_common(1)[0]
            why = self._first_failure.get(cause)     # what it was, in its words (a refused login's)
            raise PollError(cause, f"committed offsets of consumer groups: all {len(groups)} groups failed "
                                   f"({n} with {cause}{'' if why is None else f': {why}'})")
        return rows

    def _find(self, unknown: list[str], deadline: float, report: FetchReport,
              last_cause: dict[str, str]) -> list[str]:
        """Coordinators of `unknown` into the cache; returns the groups to try again."""
        if not unknown:
            return []
        batches = chunks(unknown, self._keys_per_request)
        results = self._send("FindCoordinator", [(None, find_coordinator_request(b)) for b in batches],
                             deadline, report)
        retry: list[str] = []
        for asked, res in zip(batches, results, strict=True):
            if isinstance(res, BaseException):
                last_cause.update(dict.fromkeys(asked, cause_of_exception(res)))
                retry += asked
                continue
            found, errors = parse_find_coordinator(res)
            for node in {c.node_id: c for c in found.values()}.values():
                self.transport.register_node(node)
            for g, c in found.items():
                self.cache.put(g, c.node_id)
            for g, code in errors.items():
                if code in MOVED:
                    last_cause[g] = cause_of_code(code)
                    retry.append(g)
                else:
                    report.failed[g] = cause_of_code(code)
            missing = [g for g in asked if g not in found and g not in errors]
            last_cause.update(dict.fromkeys(missing, "kafka_group_missing_from_response"))
            retry += missing
        return retry

    def _send(self, api: str, calls: list[tuple[int | None, object]], deadline: float,
              report: FetchReport) -> list[object]:
        if not calls:
            return []
        report.requests[api] += len(calls)
        results = self.transport.send(calls, deadline)
        for res in results:
            if isinstance(res, BaseException) and _unsupported(res):
                raise BatchedUnsupported(f"{api}: {type(res).__name__}: {res}")
            if isinstance(res, BaseException):
                self._first_failure.setdefault(cause_of_exception(res), res)
        return results
