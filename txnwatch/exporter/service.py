"""The exporter process: pollers (and later taps and Spark ingest) wired to one Collector."""

from __future__ import annotations

import logging
import time

from prometheus_client import CollectorRegistry
from prometheus_client.process_collector import ProcessCollector

from ..config import ClusterConfig, Config
from ..metrics import FamilyWriter
from .collector import ExporterCollector, render_health, render_snapshot
from .poller import ClusterPoller

log = logging.getLogger(__name__)


class ClusterRuntime:
    """Everything that runs for one cluster."""

    def __init__(self, cfg: ClusterConfig) -> None:
        self.cfg = cfg
        self.poller = ClusterPoller(cfg)
        self.tap = None
        self._counted_snapshot = None

    def sources(self):
        yield self.poller.health.view()
        if self.tap is not None:
            yield self.tap.health()

    def ready(self) -> bool:
        # Ready after a first successful poll, and not while the cluster is unreachable:
        # what this exporter would serve then is stale.
        if not self.poller.health.view().up:
            return False
        return self.tap is None or bool(getattr(self.tap, "rebuilt", True))


class Exporter:
    def __init__(self, config: Config) -> None:
        self.config = config
        self.started_at = time.time()
        self.clusters = {c.name: ClusterRuntime(c) for c in config.clusters}
        self.spark_state = None
        self.collector = ExporterCollector(self._parts())
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(self.collector)
        ProcessCollector(registry=self.registry)

    def _parts(self):
        for name, rt in self.clusters.items():
            yield f"cluster:{name}", self._render_cluster(rt)

    def _render_cluster(self, rt: ClusterRuntime):
        def part(w: FamilyWriter) -> None:
            for h in rt.sources():
                render_health(w, rt.cfg.name, h)
            snap = rt.poller.snapshot
            if snap is not None:
                folded = render_snapshot(w, snap, rt.cfg.granularity, rt.cfg.max_transactional_id_series,
                                         render_open_transactions=rt.tap is None)
                if snap is not rt._counted_snapshot:  # count folds once per poll, not per scrape
                    rt._counted_snapshot = snap
                    self.collector.count_dropped(rt.cfg.name, "kafka_transaction_timeout_headroom_seconds",
                                                 "id_cap", folded)
        return part

    def start(self) -> None:
        for rt in self.clusters.values():
            rt.poller.start()
            if rt.tap is not None:
                rt.tap.start()

    def stop(self) -> None:
        for rt in self.clusters.values():
            rt.poller.stop()
            if rt.tap is not None:
                rt.tap.stop()

    def ready(self) -> tuple[bool, dict[str, bool]]:
        status = {name: rt.ready() for name, rt in self.clusters.items()}
        return all(status.values()), status
