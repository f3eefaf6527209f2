"""A scrape's wait for a poll that runs late (no I/O: threads and a condition)."""

import threading

import pytest

from txnwatch.exporter.in_flight import Poll, PollInFlight, WaitCounts, wait_budget
from txnwatch.exporter.poll.schedule import PollDurations


@pytest.mark.parametrize(("header", "budget"), [
    ("10", 2.5), ("4.5", 1.125),
    (None, 0.0), ("", 0.0),              # no timeout sent (a person's curl): no wait
    ("soon", 0.0), ("-3", 0.0), ("nan", 0.0), ("inf", 0.0),
])
def test_the_wait_is_a_quarter_of_the_timeout_the_scraper_sends(header, budget):
    assert wait_budget(header) == pytest.approx(budget)


def test_a_poll_within_its_usual_length_holds_no_scrape():
    flight = PollInFlight()
    flight.set(Poll(started=100.0, due_by=100.2))
    assert flight.wait_if_overdue(now=100.1, timeout=5.0) is None
    assert flight.counts() == WaitCounts()


def test_no_poll_running_or_no_budget_holds_no_scrape():
    flight = PollInFlight()
    assert flight.wait_if_overdue(now=100.0, timeout=5.0) is None
    flight.set(Poll(100.0, 100.2))
    assert flight.wait_if_overdue(now=101.0, timeout=0.0) is None


class SaysWhenWaiting(threading.Condition):
    """A condition that says when a thread waits on it (its lock then released)."""

    def __init__(self) -> None:
        super().__init__()
        self.waiting = threading.Event()

    def wait(self, timeout=None):
        self.waiting.set()
        return super().wait(timeout)


def scrape_in_a_thread(flight: PollInFlight, now: float) -> tuple[threading.Thread, list]:
    """A scrape at `now` that may wait (up to 30 s), started and waiting; what it returns goes
    in the list."""
    flight._cond = cond = SaysWhenWaiting()
    got: list = []
    t = threading.Thread(target=lambda: got.append(flight.wait_if_overdue(now=now, timeout=30.0)))
    t.start()
    cond.waiting.wait(30)
    return t, got


def test_a_scrape_waits_for_an_overdue_poll_until_its_data_is_served():
    flight = PollInFlight()
    flight.set(Poll(100.0, 100.2))
    t, got = scrape_in_a_thread(flight, 100.5)
    flight.set(None)                     # its data is served
    t.join(30)
    assert got == [True]
    assert flight.counts().served == 1 and flight.counts().timed_out == 0


def test_the_next_poll_starting_also_ends_the_wait():
    """A worker's status can name the next poll before the serving side saw one without any."""
    flight = PollInFlight()
    flight.set(Poll(100.0, 100.2))
    t, got = scrape_in_a_thread(flight, 100.5)
    flight.set(Poll(105.0, 105.2))
    t.join(30)
    assert got == [True]


def test_the_same_poll_said_again_keeps_the_scrape_waiting_and_a_wait_ends_on_time():
    flight = PollInFlight()
    flight.set(Poll(100.0, 100.2))
    flight.set(Poll(100.0, 100.2))       # the next status of the same poll: no news
    assert flight.wait_if_overdue(now=100.5, timeout=0.05) is False
    c = flight.counts()
    assert (c.served, c.timed_out) == (0, 1) and c.seconds >= 0.05


def test_a_poll_of_a_kind_never_seen_expects_the_other_kinds_length():
    d = PollDurations(kept=5, kept_refreshing=3)
    assert d.expected(False) is None and d.expected(True) is None   # the first poll holds no scrape
    d.add(4.0, refreshing=True)                                     # the first poll: cold
    assert d.expected(False) == d.expected(True) == pytest.approx(4.0)
    for took in (0.2, 0.3, 0.25):
        d.add(took, refreshing=False)
    assert d.expected(False) == pytest.approx(0.25)
    assert d.expected(True) == pytest.approx(0.25)
    d.add(1.0, refreshing=True)
    assert d.expected(True) == pytest.approx(1.0) and d.expected(False) == pytest.approx(0.25)
