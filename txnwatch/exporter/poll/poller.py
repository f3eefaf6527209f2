"""The admin poller: one thread per cluster, polling on its own schedule and publishing
an immutable ClusterSnapshot. Scrapes only read the last published snapshot."""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Collection, Mapping
from types import MappingProxyType

from ...apps import AppResolver
from ...config import IN_PROCESS_POLL_INTERVAL, ClusterConfig
from ...kafka.admin import KafkaIO
from ...kafka.answers import ActiveProducer, ClusterFacts, TxnDescription, TxnListing
from ...kafka.errors import TIMEOUT, PollError, classify, one_line
from ...kafka.kip664 import TransactionAPI
from ...kafka.login import explain as explain_failure
from ...sharding import WHOLE, ClusterShare
from ..health import HealthTracker
from ..in_flight import Poll, PollInFlight
from ..model import (
    TP,
    ClusterSnapshot,
    GroupLag,
    HangingEnded,
    HangingTransaction,
    OpenTransaction,
    PartitionState,
)
from . import derive
from .access_probe import AccessProbe
from .findings import PollReading, config_findings
from .schedule import PollDurations, poll_period, wait_before_next_poll
from .scrape_clock import NOBODY, ScrapeView, plan_next_poll

log = logging.getLogger(__name__)

CAPABILITY_RECHECK_POLLS = 40
REPLAN_SECONDS = 1.0          # a poll timed to the scrapes re-plans at least this often while it waits
DURATIONS_KEPT = 5            # polls whose median duration plans the next one
PREV_EPOCHS_LIMIT = 100_000   # ids whose last (producer id, epoch) the poller keeps for epoch bumps
MARKER_READS_PER_POLL = 100   # partitions read per poll for gaps of markers below the LSO (the rest next poll)
MARKER_READ_SECONDS = 2.0     # at most this (and poll_timeout_seconds) per poll for those reads


