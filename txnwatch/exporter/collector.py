"""The scrape path: a prometheus_client Collector that renders the last snapshots.

No Kafka I/O happens here. Each part renders independently; an exception in one part
is logged and counted, and the rest of the scrape still goes out."""

from __future__ import annotations

import logging
import platform
import threading
from collections import defaultdict
from collections.abc import Callable, Iterable

from prometheus_client.process_collector import ProcessCollector
from prometheus_client.registry import Collector

from .. import __version__
from ..apps import fold_ids
from ..exposition import FamilyChunk, Section, assemble, family_chunks, with_tail
from ..metrics import FamilyWriter
from .model import ClusterSnapshot

log = logging.getLogger(__name__)


def render_snapshot(w: FamilyWriter, snap: ClusterSnapshot, granularity: str, id_cap: int,
                    render_open_transactions: bool = True) -> int:
    """Write one cluster's poller snapshot. Returns how many id series were folded."""
    c = snap.cluster
    f = snap.facts
    w.add("kafka_brokers", {"cluster": c}, f.brokers)
    for name, ms in (("kafka_broker_transaction_max_timeout_seconds", f.transaction_max_timeout_ms),
                     ("kafka_broker_transactional_id_expiration_seconds", f.transactional_id_expiration_ms),
                     ("kafka_broker_producer_id_expiration_seconds", f.producer_id_expiration_ms)):
        w.add(name, {"cluster": c}, None if ms is None else ms / 1000)
    w.add("kafka_transaction_state_log_min_isr", {"cluster": c}, f.transaction_state_log_min_isr)
    w.add("kafka_transaction_state_log_replication_factor", {"cluster": c},
          f.transaction_state_log_replication_factor)
    for topic, ms in f.topic_retention_ms.items():
        w.add("kafka_topic_retention_seconds", {"cluster": c, "topic": topic}, ms / 1000 if ms >= 0 else -1)
    for api, ok in snap.capabilities.items():
        w.add("txnwatch_capability", {"cluster": c, "api": api}, 1 if ok else 0)

    hanging = defaultdict(int)
    for h in snap.hanging:
        hanging[(h.topic, h.partition)] += 1
    if granularity == "topic":
        _render_topics(w, snap, hanging)
    else:
        for (topic, part), p in snap.partitions.items():
            lbl = {"cluster": c, "topic": topic, "partition": part}
            w.add("kafka_partition_high_watermark", lbl, p.high_watermark)
            w.add("kafka_partition_last_stable_offset", lbl, p.last_stable_offset)
            w.add("kafka_partition_lso_lag_messages", lbl, p.lso_lag)
            w.add("kafka_partition_lso_stalled_seconds", lbl, p.stalled_seconds)
            w.add("kafka_transaction_hanging", lbl, hanging.get((topic, part), 0))
    for g in snap.groups:
        base = {"cluster": c, "group": g.group, "topic": g.topic, "partition": g.partition}
        w.add("kafka_consumergroup_committed_offset", base, g.committed)
        w.add("kafka_consumergroup_lag_messages", {**base, "isolation": "read_committed"}, g.lag_read_committed)
        w.add("kafka_consumergroup_lag_messages", {**base, "isolation": "read_uncommitted"},
              g.lag_read_uncommitted)
    for app, n in snap.epoch_bumps.items():
        w.add("kafka_transaction_epoch_bumps", {"cluster": c, "app": app}, n)

    folded = 0
    if snap.open_transactions is not None and render_open_transactions:
        per_app: dict[str, list] = defaultdict(list)
        for t in snap.open_transactions:
            per_app[t.app].append(t)
        for app, txns in per_app.items():
            w.add("kafka_transaction_open", {"cluster": c, "app": app}, len(txns))
            ages = [t.age_seconds for t in txns if t.age_seconds is not None]
            w.add("kafka_transaction_oldest_open_age_seconds", {"cluster": c, "app": app},
                  max(ages) if ages else None)
        series, folded = fold_ids(((t.app, t.transactional_id, t.headroom_seconds)
                                   for t in snap.open_transactions if t.headroom_seconds is not None), id_cap)
        best: dict[tuple[str, str], float] = {}
        for app, tid, v in series:
            best[(app, tid)] = min(v, best.get((app, tid), v))
        for (app, tid), v in best.items():
            w.add("kafka_transaction_timeout_headroom_seconds",
                  {"cluster": c, "app": app, "transactional_id": tid}, v)
    return folded


def _render_topics(w: FamilyWriter, snap: ClusterSnapshot, hanging) -> None:
    agg: dict[str, list[float]] = {}
    for (topic, part), p in snap.partitions.items():
        a = agg.setdefault(topic, [0, 0, 0, 0.0, 0])
        a[0] += p.high_watermark
        a[1] += p.last_stable_offset
        a[2] += p.lso_lag
        a[3] = max(a[3], p.stalled_seconds)
        a[4] += hanging.get((topic, part), 0)
    for topic, (hwm, lso, lag, stalled, hang) in agg.items():
        lbl = {"cluster": snap.cluster, "topic": topic, "partition": "all"}
        w.add("kafka_partition_high_watermark", lbl, hwm)
        w.add("kafka_partition_last_stable_offset", lbl, lso)
        w.add("kafka_partition_lso_lag_messages", lbl, lag)
        w.add("kafka_partition_lso_stalled_seconds", lbl, stalled)
        w.add("kafka_transaction_hanging", lbl, hang)


