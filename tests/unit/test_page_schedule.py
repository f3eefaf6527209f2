"""The page's line on when polls happen (pure)."""

from txnwatch.exporter.poll.scrape_clock import NOBODY, Cadence, ScrapeView
from txnwatch.exporter.serve.page import poll_schedule_note


def test_timed_to_the_scrapers():
    view = ScrapeView((Cadence(15.0, 1000.0), Cadence(30.0, 990.0)))
    assert poll_schedule_note(view, [("prod", "scrapes", 1.0, 60.0)]) == (
        "Polls: prod: each poll timed to be done just before the next scrape of 2 scraper(s) (every 15 s, 30 s).")
    # learnt from jittery arrivals: two significant figures
    view = ScrapeView((Cadence(1.987, 1000.0), Cadence(0.5004, 990.0), Cadence(59.7, 980.0), Cadence(123.4, 970.0)))
    assert poll_schedule_note(view, [("prod", "scrapes", 1.0, 60.0)]).endswith("(every 2 s, 0.5 s, 60 s, 120 s).")


def test_settling_nobody_and_a_configured_interval():
    assert poll_schedule_note(ScrapeView((), 1), [("a", "scrapes", 1.0, 60.0)]) == (
        "Polls: a: polls back to back while 1 scraper(s) settle into a cadence.")
    assert poll_schedule_note(NOBODY, [("a", "scrapes", 1.0, 60.0), ("b<", "interval", 5.0, 60.0)]) == (
        "Polls: a: nobody scraping, one poll per 60 s; b&lt;: polls back to back, at most one start per 5 s.")
    assert poll_schedule_note(NOBODY, []) == ""
