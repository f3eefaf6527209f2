"""A cluster's poller and tap in a process of their own (`http.worker_processes: true`).

    python -m txnwatch.exporter.worker <dir>      # the cluster's config arrives pickled on stdin

The serving process starts one per cluster (workers.py). The worker renders what it
polls into exposition chunks and publishes them, with the page's digest and its status,
as files in <dir> swapped by rename; the serving process reads them when they change.
The config travels on stdin because it may carry SASL passwords: never written to disk.

Files: poller.chunks, tap.chunks (dict[str, FamilyChunk]), digest (ClusterDigest),
status (WorkerStatus, every `status_interval` and after each poll), checkpoint (the
counters a restarted worker continues from: the tap's TapView counters with the log
offsets they are complete to, and the poller's epoch bumps). Reads spark-topics (JSON
list) to know which topics' partitions the digest carries for the Spark join, and scrapes
(JSON: the scrapers' cadences) to time its polls to them (poll_schedule scrapes).

The worker exits when its parent goes away (checked every status interval) or on SIGTERM.
"""

from __future__ import annotations

import json
import logging
import os
import pickle
import signal
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path

from ...kafka.login import status_of as login_status
from ...kafka.login import stop_logins
from ...logsetup import setup_logging
from ...metrics import DEFAULT_CLUSTER_LABEL, FamilyWriter
from ...sharding import WHOLE
from ..poll.render import render_snapshot
from ..poll.scrape_clock import NOBODY, Cadence, ScrapeView
from .cluster import ClusterRuntime
from .gc_tuning import FullCollections, tune_gc
from .published import (
    ClusterDigest,
    WorkerStatus,
    canary_summary,
    digest_of,
    login_summary,
    tap_summary,
    write_atomic,
)
from .supervisor import SUPERVISE_INTERVAL

log = logging.getLogger("txnwatch.worker")

# the status between polls is a heartbeat (the supervisor calls a worker stalled after 5 s of
# silence); each costs a file written here and read by the serving process
STATUS_INTERVAL = 1.0
# seconds a worker takes at most to stop after SIGTERM: a call stuck in a client library is
# given up (what matters was published); podman and docker send SIGKILL 10 s after SIGTERM
SHUTDOWN_GRACE = 5.0
TAP_INTERVAL = 0.25
# the least the poll schedule allows for publishing: a file written and read, a wake-up
MIN_PUBLISH_DELAY = 0.02


class _Dropped:
    """collector.count_dropped for the worker: counts kept here, published in the status."""

    def __init__(self) -> None:
        self.counts: dict[tuple[str, str, str], int] = {}

    def count_dropped(self, cluster: str, metric: str, reason: str, n: int) -> None:
        if n:
            self.counts[(cluster, metric, reason)] = self.counts.get((cluster, metric, reason), 0) + n


