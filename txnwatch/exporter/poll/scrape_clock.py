"""When scrapers come, learnt from the scrapes themselves, and when a poll should start so
that it is done just before the next one. Pure: the serving process feeds
`ScrapeLog.seen()` from its /metrics handler; a poller asks `next_poll_start()`.

A scraper is one remote address and user agent (the two Prometheus servers of an HA pair
are two scrapers, at their own phases). It counts once its last scrapes came at a steady
cadence: a person's occasional curl never steers the polls. Wall-clock seconds throughout,
since the times cross from the serving process to the worker processes.
"""

from __future__ import annotations

import math
import statistics
import threading
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field

# Intervals kept per scraper, and how many must agree before its cadence is trusted.
KEEP = 8
STEADY_AFTER = 3
# An interval within this share of the median is "the same cadence" (Prometheus's own
# jitter is milliseconds; a missed scrape doubles one interval, which the median ignores).
TOLERANCE = 0.1
# A scraper not seen for this many periods is gone.
GONE_AFTER_PERIODS = 3.0
# Scrapers remembered at most: a client that sends a new user agent with every request
# costs no more memory than this.
MAX_SCRAPERS = 64


@dataclass(frozen=True, slots=True)
class Cadence:
    period: float      # seconds between this scraper's scrapes
    last: float        # when it last scraped (wall clock)

    def next_after(self, t: float) -> float:
        """The first expected scrape strictly after `t`."""
        k = max(1, math.floor((t - self.last) / self.period) + 1)
        return self.last + k * self.period


@dataclass(frozen=True, slots=True)
class ScrapeView:
    """What a poll schedule knows of the scrapers at one moment."""
    cadences: tuple[Cadence, ...] = ()   # the steady ones
    settling: int = 0                    # scraping again and again, at no steady cadence (yet)


NOBODY = ScrapeView()


@dataclass
class _Scraper:
    last: float
    intervals: deque = field(default_factory=lambda: deque(maxlen=KEEP))
    scheduled: bool = False       # says it scrapes on a schedule (Prometheus's timeout header)


class ScrapeLog:
    """The scrapes of /metrics, per scraper. Fed by the HTTP server's threads, read by the
    poll schedule: one lock around a few small dicts."""

    def __init__(self) -> None:
        self._scrapers: dict[str, _Scraper] = {}
        self._lock = threading.Lock()

    def seen(self, key: str, now: float, scheduled: bool = False) -> None:
        """A scrape by `key` at `now`. `scheduled`: the request says it comes on a schedule
        (Prometheus sends X-Prometheus-Scrape-Timeout-Seconds), so even its first scrape
        counts as a scraper settling: the next poll comes at once, not at the idle interval."""
        with self._lock:
            s = self._scrapers.get(key)
            if s is None:
                if len(self._scrapers) >= MAX_SCRAPERS:
                    self._forget_one()
                self._scrapers[key] = _Scraper(now, scheduled=scheduled)
                return
            if now > s.last:
                s.intervals.append(now - s.last)
                s.last = now

    def _forget_one(self) -> None:
        """The least recently seen of those that scraped once (else of all): a flood of
        one-off requests never pushes a steady scraper out."""
        once = [k for k, s in self._scrapers.items() if not s.intervals and not s.scheduled] or list(self._scrapers)
        del self._scrapers[min(once, key=lambda k: self._scrapers[k].last)]

    def view(self, now: float) -> ScrapeView:
        """The steady scrapers still scraping (the longest silent first) and how many others
        scrape repeatedly; forgets the gone. A single scrape (a person's curl) is neither."""
        cadences, settling = [], 0
        with self._lock:
            for key, s in list(self._scrapers.items()):
                period = steady_period(list(s.intervals))
                horizon = (period or max(s.intervals, default=60.0)) * GONE_AFTER_PERIODS
                if now - s.last > max(horizon, 1.0):
                    del self._scrapers[key]
                elif period is not None:
                    cadences.append(Cadence(period, s.last))
                elif s.intervals or s.scheduled:
                    settling += 1
        return ScrapeView(tuple(sorted(cadences, key=lambda c: c.last)), settling)


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
    # Each scraper's first scrape that a poll starting at `earliest` is still done before;
    # started `margin` ahead of that, or at once when less is left (re-planned at its due
    # moment, the same poll stays due: it does not slip to the scrape after).
    return min(max(earliest, c.next_after(earliest + duration) - duration - margin) for c in cadences)


def poll_margin(duration: float, spread: float = 0.0) -> float:
    """How long before the expected scrape a poll should be done: its duration varies from
    one poll to the next (`spread`: how much longer than `duration` the slower recent polls
    took), and a scrape comes a little early now and then."""
    return 0.1 + max(0.25 * duration, spread)


def duration_spread(durations: Sequence[float]) -> float:
    """How much longer than their median the slower of the recent polls took: the
    second-slowest against the median. A poll on a busy host or cluster runs long now and
    then; planned on the median alone, each such poll missed the scrape it was timed for.
    The second-slowest, not the slowest: one pause does not move every later poll earlier."""
    if len(durations) < 3:
        return 0.0
    xs = sorted(durations)
    return max(0.0, xs[-2] - statistics.median(xs))


def plan_next_poll(now: float, view: ScrapeView, last_start: float, duration: float, min_period: float,
                   idle_interval: float, publish_delay: float = 0.0, spread: float = 0.0) -> float:
    """When the next poll starts (wall clock), after one that started at `last_start` and took
    `duration` (to published data). `min_period` is the least time between starts the poll's
    cost allows (schedule.poll_period). Scrapers still settling (new, or irregular) get the
    polls back to back, as without this clock; steady ones get each poll done just before
    their next scrape; nobody scraping, one poll per `idle_interval`. `publish_delay`: how
    long published data takes to reach the serving process; `spread`: duration_spread() of
    the recent polls."""
    earliest = last_start + min_period
    if view.settling:
        return max(now, earliest)
    return next_poll_start(now, list(view.cadences), duration, earliest, idle_interval, last_start,
                           poll_margin(duration, spread) + publish_delay)
