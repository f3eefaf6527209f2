"""The scrape path: a prometheus_client Collector that renders the last snapshots.

No Kafka I/O happens here. Each part renders independently; an exception in one part
is logged and counted, and the rest of the scrape still goes out."""

from __future__ import annotations

import logging
import platform
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterable

from prometheus_client.process_collector import ProcessCollector

from .. import __version__
from ..apps import fold_ids
from ..exposition import FamilyChunk, Section, assemble, assemble_pieces, family_chunks, with_tail
from ..metrics import FamilyWriter
from .model import ClusterSnapshot

log = logging.getLogger(__name__)


def render_snapshot(w: FamilyWriter, snap: ClusterSnapshot, granularity: str, id_cap: int,
                    render_open_transactions: bool = True, cluster_level: bool = True) -> int:
    """Write one cluster's poller snapshot. Returns how many id series were folded.
    `cluster_level=False` (a shard other than 0 of a split cluster) leaves out the facts
    about the whole cluster, which shard 0 exports."""
    if cluster_level:
        _render_cluster_facts(w, snap)
    return _render_partitions_and_transactions(w, snap, granularity, id_cap, render_open_transactions)


def _render_cluster_facts(w: FamilyWriter, snap: ClusterSnapshot) -> None:
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
    for group_type, names in snap.group_types.items():
        w.add("kafka_groups", {"cluster": c, "type": group_type}, len(names))
    for feature, level in snap.features.items():
        w.add("kafka_cluster_feature_level", {"cluster": c, "feature": feature}, level)


def _render_partitions_and_transactions(w: FamilyWriter, snap: ClusterSnapshot, granularity: str, id_cap: int,
                                        render_open_transactions: bool) -> int:
    c = snap.cluster
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
            lbl = {"cluster": c, "app": app}
            w.add("kafka_transaction_open", lbl, len(txns))
            for name, group in (("kafka_transaction_oldest_open_age_seconds", [t for t in txns if not t.two_phase]),
                                ("kafka_transaction_two_phase_oldest_age_seconds", [t for t in txns if t.two_phase])):
                ages = [t.age_seconds for t in group if t.age_seconds is not None]
                if group:
                    w.add(name, lbl, max(ages) if ages else None)
            two_phase = sum(1 for t in txns if t.two_phase)
            if two_phase:
                w.add("kafka_transaction_two_phase_open", lbl, two_phase)
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
    """A small source of series rendered at every scrape (health, tap view, Spark state).
    With `key`, an object that changes identity only when the series would, the formatted
    chunks are reused until it changes."""

    __slots__ = ("name", "render", "key", "_cached_key", "_chunks")

    def __init__(self, name: str, render: Callable[[FamilyWriter], None],
                 key: Callable[[], object] | None = None) -> None:
        self.name, self.render, self.key = name, render, key
        self._cached_key: object = None
        self._chunks: dict[str, FamilyChunk] | None = None


class _Published:
    """What scrapes read: the big per-poll parts' chunks and the document section built
    from them for each format scrapers use. Replaced whole, never mutated."""

    __slots__ = ("parts", "sections")

    def __init__(self, parts: dict[str, dict[str, FamilyChunk]], sections: dict[bool, Section]) -> None:
        self.parts, self.sections = parts, sections


