"""What one cluster's sources publish for the serving side: the page's bounded digest and
the worker's status, plus the atomic file swap a worker process publishes them through.

The same `ClusterDigest` feeds the page whether the poller runs in this process or in a
worker (see worker.py): the page never walks a whole snapshot, only bounded top-N lists,
so its cost does not grow with the cluster.
"""

from __future__ import annotations

import copyreg
import os
import pickle
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import MappingProxyType
from typing import Any

from ..health import SourceHealth
from ..in_flight import Poll
from ..model import ClusterSnapshot, Finding, GroupLag, HangingEnded, OpenTransaction, PartitionState
from ..serve.app_view import AppView, CounterWindow, app_views
from ..serve.page import group_rows


# Snapshots and views freeze their mappings in MappingProxyType, which pickle cannot take
# by itself: they travel as the dict they wrap and come back frozen.
def _frozen(d: dict) -> MappingProxyType:
    return MappingProxyType(d)


copyreg.pickle(MappingProxyType, lambda m: (_frozen, (dict(m),)))

TOP = 20            # rows per table on the page
TOP_FINDINGS = 50


@dataclass(frozen=True)
class TapSummary:
    topic_found: bool
    rebuilt: bool
    lag_records: int | None
    applied: int
    ids: int


@dataclass(frozen=True)
class CanarySummary:
    committed: int
    aborted: int
    failures: int
    visibility_timeouts: int
    violations: int
    last_success: float | None
    last_failure: tuple[str, str, str] | None     # (stage, error, message)
    last_failure_at: float | None
    commit_mean_seconds: float | None
    visibility_mean_seconds: float | None        # over every partition's visible records
    partitions_visible: int

    @property
    def failing(self) -> bool:
        """No round completed yet after a failure, or the last failure is newer than the last success."""
        if self.last_failure_at is None:
            return False
        return self.last_success is None or self.last_failure_at >= self.last_success


# Group types whose committed offsets (and lag) the poller reads; the rest are only named.
OFFSET_GROUP_TYPES = frozenset({"classic", "consumer"})


@dataclass(frozen=True)
class LoginSummary:
    """How the cluster's clients log in, for the page: mechanism and source, principal, when the
    token runs out, why the credentials cannot be had while so (never a secret)."""

    describe: str
    principal: str | None = None
    expires_at: float | None = None
    failure: str | None = None


def login_summary(status) -> LoginSummary | None:
    """The page's copy of a login's status (txnwatch.kafka.login.LoginStatus): the serving
    process reads digests and never loads the Kafka room."""
    if status is None:
        return None
    return LoginSummary(status.describe, status.principal, status.expires_at, status.failure)


@dataclass(frozen=True)
class ClusterDigest:
    """A cluster's page data as of its last poll (bounded: top-N rows, counts)."""

    cluster: str
    taken_at: float | None = None
    findings: tuple[Finding, ...] = ()
    open_transactions: tuple[OpenTransaction, ...] | None = ()   # oldest first; None: not observable
    stalled: tuple[PartitionState, ...] = ()                    # longest stalled first
    group_rows: tuple[tuple[GroupLag, str], ...] = ()           # (group lag, blocked by)
    groups_caught_up: int = 0
    hanging_method: str = "producer_state"
    kip664_error: str | None = None
    tap: TapSummary | None = None
    canary: CanarySummary | None = None
    # the partitions (with their hanging and open transactions) of the topics Spark queries read
    spark_view: ClusterSnapshot | None = None
    # groups of types without committed offsets (share, ...): (type, count, the first names)
    other_groups: tuple[tuple[str, int, tuple[str, ...]], ...] = ()
    login: LoginSummary | None = None
    hanging_ended: tuple[HangingEnded, ...] = ()    # the latest hanging transactions seen to end
    # per app, the most troubled first (serve/app_view.py), and how many more apps there are
    apps: tuple[AppView, ...] = ()
    apps_more: int = 0
    apps_counted_since: float | None = None         # when the apps' tap counts start (None: no tap yet)


def tap_summary(view) -> TapSummary:
    return TapSummary(view.topic_found, view.rebuilt, view.lag_records, view.applied, sum(view.ids_per_app.values()))


def canary_summary(view) -> CanarySummary:
    commit = view.commit
    seen = sum(h.count for h in view.visibility.values())
    return CanarySummary(
        view.rounds.get("committed", 0), view.rounds.get("aborted", 0), sum(view.failures.values()),
        sum(view.visibility_timeouts.values()), view.violations, view.last_success, view.last_failure,
        view.last_failure_at, commit.sum / commit.count if commit is not None and commit.count else None,
        sum(h.sum for h in view.visibility.values()) / seen if seen else None,
        sum(1 for h in view.visibility.values() if h.count))


