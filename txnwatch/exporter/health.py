"""Per-source health bookkeeping: every source (poller, tap, ingest) reports its own."""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from ..metrics import FamilyWriter
from .in_flight import WaitCounts


@dataclass(frozen=True)
class SourceHealth:
    """An immutable view of one source's health, rendered as txnwatch_* self-metrics."""

    source: str
    up: bool = False
    last_success: float | None = None      # unix time of the last successful poll/apply
    last_attempt: float | None = None
    last_duration: float | None = None     # seconds the last poll took
    last_error: str | None = None          # one line, never with credentials
    last_error_at: float | None = None
    errors: Mapping[str, int] = field(default_factory=dict)  # cause -> count (monotonic)
    attempts: int = 0                      # polls (or attempts) made, successful or not (monotonic)


def first_attempts_done(sources) -> bool:
    """Ready (/readyz) once every source has finished its first attempt (a poll, the tap's
    first metadata or fetch), whether the cluster answered or not: from then on /metrics
    says what txnwatch knows, txnwatch_up included. Kafka's health is txnwatch_up's and the
    page's to tell, not the orchestrator's: a rollout (helm --wait, Argo) must complete
    during a Kafka outage, when a fix is deployed."""
    return all(h.last_attempt is not None for h in sources)


class HealthTracker:
    """Thread-safe recorder a source updates; `view()` returns an immutable SourceHealth."""

    def __init__(self, source: str) -> None:
        self._source = source
        self._lock = threading.Lock()
        self._up = False
        self._last_success: float | None = None
        self._last_attempt: float | None = None
        self._last_duration: float | None = None
        self._last_error: str | None = None
        self._last_error_at: float | None = None
        self._errors: dict[str, int] = {}
        self._attempts = 0

    def success(self, duration: float | None = None, now: float | None = None) -> None:
        now = time.time() if now is None else now
        with self._lock:
            self._up = True
            self._last_success = self._last_attempt = now
            self._last_duration = duration
            self._attempts += 1

    def failure(self, cause: str, message: str, duration: float | None = None,
                now: float | None = None) -> None:
        now = time.time() if now is None else now
        with self._lock:
            self._up = False
            self._last_attempt = now
            self._last_duration = duration
            self._last_error = message
            self._last_error_at = now
            self._errors[cause] = self._errors.get(cause, 0) + 1
            self._attempts += 1

    def count_error(self, cause: str) -> None:
        """Count an error that does not make the source down (e.g. a skipped record)."""
        with self._lock:
            self._errors[cause] = self._errors.get(cause, 0) + 1

    def view(self) -> SourceHealth:
        with self._lock:
            return SourceHealth(self._source, self._up, self._last_success, self._last_attempt,
                                self._last_duration, self._last_error, self._last_error_at,
                                MappingProxyType(dict(self._errors)), self._attempts)


def render_health(w: FamilyWriter, cluster: str, health: SourceHealth) -> None:
    lbl = {"cluster": cluster, "source": health.source}
    w.add("txnwatch_up", lbl, 1 if health.up else 0)
    w.add("txnwatch_poll_duration_seconds", lbl, health.last_duration)
    w.add("txnwatch_last_success_timestamp_seconds", lbl, health.last_success)
    for cause, n in health.errors.items():
        w.add("txnwatch_poll_errors", {**lbl, "cause": cause}, n)
    if health.source == "poller":    # the tap and the canary count their own work (records, rounds)
        w.add("txnwatch_polls", lbl, health.attempts)


def render_scrape_waits(w: FamilyWriter, cluster: str, counts: WaitCounts) -> None:
    """How often scrapes waited for a poll that ran late (in_flight.py), and how long."""
    w.add("txnwatch_scrape_waits", {"cluster": cluster, "outcome": "served"}, counts.served)
    w.add("txnwatch_scrape_waits", {"cluster": cluster, "outcome": "timed_out"}, counts.timed_out)
    w.add("txnwatch_scrape_wait_seconds", {"cluster": cluster}, counts.seconds)
