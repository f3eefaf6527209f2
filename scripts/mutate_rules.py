#!/usr/bin/env python
"""Check that the unit tests pin every rule of the transaction-log tap (its state machine and
its decoder's checks), of the poller's derivations and of the scrape clock (which scrapers
steer the polls): each mutation below deletes one
condition or moves one boundary, on a copy of the package, and the named tests must then
fail. Run by hand:

    .venv/bin/python scripts/mutate_rules.py [--only state|derive|decoder|schedule] [--jobs 1|2]

First checks that the named tests pass on an unmutated copy (else every mutant would look
caught), then prints one line per mutation (caught / SURVIVED) and exits 1 if any survived.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
STATE = "txnwatch/exporter/tap/state.py"
DECODER = "txnwatch/exporter/tap/decoder.py"
DERIVE = "txnwatch/exporter/poll/derive.py"
FINDINGS = "txnwatch/exporter/poll/findings.py"
MODEL = "txnwatch/exporter/model.py"
SCRAPE_CLOCK = "txnwatch/exporter/poll/scrape_clock.py"
TAP_TESTS = ["tests/unit/test_tap_state.py", "tests/unit/test_tap_real_records.py"]
DECODER_TESTS = ["tests/unit/test_tap_decoder.py"]
DERIVE_TESTS = ["tests/unit/test_derive.py"]
SCRAPE_TESTS = ["tests/unit/test_scrape_clock.py"]
GROUP_OF = {STATE: "state", DECODER: "decoder", DERIVE: "derive", FINDINGS: "derive", MODEL: "derive",
            SCRAPE_CLOCK: "schedule"}   # --only

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
    (STATE, "- self._last[s] <= window:", "- self._last[s] < window:",
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
    (FINDINGS, "if t.headroom_seconds is not None and t.headroom_seconds < 0:",
     "if t.headroom_seconds is not None and t.headroom_seconds <= 0:", "headroom: past-timeout boundary moved",
     DERIVE_TESTS),
    (STATE, "TV2_BUMP if self._tv[s] >= 2 else COORDINATOR_BUMP", "COORDINATOR_BUMP",
     "new_instance: a TV2 client's own abort read as only a fence's (its restart a fence)", TAP_TESTS),
    (STATE, "TV2_BUMP if self._tv[s] >= 2 else COORDINATOR_BUMP", "TV2_BUMP",
     "new_instance: a TV0 client's bump (only the coordinator's) given the TV2 window", TAP_TESTS),
    (STATE, "if self._tv[s] >= 2 else", "if self._tv[s] >= 1 else",
     "new_instance: a TV1 client's bump given the TV2 window", TAP_TESTS),
    (STATE, "window = FENCE_RETRY_WINDOW_MS if bumped == COORDINATOR_BUMP else",
     "window = FENCE_RETRY_WINDOW_MS if bumped != COORDINATOR_BUMP else", "new_instance: the two windows swapped",
     TAP_TESTS),
    (STATE, "TV2_FENCE_RETRY_WINDOW_MS = 500", "TV2_FENCE_RETRY_WINDOW_MS = 10_000",
     "new_instance: a restart within 10 s of a TV2 client's own abort read as a fence", TAP_TESTS),
]

# ------------------------------------------------------------------ the rest of the tap and the derivations
# Each entry: one deleted condition or moved boundary; the test that pins it is named in the
# test files' "pinned" sections. Left out as equivalent (no test can tell them apart):
# * state.py, the flag drop after a timeout (`self._bumped_abort[s] = 0` under TIMEOUT): the
#   Ongoing it follows already dropped the flag (every record but an abort's does);
# * state.py idle_scan's `max(0, cap)` (heapq.nsmallest of a negative count is empty too) and
#   its `idle_total > len(kept_slots)` (a shortcut: the loop would fold nothing);
# * derive.py, partition_states' `prev.stalled_since is None` when reusing a caught-up state
#   (a stalled previous state has LSO < HWM, so its offsets cannot equal a caught-up poll's),
#   and its `ts <= now`, deleted or moved to `ts < now`: since (this poll's now or an earlier
#   one) is never after now, so min(since, ts) already ignores a timestamp from the future;
# * derive.py with_groups_unavailable's `if not unavailable` (a shortcut to the same list).
_OPEN_SET = "_OPEN = frozenset((ONGOING, PREPARE_COMMIT, PREPARE_ABORT, PREPARE_EPOCH_FENCE))"
_DEDUP = "if prev == status and self._start[s] == value.start_ms:"
_CLAMP = "max(-128, min(127, value.client_transaction_version))"
_FLAG_DROP = "if status != COMPLETE_ABORT and status != PREPARE_ABORT:"
_FOLD = "if s in open_ or s in ks:"
_KEEP_CLOCK = "prev.last_stable_offset == o.last_stable_offset:\n                since = prev.stalled_since"
_GROUP_SKIP = "if p is None or offset < 0:"
_BLOCKED = "if p and p.stalled_since is not None and p.stalled_seconds >= min_stall_seconds:"
_SORT = "    out.sort(key=lambda t: (t.start_ms < 0, t.start_ms))\n"
_CANDIDATE = "if p.txn_start_offset >= 0 and now_ms - p.last_timestamp_ms > max_timeout_ms]"
_LSO_HANGING = "if p.stalled_since is not None and p.stalled_seconds >= threshold_seconds]"
_FORGET = "max(0, len(epochs) - limit)"
_BUMPED = "if prev and (prev[0] != d.producer_id or d.producer_epoch > prev[1]):"
_MAY_HOLD = "if s.stalled_since is not None and tp not in unavailable)"
_UNAVAILABLE = "if tp not in out and tp in previous:"
_STALLED = "if p.stalled_since is not None and p.stalled_seconds >= r.stall_warning_seconds]"
_TWO_PHASE_AGE = "if t.age_seconds is not None and t.age_seconds > r.two_phase_max_age_seconds:"
_CAP = "if max_ms is not None and t.timeout_ms > max_ms:"
_STATUS_RANGE = "if 0 <= code < len(_STATUSES):"

MUTATIONS += [
    # -------------------------------------------------------------- state.py: slots and memory
    (STATE, "            self._app[s] = app\n            self._bumped_abort[s] = 0\n",
     "            self._app[s] = app\n", "slot reuse: the previous id's bumped-abort flag kept", TAP_TESTS),
    (STATE, "        if self._free:\n", "        if False:\n", "memory: freed slots not reused", TAP_TESTS),
    (STATE, "        self._open.pop(s, None)\n        self._ids_per_app[self._app[s]] -= 1\n",
     "        self._ids_per_app[self._app[s]] -= 1\n", "expiration: an open id's transaction stays open", TAP_TESTS),
    (STATE, "        self._ids_per_app[self._app[s]] -= 1\n", "", "expiration: the app's id count kept", TAP_TESTS),
    # -------------------------------------------------------------- state.py: apply
    (STATE, "        if self.id_filter is not None and not self.id_filter(tid):\n            return\n", "",
     "filter: ids outside it followed", TAP_TESTS),
    (STATE, "        if record_timestamp_ms is not None:\n", "        if True:\n",
     "timestamp: a record without one forgets the last", TAP_TESTS),
    (STATE, "if value is None or value.status == DEAD:", "if value is None:", "Dead: not read like a tombstone",
     TAP_TESTS),
    (STATE, "            if s is not None:\n                if counting:", "            if True:\n                if counting:",
     "expiration: a tombstone of an unknown id", TAP_TESTS),
    (STATE, "                if counting:\n                    app = self._apps[self._app[s]]\n                    self._exp",
     "                if True:\n                    app = self._apps[self._app[s]]\n                    self._exp",
     "expiration: counted while rebuilding", TAP_TESTS),
    (STATE, "            if counting:\n                self._derive(", "            if True:\n                self._derive(",
     "rebuild: history counted", TAP_TESTS),
    (STATE, _CLAMP, "value.client_transaction_version", "client transaction version: not clamped", TAP_TESTS),
    (STATE, _CLAMP, "max(-128, min(128, value.client_transaction_version))",
     "client transaction version: upper clamp moved", TAP_TESTS),
    (STATE, _CLAMP, "max(-129, min(127, value.client_transaction_version))",
     "client transaction version: lower clamp moved", TAP_TESTS),
    (STATE, "        else:\n            self._open.pop(s, None)\n", "", "open: an ended transaction stays open", TAP_TESTS),
    (STATE, _OPEN_SET, "_OPEN = frozenset((ONGOING, PREPARE_ABORT, PREPARE_EPOCH_FENCE))",
     "open: PrepareCommit not open", TAP_TESTS),
    (STATE, _OPEN_SET, "_OPEN = frozenset((ONGOING, PREPARE_COMMIT, PREPARE_EPOCH_FENCE))",
     "open: PrepareAbort not open", TAP_TESTS),
    (STATE, _OPEN_SET, "_OPEN = frozenset((ONGOING, PREPARE_COMMIT, PREPARE_ABORT))",
     "open: PrepareEpochFence not open", TAP_TESTS),
    (STATE, "self._app_reinit.append(scheme in REINITIALISING_SCHEMES)", "self._app_reinit.append(False)",
     "startup_abort: no scheme re-initialises", TAP_TESTS),
    # -------------------------------------------------------------- state.py: _derive, outside the Empty branch
    (STATE, _FLAG_DROP, "if status != COMPLETE_ABORT:", "bumped flag: dropped at a PrepareAbort", TAP_TESTS),
    (STATE, _FLAG_DROP, "if status != PREPARE_ABORT:", "bumped flag: dropped at the CompleteAbort", TAP_TESTS),
    (STATE, "if status == PREPARE_ABORT or status == PREPARE_EPOCH_FENCE:", "if status == PREPARE_ABORT:",
     "PrepareEpochFence: not read like a PrepareAbort", TAP_TESTS),
    (STATE, "            elif prev != PREPARE_EPOCH_FENCE:", "            else:",
     "PrepareEpochFence: the PrepareAbort after it drops its flag", TAP_TESTS),
    (STATE, "        if reason == TIMEOUT:\n", "        if True:\n", "timeouts: every fence counted as a timeout",
     TAP_TESTS),
    (STATE, _DEDUP, "if False:", "completion: the same completion written again counted twice", TAP_TESTS),
    (STATE, _DEDUP, "if prev == status:", "completion: another start after the same status taken for a repeat",
     TAP_TESTS),
    (STATE, _DEDUP, "if self._start[s] == value.start_ms:", "completion: a Prepare's completion taken for a repeat",
     TAP_TESTS),
    (STATE, "            if value.start_ms >= 0:\n", "            if True:\n",
     "duration: an unknown start observed", TAP_TESTS),
    (STATE, "h.observe(max(0.0, (end - value.start_ms) / 1000.0))", "h.observe((end - value.start_ms) / 1000.0)",
     "duration: no floor at 0", TAP_TESTS),
    (STATE, "            if prev in _PREPARE:\n", "            if True:\n",
     "completion latency: observed without its Prepare", TAP_TESTS),
    (STATE, "h.observe(max(0.0, (end - self._last[s]) / 1000.0))", "h.observe((end - self._last[s]) / 1000.0)",
     "completion latency: no floor at 0", TAP_TESTS),
    (STATE, "_PREPARE = frozenset((PREPARE_COMMIT, PREPARE_ABORT, PREPARE_EPOCH_FENCE))",
     "_PREPARE = frozenset((PREPARE_COMMIT, PREPARE_ABORT))", "completion latency: PrepareEpochFence no Prepare",
     TAP_TESTS),
    # -------------------------------------------------------------- state.py: restore_counters, idle_scan, view
    *[(STATE, f"        {line}\n", "", f"restore: {line.split(' =')[0]} not restored", TAP_TESTS) for line in (
        "self._transactions = dict(view.transactions)",
        "self._duration = {k: h.copy() for k, h in view.duration.items()}",
        "self._completion = {k: h.copy() for k, h in view.completion.items()}",
        "self._fencing = dict(view.fencing)", "self._reinits = dict(view.reinits)",
        "self._timeouts = dict(view.timeouts)", "self._expirations = dict(view.expirations)",
        "self._skipped = dict(view.skipped)", "self.applied = view.applied")],
    (STATE, "self._duration = {k: h.copy() for k, h in view.duration.items()}", "self._duration = dict(view.duration)",
     "restore: duration histograms shared with the earlier view", TAP_TESTS),
    (STATE, "self._completion = {k: h.copy() for k, h in view.completion.items()}",
     "self._completion = dict(view.completion)", "restore: completion histograms shared with the earlier view",
     TAP_TESTS),
    (STATE, "idle = (s for s in self._slots.values() if s not in open_)", "idle = iter(self._slots.values())",
     "idle: open ids kept as idle", TAP_TESTS),
    (STATE, "heapq.nsmallest(cap, idle", "heapq.nlargest(cap, idle", "idle: the newest kept, not the oldest",
     TAP_TESTS),
    (STATE, _FOLD, "if s in ks:", "idle: open ids folded", TAP_TESTS),
    (STATE, _FOLD, "if s in open_:", "idle: kept ids folded too", TAP_TESTS),
    (STATE, "if m is None or v < m:", "if m is None:", "idle: the first folded id, not the oldest", TAP_TESTS),
    (STATE, "for i, n in enumerate(self._ids_per_app) if n > 0}", "for i, n in enumerate(self._ids_per_app) if n >= 0}",
     "view: apps without ids kept", TAP_TESTS),
    (STATE, "enumerate(self._apps) if self._app_reinit[i])", "enumerate(self._apps))",
     "view: every app re-initialising", TAP_TESTS),
    # -------------------------------------------------------------- decoder.py: versions and what it skips
    (DECODER, "if version != KEY_VERSION:", "if version > KEY_VERSION:", "key: a version below 0 read", DECODER_TESTS),
    (DECODER, "    if version == 1:\n        return _decode_v1", "    if version >= 1:\n        return _decode_v1",
     "value: a later version read as v1", DECODER_TESTS),
    (DECODER, _STATUS_RANGE, "if code < len(_STATUSES):", "status: a negative code read", DECODER_TESTS),
    (DECODER, _STATUS_RANGE, "if 0 <= code <= len(_STATUSES):", "status: range boundary moved", DECODER_TESTS),
    (DECODER, "    if n < 0:\n        raise TxnLogDecodeError(MALFORMED, f\"transactional id length",
     "    if False:\n        raise TxnLogDecodeError(MALFORMED, f\"transactional id length",
     "key: a negative id length", DECODER_TESTS),
    (DECODER, "elif count < -1:", "elif False:", "v0: a partitions count below -1", DECODER_TESTS),
    (DECODER, "if n < 0:\n                raise TxnLogDecodeError(MALFORMED, f\"topic length",
     "if False:\n                raise TxnLogDecodeError(MALFORMED, f\"topic length", "v0: a null topic", DECODER_TESTS),
    (DECODER, "if m < 0:", "if False:", "v0: null partition ids", DECODER_TESTS),
    (DECODER, "if n == 0:\n                raise TxnLogDecodeError(MALFORMED, \"null topic",
     "if False:\n                raise TxnLogDecodeError(MALFORMED, \"null topic", "v1: a null topic", DECODER_TESTS),
    (DECODER, "if m == 0:", "if False:", "v1: null partition ids", DECODER_TESTS),
    (DECODER, "if n != 8:", "if False:", "v1: a producer id tag of another size", DECODER_TESTS),
    (DECODER, "if n != 2:", "if False:", "v1: a client transaction version tag of another size", DECODER_TESTS),
    (DECODER, "if shift >= 35:", "if shift >= 42:", "varint: a sixth byte read", DECODER_TESTS),
    # -------------------------------------------------------------- derive.py: LSO, stalls, groups
    (DERIVE, "if o.last_stable_offset >= o.high_watermark:", "if o.last_stable_offset > o.high_watermark:",
     "stall: an LSO at the HWM stalled", DERIVE_TESTS),
    (DERIVE, " and prev.high_watermark == o.high_watermark", "", "caught up: a new HWM not reported", DERIVE_TESTS),
    (DERIVE, "\\\n                    and prev.last_stable_offset == o.last_stable_offset:", ":",
     "caught up: a new LSO not reported", DERIVE_TESTS),
    (DERIVE, "prev.stalled_since is not None and \\\n", "\\\n", "stall clock: kept from a caught-up poll",
     DERIVE_TESTS),
    (DERIVE, _KEEP_CLOCK, "True:\n                since = prev.stalled_since", "stall clock: kept across an LSO move",
     DERIVE_TESTS),
    (DERIVE, "if ts is not None and 0 < ts <= now:", "if ts is not None and ts <= now:",
     "stall clock: a record timestamp of 0 or less used", DERIVE_TESTS),
    (DERIVE, "since = min(since, ts)", "since = ts", "stall clock: moved forward by a later record", DERIVE_TESTS),
    (DERIVE, "if o.last_stable_offset < o.high_watermark}", "if o.last_stable_offset <= o.high_watermark}",
     "stalled LSOs: an LSO at the HWM", DERIVE_TESTS),
    (DERIVE, "return sorted(k for k in stalled if k not in known)", "return sorted(stalled)",
     "LSO timestamps: known ones asked again", DERIVE_TESTS),
    (DERIVE, _GROUP_SKIP, "if p is None or offset <= 0:", "group lag: a committed offset of 0 dropped", DERIVE_TESTS),
    (DERIVE, _GROUP_SKIP, "if p is None:", "group lag: no committed offset (-1) counted", DERIVE_TESTS),
    (DERIVE, "max(p.last_stable_offset - offset, 0)", "p.last_stable_offset - offset",
     "group lag: a negative read_committed lag", DERIVE_TESTS),
    (DERIVE, "max(p.high_watermark - offset, 0)", "p.high_watermark - offset",
     "group lag: a negative read_uncommitted lag", DERIVE_TESTS),
    (DERIVE, _BLOCKED, "if p and p.stalled_seconds >= min_stall_seconds:", "blocked: behind a caught-up partition",
     DERIVE_TESTS),
    (DERIVE, _BLOCKED, "if p and p.stalled_since is not None and p.stalled_seconds > min_stall_seconds:",
     "blocked: the minimum stall's boundary moved", DERIVE_TESTS),
    (DERIVE, _BLOCKED, "if p and p.stalled_since is not None:", "blocked: the minimum stall ignored", DERIVE_TESTS),
    (DERIVE, _BLOCKED, "if p.stalled_since is not None and p.stalled_seconds >= min_stall_seconds:",
     "blocked: a partition not polled", DERIVE_TESTS),
    # -------------------------------------------------------------- derive.py: open and hanging transactions
    (DERIVE, "        if d.state not in OPEN_STATES:\n            continue\n        known = d.start_ms >= 0",
     "        known = d.start_ms >= 0", "open: an ended transaction listed", DERIVE_TESTS),
    (DERIVE, "known = d.start_ms >= 0", "known = True", "open: an unknown start given an age", DERIVE_TESTS),
    (DERIVE, "if known and not is_two_phase(d.timeout_ms) else None", "if known else None",
     "open: a two-phase transaction given headroom", DERIVE_TESTS),
    (MODEL, "return timeout_ms >= TWO_PHASE_TIMEOUT_MS", "return timeout_ms > TWO_PHASE_TIMEOUT_MS",
     "two-phase: boundary moved", DERIVE_TESTS),
    (DERIVE, _SORT, "    out.sort(key=lambda t: t.start_ms)\n", "open: unknown starts sorted first", DERIVE_TESTS),
    (DERIVE, _SORT, "", "open: not sorted oldest first", DERIVE_TESTS),
    (DERIVE, _MAY_HOLD, "if tp not in unavailable)", "hanging may hold: a caught-up partition asked", DERIVE_TESTS),
    (DERIVE, _MAY_HOLD, "if s.stalled_since is not None)", "hanging may hold: an unread partition asked",
     DERIVE_TESTS),
    (DERIVE, _CANDIDATE, "if now_ms - p.last_timestamp_ms > max_timeout_ms]",
     "candidates: producers with no open transaction", DERIVE_TESTS),
    (DERIVE, _CANDIDATE, "if p.txn_start_offset > 0 and now_ms - p.last_timestamp_ms > max_timeout_ms]",
     "candidates: a transaction at offset 0", DERIVE_TESTS),
    (DERIVE, _CANDIDATE, "if p.txn_start_offset >= 0 and now_ms - p.last_timestamp_ms >= max_timeout_ms]",
     "candidates: the max timeout's boundary moved", DERIVE_TESTS),
    (DERIVE, "        if tid is None:\n            reason", "        if False:\n            reason",
     "find-hanging: no transactional id", DERIVE_TESTS),
    (DERIVE, "elif d is None:", "elif False:", "find-hanging: no coordinator state", DERIVE_TESTS),
    (DERIVE, "elif d.producer_id != c.producer_id:", "elif False:", "find-hanging: another producer id",
     DERIVE_TESTS),
    (DERIVE, "        elif d.state not in OPEN_STATES:", "        elif False:", "find-hanging: coordinator not open",
     DERIVE_TESTS),
    (DERIVE, "elif (c.topic, c.partition) not in d.partitions:", "elif False:",
     "find-hanging: partition not in the transaction", DERIVE_TESTS),
    (DERIVE, _LSO_HANGING, "if p.stalled_seconds >= threshold_seconds]", "LSO fallback: a caught-up partition",
     DERIVE_TESTS),
    (DERIVE, _LSO_HANGING, "if p.stalled_since is not None and p.stalled_seconds > threshold_seconds]",
     "LSO fallback: the threshold's boundary moved", DERIVE_TESTS),
    (DERIVE, "    if configured is not None:\n", "    if configured:\n", "threshold: a configured 0 ignored",
     DERIVE_TESTS),
    (DERIVE, "max_ms = facts.transaction_max_timeout_ms or default_max_ms", "max_ms = default_max_ms",
     "threshold: the broker's max timeout ignored", DERIVE_TESTS),
    (DERIVE, "return (max_ms + LATE_TRANSACTION_SLACK_MS) / 1000", "return max_ms / 1000", "threshold: no slack",
     DERIVE_TESTS),
    (DERIVE, "return {tid for tid in previously_open if tid not in now_open}", "return set(previously_open)",
     "ended: ids still open", DERIVE_TESTS),
    # -------------------------------------------------------------- derive.py: epochs
    (DERIVE, "        epochs.pop(d.transactional_id, None)", "        None",
     "epochs: a described id not made the newest", DERIVE_TESTS),
    (DERIVE, _FORGET, "len(epochs) - limit", "epochs: fewer ids than the limit", DERIVE_TESTS),
    (DERIVE, _FORGET, "max(0, len(epochs) - limit + 1)", "epochs: the limit's boundary moved", DERIVE_TESTS),
    (DERIVE, _BUMPED, "if prev and d.producer_epoch > prev[1]:", "epoch bumps: a new producer id missed",
     DERIVE_TESTS),
    (DERIVE, _BUMPED, "if prev and prev[0] != d.producer_id:", "epoch bumps: a higher epoch missed", DERIVE_TESTS),
    (DERIVE, _BUMPED, "if prev and (prev[0] != d.producer_id or d.producer_epoch >= prev[1]):",
     "epoch bumps: the same epoch counted", DERIVE_TESTS),
    (DERIVE, _BUMPED, "if (prev[0] != d.producer_id or d.producer_epoch > prev[1]):",
     "epoch bumps: an id not described before", DERIVE_TESTS),
    # -------------------------------------------------------------- derive.py: the transaction log, brokers, hashing
    (DERIVE, "if replication_factor > 0 else min_insync_replicas", "if replication_factor >= 0 else min_insync_replicas",
     "min ISR: no replicas listed caps it at 0", DERIVE_TESTS),
    (DERIVE, "    if facts.transaction_state_min_insync_replicas is not None:\n", "    if False:\n",
     "min ISR: the topic's own ignored", DERIVE_TESTS),
    (DERIVE, "if min_isr is not None else 1", "if min_isr is not None else 2", "min ISR: an unknown minimum above 1",
     DERIVE_TESTS),
    (DERIVE, "            if r not in live:", "            if True:", "missing brokers: live ones counted",
     DERIVE_TESTS),
    (DERIVE, _UNAVAILABLE, "if tp in previous:", "unavailable: the last state overrides this poll's read",
     DERIVE_TESTS),
    (DERIVE, _UNAVAILABLE, "if tp not in out:", "unavailable: a partition never read", DERIVE_TESTS),
    (DERIVE, "return groups + [g for g in previous if g.group in unavailable]", "return groups + list(previous)",
     "groups: the old lags of answered groups kept", DERIVE_TESTS),
    (DERIVE, "return h - (1 << 32) if h & 0x80000000 else h", "return h", "hash: not signed", DERIVE_TESTS),
    (DERIVE, "h = (31 * h + (data[i] << 8 | data[i + 1])) & 0xFFFFFFFF", "h = 31 * h + (data[i] << 8 | data[i + 1])",
     "hash: no 32-bit overflow", DERIVE_TESTS),
    (DERIVE, "return (0 if h == -(1 << 31) else abs(h)) % partitions", "return abs(h) % partitions",
     "coordinator partition: abs of Integer.MIN_VALUE", DERIVE_TESTS),
    # -------------------------------------------------------------- derive.py: the findings
    (FINDINGS, "    out.sort(key=lambda f: f.severity != \"critical\")\n", "", "findings: not most severe first",
     DERIVE_TESTS),
    (FINDINGS, "if n > MAX_NAMED_PARTITIONS else", "if n >= MAX_NAMED_PARTITIONS else",
     "findings: the named count's boundary moved", DERIVE_TESTS),
    (FINDINGS, "    if not below:\n        return []\n", "", "min ISR finding: with nothing below", DERIVE_TESTS),
    (FINDINGS, "if txn_log_partition_of(t.transactional_id, len(txn_log)) in blocked_parts)", "if True)",
     "min ISR finding: ids of healthy partitions named", DERIVE_TESTS),
    (FINDINGS, "    if not missing:\n        return []\n", "", "broker finding: with none missing", DERIVE_TESTS),
    (FINDINGS, "\"critical\" if cause == \"offline\" else \"warning\"", "\"critical\"",
     "unread partition finding: every cause critical", DERIVE_TESTS),
    (FINDINGS, "    if not r.groups_unavailable:\n        return []\n", "", "group finding: with none unread",
     DERIVE_TESTS),
    (FINDINGS, _STALLED, "if p.stalled_seconds >= r.stall_warning_seconds]", "stalled finding: a caught-up partition",
     DERIVE_TESTS),
    (FINDINGS, _STALLED, "if p.stalled_since is not None and p.stalled_seconds > r.stall_warning_seconds]",
     "stalled finding: the warning age's boundary moved", DERIVE_TESTS),
    (FINDINGS, "for p in _stalled(r) if (p.topic, p.partition) not in hanging_tps]", "for p in _stalled(r)]",
     "stalled finding: a hanging partition named twice", DERIVE_TESTS),
    (FINDINGS, "for g in r.blocked_groups if (g.topic, g.partition) in stalled]", "for g in r.blocked_groups]",
     "blocked finding: behind a stall younger than the warning age", DERIVE_TESTS),
    (FINDINGS, _TWO_PHASE_AGE, "if t.age_seconds > r.two_phase_max_age_seconds:", "two-phase finding: an unknown age",
     DERIVE_TESTS),
    (FINDINGS, _TWO_PHASE_AGE, "if t.age_seconds is not None and t.age_seconds >= r.two_phase_max_age_seconds:",
     "two-phase finding: the max age's boundary moved", DERIVE_TESTS),
    (FINDINGS, "            continue   # the broker never times it out", "            pass   # the broker never times it out",
     "two-phase finding: given the timeout findings too", DERIVE_TESTS),
    (FINDINGS, _CAP, "if t.timeout_ms > max_ms:", "cap finding: an unknown cap", DERIVE_TESTS),
    (FINDINGS, _CAP, "if max_ms is not None and t.timeout_ms >= max_ms:", "cap finding: boundary moved", DERIVE_TESTS),
    (FINDINGS, "if t.headroom_seconds is not None and t.headroom_seconds < 0:", "if t.headroom_seconds < 0:",
     "headroom finding: an unknown headroom", DERIVE_TESTS),
    # -------------------------------------------------------------- scrape_clock.py: who steers the polls
    (SCRAPE_CLOCK, "if len(agree) < STEADY_AFTER or len(agree) * 2 <= len(recent):", "if len(agree) < STEADY_AFTER:",
     "steady: without most recent intervals agreeing", SCRAPE_TESTS),
    (SCRAPE_CLOCK, "if len(agree) < STEADY_AFTER or len(agree) * 2 <= len(recent):",
     "if len(agree) * 2 <= len(recent):", "steady: with fewer than STEADY_AFTER agreeing", SCRAPE_TESTS),
    (SCRAPE_CLOCK, "abs(x - median) <= TOLERANCE * median", "abs(x - median) <= 2 * TOLERANCE * median",
     "steady: the tolerance widened", SCRAPE_TESTS),
    (SCRAPE_CLOCK, "elif s.intervals or s.scheduled:", "elif s.intervals:",
     "settling: Prometheus's first scrape not counted", SCRAPE_TESTS),
    (SCRAPE_CLOCK, "if not s.intervals and not s.scheduled] or list(self._scrapers)",
     "if True] or list(self._scrapers)", "memory cap: a steady scraper pushed out by one-off requests", SCRAPE_TESTS),
    (SCRAPE_CLOCK, "return min(max(earliest, c.next_after(earliest + duration) - duration - margin) for c in cadences)",
     "return max(max(earliest, c.next_after(earliest + duration) - duration - margin) for c in cadences)",
     "two scrapers: the later one's scrape served first", SCRAPE_TESTS),
    (SCRAPE_CLOCK, "    if view.settling:\n        return max(now, earliest)\n", "",
     "settling: a new scraper waits for the steady ones' schedule", SCRAPE_TESTS),
    (SCRAPE_CLOCK, "if now - s.last > max(horizon, 1.0):", "if now - s.last > 10 * max(horizon, 1.0):",
     "gone: a scraper that stopped kept", SCRAPE_TESTS),
    (SCRAPE_CLOCK, "return 0.1 + 0.25 * duration", "return 0.1",
     "margin: not growing with the poll's duration", SCRAPE_TESTS),
    (SCRAPE_CLOCK, "if not cadences:\n        return max(earliest, last_start + idle_interval)",
     "if not cadences:\n        return earliest", "nobody scraping: polls back to back", SCRAPE_TESTS),
]


def run(mutation) -> tuple[str, bool]:
    rel, old, new, what, tests = mutation
    with tempfile.TemporaryDirectory(prefix="txnwatch-mutant-") as tmp:
        for tree in ("txnwatch", "tests"):   # tests/conftest.py puts its own checkout first on the path
            shutil.copytree(ROOT / tree, Path(tmp) / tree, ignore=shutil.ignore_patterns("__pycache__"))
        if old is not None:      # None: the baseline, the unmutated copy
            path = Path(tmp) / rel
            text = path.read_text()
            if text.count(old) != 1:
                return f"MISSING  {what}: the text to mutate is not in {rel} exactly once (update this script)", False
            path.write_text(text.replace(old, new))
        # no plugin but xdist's hooks (tests/conftest.py implements one): hypothesis's and
        # schemathesis's plugins would take most of each mutant's time to import
        env = {**os.environ, "PYTHONPATH": tmp, "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
        probe = subprocess.run([sys.executable, "-c", "import txnwatch; print(txnwatch.__file__)"], env=env,
                               capture_output=True, text=True, cwd=tmp)
        if not probe.stdout.startswith(tmp):
            return f"{what}: the mutant is not the package imported ({probe.stdout.strip()})", False
        out = subprocess.run([sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider",
                              "-p", "xdist.plugin", *tests],
                             env=env, cwd=tmp, capture_output=True, text=True)
        caught = out.returncode != 0
        return f"{'caught  ' if caught else 'SURVIVED'} {what}", caught


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", action="append", choices=sorted(set(GROUP_OF.values())),
                        help="the mutations of this part only (repeatable)")
    parser.add_argument("--jobs", type=int, choices=(1, 2), default=2, help="mutants tested at once")
    args = parser.parse_args()
    chosen = [m for m in MUTATIONS if not args.only or GROUP_OF[m[0]] in args.only]
    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        suites = sorted({tuple(m[4]) for m in chosen})
        for tests, (_, failed) in zip(suites, pool.map(run, [(STATE, None, None, "baseline", list(t))
                                                              for t in suites]), strict=True):
            if failed:
                print(f"the unmutated tests fail ({' '.join(tests)}): fix them first", flush=True)
                return 2
        survived = 0
        for line, caught in pool.map(run, chosen):
            print(line, flush=True)
            survived += not caught
    print(f"{len(chosen) - survived} of {len(chosen)} mutations caught")
    return 1 if survived else 0


if __name__ == "__main__":
    sys.exit(main())
