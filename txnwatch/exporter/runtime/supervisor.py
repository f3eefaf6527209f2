"""The serving side of a cluster's worker process (see worker.py).

`WorkerRuntime` starts the worker, restarts it with backoff when it exits, kills and
restarts it when it stops publishing (stalled), and hands what it publishes to the
collector and the page. While the worker is down or stalled its last published data
keeps being served, its age in `txnwatch_data_age_seconds`, and `txnwatch_up` is 0 with
the reason on the page. Counters never go backwards across a restart: the worker resumes
from its checkpoint (tap and epoch-bump counters), and the health counters of earlier
workers are added here.
"""

from __future__ import annotations

import logging
import math
import os
import pickle
import select
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from types import MappingProxyType

from ...metrics import DEFAULT_CLUSTER_LABEL, FamilyWriter
from ..health import SourceHealth, first_attempts_done, render_health, render_scrape_waits
from ..in_flight import Poll, PollInFlight
from ..poll.scrape_clock import NOBODY, ScrapeView
from .published import ClusterDigest, PublishedFile, WorkerStatus, write_atomic_text

log = logging.getLogger(__name__)

BACKOFF_START, BACKOFF_MAX = 1.0, 30.0
HEALTHY_RESET_SECONDS = 60.0     # a worker up this long starts the next backoff from the start
# a look at the worker without news from it (its exit, a stall, the scrapers' view for its
# schedule); its published data comes at once, by the pipe it writes to after each publish
SUPERVISE_INTERVAL = 0.25
# publishes whose lag (worker status to data served) the poll schedule allows for, the slowest
PUBLISH_LAGS_KEPT = 8
STARTUP_GRACE = 30.0             # seconds a new worker may take to publish its first status


