"""The tap's state machine on records the transaction coordinator really wrote: the
transaction scenario (txnwatch_dev/transactions/scenario.py) captured from Apache Kafka 4.4 with a
TV2 (Java 4.x) and a TV0 (librdkafka) client and from Kafka 3.9, replayed without I/O.

Every line must give the scenario's expected counts: the per-commit epoch bumps of TV2 are
no fences, a new instance that cut an open transaction off is a fence (new_instance) and one
that took an idle id over a re-initialisation (no fence), a coordinator timeout counts as one
whatever the transaction version, and a restart right after the client's own abort is a
re-initialisation, also under TV2, where that abort bumps the epoch as a fence's does. (The rule before
issue 20 -- under TV2 a fence is an epoch bump of 2 or more -- counts no fence and no
timeout on the 4.4 captures: these tests fail with it.)

Regenerate a capture: python -m txnwatch_dev.transactions.scenario --kafka-version 4 --client java
--capture tests/fixtures/txnlog/scenario-kafka-4-java.jsonl
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from txnwatch.apps import AppResolver
from txnwatch.exporter.tap.decoder import decode_key, decode_value
from txnwatch.exporter.tap.state import (
    FENCE_RETRY_WINDOW_MS,
    NEW_INSTANCE,
    OPERATOR,
    TIMEOUT,
    TV2_FENCE_RETRY_WINDOW_MS,
    TxnLogState,
)
from txnwatch_dev.transactions.scenario_steps import EXPECTED, STEPS, Counts, app_of

FIXTURES = sorted((Path(__file__).resolve().parents[1] / "fixtures" / "txnlog").glob("scenario-*.jsonl"))


def replay(path: Path) -> TxnLogState:
    records = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    records.sort(key=lambda r: (r["partition"], r["offset"]))     # the log's own order per id
    state = TxnLogState(AppResolver())
    for r in records:
        value = decode_value(bytes.fromhex(r["value_hex"])) if r.get("value_hex") else None
        state.apply(decode_key(bytes.fromhex(r["key_hex"])), value, r["timestamp"], r["timestamp"], counting=True)
    return state


def counts(state: TxnLogState, step: str) -> Counts:
    v, app = state.view(), app_of(step)
    return Counts(v.transactions.get((app, "committed"), 0), v.transactions.get((app, "aborted"), 0),
                  v.fencing.get((app, NEW_INSTANCE), 0), v.reinits.get(app, 0), v.timeouts.get(app, 0),
                  v.fencing.get((app, OPERATOR), 0), v.expirations.get(app, 0))


def test_the_captures_cover_every_line():
    names = {p.name for p in FIXTURES}
    assert {"scenario-kafka-4-java.jsonl", "scenario-kafka-4-librdkafka.jsonl",
            "scenario-kafka-3.9-librdkafka.jsonl", "scenario-kafka-3.9-java.jsonl"} <= names


@pytest.mark.parametrize("path", FIXTURES, ids=lambda p: p.stem)
def test_real_coordinator_records_give_the_scenario_counts(path):
    state = replay(path)
    steps = [s for s in STEPS if any(r for r in [app_of(s)] if r in state.view().ids_per_app
                                     or state.view().expirations.get(r))]
    assert "timeout" in steps and "fence-open" in steps and "restart" in steps
    for step in steps:
        assert counts(state, step) == EXPECTED[step], step
    timeouts = sum(state.view().timeouts.values())
    fences = state.view().fencing
    assert timeouts == 1 and fences.get((app_of("timeout"), TIMEOUT)) == 1


@pytest.mark.parametrize("path", FIXTURES, ids=lambda p: p.stem)
def test_what_tells_a_restart_after_the_clients_own_abort_from_a_fence(path):
    """The scenario's `restart` id: its own last abort, the restart's Empty, then the second
    instance's fence of the restarted one's transaction and that instance's retry. The own
    abort bumps the epoch only under TV2 (the Ongoing's CTV 2), and then its records are a
    fence's; what differs is the time from the CompleteAbort to the Empty."""
    records = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    records.sort(key=lambda r: (r["partition"], r["offset"]))
    values = [decode_value(bytes.fromhex(r["value_hex"])) for r in records
              if r.get("value_hex") and decode_key(bytes.fromhex(r["key_hex"])).transactional_id == "scn-restart-0"]
    inits = [i for i, x in enumerate(values) if x.status.name == "EMPTY"][1:]
    assert len(inits) == 2
    restart, retry = inits
    ongoing, prepare, complete = values[restart - 3:restart]
    assert [x.status.name for x in (ongoing, prepare, complete)] == ["ONGOING", "PREPARE_ABORT", "COMPLETE_ABORT"]
    tv2 = ongoing.client_transaction_version >= 2
    assert prepare.producer_epoch == ongoing.producer_epoch + (1 if tv2 else 0)
    fence_ongoing, fence_prepare, fence_complete = values[retry - 3:retry]
    assert fence_prepare.producer_epoch == fence_ongoing.producer_epoch + 1      # the coordinator's bump
    if tv2:     # nothing else tells the client's abort from the fence's (below TV2 the bump does)
        for x, y in ((prepare, fence_prepare), (complete, fence_complete)):
            assert (x.client_transaction_version, x.previous_producer_id, x.next_producer_id, x.timeout_ms) == \
                (y.client_transaction_version, y.previous_producer_id, y.next_producer_id, y.timeout_ms)
    restart_gap = values[restart].last_update_ms - complete.last_update_ms
    retry_gap = values[retry].last_update_ms - fence_complete.last_update_ms
    assert restart_gap > TV2_FENCE_RETRY_WINDOW_MS
    assert retry_gap <= (TV2_FENCE_RETRY_WINDOW_MS if tv2 else FENCE_RETRY_WINDOW_MS)
