"""What the demo does, and when (pure): the payments its load generator makes and the
cycle of its faults."""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass


def next_payment(balance: float | None, rng: random.Random, low: float = 0.0, high: float = 1000.0,
                 step: float = 150.0) -> float:
    """A payment amount that keeps an account's balance within [low, high] (a bounded random
    walk; a new account opens with a deposit around the middle): balances keep going above
    the Streams app's alert threshold (600), so deposits keep raising alerts."""
    if balance is None:
        return round(rng.uniform(low + (high - low) * 0.3, low + (high - low) * 0.7), 2)
    amount = round(rng.uniform(-step, step), 2)
    if not low <= balance + amount <= high:
        amount = -amount
    return amount


@dataclass(frozen=True)
class Fault:
    name: str
    run: Callable[[], str]
    once: bool = False       # e.g. a hanging transaction: it never ends, one is enough


def fault_schedule(faults: list[Fault]) -> Iterator[Fault]:
    """The faults in a cycle, each `once` fault only the first time round (pure)."""
    first = True
    while True:
        todo = [f for f in faults if first or not f.once]
        if not todo:
            return
        yield from todo
        first = False