class ExporterCollector:
    """Renders everything the exporter knows from in-memory views; never does I/O.

    Big sources (a poller's snapshot: every partition and group) are rendered once per poll,
    in the poll thread, by `publish()`, which builds the document section for every format
    scrapers have asked for and swaps it in by reference. A scrape (`exposition()`) only
    formats the small live parts and appends them: it never waits for a render."""

    def __init__(self, parts: Iterable[Part | tuple[str, Callable[[FamilyWriter], None]]] = (),
                 live_key: Callable[[], object] | None = None) -> None:
        self._live = [p if isinstance(p, Part) else Part(*p) for p in parts]
        self._lock = threading.Lock()           # counters
        self._publish_lock = threading.Lock()   # one publisher at a time
        self._dropped: dict[tuple[str, str, str], int] = defaultdict(int)
        self._part_errors: set[str] = set()
        self._process = ProcessCollector(registry=None)
        self._published = _Published({}, {})
        # Whole responses, shared by scrapes within `response_ttl` seconds of each other
        # (several Prometheus servers arriving together); a new publish invalidates them.
        self.response_ttl = 0.5
        # ...and only while `live_key()` is unchanged (the exporter passes the facts /readyz
        # goes by, e.g. the sources' up flags: /metrics never shows an older state of them).
        self._live_key = live_key or (lambda: None)
        self._responses: dict[tuple[bool, bool], tuple[float, _Published, object, bytes]] = {}
        # (openmetrics, gzip) pairs scrapers used; Prometheus only ever asks for one.
        self._formats: set[tuple[bool, bool]] = set()

    def count_dropped(self, cluster: str, metric: str, reason: str, n: int) -> None:
        if n:
            with self._lock:
                self._dropped[(cluster, metric, reason)] += n

    def _render(self, name: str, render: Callable[[FamilyWriter], None]) -> dict[str, FamilyChunk]:
        w = FamilyWriter()
        try:
            render(w)
        except Exception:  # noqa: BLE001 - one broken part never fails the scrape
            if name not in self._part_errors:
                self._part_errors.add(name)
                log.exception("rendering %s failed; the rest of the scrape is served", name)
            self.count_dropped("", name, "render_error", 1)
        for metric, n in w.invalid.items():
            self.count_dropped("", metric, "invalid_value", n)
        return w.chunks()

    def _live_chunks(self, part: Part) -> dict[str, FamilyChunk]:
        if part.key is None:
            return self._render(part.name, part.render)
        key = part.key()
        chunks = part._chunks
        if key is not part._cached_key or chunks is None:
            chunks = self._render(part.name, part.render)
            part._chunks, part._cached_key = chunks, key
        return chunks

    # ----------------------------------------------------------------- publishing
    def publish(self, name: str, render: Callable[[FamilyWriter], None]) -> None:
        """Render a big part (a new snapshot) and swap in a document built with it."""
        self.publish_chunks(name, self._render(name, render))

    def publish_chunks(self, name: str, chunks: dict[str, FamilyChunk]) -> None:
        """Swap in a document with a big part rendered elsewhere (a worker process)."""
        with self._publish_lock:
            parts = {**self._published.parts, name: chunks}
            sections = {om: self._section(parts, om, gz) for om, gz in self._wanted_formats()}
            self._published = _Published(parts, sections)

    def _wanted_formats(self) -> list[tuple[bool, bool]]:
        wanted: dict[bool, bool] = {}
        for om, gz in list(self._formats):
            wanted[om] = wanted.get(om, False) or gz
        return list(wanted.items())

    def _section(self, parts: dict[str, dict[str, FamilyChunk]], om: bool, gz: bool) -> Section:
        plain_wanted = (om, False) in self._formats or not gz
        return Section(assemble_pieces(parts.values(), om), keep_plain=plain_wanted, deflate=gz)

    def _section_for(self, om: bool, gz: bool) -> Section:
        pub = self._published
        section = pub.sections.get(om)
        if section is not None and (section.has_plain or gz) and (section.has_deflate or not gz):
            return section
        # A format no scraper used before: build it once now, and from now on at publish.
        with self._publish_lock:
            self._formats.add((om, gz))
            pub = self._published
            section = self._section(pub.parts, om, gz or (om, True) in self._formats)
            self._published = _Published(pub.parts, {**pub.sections, om: section})
            return section

    # ----------------------------------------------------------------- scraping
    def _self_chunks(self) -> dict[str, FamilyChunk]:
        w = FamilyWriter()
        with self._lock:
            dropped = dict(self._dropped)
        for (cluster, metric, reason), n in dropped.items():
            w.add("txnwatch_series_dropped", {"cluster": cluster, "metric": metric, "reason": reason}, n)
        w.info("txnwatch_build", {"version": __version__, "python": platform.python_version()})
        chunks = w.chunks()
        chunks.update(family_chunks(self._process.collect()))
        return chunks

    def exposition(self, openmetrics: bool, gzip: bool = False) -> bytes:
        now = time.monotonic()
        live_key = self._live_key()   # taken before rendering: the body is at least this new
        hit = self._responses.get((openmetrics, gzip))
        if (hit is not None and now - hit[0] < self.response_ttl and hit[1] is self._published
                and hit[2] == live_key):
            return hit[3]
        body = self._exposition(openmetrics, gzip)
        self._responses[(openmetrics, gzip)] = (now, self._published, live_key, body)
        return body

    def _exposition(self, openmetrics: bool, gzip: bool) -> bytes:
        section = self._section_for(openmetrics, gzip)
        live = [self._live_chunks(p) for p in self._live]
        live.append(self._self_chunks())
        big_names = section.names
        if any(n in big_names for part in live for n in part):
            # A family spread over big and live parts needs one header: format it all now.
            parts = list(self._published.parts.values()) + live
            return with_tail(Section([], keep_plain=True, deflate=gzip), assemble(parts, openmetrics), gzip)
        return with_tail(section, assemble(live, openmetrics), gzip)
