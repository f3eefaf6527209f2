"""The tap's state machine on records the transaction coordinator really wrote: the
transaction scenario (txnwatch_dev/transactions/scenario.py) captured from Apache Kafka 4.4 with a
TV2 (Java 4.x) and a TV0 (librdkafka) client and from Kafka 3.9, replayed without I/O.

Every line must give the scenario's expected counts: the per-commit epoch bumps of TV2 are
no fences, a new instance that cut an open transaction off is a fence (new_instance) and one
that took an idle id over a re-initialisation (no fence), a coordinator timeout counts as one
whatever the transaction version. (The rule before
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
from txnwatch.exporter.tap.state import NEW_INSTANCE, OPERATOR, TIMEOUT, TxnLogState
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
            "scenario-kafka-3.9-librdkafka.jsonl"} <= names


@pytest.mark.parametrize("path", FIXTURES, ids=lambda p: p.stem)
def test_real_coordinator_records_give_the_scenario_counts(path):
    state = replay(path)
    steps = [s for s in STEPS if any(r for r in [app_of(s)] if r in state.view().ids_per_app
                                     or state.view().expirations.get(r))]
    assert "timeout" in steps and "fence-open" in steps
    for step in steps:
        assert counts(state, step) == EXPECTED[step], step
    timeouts = sum(state.view().timeouts.values())
    fences = state.view().fencing
    assert timeouts == 1 and fences.get((app_of("timeout"), TIMEOUT)) == 1
