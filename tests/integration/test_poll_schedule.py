"""Polls timed to the scrapes (issue 29), on the real broker: a scraper at a fixed cadence
gets data as old as the poll takes, from one poll per scrape; nobody scraping, one poll per
idle interval.

With nobody scraping, each poll is seen through its start (`txnwatch_last_success_timestamp_seconds`, when it
finished, less `txnwatch_poll_duration_seconds`) by an observer whose every request has a user agent of its own: one-off requests are
"nobody" to the scrape clock, so the observer never steers the polls it watches."""

from __future__ import annotations

import itertools
import re
import threading
import time

import pytest

from tests.integration.helpers import cluster_config
from txnwatch.exporter.poll.scrape_clock import TOLERANCE, poll_margin
from txnwatch_dev.net import wait_for
from txnwatch_dev.observability.scrape import Metrics, parse_metrics
from txnwatch_dev.transactions.workload import create_topics

pytestmark = pytest.mark.integration

PERIOD = 2.0          # the scraper's cadence; the worker's least time between polls is 1 s
OBSERVE_EVERY = 0.2


def timed_config(bootstrap: str, topic: str, **extra) -> dict:
    cfg = cluster_config(bootstrap, [topic], **extra)
    del cfg["clusters"][0]["poll_interval_seconds"]     # unset: poll_schedule scrapes
    return cfg


class Observer(threading.Thread):
    """Records each poll start the exporter publishes, with one-off requests."""

    def __init__(self, exporter) -> None:
        super().__init__(daemon=True)
        self.exporter = exporter
        self.polls: list[float] = []
        self.stop = threading.Event()

    def run(self) -> None:
        for i in itertools.count():
            if self.stop.wait(OBSERVE_EVERY):
                return
            status, body = self.exporter.get("/metrics", headers={"User-Agent": f"observer-{i}"})
            if status != 200:
                continue
            m = Metrics(parse_metrics(body))
            done = m.get_value("txnwatch_last_success_timestamp_seconds", source="poller")
            took = m.get_value("txnwatch_poll_duration_seconds", source="poller")
            if done is not None and took is not None and (not self.polls or done - took > self.polls[-1] + 1e-6):
                self.polls.append(done - took)


def scrape_as(exporter, agent: str) -> Metrics:
    """A scrape as Prometheus sends it: its user agent and its scrape timeout header."""
    status, body = exporter.get("/metrics", headers={"User-Agent": agent,
                                                     "X-Prometheus-Scrape-Timeout-Seconds": str(PERIOD)})
    assert status == 200, body[:500]
    return Metrics(parse_metrics(body))


def test_a_scraper_at_a_fixed_cadence_gets_data_as_old_as_the_poll_takes(broker, exporter_factory, unique):
    topic = unique("sched")
    create_topics(broker.bootstrap, [topic])
    # nobody scraping: one poll in ten minutes, so every fresh scrape below is the schedule's doing
    exp = exporter_factory(timed_config(broker.bootstrap, topic, poll_idle_interval_seconds=600))
    wait_for(lambda: exp.get("/readyz")[0] == 200, 30, what="the first poll")
    # the scraper, at a fixed cadence: its cadence is known from its fourth scrape
    scrapes: list[tuple[float, float, float]] = []       # (data age, that poll's duration, polls so far)

    def fresh_streak() -> bool:
        due = t0 + len(scrapes) * PERIOD
        time.sleep(max(0.0, due - time.monotonic()))   # the cadence itself, not a wait for state
        m = scrape_as(exp, "Prometheus/cadence-test")
        scrapes.append((m.get_value("txnwatch_data_age_seconds", source="poller"),
                        m.get_value("txnwatch_poll_duration_seconds", source="poller"),
                        m.get_value("txnwatch_polls_total", source="poller")))
        # fresh: no older than the poll took, its margin and a little scheduling slack, in
        # three scrapes in a row from the fifth on
        return len(scrapes) >= 8 and all(age <= d + poll_margin(d) + 0.6 for age, d, _ in scrapes[-3:])

    t0 = time.monotonic()
    try:
        wait_for(fresh_streak, 120, interval=0, what="three scrapes in a row with data as old as the poll takes")
    except TimeoutError:
        pytest.fail(f"scrapes (data age, poll duration, polls): {scrapes}")
    # ...from one poll per scrape, not polls back to back (which would be two a period here)
    polls = scrapes[-1][2] - scrapes[-4][2]
    assert 1 <= polls <= 4, scrapes
    # the page says so (a page view is no scrape)
    # (the cadence it names is learnt from arrival times, jitter and all: within the 10 % that
    # scrape_clock counts as one cadence)
    page = exp.get("/")[1]
    named = re.search(r"each poll timed to be done just before the next scrape of 1 scraper\(s\) \(every ([0-9.]+) s\)",
                      page)
    assert named and abs(float(named.group(1)) - PERIOD) <= TOLERANCE * PERIOD, page
    print(f"data age at each scrape: {[round(age, 2) for age, _, _ in scrapes]}; polls in the last three "
          f"periods: {polls:g}")


def test_nobody_scraping_polls_once_per_idle_interval(broker, exporter_factory, unique):
    topic = unique("idle")
    create_topics(broker.bootstrap, [topic])
    idle = 3.0
    exp = exporter_factory(timed_config(broker.bootstrap, topic, poll_idle_interval_seconds=idle))
    watch = Observer(exp)
    watch.start()
    try:
        wait_for(lambda: len(watch.polls) >= 4, 60, what="four polls on the idle schedule")
    finally:
        watch.stop.set()
        watch.join()
    assert "nobody scraping, one poll per 3 s" in exp.get("/")[1]
    gaps = [b - a for a, b in itertools.pairwise(watch.polls)]
    # a poll starts idle seconds after the previous one started, never sooner
    assert all(g >= idle - 0.05 for g in gaps), gaps
    print(f"poll starts {idle:g} s apart: {[round(g, 2) for g in gaps]}")