class Worker:
    def __init__(self, cfg, out_dir: Path, status_interval: float = STATUS_INTERVAL, share=None,
                 cluster_label: str = DEFAULT_CLUSTER_LABEL) -> None:
        self.cfg = cfg
        self.cluster_label = cluster_label
        self.share = share or WHOLE
        self.dir = out_dir
        self.status_interval = status_interval
        checkpoint = _load(out_dir / "checkpoint") or {}
        self.rt = ClusterRuntime(cfg, tap_resume_from=checkpoint.get("tap"), share=self.share)
        if checkpoint.get("epoch_bumps"):
            self.rt.poller.restore_epoch_bumps(checkpoint["epoch_bumps"])
        if checkpoint.get("hanging_ended"):
            self.rt.poller.restore_hanging_ended(checkpoint["hanging_ended"])
        if checkpoint.get("canary") is not None and self.rt.canary is not None:
            self.rt.canary.restore(checkpoint["canary"])
        self.dropped = _Dropped()
        self.dropped.counts.update(checkpoint.get("dropped", {}))   # continued, never backwards
        self._seq = 0
        self.wake_fd: int | None = None     # the serving process's wake-up pipe (main() sets it)
        self._lock = threading.Lock()       # publishes come from the poll thread and the main loop
        self._stop = threading.Event()
        self._spark_topics: frozenset[str] = frozenset()
        self._spark_key = None
        self._data_taken_at: dict[str, float] = {}
        self._last_tap_view = None
        self._last_canary_view = None
        self._epoch_bumps: dict = dict(checkpoint.get("epoch_bumps", {}))
        self._hanging_ended: dict = dict(checkpoint.get("hanging_ended", {}))
        self._tap_checkpoint = checkpoint.get("tap")
        self._digest: ClusterDigest | None = None
        self.rt.poller.on_snapshot = self._on_snapshot
        self.rt.poller.on_success = self._on_success
        self.rt.poller.on_start = self.publish_status   # a scrape may wait for a poll that runs late
        # poll_schedule "scrapes": the scrapers as the serving process last wrote them
        self._scrapes_key = None
        self._scrape_view = NOBODY
        self.rt.poller.scrapes = lambda: self._scrape_view
        self.rt.poller.publish_delay = SUPERVISE_INTERVAL   # until the serving process measured it
        self.full_gc = FullCollections()
        self._poll_published_at: float | None = None

    # ------------------------------------------------------------------ publishing
    def _on_snapshot(self, snap) -> None:
        w = FamilyWriter(cluster_label=self.cluster_label)
        folded = render_snapshot(w, snap, self.cfg.granularity, self.cfg.max_transactional_id_series,
                                 render_open_transactions=self.rt.tap is None,
                                 cluster_level=self.share.cluster_level, cache=self.rt.render_cache)
        for metric, n in folded.items():
            self.dropped.count_dropped(self.cfg.name, metric, "id_cap", n)
        for metric, n in w.invalid.items():
            self.dropped.count_dropped("", metric, "invalid_value", n)
        write_atomic(self.dir / "poller.chunks", (snap.taken_at, w.chunks()))
        self._read_spark_topics()
        tap_view = self.rt.tap.view() if self.rt.tap is not None else None
        canary_view = self.rt.canary.view() if self.rt.canary is not None else None
        digest = digest_of(snap, self.cfg.name, self.rt.poller.kip664_error, tap_view,
                           spark_topics=self._spark_topics, canary_view=canary_view,
                           login=login_summary(login_status(self.cfg.client_properties())),
                           **self.rt.app_inputs(tap_view))
        with self._lock:
            self._digest = digest
            write_atomic(self.dir / "digest", digest)
        with self._lock:
            self._epoch_bumps = dict(snap.epoch_bumps)
            self._hanging_ended = dict(snap.hanging_ended)

    def _on_success(self, snap) -> None:
        # The status naming this data is written after the data and after `up` changed: the
        # serving process shows a chunk file only once a status covers it, so `up` and the
        # series appear together.
        with self._lock:
            self._data_taken_at["poller"] = snap.taken_at
        self.publish_status()
        self._poll_published_at = time.time()
        log.debug("cluster %s: poll data taken at %.3f published at %.3f", self.cfg.name, snap.taken_at,
                  self._poll_published_at)
        self._write_checkpoint()     # after: the scrape waits for the data, not for this

    def _publish_tap(self) -> None:
        tap = self.rt.tap
        if tap is None:
            return
        view = tap.view()
        if view is self._last_tap_view:
            return
        w = FamilyWriter(cluster_label=self.cluster_label)
        folded = self.rt.tap_families(w, view)
        for metric, n in folded.items():
            self.dropped.count_dropped(self.cfg.name, metric, "id_cap", n)
        taken = time.time()
        write_atomic(self.dir / "tap.chunks", (taken, w.chunks()))
        self._update_digest(tap=tap_summary(view))
        self._last_tap_view = view
        with self._lock:
            self._data_taken_at["tap"] = taken
            self._tap_checkpoint = view
        self._write_checkpoint()
        self.publish_status()

    def _publish_canary(self) -> None:
        canary = self.rt.canary
        if canary is None:
            return
        view = canary.view()
        if view is self._last_canary_view:
            return
        w = FamilyWriter(cluster_label=self.cluster_label)
        self.rt.render_canary(w)
        taken = time.time()
        write_atomic(self.dir / "canary.chunks", (taken, w.chunks()))
        self._update_digest(canary=canary_summary(view))
        with self._lock:
            self._last_canary_view = view
            self._data_taken_at["canary"] = taken
        self._write_checkpoint()
        self.publish_status()

    def _update_digest(self, **rows) -> None:
        """The page's tap or canary row follows its source, also before (or without) a
        successful poll: the last digest with that row replaced, published."""
        with self._lock:   # written under the lock: a slower thread never publishes an older digest
            base = self._digest or ClusterDigest(self.cfg.name, kip664_error=self.rt.poller.kip664_error)
            self._digest = digest = replace(base, **rows)
            write_atomic(self.dir / "digest", digest)

    def _write_checkpoint(self) -> None:
        with self._lock:
            cp = {"tap": self._tap_checkpoint, "epoch_bumps": self._epoch_bumps, "hanging_ended": self._hanging_ended,
                  "dropped": dict(self.dropped.counts), "canary": self._last_canary_view}
            write_atomic(self.dir / "checkpoint", cp)

    def publish_status(self) -> None:
        with self._lock:
            self._seq += 1
            # readiness as of the data already published: the tap counts as rebuilt only once
            # the view that says so is in tap.chunks (what /metrics serves)
            readiness = [h.up for h in self.rt.sources()]
            if self.rt.tap is not None:
                readiness.append(self._last_tap_view is not None and self._last_tap_view.rebuilt)
            status = WorkerStatus(self.cfg.name, os.getpid(), self._seq, time.time(), tuple(self.rt.sources()),
                                  tuple(readiness), dict(self._data_taken_at), dict(self.dropped.counts),
                                  self.rt.poller.in_flight.current())
            write_atomic(self.dir / "status", status)
        self._nudge()

    def _nudge(self) -> None:
        """Tell the serving process a status is out (a byte down the pipe it waits on), so
        the data reaches scrapes at once, not at its next look."""
        fd = self.wake_fd
        if fd is None:
            return
        try:
            os.write(fd, b"\0")
        except (BlockingIOError, InterruptedError):
            pass                   # the pipe is full: the serving process has news waiting anyway
        except OSError:
            self.wake_fd = None    # the serving process went away; its successor looks by itself

    def _read_spark_topics(self) -> None:
        got = _read_if_replaced(self.dir / "spark-topics", self._spark_key)
        if got is not None:
            self._spark_key, self._spark_topics = got[0], frozenset(got[1])

    def _read_scrapes(self) -> None:
        got = _read_if_replaced(self.dir / "scrapes", self._scrapes_key)
        if got is None:
            return
        key, raw = got
        try:
            view = ScrapeView(tuple(Cadence(float(p), float(t)) for p, t in raw["cadences"]), int(raw["settling"]))
        except (KeyError, TypeError, ValueError):
            return    # not what the serving process writes: keep the last view
        self._scrapes_key, self._scrape_view = key, view
        lag = raw.get("publish_lag")
        if isinstance(lag, (int, float)) and 0 <= lag < 60:
            # what it takes the serving process to serve what we publish, as it measured it
            self.rt.poller.publish_delay = max(float(lag), MIN_PUBLISH_DELAY)
        self.rt.poller.wake.set()

    # ------------------------------------------------------------------ run
    def run(self, parent_pid: int) -> int:
        self.rt.start()
        next_status = 0.0
        try:
            failed = False
            while not self._stop.is_set():
                now = time.monotonic()
                try:
                    self._read_scrapes()
                    self._publish_tap()
                    self._publish_canary()
                    if now >= next_status:
                        self.publish_status()
                        next_status = now + self.status_interval
                    cadences = self._scrape_view.cadences
                    self.full_gc.maybe_collect(self._poll_published_at,
                                               max(c.last for c in cadences) if cadences else None)
                except Exception:  # noqa: BLE001 - a failed publish is retried; status silence shows it
                    if not failed:
                        log.exception("worker[%s]: publishing failed (retrying)", self.cfg.name)
                    failed = True
                if os.getppid() != parent_pid:
                    log.warning("worker[%s]: the serving process is gone; exiting", self.cfg.name)
                    break
                self._stop.wait(TAP_INTERVAL)
        finally:
            self.rt.signal_stop()
            self.rt.stop()
            stop_logins()                   # their token refreshes
            self._publish_tap()
            self._write_checkpoint()
        return 0

    def stop(self) -> None:
        self._stop.set()


