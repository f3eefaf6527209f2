"""The poll schedule: back to back, bounded by the minimum interval and the duty cycle."""

import pytest

from txnwatch.exporter.poll.schedule import poll_period, wait_before_next_poll


@pytest.mark.parametrize(("min_interval", "duty", "duration", "period"), [
    (1.0, 0.5, 0.1, 1.0),     # a small cluster: every min_interval
    (1.0, 0.5, 0.5, 1.0),     # exactly at the duty cycle
    (1.0, 0.5, 2.0, 4.0),     # a 2 s poll: half the time polling, not all of it
    (15.0, 0.5, 2.0, 15.0),   # a long interval wins over the duty cycle
    (0.1, 1.0, 0.4, 0.4),     # duty 1: truly back to back
])
def test_poll_period(min_interval, duty, duration, period):
    assert poll_period(min_interval, duty, duration) == pytest.approx(period)
    assert wait_before_next_poll(min_interval, duty, duration) == pytest.approx(period - duration)


def test_a_poll_longer_than_the_interval_starts_the_next_at_once_only_at_duty_1():
    assert wait_before_next_poll(1.0, 1.0, 3.0) == 0.0
    assert wait_before_next_poll(1.0, 0.25, 3.0) == pytest.approx(9.0)


def test_polls_that_refresh_the_configs_are_planned_on_their_own_durations():
    from txnwatch.exporter.poll.schedule import PollDurations

    d = PollDurations(kept=5, kept_refreshing=3)
    d.add(9.0, refreshing=True)          # the first poll: cold, no sample of either kind
    for took in (0.5, 0.52, 0.5, 0.55, 0.5):
        d.add(took, refreshing=False)
    # none refreshing seen yet: the plain polls' figures
    assert d.plan(True) == d.plan(False)
    d.add(1.4, refreshing=True)          # one in describe_configs_every reads every config too
    typical, spread, duty = d.plan(True)
    assert (typical, spread, duty) == (pytest.approx(1.4), 0.0, pytest.approx(0.5))
    # the plain polls keep their own plan: the long one is not in their spread
    typical, spread, duty = d.plan(False)
    assert typical == pytest.approx(0.5) and spread == pytest.approx(0.02) and duty == pytest.approx(0.5)
    # after the first poll alone: its duration for both kinds, until one of either is measured
    first = PollDurations()
    first.add(2.0, refreshing=True)
    assert first.plan(False) == first.plan(True) == (pytest.approx(2.0), 0.0, pytest.approx(2.0))
    first.add(0.5, refreshing=False)
    assert first.plan(True) == first.plan(False) == (pytest.approx(0.5), 0.0, pytest.approx(0.5))


def test_the_first_poll_is_no_sample_of_the_refreshing_polls():
    """At 100,000 partitions the first poll (connections, a cold cluster) took 10 s, the next
    refreshing one 3 s, the plain ones 1.4 s: counted as a refreshing poll, the first had the
    next refreshing poll planned on 10 s, started far too early for the scrape after next."""
    from txnwatch.exporter.poll.schedule import PollDurations

    d = PollDurations()
    d.add(10.0, refreshing=True)
    for _ in range(19):
        d.add(1.4, refreshing=False)
    assert d.expected(True) == pytest.approx(1.4)        # the plain polls' until one is measured
    d.add(3.0, refreshing=True)
    assert d.expected(True) == pytest.approx(3.0) and d.plan(True)[0] == pytest.approx(3.0)