class WorkerRuntime:
    """One cluster's worker process, as the serving process sees it."""

    def __init__(self, cfg, workdir: Callable[[], Path], collector: Callable[[], object],
                 spark_topics: Callable[[], frozenset[str]], *, log_level: str = "INFO", log_format: str = "text",
                 secrets: tuple[str, ...] = (), stall_seconds: float | None = None,
                 kill_stalled_after: float | None = None, share=None,
                 cluster_label: str = DEFAULT_CLUSTER_LABEL, scrapes: Callable[[], ScrapeView] = lambda: NOBODY) -> None:
        self._publish_lags: deque[float] = deque(maxlen=PUBLISH_LAGS_KEPT)
        self.in_flight = PollInFlight()              # the worker's poll, while its data is not served
        self._served_taken_at = float("-inf")        # when the poll data served last was taken
        self._wake: int | None = None    # the read end of the worker's wake-up pipe
        self.cfg = cfg
        self.cluster_label = cluster_label
        self.share = share
        self._workdir = workdir     # made when the worker starts (nothing on disk before)
        self.dir: Path | None = None
        self._collector = collector
        self._spark_topics = spark_topics
        self.log_level, self.log_format, self.secrets = log_level, log_format, tuple(secrets)
        # A worker publishes its status every 0.5 s; a poll never blocks that (it runs on its
        # own thread), so silence means the process is stuck (or stopped).
        self.stall_seconds = stall_seconds if stall_seconds is not None else 5.0
        self.kill_stalled_after = (kill_stalled_after if kill_stalled_after is not None
                                   else max(30.0, 4 * cfg.poll_timeout_seconds))
        self.proc: subprocess.Popen | None = None
        self.restarts = 0
        self._backoff = BACKOFF_START
        self._restart_at = 0.0
        self._started_at = 0.0
        self._problem: str | None = "worker starting"
        self._problem_cause: str | None = None
        self._events: dict[str, int] = {}        # worker_exit / worker_stalled, counted here
        self._base_errors: dict[tuple[str, str], int] = {}
        self._base_attempts: dict[str, int] = {}
        self._status_file = self._digest_file = None
        self._chunk_files: dict[str, PublishedFile] = {}
        self._pending: dict[str, tuple[float, dict]] = {}
        self._status: WorkerStatus | None = None
        self._status_seen = 0.0                   # monotonic time the status last changed
        self._spark_written: frozenset[str] | None = None
        self._scrapes = scrapes
        self._scrapes_written: ScrapeView | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    # ------------------------------------------------------------------ process
    def _spawn(self) -> None:
        # a pipe the worker writes a byte to after each status: the supervisor looks at once
        wake_r, wake_w = os.pipe()
        os.set_blocking(wake_r, False)
        cmd = [sys.executable, "-m", "txnwatch.exporter.runtime.worker", str(self.dir), str(os.getpid()), str(wake_w)]
        try:
            proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, pass_fds=(wake_w,))
        except BaseException:
            os.close(wake_r)
            raise
        finally:
            os.close(wake_w)
        self._close_wake()
        self._wake = wake_r
        try:
            # the config may carry SASL passwords: a pipe, never a file
            proc.stdin.write(pickle.dumps((self.cfg, self.log_level, self.log_format, self.secrets, self.share,
                                             self.cluster_label)))
            proc.stdin.close()
        except OSError:
            pass   # it died at once: the supervisor sees the exit
        self.proc = proc
        self._started_at = time.monotonic()
        self._status_seen = self._started_at
        log.info("cluster %s: worker process %d started", self.cfg.name, proc.pid)

    def start(self) -> None:
        self.dir = Path(self._workdir())
        self.dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        self._status_file = PublishedFile(self.dir / "status")
        self._digest_file = PublishedFile(self.dir / "digest")
        self._chunk_files = {name: PublishedFile(self.dir / f"{name}.chunks") for name in ("poller", "tap", "canary")}
        self._spawn()
        self._thread = threading.Thread(target=self._supervise, name=f"worker-{self.cfg.name}", daemon=True)
        self._thread.start()

    def signal_stop(self) -> None:
        self._stop.set()
        p = self.proc
        if p is not None and p.poll() is None:
            p.send_signal(signal.SIGTERM)

    def stop(self) -> None:
        self.signal_stop()
        if self._thread is not None:
            self._thread.join(5)
        p = self.proc
        if p is not None:
            try:
                p.wait(10)    # the worker exits within its SHUTDOWN_GRACE of SIGTERM
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(10)

    # ------------------------------------------------------------------ supervision
    def _supervise(self) -> None:
        while not self._stop.is_set():
            self._wait_for_news(SUPERVISE_INTERVAL)
            if self._stop.is_set():
                break
            try:
                self._step()
            except Exception:  # noqa: BLE001 - the supervisor never dies
                log.exception("cluster %s: supervising the worker failed", self.cfg.name)
        self._close_wake()

    def _wait_for_news(self, timeout: float) -> None:
        """Until the worker says it published (its pipe), or `timeout` (a look regardless)."""
        fd = self._wake
        if fd is None:
            self._stop.wait(timeout)
            return
        try:
            if select.select([fd], [], [], timeout)[0]:
                os.read(fd, 4096)          # drain: one look covers every status so far
        except (OSError, ValueError):
            self._stop.wait(timeout)       # closed under us (a restart): the plain wait

    def _close_wake(self) -> None:
        fd, self._wake = self._wake, None
        if fd is not None:
            try:
                os.close(fd)
            except OSError:
                pass

    def _step(self) -> None:
        now = time.monotonic()
        p = self.proc
        if p is not None and p.poll() is not None:
            code = p.returncode
            self.proc = None
            self.in_flight.set(None)          # its poll ended with it: no scrape waits for it
            self._count("worker_exit")
            up_for = now - self._started_at
            if up_for >= HEALTHY_RESET_SECONDS:
                self._backoff = BACKOFF_START
            self._restart_at = now + self._backoff
            self._set_problem("worker_exit", f"worker process exited with code {code}; restarting in "
                                             f"{self._backoff:.0f}s (serving its last data)")
            log.warning("cluster %s: worker process exited with code %s after %.0fs; restarting in %.0fs",
                        self.cfg.name, code, up_for, self._backoff)
            self._backoff = min(self._backoff * 2, BACKOFF_MAX)
        if self.proc is None:
            if now >= self._restart_at and not self._stop.is_set():
                self.restarts += 1
                self._spawn()
            return
        self._read()
        silent = now - self._status_seen
        # A worker that has not published yet is starting (imports, first connections: slow
        # on a loaded machine), not stalled: it gets the longer grace.
        started = self._status is not None and self._status.pid == self.proc.pid
        if silent >= (self.stall_seconds if started else max(self.stall_seconds, STARTUP_GRACE)):
            if self._problem_cause != "worker_stalled":
                self._count("worker_stalled")
                log.warning("cluster %s: worker process %d published nothing for %.0fs: stalled",
                            self.cfg.name, self.proc.pid, silent)
            self._set_problem("worker_stalled", f"worker process stalled: nothing published for {silent:.0f}s "
                                                "(serving its last data)")
            if silent >= self.kill_stalled_after:
                log.warning("cluster %s: killing the stalled worker %d", self.cfg.name, self.proc.pid)
                self.proc.kill()
        self._write_spark_topics()
        self._write_scrapes()

    def _read(self) -> None:
        # The data first, then the status that covers it: a scrape never sees a status (up,
        # readiness) newer than the series it is served with.
        new_status = self._status_file.load()
        st_next: WorkerStatus | None = self._status_file.value
        collector = self._collector()
        for name, f in self._chunk_files.items():
            if f.load():
                self._pending[name] = f.value
            pending = self._pending.get(name)
            if pending is not None and st_next is not None and \
                    st_next.data_taken_at.get(name, float("-inf")) >= pending[0]:
                collector.publish_chunks(f"{name}:{self.cfg.name}", pending[1])
                del self._pending[name]
                if name == "poller":    # from the worker's status to scrapes serving its data
                    self._served_taken_at = pending[0]
                    self._publish_lags.append(max(0.0, time.time() - st_next.published_at))
                    log.debug("cluster %s: serving the poll data taken at %.3f, %.3f s after its status",
                              self.cfg.name, pending[0], self._publish_lags[-1])
        self._digest_file.load()
        if new_status:
            st: WorkerStatus = st_next
            with self._lock:
                prev = self._status
                if prev is not None and prev.pid != st.pid:   # a new worker: keep the old counts
                    for h in prev.sources:
                        for cause, n in h.errors.items():
                            self._base_errors[(h.source, cause)] = self._base_errors.get((h.source, cause), 0) + n
                        self._base_attempts[h.source] = self._base_attempts.get(h.source, 0) + h.attempts
                self._status = st
                self._status_seen = time.monotonic()
                if self.proc is not None and st.pid == self.proc.pid:
                    self._problem = self._problem_cause = None
        self.in_flight.set(self._unserved_poll())

    def _unserved_poll(self) -> Poll | None:
        """The poll the worker last said it runs, unless its data is served already."""
        st = self._status
        poll = st.poll if st is not None and self.proc is not None and st.pid == self.proc.pid else None
        return poll if poll is not None and self._served_taken_at < poll.started else None


    def _write_spark_topics(self) -> None:
        topics = self._spark_topics()
        if topics == self._spark_written:
            return

        write_atomic_text(self.dir / "spark-topics", sorted(topics))
        self._spark_written = topics

    def scrapes_changed(self) -> None:
        pass    # the supervisor's next step (every SUPERVISE_INTERVAL) writes the new view

    def _write_scrapes(self) -> None:
        """The scrapers as this process sees them, for the worker's poll schedule: when they
        changed (a scrape came, a scraper settled or went away)."""
        if self.cfg.poll_schedule != "scrapes":
            return
        view = self._scrapes()
        # the slowest of the last publishes, in steps of 10 ms (a new file only when it moves)
        lag = math.ceil(max(self._publish_lags) * 100) / 100 if self._publish_lags else None
        if (view, lag) == self._scrapes_written:
            return
        write_atomic_text(self.dir / "scrapes", {"cadences": [[c.period, c.last] for c in view.cadences],
                                                 "settling": view.settling, "publish_lag": lag})
        self._scrapes_written = (view, lag)

    def _count(self, cause: str) -> None:
        with self._lock:
            self._events[cause] = self._events.get(cause, 0) + 1

    def _set_problem(self, cause: str, message: str) -> None:
        with self._lock:
            self._problem_cause, self._problem = cause, message

    # ------------------------------------------------------------------ views
    def sources(self) -> list[SourceHealth]:
        with self._lock:
            st, problem, events, base = self._status, self._problem, dict(self._events), dict(self._base_errors)
            base_attempts = dict(self._base_attempts)
        if st is None:
            names = ["poller"] + (["tap"] if self.cfg.transaction_log_tap else [])
            views = [SourceHealth(n) for n in names]
        else:
            views = list(st.sources)
        out = []
        for h in views:
            errors = dict(h.errors)
            for (src, cause), n in base.items():
                if src == h.source:
                    errors[cause] = errors.get(cause, 0) + n
            for cause, n in events.items():
                errors[cause] = errors.get(cause, 0) + n
            if problem is not None:
                h = replace(h, up=False, last_error=problem)
            out.append(replace(h, errors=MappingProxyType(errors),
                               attempts=h.attempts + base_attempts.get(h.source, 0)))
        return out

    def readiness(self) -> tuple[bool, ...]:
        with self._lock:
            st, problem = self._status, self._problem
        if st is None or problem is not None:
            return (False,)
        return tuple(st.readiness)

    def ready(self) -> bool:
        """The worker runs (not exited, not stalled) and has published its sources' first
        attempts (first_attempts_done)."""
        with self._lock:
            st, problem = self._status, self._problem
        return st is not None and problem is None and first_attempts_done(st.sources)

    def render_live(self, w: FamilyWriter) -> None:
        now = time.time()
        for h in self.sources():
            render_health(w, self.cfg.name, h)
        st = self._status
        if st is not None:
            for source, taken in st.data_taken_at.items():
                w.add("txnwatch_data_age_seconds", {"cluster": self.cfg.name, "source": source},
                      max(0.0, now - taken))
            for (cluster, metric, reason), n in st.dropped.items():
                w.add("txnwatch_series_dropped", {"cluster": cluster, "metric": metric, "reason": reason}, n)
        w.add("txnwatch_worker_restarts", {"cluster": self.cfg.name}, self.restarts)
        render_scrape_waits(w, self.cfg.name, self.in_flight.counts())

    def digest(self) -> ClusterDigest:
        d = self._digest_file.value if self._digest_file is not None else None
        return d if d is not None else ClusterDigest(self.cfg.name)

    def spark_view(self):
        return self.digest().spark_view
