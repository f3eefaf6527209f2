"""Per-transactional-id state machine over the records of __transaction_state (pure).

All time comes in as arguments (record timestamps from the log, `now_ms` from the
caller); nothing here does I/O or reads a clock, so every history is unit-testable.

What the coordinator writes (read in TransactionCoordinator and TransactionMetadata of
Apache Kafka 4.4 and 3.9, and captured from real brokers of both lines with the Java client
of the same release (TV2 on 4.4, TV0 on 3.9) and librdkafka (TV0): tests/fixtures/txnlog/).
Each line is one record, `e` the producer epoch, CTV the ClientTransactionVersion carried by
v1 values (0 for v0 values):

* InitProducerId: ``Empty(e+1)`` (start -1, no partitions), or ``Empty`` with a new producer
  id at epoch 0 when the epoch is exhausted. The first one of an id is its registration
  (``Empty(0)``); every later one is a new instance taking the id over -- a restart, a
  second instance (this fences the first), or an operator's ``Admin.fenceProducers`` /
  ``kafka-transactions.sh forceTerminateTransaction`` (4.1+). The broker logs each as
  "Initialized transactionalId ...".
* AddPartitionsToTxn: ``Ongoing(e)`` with start = the update time of the first add
  (the transaction's start); further adds repeat ``Ongoing`` with the same start.
* EndTxn from the client: ``Prepare*`` then, once the markers are written, ``Complete*``
  (start kept, last update = the completion time). Under TV0/1 the epoch stays ``e``.
  Under TV2 (KIP-890, a TV2 client on a cluster with transaction.version 2) every end
  bumps it: ``Prepare*(e+1)``, ``Complete*(e+1)``; an exhausted epoch moves on to a new
  producer id at epoch 0 in the ``Complete*`` record. TV2 also allows an abort with no
  partitions added: ``PrepareAbort(e+1)`` straight from Empty/Complete* (start = update
  time), counted as an aborted transaction.
* A fence while a transaction is open (a new instance's InitProducerId, or the
  coordinator's timeout check, every 10 s by default, on an Ongoing transaction whose
  start + timeout has passed) bumps the epoch once and aborts with the server's
  transaction version: ``Ongoing(e) -> PrepareAbort(e+1) -> CompleteAbort(e+1)`` on every
  line since 4.0.1 (4.0.0 bumped twice, KAFKA-19367), CTV 2 on a TV2 cluster even for a
  TV0 client. A new instance's InitProducerId then completes: ``Empty(e+2)``. So under
  TV2 the abort of a fence looks like a client's abort; what tells them apart is the
  ``Empty`` that follows (new instance) or the clock (timeout).
* A client's own EndTxn(abort), then a fresh InitProducerId (its process exits and starts
  again, or another instance starts): under TV2 ``Ongoing(e) -> PrepareAbort(e+1) ->
  CompleteAbort(e+1)``, later ``Empty(e+2)`` -- record for record a fence's: the same
  epochs, CTV 2 throughout, the same partitions, start and timeout, PreviousProducerId the
  producer id and NextProducerId -1 in both (no field says who ended a transaction). Only
  the time from the CompleteAbort to the ``Empty`` differs: a fence's new instance got
  CONCURRENT_TRANSACTIONS for its first InitProducerId (answered once the PrepareAbort is
  written) and retries one retry.backoff.ms later (the Java client's: 100 ms, fixed),
  0.1 to 0.12 s after the CompleteAbort in the captures; a restart comes once the old
  process has exited and the new one has started and bootstrapped, 1.5 s (4.4) and 3 s
  (3.9) for the captures' JVM. Under TV0/1 the client's abort keeps ``e`` and the restart
  writes ``Empty(e+1)``: at an abort only the coordinator bumps (on a 4.x cluster with CTV 2
  after the client's CTV 0 ``Ongoing``).

Hence the rules, the same on every broker line and client:
* ``timeout``: a ``PrepareAbort`` after ``Ongoing`` with the same producer id, a higher
  epoch, and the transaction's start + timeout before the PrepareAbort's update time (the
  coordinator needs start + timeout < its clock). Counted in fencing{reason=timeout} and
  in timeouts. (A client's own abort keeps the epoch under TV0; under TV2 one that comes
  after its deadline but before the coordinator's check counts as a timeout: the
  transaction had timed out.) The broker logs it as "... due to timeout".
* An ``Empty`` for an id the tap already holds, with another epoch or producer id, is an
  InitProducerId after the registration. What it means depends on what it cut off:
  * ``new_instance``: it aborted a transaction that was open -- the ``Empty`` follows an
    epoch-bumping ``PrepareAbort``/``CompleteAbort`` of an ``Ongoing`` transaction as the
    retry of the InitProducerId that caused the abort (the coordinator aborts, answers
    CONCURRENT_TRANSACTIONS, the new instance retries after its backoff). How soon after
    the CompleteAbort depends on who else bumps there: for a client below TV2 (the
    ``Ongoing``'s CTV under 2) nobody, so within FENCE_RETRY_WINDOW_MS (10 s; librdkafka
    retries after 0.5 s); for a TV2 client, whose own abort bumps too, within
    TV2_FENCE_RETRY_WINDOW_MS (0.5 s). A zombie was cut off mid-transaction: the event an
    SRE must see (it pages when it persists).
  * a re-initialisation (``reinits``, not a fence): the id was idle -- a restart (also one
    right after the client's own abort), a task moved to another worker or executor, a
    pool's re-init. Counted apart, as churn.
  * ``operator``: an ``Empty`` whose transaction timeout changed to 30 s, the timeout
    ``Admin.fenceProducers`` sends (the admin client's request.timeout.ms, which
    ``forceTerminateTransaction`` leaves at its default): the one mark the log keeps of an
    operator's fence, open or idle. A producer restarted with its transaction.timeout.ms
    changed to exactly 30 s reads the same; one whose timeout already was 30 s does not.
* What the log cannot tell apart (TV2 clients only): a client's own abort followed within
  0.5 s by an InitProducerId for its id -- a producer closed and made anew in the same
  process right after its abort, or another instance starting just then -- writes
  ``Ongoing(e), PrepareAbort(e+1), CompleteAbort(e+1), Empty(e+2)``, CTV 2, as a fence does,
  and counts as ``new_instance``: a fence's retry is that fast, a process's restart seldom
  is. The other way round, a fence whose new instance retries later than 0.5 s after the
  abort completed (a retry.backoff.ms raised past about 0.4 s, a coordinator slow to write
  the CompleteAbort) counts as a re-init: a fence missed rather than a false page (the
  fenced instance still gets PRODUCER_FENCED, which instrumented producers count).
* ``PrepareEpochFence`` (7) and ``Dead`` (6) should never be in the log. A
  PrepareEpochFence after Ongoing is read like a PrepareAbort; Dead like a tombstone.
* Expiration: the coordinator writes a tombstone (null value) for ids idle (Empty or
  Complete*) longer than transactional.id.expiration.ms. The id's state is freed; an id
  registered again later is new.

Counting: while the tap rebuilds state from the compacted log (``counting=False``) only
current state is built. With ``counting=True`` completions (Complete* after Prepare*),
their durations (start -> completion) and completion latencies (Prepare* -> Complete*,
both from the records' last-update timestamps), fences, timeouts and expirations are
counted. A completion whose Prepare* was seen during the rebuild is still counted when
its Complete* arrives later: it happened after the tap started.

Memory: per id, one dict entry (id -> slot) and a slot in typed arrays (columns);
freed slots are reused, so churning ids keeps memory bounded by the peak number of
live ids.
"""

