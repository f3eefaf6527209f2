"""Scrape cadences learnt from the scrapes, and the poll start they give (no I/O)."""

import pytest

from txnwatch.exporter.poll.scrape_clock import (
    NOBODY,
    Cadence,
    ScrapeLog,
    ScrapeView,
    next_poll_start,
    plan_next_poll,
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
    assert log.view(1011.0).cadences == ()                               # two intervals: not yet
    last = feed(log, "10.0.0.1 Prometheus/3.16", 1015.0, 5.0, 1)
    [c] = log.view(last + 1).cadences
    assert c.period == pytest.approx(5.0) and c.last == last


def test_jitter_and_a_missed_scrape_keep_the_cadence():
    assert steady_period([5.01, 4.99, 5.0, 10.0, 5.02]) == pytest.approx(5.005, abs=0.01)
    assert steady_period([5.0, 9.0, 2.0, 30.0]) is None                 # a person's curl
    assert steady_period([5.0, 5.0]) is None


def test_a_cadence_most_recent_intervals_do_not_share_is_none():
    """Three or more intervals at the median are not enough: most of the recent ones must
    agree. A scraper that comes every 5 s half the time and at random otherwise (a script in a
    loop with waits of its own, a person's curl between) would otherwise steer the polls to a
    cadence it does not keep."""
    assert steady_period([5.0, 5.0, 5.0, 5.0, 1.0, 2.0, 9.0, 13.0]) is None        # 4 of 8 agree
    assert steady_period([5.0, 5.0, 5.0, 5.0, 5.0, 2.0, 9.0, 13.0]) == pytest.approx(5.0)   # 5 of 8 do
    assert steady_period([5.0, 5.0, 9.0]) is None          # a majority, but fewer than STEADY_AFTER


def test_an_interval_more_than_a_tenth_off_the_median_is_not_the_cadence():
    assert steady_period([5.0, 5.0, 5.0, 5.75]) == pytest.approx(5.0)     # 15 % off: left out
    assert steady_period([5.0, 5.0, 5.0, 5.4]) == pytest.approx(5.1)      # 8 % off: the same cadence


def test_an_ha_pair_is_two_scrapers_at_their_own_phases():
    log = ScrapeLog()
    feed(log, "10.0.0.1 Prometheus", 1000.0, 15.0, 5)
    feed(log, "10.0.0.2 Prometheus", 1007.0, 15.0, 5)
    cads = log.view(1070.0).cadences
    assert [c.last for c in cads] == [1060.0, 1067.0]


def test_a_scraper_that_stopped_is_forgotten():
    log = ScrapeLog()
    last = feed(log, "a", 1000.0, 5.0, 6)
    assert log.view(last + 14).cadences and not log.view(last + 16).cadences


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


def test_a_single_scrape_is_nobody_and_repeated_irregular_scrapes_are_settling():
    log = ScrapeLog()
    log.seen("10.0.0.9 curl/8", 1000.0)
    assert log.view(1001.0) == NOBODY                                  # a person's curl
    log.seen("10.0.0.9 curl/8", 1004.0)
    assert log.view(1005.0) == ScrapeView((), 1)                       # again: settling
    feed(log, "10.0.0.1 Prometheus", 1000.0, 5.0, 4)
    view = log.view(1016.0)
    assert view.settling == 1 and [c.period for c in view.cadences] == [pytest.approx(5.0)]
    assert log.view(1030.0).settling == 0                              # the curls stopped


def test_the_plan_follows_the_scrapers():
    steady = ScrapeView((Cadence(5.0, 1000.0),))
    # steady: done poll_margin(1.0) = 0.35 s before the scrape at 1005
    assert plan_next_poll(1001.0, steady, 999.0, 1.0, 2.0, 60.0) == pytest.approx(1005.0 - 1.35)
    # the serving process reads published data up to 0.1 s late: start that much earlier
    assert plan_next_poll(1001.0, steady, 999.0, 1.0, 2.0, 60.0, 0.1) == pytest.approx(1005.0 - 1.45)
    # the poll's cost comes first: not before last start + min period
    assert plan_next_poll(1001.0, steady, 1002.0, 1.0, 2.0, 60.0) == pytest.approx(1010.0 - 1.35)
    # settling scrapers: back to back, bounded by the cost
    assert plan_next_poll(1001.0, ScrapeView((), 1), 999.0, 1.0, 2.0, 60.0) == 1001.0
    assert plan_next_poll(1001.0, ScrapeView((), 1), 1000.5, 1.0, 2.0, 60.0) == 1002.5
    # nobody: the idle interval
    assert plan_next_poll(1001.0, NOBODY, 999.0, 1.0, 2.0, 60.0) == 1059.0


def test_polls_whose_duration_varies_start_earlier_by_the_spread():
    from txnwatch.exporter.poll.scrape_clock import duration_spread

    assert duration_spread([1.0, 1.0]) == 0.0                      # too few to say
    assert duration_spread([1.0, 1.1, 0.9, 1.0, 1.0]) == pytest.approx(0.0)
    # a busy host: polls of 1.5 s that now and then take 2.5 s
    durations = [1.5, 2.5, 1.4, 1.5, 2.4]
    assert duration_spread(durations) == pytest.approx(2.4 - 1.5)
    # one pause alone does not move every later poll earlier
    assert duration_spread([1.5, 1.4, 9.0, 1.5, 1.6]) == pytest.approx(0.1)
    steady = ScrapeView((Cadence(5.0, 1000.0),))
    spread = duration_spread(durations)
    due = plan_next_poll(1001.0, steady, 999.0, 1.5, 3.0, 60.0, 0.02, spread)
    assert due == pytest.approx(1005.0 - 1.5 - 0.1 - spread - 0.02)
    # each of those durations again: every one done before the scrape at 1005
    assert all(due + d < 1005.0 for d in durations)
    # on the median alone (the plan before) only the polls no slower than the median were
    no_spread = plan_next_poll(1001.0, steady, 999.0, 1.5, 3.0, 60.0, 0.02)
    assert sum(no_spread + d < 1005.0 for d in durations) == 3
    # a quarter of the duration stays the least margin
    assert poll_margin(2.0, 0.1) == pytest.approx(0.6)


def test_a_flood_of_user_agents_is_remembered_no_more_than_the_cap():
    from txnwatch.exporter.poll.scrape_clock import MAX_SCRAPERS

    log = ScrapeLog()
    feed(log, "10.0.0.1 Prometheus", 1000.0, 1.0, 4)
    for i in range(MAX_SCRAPERS * 3):
        log.seen(f"10.0.0.66 agent-{i}", 1003.0 + i * 0.001)
    log.seen("10.0.0.1 Prometheus", 1004.0)     # the steady scraper keeps its cadence
    assert len(log._scrapers) == MAX_SCRAPERS
    [c] = log.view(1004.5).cadences
    assert c.period == pytest.approx(1.0)


def test_a_poll_re_planned_at_its_due_moment_is_still_due():
    """The poll thread wakes at the planned start a little late and plans again: the poll
    stays due (it eats into its margin) instead of slipping one period, again and again."""
    c = Cadence(period=3.0, last=1000.0)
    due = next_poll_start(1001.0, [c], 0.5, 1001.0, 600.0, 999.0, 0.3)
    assert due == pytest.approx(1002.2)
    for late in (0.0, 0.001, 0.05, 0.29):
        assert next_poll_start(due + late, [c], 0.5, 1001.0, 600.0, 999.0, 0.3) == pytest.approx(due + late)
    # too late to be done before the scrape at 1003: the one after
    assert next_poll_start(1002.6, [c], 0.5, 1001.0, 600.0, 999.0, 0.3) == pytest.approx(1005.2)


def test_prometheus_says_it_scrapes_on_a_schedule_from_its_first_scrape():
    log = ScrapeLog()
    log.seen("10.0.0.1 Prometheus/3.16", 1000.0, scheduled=True)
    assert log.view(1000.1) == ScrapeView((), 1)       # settling: polls come at once
    log.seen("10.0.0.9 curl/8", 1000.2)
    assert log.view(1000.3) == ScrapeView((), 1)       # a curl is still nobody