def render_health(w: FamilyWriter, cluster: str, health) -> None:
    lbl = {"cluster": cluster, "source": health.source}
    w.add("txnwatch_up", lbl, 1 if health.up else 0)
    w.add("txnwatch_poll_duration_seconds", lbl, health.last_duration)
    w.add("txnwatch_last_success_timestamp_seconds", lbl, health.last_success)
    for cause, n in health.errors.items():
        w.add("txnwatch_poll_errors", {**lbl, "cause": cause}, n)


class Part:
    """One source of series. `key()` returns an object that changes (by identity) only when
    the rendered series would: an immutable snapshot. With a key the formatted chunks are
    reused by every scrape until it changes; without one the part renders every scrape."""

    __slots__ = ("name", "render", "key", "_cached_key", "_chunks")

    def __init__(self, name: str, render: Callable[[FamilyWriter], None],
                 key: Callable[[], object] | None = None) -> None:
        self.name, self.render, self.key = name, render, key
        self._cached_key: object = None
        self._chunks: dict[str, FamilyChunk] | None = None


class ExporterCollector(Collector):
    """Renders everything the exporter knows from in-memory views; never does I/O.

    `exposition()` is the scrape path (cached chunks per part, merged into one document);
    `collect()` yields prometheus_client families for registry-based use."""

    def __init__(self, parts: Iterable[Part | tuple[str, Callable[[FamilyWriter], None]]]) -> None:
        self._parts = [p if isinstance(p, Part) else Part(*p) for p in parts]
        self._lock = threading.Lock()
        self._render_lock = threading.Lock()
        self._dropped: dict[tuple[str, str, str], int] = defaultdict(int)
        self._part_errors: set[str] = set()
        self._process = ProcessCollector(registry=None)
        self._sections: dict[bool, tuple[tuple, Section]] = {}
        self._formats_seen: set[tuple[bool, bool]] = set()

    def count_dropped(self, cluster: str, metric: str, reason: str, n: int) -> None:
        if n:
            with self._lock:
                self._dropped[(cluster, metric, reason)] += n

    def _render_part(self, part: Part) -> FamilyWriter:
        w = FamilyWriter()
        try:
            part.render(w)
        except Exception:  # noqa: BLE001 - one broken part never fails the scrape
            if part.name not in self._part_errors:
                self._part_errors.add(part.name)
                log.exception("rendering %s failed; the rest of the scrape is served", part.name)
            self.count_dropped("", part.name, "render_error", 1)
        for metric, n in w.invalid.items():
            self.count_dropped("", metric, "invalid_value", n)
        return w

    def chunks(self, part: Part) -> dict[str, FamilyChunk]:
        """The part's formatted series; rendered again only when its key changed."""
        if part.key is None:
            return family_chunks(self._render_part(part).families())
        key = part.key()
        if key is part._cached_key and part._chunks is not None:
            return part._chunks
        with self._render_lock:  # concurrent scrapes wait for one render instead of each rendering
            if key is not part._cached_key or part._chunks is None:
                part._chunks = family_chunks(self._render_part(part).families())
                part._cached_key = key
            return part._chunks

    def prerender(self, name: str) -> None:
        """Render a cached part now (called from a source's thread after it publishes), and
        the document sections scrapers use, so no scrape pays for the new data."""
        for part in self._parts:
            if part.name == name and part.key is not None:
                self.chunks(part)
        self.prewarm()

    def _self_families(self) -> list:
        w = FamilyWriter()
        with self._lock:
            dropped = dict(self._dropped)
        for (cluster, metric, reason), n in dropped.items():
            w.add("txnwatch_series_dropped", {"cluster": cluster, "metric": metric, "reason": reason}, n)
        w.info("txnwatch_build", {"version": __version__, "python": platform.python_version()})
        return list(w.families()) + list(self._process.collect())

    def _section(self, cached: list[dict[str, FamilyChunk]], openmetrics: bool, gzip: bool) -> Section:
        """The cached parts formatted as one section, rebuilt only when one of them changed
        (compared by identity: chunk dicts are replaced, never mutated)."""
        with self._render_lock:
            entry = self._sections.get(openmetrics)
            if entry is None or len(entry[0]) != len(cached) or any(a is not b for a, b in zip(entry[0], cached, strict=False)):
                entry = (tuple(cached), Section(assemble(cached, openmetrics, eof=False)))
                self._sections[openmetrics] = entry
            if gzip:
                entry[1].deflated()
            self._formats_seen.add((openmetrics, gzip))
            return entry[1]

    def exposition(self, openmetrics: bool, gzip: bool = False) -> bytes:
        """The scrape: cached parts form one section, formatted (and compressed) once per
        change of any of their snapshots; the small live parts are formatted each time."""
        cached = [self.chunks(p) for p in self._parts if p.key is not None]
        live = [self.chunks(p) for p in self._parts if p.key is None]
        live.append(family_chunks(self._self_families()))
        cached_names = {n for c in cached for n in c}
        if any(n in cached_names for part in live for n in part):
            # A family spread over cached and live parts needs one header: no section cache.
            return with_tail(Section(b""), assemble(cached + live, openmetrics), gzip)
        return with_tail(self._section(cached, openmetrics, gzip), assemble(live, openmetrics), gzip)

    def prewarm(self) -> None:
        """Build the sections scrapers have asked for (after a source published new data)."""
        cached = [self.chunks(p) for p in self._parts if p.key is not None]
        for openmetrics, gzip in list(self._formats_seen):
            self._section(cached, openmetrics, gzip)

    def collect(self):
        families = []
        for part in self._parts:
            families.extend(self._render_part(part).families())
        return families + self._self_families()
