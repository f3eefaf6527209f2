"""Scrape cadences learnt from the scrapes, and the poll start they give (no I/O)."""

import pytest

from txnwatch.exporter.poll.scrape_clock import (
    Cadence,
    ScrapeLog,
    next_poll_start,
    poll_margin,
    steady_period,
)


def feed(log: ScrapeLog, key: str, start: float, period: float, n: int, jitter=()) -> float:
    t = start
    for i in range(n):
        log.seen(key, t + (jitter[i % len(jitter)] if jitter else 0.0))
        t += period
    return t - period


def test_a_steady_scraper_is_learnt_after_three_intervals():
    log = ScrapeLog()
    feed(log, "10.0.0.1 Prometheus/3.16", 1000.0, 5.0, 3)
    assert log.cadences(1011.0) == []                               # two intervals: not yet
    last = feed(log, "10.0.0.1 Prometheus/3.16", 1015.0, 5.0, 1)
    [c] = log.cadences(last + 1)
    assert c.period == pytest.approx(5.0) and c.last == last


def test_jitter_and_a_missed_scrape_keep_the_cadence():
    assert steady_period([5.01, 4.99, 5.0, 10.0, 5.02]) == pytest.approx(5.005, abs=0.01)
    assert steady_period([5.0, 9.0, 2.0, 30.0]) is None                 # a person's curl
    assert steady_period([5.0, 5.0]) is None


def test_an_ha_pair_is_two_scrapers_at_their_own_phases():
    log = ScrapeLog()
    feed(log, "10.0.0.1 Prometheus", 1000.0, 15.0, 5)
    feed(log, "10.0.0.2 Prometheus", 1007.0, 15.0, 5)
    cads = log.cadences(1070.0)
    assert [c.last for c in cads] == [1060.0, 1067.0]


def test_a_scraper_that_stopped_is_forgotten():
    log = ScrapeLog()
    last = feed(log, "a", 1000.0, 5.0, 6)
    assert log.cadences(last + 14) and not log.cadences(last + 16)


def test_the_poll_is_done_just_before_the_next_scrape():
    c = Cadence(period=5.0, last=1000.0)
    # a 1 s poll with 0.35 s margin: starts at 1003.65 for the scrape at 1005
    assert next_poll_start(1001.0, [c], 1.0, 1001.0, 60.0, 999.0, poll_margin(1.0)) == pytest.approx(1003.65)
    # too late for 1005 (it cannot start before 1004.5): the scrape at 1010
    assert next_poll_start(1001.0, [c], 1.0, 1004.5, 60.0, 999.0, 0.35) == pytest.approx(1008.65)


def test_two_scrapers_each_get_their_poll():
    a, b = Cadence(15.0, 1000.0), Cadence(15.0, 992.0)        # next scrapes: 1015 and 1007
    first = next_poll_start(1001.0, [a, b], 1.0, 1001.0, 60.0, 999.0, 0.5)
    assert first == pytest.approx(1007.0 - 1.5)
    second = next_poll_start(1007.0, [a, b], 1.0, first + 1.0, 60.0, first, 0.5)
    assert second == pytest.approx(1015.0 - 1.5)


def test_nobody_scraping_polls_on_the_idle_interval():
    assert next_poll_start(1010.0, [], 1.0, 1001.0, 60.0, 1000.0, 0.5) == 1060.0
    assert next_poll_start(1100.0, [], 1.0, 1001.0, 60.0, 1000.0, 0.5) == 1100.0
