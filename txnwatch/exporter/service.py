"""The exporter process: per-cluster sources (poller, optional transaction-log tap) and the
Spark ingest state, wired to one Collector. Scrapes render the sources' last views."""

from __future__ import annotations

import logging
import time
from html import escape

from ..config import ClusterConfig, Config
from ..metrics import FamilyWriter
from ..spark_listener.state import SparkQueryState
from .collector import ExporterCollector, Part, render_health, render_snapshot
from .poller import ClusterPoller
from .spark_blocked import BLOCKED, classify
from .spark_page import spark_section

log = logging.getLogger(__name__)


class ClusterRuntime:
    """Everything that runs for one cluster."""

    def __init__(self, cfg: ClusterConfig) -> None:
        self.cfg = cfg
        self.poller = ClusterPoller(cfg)
        self.tap = None
        if cfg.transaction_log_tap:
            from .tap.source import TransactionLogTap

            self.tap = TransactionLogTap(cfg.name, cfg.client_properties(), self.poller.resolver,
                                         cfg.max_transactional_id_series,
                                         expiration_ms=cfg.default_transactional_id_expiration_ms,
                                         poll_timeout=min(1.0, cfg.poll_timeout_seconds))
            self.poller.access.tap = self.tap   # its health and known ids feed the access findings

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

    def render_snapshot(self, w: FamilyWriter, collector: ExporterCollector, snap) -> None:
        """A poller snapshot: rendered once per poll, in the poll thread (see publish)."""
        # With the tap on, it is the exact source of open transactions; the poller's KIP-664
        # view would report the same series.
        folded = render_snapshot(w, snap, self.cfg.granularity, self.cfg.max_transactional_id_series,
                                 render_open_transactions=self.tap is None)
        collector.count_dropped(self.cfg.name, "kafka_transaction_timeout_headroom_seconds", "id_cap", folded)

    def render_tap(self, w: FamilyWriter, collector: ExporterCollector) -> None:
        """The tap's last view (cached by view identity; headroom is as of the view)."""
        from .tap.render import render_tap

        folded_by_metric = render_tap(w, self.cfg.name, self.tap.view(), cap=self.cfg.max_transactional_id_series)
        for metric, n in folded_by_metric.items():
            collector.count_dropped(self.cfg.name, metric, "id_cap", n)


class Exporter:
    def __init__(self, config: Config) -> None:
        self.config = config
        self.started_at = time.time()
        self.clusters = {c.name: ClusterRuntime(c) for c in config.clusters}
        self.spark_state = SparkQueryState(ttl_seconds=config.http.spark_query_ttl_seconds)
        parts: list[Part] = []
        for name, rt in self.clusters.items():
            parts.append(Part(f"health:{name}", rt.render_live))
            if rt.tap is not None:
                parts.append(Part(f"tap:{name}", lambda w, rt=rt: rt.render_tap(w, self.collector),
                                  key=lambda rt=rt: rt.tap.view()))
            rt.poller.on_snapshot = lambda snap, name=name, rt=rt: self.collector.publish(
                f"poller:{name}", lambda w: rt.render_snapshot(w, self.collector, snap))
        parts.append(Part("spark", self.render_spark))
        # a response shared between scrapes is not served once what /readyz goes by changed
        self.collector = ExporterCollector(parts, live_key=lambda: tuple(
            rt.readiness() for rt in self.clusters.values()))

    def spark_partitions(self):
        """The Spark queries' read positions matched with the clusters' partitions."""
        snaps = {name: rt.poller.snapshot for name, rt in self.clusters.items()}
        return classify(self.spark_state.positions(), snaps)

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

    def start(self) -> None:
        for rt in self.clusters.values():
            rt.poller.start()
            if rt.tap is not None:
                rt.tap.start()

    def stop(self) -> None:
        # Every source is told first, then each is waited for: a shutdown takes as long as
        # the slowest source's call in flight, not the sum of them.
        for rt in self.clusters.values():
            rt.poller.signal_stop()
            if rt.tap is not None:
                rt.tap.signal_stop()
        for rt in self.clusters.values():
            rt.poller.stop()
            if rt.tap is not None:
                rt.tap.stop()

    def ready(self) -> tuple[bool, dict[str, bool]]:
        status = {name: rt.ready() for name, rt in self.clusters.items()}
        return all(status.values()), status

    def page_sections(self) -> list[str]:
        """Extra sections of the human page: the tap and Spark queries."""
        out = []
        taps = [(n, rt.tap.view(), rt.tap.health()) for n, rt in self.clusters.items() if rt.tap is not None]

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
                f"<td class=num>{v.applied}</td><td class=num>{sum(v.ids_per_app.values())}</td></tr>"
                for n, v, h in taps)
            out.append("<section><h2>Transaction-log tap</h2><table><tr><th>cluster</th><th>topic found</th>"
                       "<th>rebuilt</th><th>lag (records)</th><th>applied</th><th>transactional ids</th></tr>"
                       + rows + "</table></section>")
        cards = self.spark_state.cards()
        if cards:
            statuses, ambiguous = self.spark_partitions()
            out.append(spark_section(cards, statuses, ambiguous))
        return out
