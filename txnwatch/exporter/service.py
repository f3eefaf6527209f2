"""The exporter process: per-cluster sources (poller, optional transaction-log tap) and the
Spark ingest state, wired to one Collector. Scrapes render the sources' last views."""

from __future__ import annotations

import logging
import re
import shutil
import tempfile
import time
from html import escape
from pathlib import Path

from ..config import ClusterConfig, Config
from ..metrics import FamilyWriter
from ..sharding import ALL, WHOLE, ClusterShare, Shard, plan
from ..spark_listener.state import SparkQueryState
from .collector import ExporterCollector, Part, render_health, render_snapshot
from .page import canary_section
from .poller import ClusterPoller
from .published import ClusterDigest, digest_of
from .spark_blocked import BLOCKED, classify
from .spark_page import spark_section
from .workers import WorkerRuntime

log = logging.getLogger(__name__)


class ClusterRuntime:
    """Everything that runs for one cluster."""

    def __init__(self, cfg: ClusterConfig, tap_resume_from=None, share: ClusterShare = WHOLE) -> None:
        self.cfg = cfg
        self.share = share
        self.poller = ClusterPoller(cfg, share=share)
        self.tap = None
        if cfg.transaction_log_tap:
            from .tap.source import TransactionLogTap

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
            from ..canary.probe import CanaryProbe, default_instance

            self.canary = CanaryProbe(cfg.name, cfg.client_properties(), cfg.canary,
                                      cfg.canary.instance or default_instance())

    def sources(self):
        yield self.poller.health.view()
        if self.tap is not None:
            yield self.tap.health()

    def readiness(self) -> tuple[bool, ...]:
        """The facts readiness goes by, each as /metrics shows it: txnwatch_up of every source
        and, with the tap, txnwatch_tap_rebuilt of its published view (the one scrapes render)."""
        facts = [h.up for h in self.sources()]
        if self.tap is not None:
            facts.append(self.tap.view().rebuilt)
        return tuple(facts)

    def ready(self) -> bool:
        # Ready when every source of the cluster is up: the poller has polled successfully
        # and, with the tap, the tap is up and has rebuilt its state from the log. Not while
        # the cluster is unreachable: data would be stale. (A tap that has rebuilt an empty
        # log is not up until its first fetch succeeds.)
        return all(self.readiness())

    def render_live(self, w: FamilyWriter) -> None:
        """Health of every source (small; changes with each attempt)."""
        for h in self.sources():
            render_health(w, self.cfg.name, h)
        snap = self.poller.snapshot
        if snap is not None:
            w.add("txnwatch_data_age_seconds", {"cluster": self.cfg.name, "source": "poller"},
                  max(0.0, time.time() - snap.taken_at))

    def digest(self) -> ClusterDigest:
        """The page's data (every partition stays in spark_view: it is in memory anyway)."""
        return digest_of(self.poller.snapshot, self.cfg.name, self.poller.kip664_error,
                         self.tap.view() if self.tap is not None else None,
                         canary_view=self.canary.view() if self.canary is not None else None)

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
        from ..canary.stats import render_canary

        render_canary(w, self.cfg.name, self.canary.view())

    def render_snapshot(self, w: FamilyWriter, collector: ExporterCollector, snap) -> None:
        """A poller snapshot: rendered once per poll, in the poll thread (see publish)."""
        # With the tap on, it is the exact source of open transactions; the poller's KIP-664
        # view would report the same series.
        folded = render_snapshot(w, snap, self.cfg.granularity, self.cfg.max_transactional_id_series,
                                 render_open_transactions=self.tap is None, cluster_level=self.share.cluster_level)
        collector.count_dropped(self.cfg.name, "kafka_transaction_timeout_headroom_seconds", "id_cap", folded)

    def render_tap(self, w: FamilyWriter, collector: ExporterCollector) -> None:
        """The tap's last view (cached by view identity; headroom is as of the view)."""
        from .tap.render import render_tap

        folded_by_metric = render_tap(w, self.cfg.name, self.tap.view(), cap=self.cfg.max_transactional_id_series)
        for metric, n in folded_by_metric.items():
            collector.count_dropped(self.cfg.name, metric, "id_cap", n)


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", name)[:80]


