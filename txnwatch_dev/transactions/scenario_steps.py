"""The transaction scenario's steps and what every broker line must count for each (pure;
scenario.py runs them, tests/unit/test_tap_real_records.py replays captures against them)."""

from __future__ import annotations

from dataclasses import dataclass

STEPS = ("commits", "fence-open", "fence-idle", "restart", "timeout", "operator", "hanging")


@dataclass(frozen=True)
class Counts:
    committed: int = 0
    aborted: int = 0
    new_instance: int = 0      # fences that cut an open transaction off
    reinit: int = 0            # InitProducerIds that took an idle id over
    timeout: int = 0
    operator: int = 0
    expired: int = 0


# What every line must show, per step (app `scn-<step>`); `operator` only where the release
# has forceTerminateTransaction (4.1+).
EXPECTED = {
    "commits": Counts(committed=3, aborted=2, expired=1),
    "fence-open": Counts(committed=1, aborted=1, new_instance=1, expired=1),
    "fence-idle": Counts(committed=2, reinit=1, expired=1),
    # the client's own abort (under TV2 an epoch bump like a fence's), its process's restart (a
    # re-init), then a second instance cutting the restarted one's transaction off (the fence)
    "restart": Counts(committed=4, aborted=3, new_instance=1, reinit=1, expired=1),
    "timeout": Counts(aborted=1, timeout=1, expired=1),
    "operator": Counts(aborted=1, operator=1, expired=1),
    # the hanging transaction never reaches the coordinator's log: nothing to count there
    # but the registration of the id that made it, which expires like the others
    "hanging": Counts(expired=1),
}


def app_of(step: str) -> str:
    return f"scn-{step}"


def tid_of(step: str) -> str:
    return f"scn-{step}-0"
