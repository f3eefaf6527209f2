"""The canary's bookkeeping, free of I/O: what each round wrote, what became visible.

Every round is one transaction writing one record to each canary partition, committed or
(one round in `abort_every`) aborted on purpose. A read_committed consumer reads the
canary partitions; each record it returns is matched here against the round that wrote it:

* a record of a committed round: visible, its latency is now - the round's produce start;
* a record of an aborted round: a visibility violation (read_committed returned an
  aborted record: a broker or client bug, never normal);
* a committed round's partition still not visible at its deadline: `visibility_timeout`;
* a record of an unknown round (an earlier canary instance, or a round already settled):
  ignored, counted as stale.

Records carry their own identity (instance, round, outcome, produce start), so a restart of
the canary never confuses an old instance's records with its own.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

PAYLOAD_VERSION = 1


class PayloadError(ValueError):
    """A record on the canary topic that is not a canary record of a known version."""


@dataclass(frozen=True, slots=True)
class CanaryRecord:
    instance: str          # the canary's transactional id: one per exporter instance
    round: int
    committed: bool        # the outcome the round was meant to have
    produced_at: float     # epoch seconds when the round's produce started
    partition: int

    def encode(self) -> bytes:
        return json.dumps({"v": PAYLOAD_VERSION, "i": self.instance, "r": self.round,
                           "o": "commit" if self.committed else "abort", "t": round(self.produced_at, 6),
                           "p": self.partition}, separators=(",", ":")).encode()


def decode(value: bytes | None) -> CanaryRecord:
    """The record a canary wrote; PayloadError says what is wrong with anything else."""
    if not value:
        raise PayloadError("empty value: not a canary record")
    try:
        d = json.loads(value)
    except (ValueError, UnicodeDecodeError) as exc:
        raise PayloadError(f"not JSON ({exc}): not a canary record") from None
    if not isinstance(d, dict) or d.get("v") != PAYLOAD_VERSION:
        raise PayloadError(f"unknown canary payload version {d.get('v') if isinstance(d, dict) else None!r} "
                           f"(this txnwatch reads version {PAYLOAD_VERSION}): written by another txnwatch version")
    try:
        if d["o"] not in ("commit", "abort"):
            raise PayloadError(f"outcome {d['o']!r} is neither commit nor abort")
        return CanaryRecord(str(d["i"]), int(d["r"]), d["o"] == "commit", float(d["t"]), int(d["p"]))
    except (KeyError, TypeError, ValueError) as exc:
        raise PayloadError(f"canary record without a valid {exc}") from None


@dataclass
class _Round:
    committed: bool
    produced_at: float
    deadline: float
    pending: set[int]          # partitions not yet visible (committed) / not yet settled (aborted)


@dataclass(frozen=True, slots=True)
class Visible:
    partition: int
    latency: float


@dataclass(frozen=True, slots=True)
class Violation:
    partition: int
    round: int


@dataclass(frozen=True, slots=True)
class TimedOut:
    partition: int
    round: int


@dataclass
class RoundBook:
    """The rounds of one canary instance whose records are still expected (or, for aborted
    rounds, watched for: until their deadline an aborted record showing up is a violation)."""

    instance: str
    rounds: dict[int, _Round] = field(default_factory=dict)
    stale: int = 0

    def wrote(self, round_: int, partitions: list[int], committed: bool, produced_at: float,
              deadline: float) -> None:
        """A round whose transaction ended: committed (records must become visible by
        `deadline`) or aborted (they must never)."""
        self.rounds[round_] = _Round(committed, produced_at, deadline, set(partitions))

    def failed(self, round_: int) -> None:
        """A round whose transaction failed before ending: nothing to expect from it."""
        self.rounds.pop(round_, None)

    def seen(self, rec: CanaryRecord, now: float) -> Visible | Violation | None:
        if rec.instance != self.instance:
            self.stale += 1
            return None
        r = self.rounds.get(rec.round)
        if not rec.committed:
            # whatever this instance remembers: read_committed must never return it
            return Violation(rec.partition, rec.round)
        if r is None or rec.partition not in r.pending:
            self.stale += 1     # settled already (timed out, or a duplicate read)
            return None
        r.pending.discard(rec.partition)
        if not r.pending:
            del self.rounds[rec.round]
        return Visible(rec.partition, max(0.0, now - r.produced_at))

    def expire(self, now: float) -> list[TimedOut]:
        """Committed rounds past their deadline with partitions not visible; aborted rounds
        past theirs are forgotten (nothing was expected of them)."""
        out = []
        for round_, r in list(self.rounds.items()):
            if now < r.deadline:
                continue
            if r.committed:
                out.extend(TimedOut(p, round_) for p in sorted(r.pending))
            del self.rounds[round_]
        return out


def is_abort_round(round_: int, abort_every: int) -> bool:
    """One round in `abort_every` is aborted on purpose (never the first, so a canary that
    just started proves a commit first); 0 disables aborts."""
    return abort_every > 0 and round_ > 0 and round_ % abort_every == 0


def charged_partitions(parts: list[int], delivered: set[int]) -> list[int]:
    """The partitions a produce step that ran out of time charges with a visibility timeout:
    those whose record was not written while others' were. A round that wrote nothing at all
    tells nothing about any one partition: its transaction could not take a partition in
    (AddPartitionsToTxn waits on the coordinator: its log's ISR shrinking after a follower
    froze, or a previous transaction's markers still pending), and charging every partition
    would point away from the one leader that is slow. That round still counts as a failed
    produce step."""
    missing = sorted(set(parts) - delivered)
    return [] if len(missing) == len(set(parts)) else missing


def step_deadline(interval: float, elapsed: float, floor: float = 0.5) -> float:
    """Seconds the next step of a round may take: what is left of the interval, at least
    `floor` (a step given no time at all cannot even fail cleanly)."""
    return max(floor, interval - elapsed)
