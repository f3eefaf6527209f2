"""When the next poll starts: back to back, bounded by a minimum interval and by cost.

A poll's duration is what it costs the brokers (its requests are answered serially by
them), so capping the share of wall time spent polling caps that cost: a cluster that
takes 2 s to poll at a duty cycle of 0.5 is polled every 4 s, not every 2 s, and a
small one every `min_interval`.
"""

from __future__ import annotations

import statistics
from collections import deque
from collections.abc import Sequence

from .scrape_clock import duration_spread


def poll_period(min_interval: float, duty_cycle: float, duration: float) -> float:
    """Seconds from one poll's start to the next's, after a poll that took `duration`."""
    return max(min_interval, duration / duty_cycle)


def wait_before_next_poll(min_interval: float, duty_cycle: float, duration: float) -> float:
    """Seconds to wait after a poll that took `duration` before starting the next."""
    return max(0.0, poll_period(min_interval, duty_cycle, duration) - duration)


class PollDurations:
    """Recent poll durations, kept apart for the polls that also refresh the cluster's configs
    (one in `describe_configs_every`, longer by DescribeConfigs of every broker and topic):
    planned on the plain polls' durations, each of those missed the scrape it was timed for.
    Each kind of poll is planned on its own kind's; the duty cycle on the plain ones.

    The first poll's duration is no sample of either kind: it also connects to every broker
    and reads the cluster cold (at 100,000 partitions 10 s, where a refreshing poll took 3 s
    and a plain one 1.4 s). It stands in only while nothing else is known; counted as the
    first refreshing poll, it had every refreshing poll start seconds early for the scrape
    after next, and miss the one it could have served."""

    def __init__(self, kept: int = 5, kept_refreshing: int = 3) -> None:
        self._plain: deque[float] = deque(maxlen=kept)
        self._refreshing: deque[float] = deque(maxlen=kept_refreshing)
        self._first: float | None = None

    def add(self, took: float, refreshing: bool) -> None:
        if self._first is None:
            self._first = took
            return
        (self._refreshing if refreshing else self._plain).append(took)

    def _of_kind(self, refreshing: bool) -> Sequence[float]:
        own = (self._refreshing if refreshing else self._plain) or self._plain or self._refreshing
        return own or ([] if self._first is None else [self._first])

    def expected(self, refreshing: bool) -> float | None:
        """How long a poll of this kind usually takes (None before any poll)."""
        own = self._of_kind(refreshing)
        return statistics.median(own) if own else None

    def plan(self, refreshing: bool) -> tuple[float, float, float]:
        """For the next poll (whether it refreshes the configs): its expected duration (the
        median of its kind; of the other while its kind has none yet; the first poll's while
        there is no other), that duration's spread (scrape_clock.duration_spread) and the
        duration the duty cycle reads. Only after a poll (add)."""
        own = self._of_kind(refreshing)
        plain = self._plain or own
        return statistics.median(own), duration_spread(own), statistics.median(plain)
