"""Garbage collection timed to the scrapes, in both kinds of exporter process.

A poll of a big cluster allocates tens of thousands of objects. With CPython's default
thresholds that triggers full collections that hold the GIL for 50 to 280 ms at 10k
partitions (bench/bench_scrape.py; the worker traces of bench/bench_poll_cost.py in
docs/benchmarks.md): in the serving process they stall scrapes, in a worker they delay the
poll and take a core just when the scrape it was timed for arrives. Snapshots hold no
reference cycles, so they are freed by reference counting as soon as the next one
replaces them; what cyclic garbage there is (exception tracebacks) waits for a full
collection that a worker runs at a moment of its choosing: right after a scrape, with the
next poll a period away.
"""

from __future__ import annotations

import gc
import time

GC_THRESHOLDS = (10_000, 50, 1000)
FULL_COLLECTION_EVERY = 300.0    # seconds, at most, between a worker's own full collections


def tune_gc() -> None:
    """Freeze what startup built (never scanned again) and collect young objects in bigger,
    rarer steps: automatic full collections become rare."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)


class FullCollections:
    """A worker's full collections: at most every `every` seconds, and only when the data a
    scraper has come for since the last poll was published (or nobody scrapes)."""

    def __init__(self, every: float = FULL_COLLECTION_EVERY, clock=time.time) -> None:
        self.every = every
        self._clock = clock
        self._last = clock()
        self.runs = 0

    def due(self, published_at: float | None, last_scrape: float | None) -> bool:
        """`published_at`: when the last poll's data went out (wall clock); `last_scrape`:
        the newest scrape the serving process saw (None: no scraper)."""
        if self._clock() - self._last < self.every:
            return False
        if last_scrape is None:
            return True
        return published_at is None or last_scrape >= published_at

    def maybe_collect(self, published_at: float | None, last_scrape: float | None) -> bool:
        if not self.due(published_at, last_scrape):
            return False
        gc.collect()
        self._last = self._clock()
        self.runs += 1
        return True
