"""Everything that runs for one cluster: its poller, optional transaction-log tap and
canary, as one unit a worker process (or the exporter process itself) starts and stops."""

from __future__ import annotations

import threading
import time
from functools import partial

from ...canary.probe import CanaryProbe, default_instance
from ...canary.stats import render_canary
from ...config import ClusterConfig
from ...kafka.login import status_of as login_status
from ...metrics import FamilyWriter
from ...sharding import WHOLE, ClusterShare
from ..health import first_attempts_done, render_health, render_scrape_waits
from ..in_flight import PollInFlight
from ..poll.findings import abort_app_command
from ..poll.granularity import PartitionSeries
from ..poll.poller import ClusterPoller
from ..poll.render import RenderCache, render_snapshot
from ..serve.app_view import CounterWindow, advance, tap_counters
from ..serve.collector import ExporterCollector
from ..tap.render import render_tap
from ..tap.source import TransactionLogTap
from ..transaction_series import TransactionSeries
from .published import ClusterDigest, digest_of, login_summary


class ClusterRuntime:
    """Everything that runs for one cluster."""

    def __init__(self, cfg: ClusterConfig, tap_resume_from=None, share: ClusterShare = WHOLE) -> None:
        self.cfg = cfg
        self.share = share
        self.poller = ClusterPoller(cfg, share=share)
        self.render_cache = RenderCache(PartitionSeries(
            cfg.series_linger_seconds, cfg.series_apps,
            cfg.series_group_still_seconds),
            TransactionSeries(cfg.series_linger_seconds, cfg.series_apps))   # used in the poll thread only
        # which of the tap's open transactions keep per-id series (every one at granularity partition)
        self.tap_series = None if cfg.granularity == "partition" else TransactionSeries(
            cfg.series_linger_seconds, cfg.series_apps)
        # the page's per-app commit rates: the tap's counters kept between digests
        self._app_counts: CounterWindow | None = None
        self._app_counts_lock = threading.Lock()
        # as the findings' abort commands: a secured cluster needs an admin's settings file
        secured = cfg.client_properties().get("security.protocol", "PLAINTEXT").upper() != "PLAINTEXT"
        self.abort_app = partial(abort_app_command, bootstrap=cfg.bootstrap_servers, secured=secured)
        self.tap = None
        if cfg.transaction_log_tap:
            self.tap = TransactionLogTap(cfg.name, cfg.client_properties(), self.poller.resolver,
                                         cfg.max_transactional_id_series,
                                         expiration_ms=cfg.default_transactional_id_expiration_ms,
                                         poll_timeout=min(1.0, cfg.poll_timeout_seconds),
                                         resume_from=tap_resume_from,
                                         partition_filter=share.split.owns_log_partition if share.split.sharded
                                         else None,
                                         id_filter=None if cfg.transactional_ids.everything else cfg.transactional_ids)
            self.poller.access.tap = self.tap   # its health and known ids feed the access findings
        self.canary = None
        if cfg.canary.enabled and share.cluster_level:   # one canary per cluster, not per shard
            self.canary = CanaryProbe(cfg.name, cfg.client_properties(), cfg.canary,
                                      cfg.canary.instance or default_instance())

    @property
    def in_flight(self) -> PollInFlight:
        return self.poller.in_flight

    def scrapes_changed(self) -> None:
        self.poller.wake.set()

    def sources(self):
        yield self.poller.health.view()
        if self.tap is not None:
            yield self.tap.health()

    def readiness(self) -> tuple[bool, ...]:
        """The health facts scrapes show live (txnwatch_up of every source and, with the
        tap, txnwatch_tap_rebuilt of its published view): a response cached between scrapes
        is not served once one of them changed."""
        facts = [h.up for h in self.sources()]
        if self.tap is not None:
            facts.append(self.tap.view().rebuilt)
        return tuple(facts)

    def ready(self) -> bool:
        return first_attempts_done(self.sources())

    def render_live(self, w: FamilyWriter) -> None:
        """Health of every source (small; changes with each attempt)."""
        for h in self.sources():
            render_health(w, self.cfg.name, h)
        snap = self.poller.snapshot
        if snap is not None:
            w.add("txnwatch_data_age_seconds", {"cluster": self.cfg.name, "source": "poller"},
                  max(0.0, time.time() - snap.taken_at))
        render_scrape_waits(w, self.cfg.name, self.in_flight.counts())

    def digest(self) -> ClusterDigest:
        """The page's data (every partition stays in spark_view: it is in memory anyway)."""
        tap_view = self.tap.view() if self.tap is not None else None
        return digest_of(self.poller.snapshot, self.cfg.name, self.poller.kip664_error, tap_view,
                         canary_view=self.canary.view() if self.canary is not None else None,
                         login=login_summary(login_status(self.cfg.client_properties())),
                         **self.app_inputs(tap_view))

    def app_inputs(self, tap_view) -> dict:
        """digest_of's inputs for the apps' view: the tap's counters read now (into the window
        their rates come from), the app of an id, the dry-run command for an app."""
        with self._app_counts_lock:   # in-process, page renders read it from several threads
            if tap_view is not None and tap_view.rebuilt:
                self._app_counts = advance(self._app_counts, tap_counters(tap_view), time.time())
            counts = self._app_counts
        return {"app_counts": counts, "app_of": self.poller.resolver, "abort_app": self.abort_app}

    def spark_view(self):
        return self.poller.snapshot

    def start(self) -> None:
        self.poller.start()
        if self.tap is not None:
            self.tap.start()
        if self.canary is not None:
            self.canary.start()

    def signal_stop(self) -> None:
        self.poller.signal_stop()
        if self.tap is not None:
            self.tap.signal_stop()
        if self.canary is not None:
            self.canary.signal_stop()

    def stop(self) -> None:
        self.poller.stop()
        if self.tap is not None:
            self.tap.stop()
        if self.canary is not None:
            self.canary.stop()

    def render_canary(self, w: FamilyWriter) -> None:
        render_canary(w, self.cfg.name, self.canary.view())

    def render_snapshot(self, w: FamilyWriter, collector: ExporterCollector, snap) -> None:
        """A poller snapshot: rendered once per poll, in the poll thread (see publish)."""
        # With the tap on, it is the exact source of open transactions; the poller's KIP-664
        # view would report the same series.
        folded = render_snapshot(w, snap, self.cfg.granularity, self.cfg.max_transactional_id_series,
                                 render_open_transactions=self.tap is None, cluster_level=self.share.cluster_level,
                                 cache=self.render_cache)
        for metric, n in folded.items():
            collector.count_dropped(self.cfg.name, metric, "id_cap", n)

    def tap_families(self, w: FamilyWriter, view) -> dict[str, int]:
        """The tap's `view` written into `w`; returns {metric: ids folded by the cap}."""
        snap = self.poller.snapshot
        return render_tap(w, self.cfg.name, view, cap=self.cfg.max_transactional_id_series, series=self.tap_series,
                          max_timeout_ms=snap.facts.transaction_max_timeout_ms if snap is not None else None)

    def render_tap(self, w: FamilyWriter, collector: ExporterCollector) -> None:
        """The tap's last view (cached by view identity; headroom is as of the view)."""
        for metric, n in self.tap_families(w, self.tap.view()).items():
            collector.count_dropped(self.cfg.name, metric, "id_cap", n)