def with_tap_clock(txns: tuple[OpenTransaction, ...], tap_open, at: float) -> tuple[OpenTransaction, ...]:
    """The poller's open transactions with the coordinator's clock the tap read from the log
    (`tap_open`: its OpenTxns) where it has the id open, as of `at` (unix seconds): a log record's
    update time is exact, a poll sees a change only when it polls (the tap wins, as on /metrics)."""
    last = {t.transactional_id: t.last_update_ms for t in tap_open}
    return tuple(replace(t, state_unchanged_seconds=max(0.0, at - last[t.transactional_id] / 1000))
                 if t.transactional_id in last else t for t in txns)


def digest_of(snap: ClusterSnapshot | None, cluster: str, kip664_error: str | None, tap_view=None,
              spark_topics: frozenset[str] | None = None, canary_view=None,
              login: LoginSummary | None = None, app_counts: CounterWindow | None = None,
              app_of: Callable[[str], str] | None = None,
              abort_app: Callable[[str], str] | None = None) -> ClusterDigest:
    """The page digest of a snapshot (pure). `spark_topics`: None keeps every partition in
    `spark_view` (in-process: the snapshot itself), a set keeps only those topics. The apps'
    view takes the tap's counters windowed (`app_counts`), the app of a transactional id
    (`app_of`) and the dry-run command for an app (`abort_app`)."""

    tap = None if tap_view is None else tap_summary(tap_view)
    canary = None if canary_view is None else canary_summary(canary_view)
    if snap is None:
        return ClusterDigest(cluster, kip664_error=kip664_error, tap=tap, canary=canary, login=login)
    txns = None
    if snap.open_transactions is not None:
        txns = tuple(sorted(snap.open_transactions, key=lambda t: -(t.age_seconds or 0))[:TOP])
        if tap_view is not None and tap_view.rebuilt:
            txns = with_tap_clock(txns, tap_view.open_txns, snap.taken_at)
    stalled = sorted((p for p in snap.partitions.values() if p.stalled_since is not None),
                     key=lambda p: -p.stalled_seconds)[:TOP]
    rows, caught_up = group_rows(snap, TOP)
    if spark_topics is None:
        spark_view = snap
    elif spark_topics:
        parts = {tp: p for tp, p in snap.partitions.items() if tp[0] in spark_topics}
        spark_view = ClusterSnapshot(
            snap.cluster, snap.taken_at, snap.poll_seconds, partitions=MappingProxyType(parts),
            open_transactions=None if snap.open_transactions is None else tuple(
                t for t in snap.open_transactions if any(tp[0] in spark_topics for tp in t.partitions)),
            hanging=tuple(h for h in snap.hanging if h.topic in spark_topics))
    else:
        spark_view = None
    other = tuple((t, len(names), names[:TOP]) for t, names in sorted(snap.group_types.items())
                  if t not in OFFSET_GROUP_TYPES and names)
    clocked = snap.open_transactions
    if clocked is not None and tap_view is not None and tap_view.rebuilt:
        clocked = with_tap_clock(tuple(clocked), tap_view.open_txns, snap.taken_at)
    apps, apps_more = app_views(snap, cluster, clocked, app_counts, app_of, abort_app)
    return ClusterDigest(cluster, snap.taken_at, tuple(snap.findings[:TOP_FINDINGS]), txns, tuple(stalled),
                         tuple(rows), caught_up, snap.hanging_method, kip664_error, tap, canary, spark_view, other,
                         login, hanging_ended=snap.hanging_ended_recent, apps=apps, apps_more=apps_more,
                         apps_counted_since=app_counts.since if app_counts is not None else None)


@dataclass(frozen=True)
class WorkerStatus:
    """Published by a worker every status interval and after each poll: its sources' health
    and the facts readiness goes by."""

    cluster: str
    pid: int
    seq: int
    published_at: float                     # unix time
    sources: tuple[SourceHealth, ...]
    readiness: tuple[bool, ...]
    data_taken_at: dict[str, float] = field(default_factory=dict)   # source -> when its data was taken
    dropped: dict[tuple[str, str, str], int] = field(default_factory=dict)   # (cluster, metric, reason) -> n
    poll: Poll | None = None     # the poll running as this status was written


def write_atomic(path: Path, obj: Any) -> None:
    """Pickle `obj` to `path` by a rename: a reader sees the old file or the new one whole."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "wb") as fh:
            pickle.dump(obj, fh, protocol=pickle.HIGHEST_PROTOCOL)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def write_atomic_text(path: Path, obj: Any) -> None:
    """JSON to `path` by a rename (the serving process's requests to a worker)."""
    import json

    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    with os.fdopen(fd, "w") as fh:
        json.dump(obj, fh)
    os.replace(tmp, path)


class PublishedFile:
    """Reads a file a worker publishes, again only when it was replaced (a stat per call)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._key: tuple | None = None
        self.value: Any = None

    def load(self) -> bool:
        """True when a new version was read into `value`."""
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            return False
        key = (st.st_ino, st.st_mtime_ns, st.st_size)
        if key == self._key:
            return False
        with open(self.path, "rb") as fh:
            value = pickle.load(fh)   # noqa: S301 - our own worker's file in a private 0700 directory
        self._key, self.value = key, value
        return True
