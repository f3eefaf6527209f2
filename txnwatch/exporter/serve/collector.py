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

from ... import __version__, revision
from ...metrics import DEFAULT_CLUSTER_LABEL, FamilyWriter
from ...metrics.exposition import (
    DeflateCache,
    FamilyChunk,
    Section,
    assemble,
    assemble_pieces,
    family_chunks,
    text_name,
    with_tail,
)

log = logging.getLogger(__name__)


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
    """What scrapes read: the big per-poll parts' chunks, the document section built from
    them for each format scrapers use, and their series per family. Replaced whole, never
    mutated."""

    __slots__ = ("parts", "sections", "series")

    def __init__(self, parts: dict[str, dict[str, FamilyChunk]], sections: dict[bool, Section],
                 series: dict[str, int] | None = None) -> None:
        self.parts, self.sections = parts, sections
        self.series = series if series is not None else series_per_family(parts.values())


def series_per_family(parts: Iterable[dict[str, FamilyChunk]]) -> dict[str, int]:
    """Sample lines (one series each) per family, named as in the text format's TYPE line
    (a counter's with _total): the name the series are queried by."""
    out: dict[str, int] = defaultdict(int)
    for chunks in parts:
        for chunk in chunks.values():
            out[text_name(chunk)] += chunk.body.count(b"\n")
    return dict(out)


class ExporterCollector:
    """Renders everything the exporter knows from in-memory views; never does I/O.

    Big sources (a poller's snapshot: every partition and group) are rendered once per poll,
    in the poll thread, by `publish()`, which builds the document section for every format
    scrapers have asked for and swaps it in by reference. A scrape (`exposition()`) only
    formats the small live parts and appends them: it never waits for a render."""

    def __init__(self, parts: Iterable[Part | tuple[str, Callable[[FamilyWriter], None]]] = (),
                 live_key: Callable[[], object] | None = None,
                 worker_pids: Callable[[], dict[str, int]] | None = None,
                 cluster_label: str = DEFAULT_CLUSTER_LABEL) -> None:
        self.cluster_label = cluster_label
        self._live = [p if isinstance(p, Part) else Part(*p) for p in parts]
        self._lock = threading.Lock()           # counters
        self._publish_lock = threading.Lock()   # one publisher at a time
        self._dropped: dict[tuple[str, str, str], int] = defaultdict(int)
        self._part_errors: set[str] = set()
        self._process = ProcessCollector(registry=None)
        # cluster -> pid of the worker process that holds its state: process_* of each,
        # labelled by cluster, beside this process's own (unlabelled)
        self._worker_pids = worker_pids or dict
        self._published = _Published({}, {})
        # Whole responses, shared by scrapes within `response_ttl` seconds of each other
        # (several Prometheus servers arriving together); a new publish invalidates them.
        self.response_ttl = 0.5
        # ...and only while `live_key()` is unchanged (the exporter passes the facts /readyz
        # goes by, e.g. the sources' up flags: /metrics never shows an older state of them).
        self._live_key = live_key or (lambda: None)
        self._responses: dict[tuple[bool, bool], tuple[float, _Published, object, bytes]] = {}
        # (openmetrics, gzip) pairs scrapers used -> when one last asked (monotonic). A publish
        # builds only those asked for within `format_ttl` seconds: one `curl` without gzip does
        # not make every later publish join the whole plain document (at 10,000 partitions,
        # 8 MB and ~2 ms a publish). Prometheus only ever asks for one format.
        self.format_ttl = 120.0
        self._formats: dict[tuple[bool, bool], float] = {}
        self._deflated: dict[bool, DeflateCache] = {}   # per format: last publish's deflated families

    def count_dropped(self, cluster: str, metric: str, reason: str, n: int) -> None:
        if n:
            with self._lock:
                self._dropped[(cluster, metric, reason)] += n

    def _render(self, name: str, render: Callable[[FamilyWriter], None]) -> dict[str, FamilyChunk]:
        w = FamilyWriter(cluster_label=self.cluster_label)
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

    def _in_use(self) -> set[tuple[bool, bool]]:
        """The formats a scrape asked for within `format_ttl` seconds."""
        since = time.monotonic() - self.format_ttl
        return {f for f, last in list(self._formats.items()) if last >= since}

    def _wanted_formats(self) -> list[tuple[bool, bool]]:
        wanted: dict[bool, bool] = {}
        for om, gz in self._in_use():
            wanted[om] = wanted.get(om, False) or gz
        return list(wanted.items())

    def _section(self, parts: dict[str, dict[str, FamilyChunk]], om: bool, gz: bool) -> Section:
        plain_wanted = (om, False) in self._in_use() or not gz
        reuse = self._deflated.get(om)
        if reuse is None:
            reuse = self._deflated[om] = DeflateCache()
        return Section(assemble_pieces(parts.values(), om), keep_plain=plain_wanted, deflate=gz, reuse=reuse)

    def _section_for(self, om: bool, gz: bool) -> Section:
        self._formats[(om, gz)] = time.monotonic()
        pub = self._published
        section = pub.sections.get(om)
        if section is not None and (section.has_plain or gz) and (section.has_deflate or not gz):
            return section
        # A format no scraper asked for lately: build it now, and at each publish while asked.
        with self._publish_lock:
            pub = self._published
            section = self._section(pub.parts, om, gz or (om, True) in self._in_use())
            self._published = _Published(pub.parts, {**pub.sections, om: section}, pub.series)
            return section

    # ----------------------------------------------------------------- scraping
    def _self_chunks(self, live: list[dict[str, FamilyChunk]]) -> dict[str, FamilyChunk]:
        w = FamilyWriter(cluster_label=self.cluster_label)
        with self._lock:
            dropped = dict(self._dropped)
        for (cluster, metric, reason), n in dropped.items():
            w.add("txnwatch_series_dropped", {"cluster": cluster, "metric": metric, "reason": reason}, n)
        w.info("txnwatch_build", {"version": __version__, "revision": revision(), "python": platform.python_version()})
        processes = family_chunks([*self._process.collect(), *self._worker_process_families()])
        # the document's series per family: the published parts' (counted once per publish),
        # the live parts', and these own (txnwatch_series itself: one per family, itself included)
        series = dict(self._published.series)
        for name, n in series_per_family([*live, w.chunks(), processes]).items():
            series[name] = series.get(name, 0) + n
        series["txnwatch_series"] = len(series) + ("txnwatch_series" not in series)
        for family, n in sorted(series.items()):
            w.add("txnwatch_series", {"family": family}, n)
        chunks = w.chunks()
        chunks.update(processes)
        return chunks

    def _worker_process_families(self):
        """process_* of every running worker (read from /proc, as for this process), with
        its cluster label; a worker that just exited has none."""
        for cluster, pid in sorted(self._worker_pids().items()):
            for fam in ProcessCollector(pid=lambda pid=pid: pid, registry=None).collect():
                fam.samples = [s._replace(labels={**s.labels, self.cluster_label: cluster}) for s in fam.samples]
                yield fam

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
        live.append(self._self_chunks(live))
        big_names = section.names
        if any(n in big_names for part in live for n in part):
            # A family spread over big and live parts needs one header: format it all now.
            parts = list(self._published.parts.values()) + live
            return with_tail(Section([], keep_plain=True, deflate=gzip), assemble(parts, openmetrics), gzip)
        return with_tail(section, assemble(live, openmetrics), gzip)
