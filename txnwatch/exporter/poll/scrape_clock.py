"""When scrapers come, learnt from the scrapes themselves, and when a poll should start so
that it is done just before the next one (issue 29). Pure: the serving process feeds
`ScrapeLog.seen()` from its /metrics handler; a poller asks `next_poll_start()`.

A scraper is one remote address and user agent (the two Prometheus servers of an HA pair
are two scrapers, at their own phases). It counts once its last scrapes came at a steady
cadence: a person's occasional curl never steers the polls. Wall-clock seconds throughout,
since the times cross from the serving process to the worker processes.
"""

from __future__ import annotations

import math
import statistics
from collections import deque
from dataclasses import dataclass, field

# Intervals kept per scraper, and how many must agree before its cadence is trusted.
KEEP = 8
STEADY_AFTER = 3
# An interval within this share of the median is "the same cadence" (Prometheus's own
# jitter is milliseconds; a missed scrape doubles one interval, which the median ignores).
TOLERANCE = 0.1
# A scraper not seen for this many periods is gone.
GONE_AFTER_PERIODS = 3.0


@dataclass(frozen=True, slots=True)
class Cadence:
    period: float      # seconds between this scraper's scrapes
    last: float        # when it last scraped (wall clock)

    def next_after(self, t: float) -> float:
        """The first expected scrape strictly after `t`."""
        k = max(1, math.floor((t - self.last) / self.period) + 1)
        return self.last + k * self.period


@dataclass
class _Scraper:
    last: float
    intervals: deque = field(default_factory=lambda: deque(maxlen=KEEP))


class ScrapeLog:
    """The scrapes of /metrics, per scraper."""

    def __init__(self) -> None:
        self._scrapers: dict[str, _Scraper] = {}

    def seen(self, key: str, now: float) -> None:
        s = self._scrapers.get(key)
        if s is None:
            self._scrapers[key] = _Scraper(now)
            return
        if now > s.last:
            s.intervals.append(now - s.last)
            s.last = now

    def cadences(self, now: float) -> list[Cadence]:
        """The steady scrapers still scraping, the longest silent first; forgets the gone."""
        out = []
        for key, s in list(self._scrapers.items()):
            period = steady_period(list(s.intervals))
            horizon = (period or max(s.intervals, default=60.0)) * GONE_AFTER_PERIODS
            if now - s.last > max(horizon, 1.0):
                del self._scrapers[key]
                continue
            if period is not None:
                out.append(Cadence(period, s.last))
        return sorted(out, key=lambda c: c.last)


def steady_period(intervals: list[float]) -> float | None:
    """The cadence of these intervals, or None while fewer than STEADY_AFTER of the last
    ones agree with their median (a missed scrape, one long interval, does not break it)."""
    if len(intervals) < STEADY_AFTER:
        return None
    recent = intervals[-KEEP:]
    median = statistics.median(recent)
    if median <= 0:
        return None
    agree = [x for x in recent if abs(x - median) <= TOLERANCE * median]
    if len(agree) < STEADY_AFTER or len(agree) * 2 <= len(recent):
        return None
    return statistics.fmean(agree)


def next_poll_start(now: float, cadences: list[Cadence], duration: float, earliest: float,
                    idle_interval: float, last_start: float, margin: float) -> float:
    """When the next poll should start (wall clock, never before `earliest`, the end of the
    gap the poll's cost allows): done `margin` before the next expected scrape it can still
    serve, for whichever scraper comes first. No steady scraper: `idle_interval` after the
    last start."""
    earliest = max(now, earliest)
    if not cadences:
        return max(earliest, last_start + idle_interval)
    lead = duration + margin
    # each scraper's first scrape a poll starting at `earliest` can be done before
    return min(c.next_after(earliest + lead - 1e-9) - lead for c in cadences)


def poll_margin(duration: float) -> float:
    """How long before the expected scrape a poll should be done: its duration varies from
    one poll to the next, and a scrape comes a little early now and then."""
    return 0.1 + 0.25 * duration