from __future__ import annotations

import heapq
from array import array
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from ...apps import REINITIALISING_SCHEMES, AppResolver
from ...metrics import CATALOG, Histogram
from .decoder import TxnLogKey, TxnLogValue, TxnStatus

DEFAULT_EXPIRATION_MS = 604_800_000  # transactional.id.expiration.ms default (7 days)

EMPTY, ONGOING, PREPARE_COMMIT, PREPARE_ABORT, COMPLETE_COMMIT, COMPLETE_ABORT, DEAD, \
    PREPARE_EPOCH_FENCE = range(8)
_OPEN = frozenset((ONGOING, PREPARE_COMMIT, PREPARE_ABORT, PREPARE_EPOCH_FENCE))
_PREPARE = frozenset((PREPARE_COMMIT, PREPARE_ABORT, PREPARE_EPOCH_FENCE))

_DURATION_BUCKETS = CATALOG["kafka_transaction_duration_seconds"].buckets
_COMPLETION_BUCKETS = CATALOG["kafka_transaction_completion_seconds"].buckets

COMMITTED, ABORTED = "committed", "aborted"
TIMEOUT, NEW_INSTANCE, OPERATOR = "timeout", "new_instance", "operator"
# A Flink KafkaSink start-up that aborted a transaction its failed run left open (probing or
# listing): counted instead of new_instance for ids of a re-initialising scheme.
STARTUP_ABORT = "startup_abort"
# Who bumped the epoch at the abort of an Ongoing transaction (not a timeout), as far as the log
# says: below TV2 a client's own abort keeps the epoch, so the bump is the coordinator's, for
# another instance's InitProducerId; a TV2 client's own abort bumps it as well.
COORDINATOR_BUMP, TV2_BUMP = 1, 2
# An InitProducerId that aborted an open transaction is retried by its client after the
# abort completed (CONCURRENT_TRANSACTIONS): its Empty lands this soon after the CompleteAbort.
FENCE_RETRY_WINDOW_MS = 10_000
# The same for a TV2 client's transaction, where a restart after the client's own abort writes
# the same records: the retry comes one retry.backoff.ms after the abort completed (the Java
# client's is 100 ms, fixed: 0.12 s in the 4.4 capture), a restarted process first starts
# up (1.5 s in that capture).
TV2_FENCE_RETRY_WINDOW_MS = 500
# The transaction timeout Admin.fenceProducers (forceTerminateTransaction) sends: the admin
# client's default request.timeout.ms.
FENCE_PRODUCERS_TIMEOUT_MS = 30_000


