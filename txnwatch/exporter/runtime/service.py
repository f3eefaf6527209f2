"""The exporter process: per-cluster sources (in worker processes, or in this one) and the
Spark ingest state, wired to one Collector and served over HTTP (`serve`, the main of
`txnwatch serve`). Scrapes render the sources' last views."""

from __future__ import annotations

import logging
import os
import re
import shutil
import signal
import tempfile
import threading
import time
from pathlib import Path

from ...config import Config
from ...kafka.login import stop_logins
from ...metrics import FamilyWriter
from ...sharding import ALL, Shard, plan
from ...spark_listener.state import SparkQueryState
from ..poll.scrape_clock import ScrapeLog, ScrapeView
from ..serve.app import create_app
from ..serve.collector import ExporterCollector, Part
from ..serve.page import canary_section, tap_section
from ..serve.record import Record, config_key
from ..serve.record import remove as remove_record
from ..serve.record import write as write_record
from ..serve.server import make_server
from ..spark.blocked import BLOCKED, classify
from ..spark.page import spark_section
from .cluster import ClusterRuntime
from .gc_tuning import tune_gc
from .published import ClusterDigest
from .supervisor import WorkerRuntime

log = logging.getLogger(__name__)


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", name)[:80]


class Exporter:
    def __init__(self, config: Config, shard: Shard | None = None) -> None:
        self.config = config
        self.shard = shard or ALL
        shares = plan([c.name for c in config.clusters], self.shard,
                      whole_topics={c.name for c in config.clusters if c.granularity != "partition"})
        watched = [c for c in config.clusters if shares[c.name].watch]
        self.started_at = time.time()
        self.spark_state = SparkQueryState(ttl_seconds=config.http.spark_query_ttl_seconds)
        self.scrape_log = ScrapeLog()     # the scrapes of /metrics: polls timed to them
        parts: list[Part] = []
        self.clusters: dict[str, ClusterRuntime | WorkerRuntime] = {}
        self.workers = config.http.worker_processes
        self._worker_dir: Path | None = None
        if self.workers:
            # Pollers and taps run in worker processes; this one holds no Kafka client.
            for c in watched:
                wr = WorkerRuntime(c, lambda name=c.name: self._worker_base() / _safe(name), lambda: self.collector,
                                   self.spark_state.topics, log_level=config.log_level, log_format=config.log_format,
                                   secrets=tuple(config.secret_values()), share=shares[c.name],
                                   cluster_label=config.cluster_label, scrapes=self.scrape_view)
                self.clusters[c.name] = wr
                parts.append(Part(f"health:{c.name}", wr.render_live))
        else:
            for c in watched:
                rt = self.clusters[c.name] = ClusterRuntime(c, share=shares[c.name])
                rt.poller.scrapes = self.scrape_view
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
            parts.append(Part("shard", lambda w: w.info("txnwatch_shard", {"shard": self.shard.index,
                                                                            "total_shards": self.shard.total})))
        # a response shared between scrapes is not served once what /readyz goes by changed
        self.collector = ExporterCollector(parts, live_key=lambda: tuple(
            rt.readiness() for rt in self.clusters.values()), worker_pids=self.worker_pids,
            cluster_label=config.cluster_label)

    def scrape_view(self) -> ScrapeView:
        return self.scrape_log.view(time.time())

    def scrape_seen(self, scraper: str, scheduled: bool = False) -> None:
        """A scrape of /metrics by `scraper` (address and user agent; `scheduled`: it says it
        scrapes on a schedule): pollers timed to the scrapes re-plan (worker processes hear of
        it within their supervisor's step)."""
        self.scrape_log.seen(scraper, time.time(), scheduled)
        for rt in self.clusters.values():
            rt.scrapes_changed()

    def wait_for_late_polls(self, budget: float) -> None:
        """Up to `budget` seconds in all for the clusters' polls that should be done by now
        (in_flight.py): a scrape then serves their data, not the polls' before."""
        if budget <= 0:
            return
        now, deadline = time.time(), time.monotonic() + budget
        for rt in self.clusters.values():
            rt.in_flight.wait_if_overdue(now, deadline - time.monotonic())

    def worker_pids(self) -> dict[str, int]:
        """cluster -> pid of its running worker process (none without worker processes)."""
        out = {}
        for name, rt in self.clusters.items():
            proc = getattr(rt, "proc", None)
            if proc is not None and proc.poll() is None:
                out[name] = proc.pid
        return out

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

    def signal_stop(self) -> None:
        """Tell every source to stop (worker processes get SIGTERM), without waiting."""
        for rt in self.clusters.values():
            rt.signal_stop()

    def stop(self) -> None:
        # Every source is told first, then each is waited for: a shutdown takes as long as
        # the slowest source's call in flight, not the sum of them.
        self.signal_stop()
        for rt in self.clusters.values():
            rt.stop()
        if not self.workers:
            stop_logins()               # the in-process clients' token refreshes
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
        if taps:
            out.append(tap_section(taps))
        canaries = [(name, d.canary) for name, _sources, d in views if d.canary is not None]
        if canaries:
            out.append(canary_section(canaries, time.time()))
        cards = self.spark_state.cards()
        if cards:
            statuses, ambiguous = self.spark_partitions()
            out.append(spark_section(cards, statuses, ambiguous))
        return out


def serve(config: Config, ready_event: threading.Event | None = None, shard=None) -> int:
    """`txnwatch serve`: the exporter on a production WSGI server until SIGTERM or SIGINT.
    Raises ConfigError, naming the setting, when an address cannot be listened on."""
    exporter = Exporter(config, shard=shard)
    http = config.http
    servers = make_server(create_app(exporter), http, http.web, config.source)
    tune_gc()
    exporter.start()
    names = ", ".join(f"{c.name} ({c.bootstrap_servers})" for c in config.clusters if c.name in exporter.clusters)
    if exporter.shard.sharded:
        names += f"; shard {exporter.shard.index} of {exporter.shard.total}"
    record = _record(config, servers.local_urls)
    log.info("txnwatch serving on %s (metrics at %s) for %s", ", ".join(f"{u}/" for u in servers.urls),
             http.telemetry_path, names)

    def shutdown(signum, _frame) -> None:
        log.info("received %s, shutting down", signal.Signals(signum).name)
        servers.close()
        # the sources start stopping now, beside the servers: a worker stuck in a poll's call
        # uses its grace while they close, and the whole stop fits a container runtime's 10 s
        threading.Thread(target=exporter.signal_stop, name="stop sources", daemon=True).start()

    signal.signal(signal.SIGTERM, shutdown)
    signal.signal(signal.SIGINT, shutdown)
    if ready_event:
        ready_event.set()
    try:
        servers.run()
    finally:
        if record is not None:
            remove_record(record)
        exporter.stop()
    return 0


def _record(config: Config, urls: list[str]) -> Path | None:
    """Say where this process listens, for `txnwatch healthcheck` (serve/record.py); without a
    writable temporary directory the healthcheck follows the configuration instead."""
    http = config.http
    source = config.source if config.source and os.path.isfile(config.source) else None
    try:
        return write_record(Record(os.getpid(), tuple(urls), bool(http.tls and http.web.tls.client_cert_required),
                                   config_key(source)))
    except OSError as exc:
        log.warning("cannot record where this process listens (%s): `txnwatch healthcheck` follows the "
                    "configuration instead", exc)
        return None
