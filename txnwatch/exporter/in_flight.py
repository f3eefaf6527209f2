"""A poll that should be done by now, and a scrape's bounded wait for it.

Polls are timed to be served just before the scrape they are for (scrape_clock). Now and
then one runs several times its usual length (a broker busy with another client's
requests): the scrape it was timed for then found the data of the poll before, a whole
scrape period old. A scrape that comes while such an overdue poll still runs waits for its
data instead, for at most a share of the timeout the scraper sends: what a fetch-on-scrape
exporter does at every scrape, done here only for the poll that is late. A poll still
within its usual length, or one no scrape was timed for, holds no scrape.
"""

from __future__ import annotations

import math
import threading
import time
from dataclasses import dataclass

# A scrape waits for an overdue poll at most this share of the scraper's own timeout
# (Prometheus sends it as X-Prometheus-Scrape-Timeout-Seconds): the scrape stays well
# inside its timeout, and a scraper that sends none (a person's curl) never waits.
WAIT_SHARE = 0.25
TIMEOUT_HEADER = "X-Prometheus-Scrape-Timeout-Seconds"


def wait_budget(timeout_header: str | None) -> float:
    """Seconds a scrape may wait for overdue polls, from the timeout its scraper sent."""
    try:
        timeout = float(timeout_header or 0)
    except ValueError:
        return 0.0
    return timeout * WAIT_SHARE if math.isfinite(timeout) and timeout > 0 else 0.0


@dataclass(frozen=True, slots=True)
class Poll:
    started: float     # wall clock, when it started
    due_by: float      # wall clock, when a poll of its usual length is done


@dataclass(frozen=True, slots=True)
class WaitCounts:
    served: int = 0        # scrapes that waited and got the poll's data
    timed_out: int = 0     # scrapes that waited their budget and were served the data before
    seconds: float = 0.0   # time scrapes spent waiting, in all


class PollInFlight:
    """One cluster's running poll as the serving side knows it: set by the poller (in this
    process) or from a worker's status, read by the scrapes."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._poll: Poll | None = None
        self._counts = WaitCounts()

    def set(self, poll: Poll | None) -> None:
        """The poll now running (None: none runs, or its data is served)."""
        with self._cond:
            if poll != self._poll:
                self._poll = poll
                self._cond.notify_all()

    def current(self) -> Poll | None:
        return self._poll

    def wait_if_overdue(self, now: float, timeout: float) -> bool | None:
        """Wait up to `timeout` seconds for a poll that should have been done by `now`. None:
        no such poll; True: its data came; False: the wait ran out."""
        with self._cond:
            poll = self._poll
            if poll is None or now < poll.due_by or timeout <= 0:
                return None
            began = time.monotonic()
            done = self._cond.wait_for(lambda: self._poll is not poll, timeout)
            c = self._counts
            self._counts = WaitCounts(c.served + done, c.timed_out + (not done),
                                      c.seconds + time.monotonic() - began)
            return done

    def counts(self) -> WaitCounts:
        return self._counts