@dataclass(frozen=True, slots=True)
class OpenTxn:
    transactional_id: str
    app: str
    status: TxnStatus
    start_ms: int
    timeout_ms: int
    producer_id: int
    producer_epoch: int
    # TransactionLastUpdateTimestampMs of the id's latest record: the coordinator's last change
    last_update_ms: int = -1


@dataclass(frozen=True, slots=True)
class IdleSummary:
    """The idle ids with the least expiration headroom (oldest last update), at most
    `cap`, and per app the oldest last update among the rest (folded)."""

    kept: tuple[tuple[str, str, int], ...] = ()          # (transactional id, app, last update ms)
    folded_min: Mapping[str, int] = field(default_factory=dict)   # app -> oldest last update
    folded: int = 0
    scanned_at_ms: int | None = None
    # app -> the newest last update of its idle ids, for apps of a re-initialising scheme
    # (Flink's KafkaSink, an id per checkpoint): one figure per app, not one per id
    newest: Mapping[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class TapView:
    """An immutable snapshot of the tap for rendering (safe to read from any thread)."""

    expiration_ms: int = DEFAULT_EXPIRATION_MS
    cap: int = 500                       # per-id series cap (the rest fold into __other__)
    ids_per_app: Mapping[str, int] = field(default_factory=dict)
    open_txns: tuple[OpenTxn, ...] = ()
    transactions: Mapping[tuple[str, str], int] = field(default_factory=dict)  # (app, outcome)
    duration: Mapping[tuple[str, str], Histogram] = field(default_factory=dict)
    completion: Mapping[tuple[str, str], Histogram] = field(default_factory=dict)
    fencing: Mapping[tuple[str, str], int] = field(default_factory=dict)       # (app, reason)
    reinits: Mapping[str, int] = field(default_factory=dict)                   # app -> idle re-inits
    reinit_apps: frozenset[str] = frozenset()   # apps of a re-initialising scheme (Flink's sink)
    timeouts: Mapping[str, int] = field(default_factory=dict)
    expirations: Mapping[str, int] = field(default_factory=dict)
    idle: IdleSummary = IdleSummary()
    applied: int = 0
    skipped: Mapping[str, int] = field(default_factory=dict)                    # reason -> count
    last_record_timestamp_ms: int | None = None
    # filled by the source
    rebuilt: bool = False
    lag_records: int | None = None
    partitions: int = 0
    topic_found: bool = False
    # partition -> next offset, as of these counters (what a restarted tap resumes counting at)
    positions: Mapping[int, int] = field(default_factory=dict)


def _freeze(d: dict) -> Mapping:
    return MappingProxyType(dict(d))


class TxnLogState:
    """Current state of every transactional id, and the counters derived from changes."""

    def __init__(self, resolver: AppResolver, expiration_ms: int | None = None,
                 id_filter: Callable[[str], bool] | None = None) -> None:
        self.resolver = resolver
        self.id_filter = id_filter      # ids outside it (config transactional_ids) are not followed
        self.expiration_ms = DEFAULT_EXPIRATION_MS if expiration_ms is None else int(expiration_ms)
        self._slots: dict[str, int] = {}
        self._tids: list[str | None] = []
        self._free: list[int] = []
        # columns, one entry per slot
        self._status = array("b")
        self._tv = array("b")
        self._epoch = array("h")
        self._timeout = array("i")
        self._app = array("i")
        self._pid = array("q")
        self._start = array("q")
        self._last = array("q")
        self._bumped_abort = array("b")    # COORDINATOR_BUMP or TV2_BUMP through an epoch-bumping abort
        self._apps: list[str] = []
        self._app_reinit: list[bool] = []  # the app's ids are of a scheme that re-initialises them
        self._app_index: dict[str, int] = {}
        self._ids_per_app: list[int] = []
        self._open: dict[int, None] = {}
        # counters (keys use app names: they outlive the ids)
        self._transactions: dict[tuple[str, str], int] = {}
        self._duration: dict[tuple[str, str], Histogram] = {}
        self._completion: dict[tuple[str, str], Histogram] = {}
        self._fencing: dict[tuple[str, str], int] = {}
        self._reinits: dict[str, int] = {}
        self._timeouts: dict[str, int] = {}
        self._expirations: dict[str, int] = {}
        self._skipped: dict[str, int] = {}
        self.applied = 0
        self.last_record_timestamp_ms: int | None = None

    def restore_counters(self, view: TapView) -> None:
        """Start from the counters of an earlier tap of this cluster (a restarted worker), so
        no counter goes backwards; the state itself is rebuilt from the log."""
        self._transactions = dict(view.transactions)
        self._duration = {k: h.copy() for k, h in view.duration.items()}
        self._completion = {k: h.copy() for k, h in view.completion.items()}
        self._fencing = dict(view.fencing)
        self._reinits = dict(view.reinits)
        self._timeouts = dict(view.timeouts)
        self._expirations = dict(view.expirations)
        self._skipped = dict(view.skipped)
        self.applied = view.applied

    # ------------------------------------------------------------------ queries
    def __len__(self) -> int:
        return len(self._slots)

    def __contains__(self, transactional_id: str) -> bool:
        return transactional_id in self._slots

    def status_of(self, transactional_id: str) -> TxnStatus | None:
        s = self._slots.get(transactional_id)
        return None if s is None else TxnStatus(self._status[s])

    @property
    def open_count(self) -> int:
        return len(self._open)

    # ------------------------------------------------------------------ updates
    def skip(self, reason: str) -> None:
        """Count a record that could not be decoded."""
        self._skipped[reason] = self._skipped.get(reason, 0) + 1

    def _app_of(self, tid: str) -> int:
        name, scheme = self.resolver.resolve(tid)
        idx = self._app_index.get(name)
        if idx is None:
            idx = len(self._apps)
            self._apps.append(name)
            self._app_index[name] = idx
            self._ids_per_app.append(0)
            self._app_reinit.append(scheme in REINITIALISING_SCHEMES)
        return idx

    def _alloc(self, tid: str) -> int:
        app = self._app_of(tid)
        self._ids_per_app[app] += 1
        if self._free:
            s = self._free.pop()
            self._tids[s] = tid
            self._app[s] = app
            self._bumped_abort[s] = 0
        else:
            s = len(self._tids)
            self._tids.append(tid)
            for col in (self._status, self._tv, self._epoch, self._timeout, self._pid,
                        self._start, self._last, self._bumped_abort):
                col.append(0)
            self._app.append(app)
        self._slots[tid] = s
        return s

    def _release(self, tid: str, s: int) -> None:
        del self._slots[tid]
        self._tids[s] = None
        self._open.pop(s, None)
        self._ids_per_app[self._app[s]] -= 1
        self._free.append(s)

    def apply(self, key: TxnLogKey | str, value: TxnLogValue | None, record_timestamp_ms: int | None,
              now_ms: int, counting: bool) -> None:
        """Apply one record (value None = tombstone). `now_ms` is accepted for symmetry with
        the rest of the tap; derivations use the records' own timestamps."""
        tid = key if isinstance(key, str) else key.transactional_id
        self.applied += 1
        if self.id_filter is not None and not self.id_filter(tid):
            return
        if record_timestamp_ms is not None:
            self.last_record_timestamp_ms = record_timestamp_ms
        s = self._slots.get(tid)
        if value is None or value.status == DEAD:
            if s is not None:
                if counting:
                    app = self._apps[self._app[s]]
                    self._expirations[app] = self._expirations.get(app, 0) + 1
                self._release(tid, s)
            return

        status = int(value.status)
        if s is None:
            s = self._alloc(tid)
            prev = -1
        else:
            prev = self._status[s]
            if counting:
                self._derive(s, prev, value, status)

        self._status[s] = status
        self._tv[s] = max(-128, min(127, value.client_transaction_version))
        self._epoch[s] = value.producer_epoch
        self._timeout[s] = value.timeout_ms
        self._pid[s] = value.producer_id
        self._start[s] = value.start_ms
        self._last[s] = value.last_update_ms
        if status in _OPEN:
            self._open[s] = None
        else:
            self._open.pop(s, None)

    def _count_fence(self, s: int, reason: str) -> None:
        app = self._apps[self._app[s]]
        k = (app, reason)
        self._fencing[k] = self._fencing.get(k, 0) + 1
        if reason == TIMEOUT:
            self._timeouts[app] = self._timeouts.get(app, 0) + 1

    def _count_reinit(self, s: int) -> None:
        app = self._apps[self._app[s]]
        self._reinits[app] = self._reinits.get(app, 0) + 1

    def _derive(self, s: int, prev: int, value: TxnLogValue, status: int) -> None:
        bumped = self._bumped_abort[s]
        if status != COMPLETE_ABORT and status != PREPARE_ABORT:   # kept through the abort's records
            self._bumped_abort[s] = 0
        if status == EMPTY:
            if value.producer_epoch != self._epoch[s] or value.producer_id != self._pid[s]:
                # an InitProducerId after the registration: someone took the id over
                window = FENCE_RETRY_WINDOW_MS if bumped == COORDINATOR_BUMP else TV2_FENCE_RETRY_WINDOW_MS
                if value.timeout_ms == FENCE_PRODUCERS_TIMEOUT_MS != self._timeout[s]:
                    self._count_fence(s, OPERATOR)
                elif bumped and value.last_update_ms - self._last[s] <= window:
                    # it aborted the open transaction of the instance it replaced; Flink's
                    # sink does so at start-up, by design, for what its failed run left open
                    self._count_fence(s, STARTUP_ABORT if self._app_reinit[self._app[s]] else NEW_INSTANCE)
                else:
                    self._count_reinit(s)
            return
        if status == PREPARE_ABORT or status == PREPARE_EPOCH_FENCE:
            if prev == ONGOING and value.producer_id == self._pid[s] and value.producer_epoch > self._epoch[s]:
                start, timeout = self._start[s], self._timeout[s]
                if start >= 0 and start + timeout < value.last_update_ms:
                    self._count_fence(s, TIMEOUT)
                    self._bumped_abort[s] = 0
                else:    # a fence's abort; under TV2 (the Ongoing's CTV) also the client's own
                    self._bumped_abort[s] = TV2_BUMP if self._tv[s] >= 2 else COORDINATOR_BUMP
            elif prev != PREPARE_EPOCH_FENCE:    # (a PrepareAbort after PrepareEpochFence keeps its flag)
                self._bumped_abort[s] = 0
            return
        if status == COMPLETE_COMMIT or status == COMPLETE_ABORT:
            if prev == status and self._start[s] == value.start_ms:
                return  # the same completion written again
            app = self._apps[self._app[s]]
            k = (app, COMMITTED if status == COMPLETE_COMMIT else ABORTED)
            self._transactions[k] = self._transactions.get(k, 0) + 1
            end = value.last_update_ms
            if value.start_ms >= 0:
                h = self._duration.get(k)
                if h is None:
                    h = self._duration[k] = Histogram(_DURATION_BUCKETS)
                h.observe(max(0.0, (end - value.start_ms) / 1000.0))
            if prev in _PREPARE:
                h = self._completion.get(k)
                if h is None:
                    h = self._completion[k] = Histogram(_COMPLETION_BUCKETS)
                h.observe(max(0.0, (end - self._last[s]) / 1000.0))

    # ------------------------------------------------------------------ snapshots
    def open_transactions(self) -> tuple[OpenTxn, ...]:
        out = []
        for s in self._open:
            out.append(OpenTxn(self._tids[s], self._apps[self._app[s]], TxnStatus(self._status[s]),
                               self._start[s], self._timeout[s], self._pid[s], self._epoch[s], self._last[s]))
        return tuple(out)

    def idle_scan(self, cap: int, now_ms: int | None = None) -> IdleSummary:
        """The `cap` idle ids closest to expiration, and per app the oldest of the rest.

        The idle ids of an app of a re-initialising scheme (Flink's KafkaSink) are one figure
        per app, the newest last update: its sink names an id per checkpoint and never uses
        an old one again, so an old id expiring fails nobody, while the newest (what a restore
        from the last checkpoint commits) expiring means the job has not committed for
        transactional.id.expiration.ms.
        O(ids): the source runs it on its own schedule, never per scrape."""
        last, open_, app_of, reinit = self._last, self._open, self._app, self._app_reinit
        per_id: list[int] = []
        newest: dict[int, int] = {}
        for s in self._slots.values():
            if s in open_:
                continue
            a = app_of[s]
            if reinit[a]:
                if last[s] > newest.get(a, -1):
                    newest[a] = last[s]
            else:
                per_id.append(s)
        cap = max(0, cap)
        kept_slots = heapq.nsmallest(cap, per_id, key=last.__getitem__)
        kept = tuple((self._tids[s], self._apps[app_of[s]], last[s]) for s in kept_slots)
        folded_min: dict[str, int] = {}
        folded = len(per_id) - len(kept_slots)
        if folded:
            ks = set(kept_slots)
            mins: dict[int, int] = {}
            for s in per_id:
                if s in ks:
                    continue
                a = app_of[s]
                v = last[s]
                m = mins.get(a)
                if m is None or v < m:
                    mins[a] = v
            folded_min = {self._apps[a]: v for a, v in mins.items()}
        return IdleSummary(kept, MappingProxyType(folded_min), folded, now_ms,
                           MappingProxyType({self._apps[a]: v for a, v in newest.items()}))

    def view(self, idle: IdleSummary | None = None, cap: int = 500) -> TapView:
        """An immutable snapshot (counters copied, histograms copied)."""
        ids_per_app = {self._apps[i]: n for i, n in enumerate(self._ids_per_app) if n > 0}
        return TapView(
            expiration_ms=self.expiration_ms,
            cap=cap,
            ids_per_app=_freeze(ids_per_app),
            open_txns=self.open_transactions(),
            transactions=_freeze(self._transactions),
            duration=MappingProxyType({k: h.copy() for k, h in self._duration.items()}),
            completion=MappingProxyType({k: h.copy() for k, h in self._completion.items()}),
            fencing=_freeze(self._fencing),
            reinits=_freeze(self._reinits),
            reinit_apps=frozenset(a for i, a in enumerate(self._apps) if self._app_reinit[i]),
            timeouts=_freeze(self._timeouts),
            expirations=_freeze(self._expirations),
            idle=idle if idle is not None else IdleSummary(),
            applied=self.applied,
            skipped=_freeze(self._skipped),
            last_record_timestamp_ms=self.last_record_timestamp_ms,
        )
