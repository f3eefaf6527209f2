"""When a worker runs its own full collection (gc_tuning.FullCollections)."""

from txnwatch.exporter.runtime.gc_tuning import FullCollections


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def test_not_before_its_interval():
    clock = Clock()
    full = FullCollections(every=300, clock=clock)
    clock.t += 299
    assert not full.maybe_collect(published_at=None, last_scrape=None)
    clock.t += 1
    assert full.maybe_collect(published_at=None, last_scrape=None) and full.runs == 1
    assert not full.maybe_collect(published_at=None, last_scrape=None)   # the interval starts again


def test_waits_for_the_scrape_the_poll_was_timed_for():
    clock = Clock()
    full = FullCollections(every=300, clock=clock)
    clock.t += 400
    published = clock.t - 0.3
    # the last scrape came before this poll's data went out: its scrape is still to come
    assert not full.maybe_collect(published_at=published, last_scrape=published - 4.7)
    # scraped since: the next poll is a period away
    assert full.maybe_collect(published_at=published, last_scrape=published + 0.2)


def test_nobody_scraping_collects_when_due():
    clock = Clock()
    full = FullCollections(every=300, clock=clock)
    clock.t += 300
    assert full.maybe_collect(published_at=clock.t - 1, last_scrape=None)
