"""The canary's counters and histograms, and their rendering: one writer (the probe's
threads, under the probe's lock) and immutable views for the scrape side."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from types import MappingProxyType

from ..metrics import COMMIT_BUCKETS, FamilyWriter, Histogram
from .rounds import TimedOut, Violation, Visible

_EMPTY: MappingProxyType = MappingProxyType({})


@dataclass(frozen=True)
class CanaryView:
    """What the canary has measured so far (never reset while the process lives)."""

    init_seconds: float | None = None
    commit: Histogram | None = None
    visibility: MappingProxyType = field(default_factory=lambda: _EMPTY)            # partition -> Histogram
    rounds: MappingProxyType = field(default_factory=lambda: _EMPTY)                # outcome -> count
    failures: MappingProxyType = field(default_factory=lambda: _EMPTY)              # (stage, error) -> count
    visibility_timeouts: MappingProxyType = field(default_factory=lambda: _EMPTY)   # partition -> count
    violations: int = 0
    last_success: float | None = None
    last_failure: tuple[str, str, str] | None = None          # (stage, error, message) of the last one
    last_failure_at: float | None = None                      # unix time of the last failure


@dataclass
class CanaryStats:
    init_seconds: float | None = None
    commit: Histogram = field(default_factory=lambda: Histogram(COMMIT_BUCKETS))
    visibility: dict[int, Histogram] = field(default_factory=dict)
    rounds: dict[str, int] = field(default_factory=dict)
    failures: dict[tuple[str, str], int] = field(default_factory=dict)
    visibility_timeouts: dict[int, int] = field(default_factory=dict)
    violations: int = 0
    last_success: float | None = None
    last_failure: tuple[str, str, str] | None = None
    last_failure_at: float | None = None
    version: int = 0                  # bumped by every change: views are reused while it stays

    def init(self, seconds: float) -> None:
        self.init_seconds = seconds
        self.version += 1

    def committed(self, seconds: float) -> None:
        self.commit.observe(seconds)
        self.version += 1

    def round_ended(self, outcome: str, now: float) -> None:
        self.rounds[outcome] = self.rounds.get(outcome, 0) + 1
        self.last_success = now
        self.version += 1

    def failed(self, stage: str, error: str, message: str = "", now: float | None = None) -> None:
        self.failures[(stage, error)] = self.failures.get((stage, error), 0) + 1
        self.last_failure = (stage, error, message)
        self.last_failure_at = time.time() if now is None else now
        self.version += 1

    def seen(self, event: Visible | Violation | TimedOut | None) -> None:
        if event is not None:
            self.version += 1
        if isinstance(event, Visible):
            self.visibility.setdefault(event.partition, Histogram(COMMIT_BUCKETS)).observe(event.latency)
        elif isinstance(event, Violation):
            self.violations += 1
        elif isinstance(event, TimedOut):
            self.not_visible(event.partition)
            self.failed("visibility_timeout", "timed_out",
                        f"round {event.round}: partition {event.partition} not visible in time")

    def restore(self, v: CanaryView) -> None:
        """Start from an earlier process's counts (its checkpoint); what was measured since
        this process started is kept on top."""
        if v.commit is not None:
            self.commit.add(v.commit)
        for p, h in v.visibility.items():
            self.visibility.setdefault(p, Histogram(COMMIT_BUCKETS)).add(h)
        for table, earlier in ((self.rounds, v.rounds), (self.failures, v.failures),
                               (self.visibility_timeouts, v.visibility_timeouts)):
            for k, n in earlier.items():
                table[k] = table.get(k, 0) + n
        self.violations += v.violations
        self.init_seconds = self.init_seconds if self.init_seconds is not None else v.init_seconds
        self.last_success = max(filter(None, (self.last_success, v.last_success)), default=None)
        if self.last_failure is None:
            self.last_failure, self.last_failure_at = v.last_failure, v.last_failure_at
        self.version += 1

    def not_visible(self, partition: int) -> None:
        """A partition whose record of a round was not visible in time (or not even written)."""
        self.visibility_timeouts[partition] = self.visibility_timeouts.get(partition, 0) + 1
        self.version += 1

    def view(self) -> CanaryView:
        return CanaryView(self.init_seconds, self.commit.copy(),
                          MappingProxyType({p: h.copy() for p, h in self.visibility.items()}),
                          MappingProxyType(dict(self.rounds)), MappingProxyType(dict(self.failures)),
                          MappingProxyType(dict(self.visibility_timeouts)), self.violations,
                          self.last_success, self.last_failure, self.last_failure_at)


def render_canary(w: FamilyWriter, cluster: str, v: CanaryView) -> None:
    c = {"cluster": cluster}
    if v.init_seconds is not None:
        w.add("txnwatch_canary_init_seconds", c, v.init_seconds)
    if v.commit is not None:
        w.histogram("txnwatch_canary_commit_seconds", c, v.commit.counts, v.commit.sum)
    for p, h in sorted(v.visibility.items()):
        w.histogram("txnwatch_canary_visibility_seconds", {**c, "partition": p}, h.counts, h.sum)
    for outcome in ("committed", "aborted"):
        w.add("txnwatch_canary_rounds", {**c, "outcome": outcome}, v.rounds.get(outcome, 0))
    for (stage, error), n in sorted(v.failures.items()):
        w.add("txnwatch_canary_failures", {**c, "stage": stage, "error": error}, n)
    for p, n in sorted(v.visibility_timeouts.items()):
        w.add("txnwatch_canary_visibility_timeouts", {**c, "partition": p}, n)
    w.add("txnwatch_canary_visibility_violations", c, v.violations)
    if v.last_success is not None:
        w.add("txnwatch_canary_last_success_timestamp_seconds", c, v.last_success)
