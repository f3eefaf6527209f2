"""Grouping transactional ids into applications (`app` label).

Clusters can hold huge numbers of transactional ids; `app` is the bounded label every
Kafka-side transaction series carries. User rules (regex -> app template) come first,
then built-in rules for the id schemes of common exactly-once frameworks.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

# The app of txnwatch's own transactional canary: its planned aborts are left out of the
# transaction alerts (the canary has alerts of its own).
CANARY_APP = "txnwatch-canary"
# the transactional_id of an app's ids folded into one series (the per-id cap, the series budget)
OTHER_IDS = "__other__"

_UUID = r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"


@dataclass(frozen=True)
class AppRule:
    """`pattern` is matched with re.search; `app` is a template for Match.expand (\\1, \\g<name>)."""

    pattern: re.Pattern
    app: str
    name: str = ""

    def apply(self, transactional_id: str) -> str | None:
        m = self.pattern.search(transactional_id)
        if not m:
            return None
        value = m.expand(self.app)
        return value or None


# Order matters: most specific first.
BUILTIN_RULES: tuple[AppRule, ...] = (
    # txnwatch's own transactional canary: txnwatch-canary-<cluster>-<instance>
    AppRule(re.compile(r"^txnwatch-canary-"), CANARY_APP, "txnwatch-canary"),
    # txnwatch's own Spark sink: txnwatch.<sink name>.<task index>
    AppRule(re.compile(r"^txnwatch\.(?P<app>.+)\.\d+$"), r"\g<app>", "txnwatch-spark-sink"),
    # Kafka Streams EOS-v2: <application.id>-<process uuid>-<thread index>
    AppRule(re.compile(rf"^(?P<app>.+)-{_UUID}-\d+$"), r"\g<app>", "kafka-streams-eos-v2"),
    # Kafka Streams EOS-v1 (deprecated): <application.id>-<task id like 0_1>
    AppRule(re.compile(r"^(?P<app>.+)-\d+_\d+$"), r"\g<app>", "kafka-streams-eos-v1"),
    # Flink KafkaSink: <prefix>-<subtask id>-<checkpoint id>
    AppRule(re.compile(r"^(?P<app>.+)-\d+-\d+$"), r"\g<app>", "flink-kafkasink"),
)

# Schemes whose runtime initialises its own known ids again by design: Flink's KafkaSink
# probes <prefix>-<subtask>-<n> at start-up (aborting what a failed run left open) and, with
# the POOLING naming of connector 4.x/5.x, re-initialises a pooled id at every checkpoint.
# An InitProducerId of a known id of these is not a zombie fence.
REINITIALISING_SCHEMES = frozenset({"flink-kafkasink"})
KNOWN_SCHEMES = frozenset(r.name for r in BUILTIN_RULES)

# Fallback: strip trailing numeric parts (orders-producer-3 -> orders-producer).
_TRAILING_NUMBERS = re.compile(r"([-_.]\d+)+$")


def fallback_app(transactional_id: str) -> str:
    return _TRAILING_NUMBERS.sub("", transactional_id) or transactional_id


class AppResolver:
    """Maps transactional ids to app names, memoised (ids recur every poll)."""

    def __init__(self, rules: Sequence[AppRule] = (), builtins: bool = True,
                 cache_size: int = 200_000) -> None:
        self.rules: tuple[AppRule, ...] = tuple(rules) + (BUILTIN_RULES if builtins else ())
        self._cache: dict[str, tuple[str, str]] = {}
        self._pairs: dict[tuple[str, str], tuple[str, str]] = {}
        self._cache_size = cache_size

    def __call__(self, transactional_id: str | None) -> str:
        return self.resolve(transactional_id)[0]

    def scheme(self, transactional_id: str | None) -> str:
        """The name of the rule that named the id's app (`flink-kafkasink`, `kafka-streams-eos-v2`,
        a user rule's name...), "" for the fallback."""
        return self.resolve(transactional_id)[1]

    def resolve(self, transactional_id: str | None) -> tuple[str, str]:
        """(app, scheme) of an id."""
        if not transactional_id:
            return "unknown", ""
        hit = self._cache.get(transactional_id)
        if hit is not None:
            return hit
        found = ("", "")
        for r in self.rules:
            a = r.apply(transactional_id)
            if a:
                found = (a, r.name)
                break
        out = found if found[0] else (fallback_app(transactional_id), "")
        out = self._pairs.setdefault(out, out)   # one tuple per (app, scheme): ids share it
        if len(self._cache) >= self._cache_size:
            self._cache.clear()  # ids churn; a bounded cache is enough
            self._pairs.clear()
        self._cache[transactional_id] = out
        return out


def fold_ids(items: Iterable[tuple[str, str, float]], cap: int,
             highest: bool = False) -> tuple[list[tuple[str, str, float]], int]:
    """Per-transactional-id series under a cap: keep the `cap` lowest values (lowest headroom
    matters most); the rest fold into (app, "__other__", min value of that app's folded ids).
    With `highest`, the other way round (the oldest age matters most: keep the highest, fold
    into the max). Returns (series, number of ids folded)."""
    ordered = sorted(items, key=lambda t: t[2], reverse=highest)
    if len(ordered) <= cap:
        return ordered, 0
    kept, rest = ordered[:cap], ordered[cap:]
    worst = max if highest else min
    other: dict[str, float] = {}
    for app, _, value in rest:
        other[app] = worst(other.get(app, value), value)
    kept.extend((app, OTHER_IDS, v) for app, v in other.items())
    return kept, len(rest)