class Exporter:
    def __init__(self, config: Config, shard: Shard | None = None) -> None:
        self.config = config
        self.shard = shard or ALL
        shares = plan([c.name for c in config.clusters], self.shard)
        watched = [c for c in config.clusters if shares[c.name].watch]
        self.started_at = time.time()
        self.spark_state = SparkQueryState(ttl_seconds=config.http.spark_query_ttl_seconds)
        parts: list[Part] = []
        self.clusters: dict[str, ClusterRuntime | WorkerRuntime] = {}
        self.workers = config.http.worker_processes
        self._worker_dir: Path | None = None
        if self.workers:
            # Pollers and taps run in worker processes; this one holds no Kafka client.
            for c in watched:
                wr = WorkerRuntime(c, lambda name=c.name: self._worker_base() / _safe(name), lambda: self.collector,
                                   self.spark_state.topics, log_level=config.log_level,
                                   secrets=tuple(config.secret_values()), share=shares[c.name])
                self.clusters[c.name] = wr
                parts.append(Part(f"health:{c.name}", wr.render_live))
        else:
            for c in watched:
                rt = self.clusters[c.name] = ClusterRuntime(c, share=shares[c.name])
                name = c.name
                parts.append(Part(f"health:{name}", rt.render_live))
                if rt.tap is not None:
                    parts.append(Part(f"tap:{name}", lambda w, rt=rt: rt.render_tap(w, self.collector),
                                      key=lambda rt=rt: rt.tap.view()))
                if rt.canary is not None:
                    parts.append(Part(f"canary:{name}", rt.render_canary, key=lambda rt=rt: rt.canary.view()))
                rt.poller.on_snapshot = lambda snap, name=name, rt=rt: self.collector.publish(
                    f"poller:{name}", lambda w: rt.render_snapshot(w, self.collector, snap))
        parts.append(Part("spark", self.render_spark))
        if self.shard.sharded:
            parts.append(Part("shard", lambda w: w.add("txnwatch_shard", {"shard": self.shard.index,
                                                                           "total_shards": self.shard.total}, 1)))
        # a response shared between scrapes is not served once what /readyz goes by changed
        self.collector = ExporterCollector(parts, live_key=lambda: tuple(
            rt.readiness() for rt in self.clusters.values()))

    def spark_partitions(self):
        """The Spark queries' read positions matched with the clusters' partitions."""
        positions = self.spark_state.positions()
        if not positions:
            return [], []
        return classify(positions, {name: rt.spark_view() for name, rt in self.clusters.items()})

    def page_views(self) -> list[tuple[str, list, ClusterDigest]]:
        return [(name, list(rt.sources()), rt.digest()) for name, rt in self.clusters.items()]

    def render_spark(self, w: FamilyWriter) -> None:
        self.spark_state.render(w)
        statuses, _ = self.spark_partitions()
        for st in statuses:
            if st.state == BLOCKED:
                w.add("spark_streaming_source_blocked_seconds",
                      {"cluster": st.cluster, "query": st.query, "query_id": st.query_id,
                       "topic": st.topic, "partition": st.partition}, st.stalled_seconds)

    def metrics(self, openmetrics: bool, gzip: bool = False) -> bytes:
        return self.collector.exposition(openmetrics, gzip)

    def _worker_base(self) -> Path:
        if self._worker_dir is None:   # private (0700): made at start, removed at stop
            self._worker_dir = Path(tempfile.mkdtemp(prefix="txnwatch-workers-"))
        return self._worker_dir

    def start(self) -> None:
        for rt in self.clusters.values():
            rt.start()

    def stop(self) -> None:
        # Every source is told first, then each is waited for: a shutdown takes as long as
        # the slowest source's call in flight, not the sum of them.
        for rt in self.clusters.values():
            rt.signal_stop()
        for rt in self.clusters.values():
            rt.stop()
        if self._worker_dir is not None:
            shutil.rmtree(self._worker_dir, ignore_errors=True)

    def ready(self) -> tuple[bool, dict[str, bool]]:
        status = {name: rt.ready() for name, rt in self.clusters.items()}
        return all(status.values()), status

    def page_sections(self) -> list[str]:
        """Extra sections of the human page: the tap, the canary and Spark queries."""
        out = []
        taps = []
        views = self.page_views()
        for name, sources, d in views:
            if d.tap is not None:
                h = next((h for h in sources if h.source == "tap"), None)
                if h is not None:
                    taps.append((name, d.tap, h))

        def found(v, h) -> str:
            if v.topic_found:
                return "yes"
            if h.up or not h.last_error:   # the broker answered: no transactional producer ran yet
                return "<span class=warn>waiting for __transaction_state</span>"
            return f"<span class=bad>cannot read it: {escape(h.last_error)}</span>"

        if taps:
            rows = "".join(
                f"<tr><td>{escape(n)}</td><td>{found(v, h)}</td>"
                f"<td>{'yes' if v.rebuilt else 'rebuilding'}</td>"
                f"<td class=num>{'' if v.lag_records is None else v.lag_records}</td>"
                f"<td class=num>{v.applied}</td><td class=num>{v.ids}</td></tr>"
                for n, v, h in taps)
            out.append("<section><h2>Transaction-log tap</h2><table><tr><th>cluster</th><th>topic found</th>"
                       "<th>rebuilt</th><th>lag (records)</th><th>applied</th><th>transactional ids</th></tr>"
                       + rows + "</table></section>")
        canaries = [(name, d.canary) for name, _sources, d in views if d.canary is not None]
        if canaries:
            out.append(canary_section(canaries, time.time()))
        cards = self.spark_state.cards()
        if cards:
            statuses, ambiguous = self.spark_partitions()
            out.append(spark_section(cards, statuses, ambiguous))
        return out