def _read_if_replaced(path: Path, key: tuple | None) -> tuple[tuple, object] | None:
    """(its new key, its JSON) when the serving process replaced `path` since `key`; None when
    it is missing, unchanged, or caught half-read (the next look reads it whole)."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    new = (st.st_ino, st.st_mtime_ns, st.st_size)
    if new == key:
        return None
    try:
        return new, json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def _load(path: Path):
    try:
        with open(path, "rb") as fh:
            return pickle.load(fh)   # noqa: S301 - written by an earlier worker into our private directory
    except FileNotFoundError:
        return None
    except Exception:  # noqa: BLE001 - a damaged checkpoint only costs continuity
        log.warning("ignoring an unreadable checkpoint %s", path, exc_info=True)
        return None


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    out_dir = Path(argv[0])
    parent = int(argv[1]) if len(argv) > 1 else os.getppid()
    cfg, log_level, log_format, secrets, share, cluster_label = pickle.load(sys.stdin.buffer)  # noqa: S301
    setup_logging(log_level, secrets, log_format)
    worker = Worker(cfg, out_dir, share=share, cluster_label=cluster_label)
    tune_gc()     # after start-up: what it built is frozen (gc_tuning.py)
    if len(argv) > 2:
        worker.wake_fd = int(argv[2])
        os.set_blocking(worker.wake_fd, False)

    def stop(*_) -> None:
        worker.stop()
        # a call stuck in a client library must not hold the exit: what matters is published
        timer = threading.Timer(SHUTDOWN_GRACE, lambda: os._exit(0))
        timer.daemon = True    # a quick stop exits at once
        timer.start()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    return worker.run(parent)


if __name__ == "__main__":
    sys.exit(main())