class ClusterPoller:
    """Polls one cluster. `poll_once()` is the whole cycle (also used by `txnwatch check`)."""

    def __init__(self, cfg: ClusterConfig, clock: Callable[[], float] = time.time,
                 share: ClusterShare = WHOLE) -> None:
        self.cfg = cfg
        # With --total-shards: this replica's topic partitions, and the apps whose
        # transactional ids it describes (see txnwatch.sharding).
        self.split = share.split
        self.clock = clock
        self.resolver = AppResolver(cfg.app_rules)
        self.health = HealthTracker("poller")
        self.io = KafkaIO(cfg.client_properties(), cfg.poll_timeout_seconds)
        self.io.count_error = self.health.count_error   # groups left out of a poll, by cause
        self.txn_api = TransactionAPI(cfg.client_properties(), cfg.poll_timeout_seconds)
        # missing ACLs as findings; service.py sets access.tap when the cluster's tap runs here
        self.access = AccessProbe(cfg.client_properties(), cfg.bootstrap_servers, self.io, self.txn_api,
                                  cfg.transaction_log_tap)
        self.snapshot: ClusterSnapshot | None = None
        self.on_snapshot: Callable[[ClusterSnapshot], None] | None = None  # called in the poll thread
        self.on_success: Callable[[ClusterSnapshot], None] | None = None   # then, once `up` says so
        # poll_schedule "scrapes": the scrapers as the serving side sees them, how long published
        # data takes to be served, and an event set when the scrapers change (re-plan at once)
        self.scrapes: Callable[[], ScrapeView] = lambda: NOBODY
        self.publish_delay = 0.0
        self.wake = threading.Event()
        # the poll running now, for the scrapes that wait for an overdue one; on_start is
        # called as each poll starts (a worker process tells its serving process)
        self.in_flight = PollInFlight()
        self.on_start: Callable[[], None] | None = None
        self.polls = 0
        self._facts = ClusterFacts()
        self._prev_partitions: dict = {}
        self._prev_groups: list = []
        self._lag_rows: dict = {}      # derive.group_lags' cache: unchanged group rows cost no new objects
        self._lso_ts: dict[tuple[str, int, int], float] = {}
        self._marker_verdicts: dict[derive.MarkerGap, bool] = {}   # steady gaps read: only markers?
        self._prev_epochs: dict[str, tuple[int, int]] = {}
        self._prev_open: set[str] = set()
        self._states: dict[str, derive.StateSeen] = {}   # open id -> its coordinator state, since when
        self._epoch_bumps: dict[str, int] = {}
        # hanging transactions as last seen (with their ids' coordinator state then), and how
        # those that ended did: (app, how) -> count, and the latest ends
        self._hanging_seen: dict[tuple, derive.HangingSeen] = {}
        self._coordinators_of_hanging: dict[str, TxnDescription] = {}
        self._hanging_ended: dict[tuple[str, str], int] = {}
        self._hanging_ended_recent: deque[HangingEnded] = deque(maxlen=derive.HANGING_ENDED_KEPT)
        self._capabilities: dict[str, bool] = {}
        self._group_types: dict[str, tuple[str, ...]] = {}
        self._features: dict[str, int] = {}
        self._kip664_error: str | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._failing_since: float | None = None
        self._consecutive_failures = 0

    # ------------------------------------------------------------------ cycle
    def poll_once(self) -> ClusterSnapshot:
        started = time.monotonic()
        now = self.clock()
        cfg = self.cfg
        md = self.io.metadata(cfg.topics)
        owns = self.split.owns_partition if self.split.sharded else None
        offline = [(p.topic, p.partition) for p in md.degraded if p.offline and (owns is None or owns(p.topic, p.partition))]
        # committed offsets before the log ends, as kafka-consumer-groups does: a consumer that
        # moves on meanwhile shows a little more lag, never less than it has; and the offsets
        # read last are the freshest when the poll is published
        whole_topics = self.split.sharded and self.split.by_topic     # rows of other topics: not decoded
        committed = self.io.group_offsets(cfg.groups, self.split.owns_topic if whole_topics else None)
        if owns is not None and not whole_topics:
            committed = [c for c in committed if owns(c[1], c[2])]
        # groups whose coordinator did not answer keep their last lags, named as such
        groups_unavailable = dict(self.io.groups_left_out)
        # one offline partition, or a leader that does not answer, costs its own partitions'
        # offsets only: they are served as last read, and named
        offsets, failed = self.io.offsets(md.topics, self.split.partitions_of if self.split.sharded else None,
                                          skip=offline, leaders=md.leaders)
        unavailable = {**dict.fromkeys(offline, "offline"), **failed}
        self._refresh_lso_timestamps(derive.stalled_lsos(offsets), now)
        partitions = derive.with_unavailable(
            derive.partition_states(offsets, self._prev_partitions, now, self._lso_ts), self._prev_partitions,
            unavailable)
        lags = self._without_marker_gaps(derive.group_lags(committed, partitions, self._lag_rows), partitions)
        groups = derive.with_groups_unavailable(lags, self._prev_groups, groups_unavailable)

        if self._refreshes_configs():
            try:
                self._facts = self.io.configs(md.brokers, md.topics, txn_log=bool(md.txn_log))
                self.access.observe_configs(None)
            except Exception as exc:  # noqa: BLE001 - configs are optional facts
                self.access.observe_configs(exc)
                self.health.count_error("describe_configs_" + classify(exc))
                log.info("cluster %s: DescribeConfigs failed (%s); keeping the last values",
                         cfg.name, one_line(exc))
            self._refresh_group_facts()
        facts = dataclasses.replace(self._facts, brokers=len(md.brokers))
        missing = derive.missing_brokers(md.degraded + md.txn_log, md.brokers)

        open_txns, hanging, method = self._transactions(partitions, facts, now, unavailable)
        threshold = derive.hanging_threshold_seconds(facts, cfg.hanging_threshold_seconds,
                                                     cfg.default_transaction_max_timeout_ms)
        if method == "lso_stall":
            hanging = derive.lso_hanging(partitions, threshold)
        self._note_hanging_ends(hanging, partitions, unavailable, now)
        blocked = derive.blocked_groups(groups, partitions, min_stall_seconds=min(threshold, 60))
        findings = config_findings(PollReading(
            facts, stall_warning_seconds=min(threshold, 60), open_transactions=open_txns, hanging=hanging,
            partitions=partitions, blocked_groups=blocked, txn_log=md.txn_log, unavailable=unavailable,
            missing_brokers=missing, groups_unavailable=groups_unavailable, bootstrap=cfg.bootstrap_servers,
            secured=cfg.client_properties().get("security.protocol", "PLAINTEXT").upper() != "PLAINTEXT",
            two_phase_max_age_seconds=cfg.two_phase_commit_max_age_seconds))
        findings += self.access.findings(self.polls, cfg.describe_configs_every)
        self._prev_partitions = partitions
        self._prev_groups = groups
        self.polls += 1
        return ClusterSnapshot(
            cluster=cfg.name, taken_at=self.clock(), poll_seconds=time.monotonic() - started,
            partitions=MappingProxyType(partitions), groups=tuple(groups), facts=facts,
            open_transactions=None if open_txns is None else tuple(open_txns),
            hanging=tuple(hanging), hanging_method=method,
            epoch_bumps=MappingProxyType(dict(self._epoch_bumps)),
            capabilities=MappingProxyType({**self._capabilities, **self.txn_api.filter_capabilities(),
                                           **self.io.capabilities}),
            findings=tuple(findings), group_types=MappingProxyType(dict(self._group_types)),
            features=MappingProxyType(dict(self._features)), txn_log=md.txn_log, degraded=md.degraded,
            unavailable=MappingProxyType(unavailable), missing_brokers=MappingProxyType(missing),
            groups_unavailable=MappingProxyType(groups_unavailable),
            hanging_ended=MappingProxyType(dict(self._hanging_ended)),
            hanging_ended_recent=tuple(self._hanging_ended_recent))

    def _refresh_group_facts(self) -> None:
        """Groups by type and the finalized features, with the broker configs' cadence: share
        groups (KIP-932) and other non-consumer groups are named apart instead of having
        offsets fetched; transaction.version says how the cluster ends transactions."""
        try:
            listed = self.txn_api.groups_by_type()
            self._features = self.txn_api.finalized_features()
        except Exception as exc:  # noqa: BLE001 - facts for the page; the lag series do not need them
            self.health.count_error("list_groups_" + classify(exc))
            return
        self._group_types = {t: tuple(g for g in names if self.cfg.groups(g)) for t, names in listed.items()}

    def _refresh_lso_timestamps(self, stalled: set[tuple[str, int, int]], now: float) -> None:
        # Keep only entries for LSOs still stalled; fetch the new ones (one fetch per new LSO).
        self._lso_ts = {k: v for k, v in self._lso_ts.items() if k in stalled}
        wanted = derive.lso_timestamps_needed(stalled, self._lso_ts)
        if not wanted:
            return
        try:
            got = self.io.record_timestamps(wanted[:1000], timeout=min(2.0, self.cfg.poll_timeout_seconds))
        except Exception as exc:  # noqa: BLE001 - the stall clock falls back to observation time
            self.health.count_error("lso_timestamp_" + classify(exc))
            return
        self._lso_ts.update(got)
        for k in wanted[:1000]:
            self._lso_ts.setdefault(k, now)  # no record readable: remember first observation

    def _without_marker_gaps(self, groups: list[GroupLag], partitions: Mapping[TP, PartitionState]) -> list[GroupLag]:
        """Group lags with a read_committed lag of 0 where only transaction markers lie between
        the committed offset and the LSO. Each small gap that has not moved since the last
        poll is read once; its verdict is kept until either offset moves."""
        steady = derive.steady_marker_gaps(groups, partitions, self._prev_groups, self._prev_partitions)
        self._marker_verdicts = {k: v for k, v in self._marker_verdicts.items() if k in steady}
        wanted = derive.marker_gaps_to_read(steady, self._marker_verdicts, MARKER_READS_PER_POLL)
        if wanted:
            self._read_marker_gaps(wanted)
        return derive.with_marker_gaps(groups, self._marker_verdicts)

    def _read_marker_gaps(self, wanted: list[derive.MarkerGap]) -> None:
        timeout = min(MARKER_READ_SECONDS, self.cfg.poll_timeout_seconds)
        try:
            verdicts, failed = self.io.read_marker_gaps(wanted, timeout)
        except Exception as exc:  # noqa: BLE001 - the lags stay as ListOffsets gave them
            self.health.count_error("marker_gaps_" + classify(exc))
            return
        self._marker_verdicts.update(verdicts)
        # a refused read (an ACL) is not tried again every poll, one that ran out of time is
        self._marker_verdicts.update({gap: False for gap, cause in failed.items() if cause != TIMEOUT})
        for cause in sorted(set(failed.values())):
            self.health.count_error("marker_gaps_" + cause)

    def _transactions(self, partitions: Mapping[TP, PartitionState], facts: ClusterFacts, now: float,
                      unavailable: Mapping[TP, str],
                      ) -> tuple[list[OpenTransaction] | None, list[HangingTransaction], str]:
        """KIP-664 open and hanging transactions (method producer_state), or, without them,
        (None, [], "lso_stall"): the caller then finds hanging transactions by stalled LSOs."""
        try:
            available = self._kip664_available()
        except PollError as exc:
            return self._lso_stall(exc)
        if not available:
            return self._lso_stall()
        try:
            open_txns, hanging = self._kip664_transactions(partitions, facts, int(now * 1000), unavailable)
        except PollError as exc:
            log.warning("cluster %s: KIP-664 poll failed (%s); falling back to LSO-based detection",
                        self.cfg.name, exc)
            return self._lso_stall(exc)
        self._kip664_error = None
        return open_txns, hanging, "producer_state"

    def _lso_stall(self, exc: PollError | None = None) -> tuple[None, list[HangingTransaction], str]:
        """No KIP-664 view this poll: the broker lacks the APIs, or a call failed (`exc`,
        counted as the poller's error and kept to be shown)."""
        if exc is not None:
            cause, message = explain_failure(self.cfg.client_properties(), exc.cause, str(exc))
            self._kip664_error = message
            self.health.count_error(cause)
        self.access.kip664_unavailable()
        return None, [], "lso_stall"

    def _kip664_available(self) -> bool:
        """Whether the brokers have the KIP-664 APIs: ApiVersions, asked again every
        CAPABILITY_RECHECK_POLLS polls."""
        if not self._capabilities or self.polls % CAPABILITY_RECHECK_POLLS == 0:
            self._capabilities = self.txn_api.detect()
        return self.txn_api.available

    def _kip664_transactions(self, partitions: Mapping[TP, PartitionState], facts: ClusterFacts, now_ms: int,
                             unavailable: Mapping[TP, str],
                             ) -> tuple[list[OpenTransaction], list[HangingTransaction]]:
        """Open transactions from the coordinators, hanging ones from the stalled partitions'
        producers, and the epoch bumps counted on the way."""
        listings = self._open_listings()
        open_ids = {t.transactional_id for t in listings if t.state in derive.OPEN_STATES}
        # Ids open at the last poll and ended since are described once more: a transaction
        # ended by a fence or the coordinator's timeout shows as an epoch bump only then.
        ended = derive.ended_since(self._prev_open, open_ids)
        descriptions = self.txn_api.describe_transactions(sorted(open_ids | ended))
        self._count_epoch_bumps(descriptions.values())
        self._prev_open = open_ids
        # (an open transaction's partitions hold their LSO: its producer's appends are among these)
        producers = self.txn_api.describe_producers(derive.hanging_may_hold(partitions, unavailable))
        self.access.observe_kip664(listings, producers)
        self._states = derive.state_since(self._states, descriptions.values(), now_ms)
        max_ms = facts.transaction_max_timeout_ms or self.cfg.default_transaction_max_timeout_ms
        return (derive.open_transactions(descriptions.values(), self.resolver, now_ms, self._states,
                                         derive.last_appends(descriptions.values(), producers)),
                self._hanging(derive.hanging_candidates(producers, max_ms, now_ms), now_ms))

    def _open_listings(self) -> list[TxnListing]:
        """The selected ids' open transactions, filtered by the coordinators: the cost of a
        poll does not grow with idle transactional ids (a Streams estate has hundreds of
        thousands)."""
        ids = self.cfg.transactional_ids
        listings = self.txn_api.list_transactions(
            derive.OPEN_STATES, int(self.cfg.open_transaction_min_age_seconds * 1000), ids.include_pattern())
        if not ids.everything:      # the broker filters what it can (KIP-1152); the rest here
            listings = [t for t in listings if ids(t.transactional_id)]
        if self.split.sharded:   # this replica's apps only: per-app series from one replica
            listings = [t for t in listings if self.split.owns_key(self.resolver(t.transactional_id))]
        return listings

    def _hanging(self, candidates: list[ActiveProducer], now_ms: int) -> list[HangingTransaction]:
        """Which of the candidates hang: their transactional ids and what the coordinators
        say of them (kafka-transactions.sh find-hanging)."""
        if not candidates:
            self._coordinators_of_hanging = {}
            return []
        pid_map = self.txn_api.pids_to_ids(c.producer_id for c in candidates)
        described = self.txn_api.describe_transactions(set(pid_map.values()))
        self._coordinators_of_hanging = described   # what their coordinators held: how they end tells
        return derive.find_hanging(candidates, pid_map, described, now_ms)

    def _note_hanging_ends(self, hanging: list[HangingTransaction], partitions: Mapping[TP, PartitionState],
                           unavailable: Mapping[TP, str], now: float) -> None:
        """Count the hanging transactions of the last poll that ended since, by how (one
        DescribeTransactions of their ids, only when some ended); remember this poll's."""
        gone = derive.hanging_gone(self._hanging_seen, hanging, partitions, unavailable)
        undecided = self._count_hanging_ends(gone, now) if gone else []
        held = self._coordinators_of_hanging
        self._hanging_seen = {derive.hanging_key(h): derive.HangingSeen(h, held.get(h.transactional_id or ""))
                              for h in hanging}
        self._hanging_seen.update({derive.hanging_key(g.hanging): g for g in undecided})

    def _count_hanging_ends(self, gone: list[derive.HangingSeen], now: float) -> list[derive.HangingSeen]:
        """Count each end; those whose ids could not be described are decided at the next poll."""
        ids = sorted({g.hanging.transactional_id for g in gone if g.hanging.transactional_id})
        try:
            after = self.txn_api.describe_transactions(ids) if ids else {}
        except PollError as exc:
            self.health.count_error(exc.cause)
            return gone
        for g in gone:
            tid = g.hanging.transactional_id
            how = derive.how_hanging_ended(g, after.get(tid) if tid else None, int(now * 1000))
            app = self.resolver(tid) if tid else "unknown"
            self._hanging_ended[(app, how)] = self._hanging_ended.get((app, how), 0) + 1
            self._hanging_ended_recent.append(HangingEnded(g.hanging, app, how, now))
        return []

    def restore_hanging_ended(self, counts) -> None:
        """Continue the counts of an earlier poller of this cluster (a restarted worker)."""
        for key, n in dict(counts).items():
            self._hanging_ended[key] = max(self._hanging_ended.get(key, 0), int(n))

    def _count_epoch_bumps(self, described: Collection[TxnDescription]) -> None:
        """Count, per app, the ids whose epoch moved since the last poll; remember each
        described id's epoch for the next."""
        for tid in derive.epoch_bumps(self._prev_epochs, described):
            app = self.resolver(tid)
            self._epoch_bumps[app] = self._epoch_bumps.get(app, 0) + 1
        derive.remember_epochs(self._prev_epochs, described, PREV_EPOCHS_LIMIT)

    def restore_epoch_bumps(self, counts) -> None:
        """Continue the epoch-bump counters of an earlier poller of this cluster (a restarted
        worker): they never go backwards. Bumps between the two are not seen."""
        for app, n in dict(counts).items():
            self._epoch_bumps[app] = max(self._epoch_bumps.get(app, 0), int(n))

    @property
    def kip664_error(self) -> str | None:
        return self._kip664_error

    # ------------------------------------------------------------------ schedule
    def run_cycle(self) -> None:
        t0 = time.monotonic()
        try:
            snap = self.poll_once()
        except Exception as exc:  # noqa: BLE001 - a poll never kills the poller
            self._on_failure(exc, time.monotonic() - t0)
            return
        self.snapshot = snap
        if self.on_snapshot is not None:
            try:
                self.on_snapshot(snap)  # render and publish, so no scrape pays for it
            except Exception:  # noqa: BLE001 - rendering problems surface at scrape time
                log.debug("publishing the snapshot failed", exc_info=True)
        # Success is reported once the data is served: `up` and the series appear together.
        self.health.success(snap.poll_seconds, now=snap.taken_at)
        if self.on_success is not None:
            try:
                self.on_success(snap)
            except Exception:  # noqa: BLE001
                log.debug("on_success failed", exc_info=True)
        if self._failing_since is not None:
            log.warning("cluster %s: polls recovered after %.0fs (%d failed)", self.cfg.name,
                        self.clock() - self._failing_since, self._consecutive_failures)
        self._failing_since, self._consecutive_failures = None, 0

    def _on_failure(self, exc: BaseException, duration: float) -> None:
        # a client without credentials it can use says only that no broker answered: what librdkafka
        # reported meanwhile (a refused login, whichever request timed out first) or the login says why
        exc = self.io.named_failure(exc)
        cause, message = explain_failure(self.cfg.client_properties(), classify(exc), one_line(exc))
        self.health.failure(cause, message, duration)
        self._consecutive_failures += 1
        if self._failing_since is None:
            self._failing_since = self.clock()
            log.warning("cluster %s: poll failed (%s): %s; serving the last snapshot",
                        self.cfg.name, cause, message)
        elif self._consecutive_failures % 20 == 0:
            log.warning("cluster %s: still failing after %d polls (%s)", self.cfg.name,
                        self._consecutive_failures, cause)
        if cause == "unexpected":
            log.debug("unexpected poll error", exc_info=exc)

    def _loop(self) -> None:
        interval = self.cfg.poll_interval_seconds or IN_PROCESS_POLL_INTERVAL
        durations = PollDurations(DURATIONS_KEPT)
        while not self._stop.is_set():
            started, t0 = time.time(), time.monotonic()
            refreshing = self._refreshes_configs()
            # after a failed poll nothing says how long the next takes: no scrape waits for it
            self._begin(started, durations.expected(refreshing) if not self._consecutive_failures else None)
            self.run_cycle()
            self.in_flight.set(None)
            took = time.monotonic() - t0
            durations.add(took, refreshing)
            if self.cfg.poll_schedule == "interval":
                self._stop.wait(wait_before_next_poll(interval, self.cfg.poll_duty_cycle, took))
                continue
            # the duty cycle on the recent median too: one poll slowed by a busy host does not
            # push the next past the scrape it is for; a cluster whose polls are all slow is
            # still asked less often
            typical, spread, duty = durations.plan(self._refreshes_configs())
            self._wait_for_the_scrapes(started, typical, spread, poll_period(interval, self.cfg.poll_duty_cycle, duty))

    def _begin(self, started: float, expected: float | None) -> None:
        """Say a poll runs, and when a poll of its kind is usually done (none yet: the first
        poll holds no scrape)."""
        self.in_flight.set(None if expected is None else Poll(started, started + expected))
        if self.on_start is not None:
            self.on_start()

    def _refreshes_configs(self) -> bool:
        """Whether the next poll also reads the configs (DescribeConfigs and the group facts)."""
        return self.polls % max(self.cfg.describe_configs_every, 1) == 0

    def _wait_for_the_scrapes(self, started: float, duration: float, spread: float, min_period: float) -> None:
        """Until the poll after the one that started at `started` is due: timed to be done
        just before the next scrape (scrape_clock.plan_next_poll), re-planned when the
        scrapers change."""
        while not self._stop.is_set():
            now, view = time.time(), self.scrapes()
            due = plan_next_poll(now, view, started, duration, min_period,
                                 self.cfg.poll_idle_interval_seconds, self.publish_delay, spread)
            if due <= now:
                if log.isEnabledFor(logging.DEBUG):
                    log.debug("cluster %s: poll %d starts %.3f s after its due time %.3f, expected to take "
                              "%.3f s (spread %.3f, publish delay %.3f); next scrapes expected at %s",
                              self.cfg.name, self.polls + 1, now - due, due, duration, spread,
                              self.publish_delay, [round(c.next_after(now + duration), 3) for c in view.cadences])
                return
            self.wake.wait(min(due - now, REPLAN_SECONDS))
            self.wake.clear()

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name=f"poller-{self.cfg.name}", daemon=True)
        self._thread.start()

    def signal_stop(self) -> None:
        """Ask the poll thread to end after its current step (stop() waits for it)."""
        self._stop.set()
        self.wake.set()

    def stop(self) -> None:
        self.signal_stop()
        if self._thread:
            self._thread.join(timeout=self.cfg.poll_timeout_seconds * 4)
        self.io.close()
        self.txn_api.close()
