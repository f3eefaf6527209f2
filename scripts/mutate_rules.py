#!/usr/bin/env python
"""Check that the unit tests pin every condition of the tap's fence rules and the
boundaries of the min-ISR and headroom derivations: each mutation below deletes one condition or moves one boundary,
on a copy of the package, and the named tests must then fail. Run by hand:

    .venv/bin/python scripts/mutate_rules.py

Prints one line per mutation (caught / SURVIVED) and exits 1 if any survived.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
STATE = "txnwatch/exporter/tap/state.py"
DERIVE = "txnwatch/exporter/poll/derive.py"
TAP_TESTS = ["tests/unit/test_tap_state.py", "tests/unit/test_tap_real_records.py"]
DERIVE_TESTS = ["tests/unit/test_derive.py"]

# (file, text, replacement, what it breaks, tests that must catch it)
MUTATIONS = [
    (STATE, "if prev == ONGOING and value.producer_id", "if value.producer_id",
     "timeout: the abort need not follow Ongoing", TAP_TESTS),
    (STATE, " and value.producer_epoch > self._epoch[s]:", ":",
     "timeout: no epoch bump needed", TAP_TESTS),
    (STATE, "prev == ONGOING and value.producer_id == self._pid[s] and ", "prev == ONGOING and ",
     "timeout: any producer id", TAP_TESTS),
    (STATE, "if start >= 0 and start + timeout", "if start + timeout",
     "timeout: an unknown start", TAP_TESTS),
    (STATE, "start + timeout < value.last_update_ms", "start + timeout <= value.last_update_ms",
     "timeout: boundary moved to start + timeout", TAP_TESTS),
    (STATE, "value.timeout_ms == FENCE_PRODUCERS_TIMEOUT_MS != self._timeout[s]",
     "value.timeout_ms == FENCE_PRODUCERS_TIMEOUT_MS", "operator: a 30 s timeout that did not change", TAP_TESTS),
    (STATE, "elif bumped and value.last_update_ms", "elif value.last_update_ms",
     "new_instance: no bumped abort needed", TAP_TESTS),
    (STATE, "<= FENCE_RETRY_WINDOW_MS", "< FENCE_RETRY_WINDOW_MS",
     "new_instance: window boundary moved", TAP_TESTS),
    (STATE, "if value.producer_epoch != self._epoch[s] or value.producer_id != self._pid[s]:",
     "if value.producer_epoch != self._epoch[s]:", "init: a new producer id at the same epoch ignored", TAP_TESTS),
    (STATE, "if value.producer_epoch != self._epoch[s] or value.producer_id != self._pid[s]:",
     "if True:", "init: an Empty that changed nothing counted", TAP_TESTS),
    (STATE, "            elif prev != PREPARE_EPOCH_FENCE:    # (a PrepareAbort after PrepareEpochFence keeps its flag)\n"
            "                self._bumped_abort[s] = 0\n", "",
     "new_instance: a fence's flag carried over a later abort", TAP_TESTS),
    (DERIVE, "if p.leader < 0 or len(p.isr) < need:", "if p.leader < 0 or len(p.isr) <= need:",
     "min ISR: boundary moved (an ISR of exactly the minimum)", DERIVE_TESTS),
    (DERIVE, "if p.leader < 0 or len(p.isr) < need:", "if len(p.isr) < need:",
     "min ISR: an offline partition with its ISR listed", DERIVE_TESTS),
    (DERIVE, "return min(min_insync_replicas, replication_factor) if", "return min_insync_replicas if",
     "min ISR: no cap at the replica count", DERIVE_TESTS),
    (DERIVE, "if t.headroom_seconds is not None and t.headroom_seconds < 0:",
     "if t.headroom_seconds is not None and t.headroom_seconds <= 0:", "headroom: past-timeout boundary moved",
     DERIVE_TESTS),
]


def run(mutation) -> tuple[str, bool]:
    rel, old, new, what, tests = mutation
    with tempfile.TemporaryDirectory(prefix="txnwatch-mutant-") as tmp:
        for tree in ("txnwatch", "tests"):   # tests/conftest.py puts its own checkout first on the path
            shutil.copytree(ROOT / tree, Path(tmp) / tree, ignore=shutil.ignore_patterns("__pycache__"))
        path = Path(tmp) / rel
        text = path.read_text()
        if text.count(old) != 1:
            return f"{what}: the text to mutate is not in {rel} exactly once (update this script)", False
        path.write_text(text.replace(old, new))
        env = {**os.environ, "PYTHONPATH": tmp}
        probe = subprocess.run([sys.executable, "-c", "import txnwatch; print(txnwatch.__file__)"], env=env,
                               capture_output=True, text=True, cwd=tmp)
        if not probe.stdout.startswith(tmp):
            return f"{what}: the mutant is not the package imported ({probe.stdout.strip()})", False
        out = subprocess.run([sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", *tests],
                             env=env, cwd=tmp, capture_output=True, text=True)
        caught = out.returncode != 0
        return f"{'caught  ' if caught else 'SURVIVED'} {what}", caught


def main() -> int:
    results = [run(m) for m in MUTATIONS]
    for line, _ in results:
        print(line)
    survived = sum(1 for _, caught in results if not caught)
    print(f"{len(results) - survived} of {len(results)} mutations caught")
    return 1 if survived else 0


if __name__ == "__main__":
    sys.exit(main())
