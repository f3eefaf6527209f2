"""Conversion of PySpark listener events (3.4 to 4.x shapes) and event validation."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from types import SimpleNamespace

import pytest

from txnwatch.spark_listener import events as ev
from txnwatch.spark_listener.events import EventValidationError, validate_event, validate_payload
from txnwatch.spark_listener.serve import render_text
from txnwatch.spark_listener.state import SparkQueryState

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "spark"
KAFKA_ID = "5f1c9a1e-0b7d-4c55-9a51-2b8e6f2d7c10"


def load(name: str) -> dict:
    return json.loads((FIX / name).read_text())


def rendered(*events) -> str:
    st = SparkQueryState()
    for e in events:
        st.apply(e)
    return render_text(st, include_self=False)


def test_spark4_progress_object_matches_plain_json():
    from pyspark.sql.streaming.listener import QueryProgressEvent

    raw = load("kafka_progress.json")
    spark4 = QueryProgressEvent.fromJson({"progress": raw})        # dict subclass, UUID ids, Rows
    assert isinstance(spark4.progress, dict)
    e4 = ev.from_progress(spark4)
    plain = ev.from_progress(raw)
    assert e4["query"] == "orders-enrich" and e4["query_id"] == KAFKA_ID
    assert e4["timestamp"] == pytest.approx(ev.parse_timestamp("2026-11-20T09:15:02.118Z"))
    json.dumps(e4, allow_nan=False)                                 # JSON-able as is
    assert rendered(e4) == rendered(plain)


def test_spark34_progress_with_json_property_and_method():
    raw = (FIX / "rate_progress.json").read_text()
    as_property = SimpleNamespace(progress=SimpleNamespace(json=raw))          # 3.4/3.5 shape
    as_method = SimpleNamespace(progress=SimpleNamespace(json=lambda: raw))    # py4j-style
    as_json_value = SimpleNamespace(progress=SimpleNamespace(jsonValue=json.loads(raw)))
    a, b, c = (ev.from_progress(x) for x in (as_property, as_method, as_json_value))
    assert a == b == c
    assert a["query"] == a["query_id"] == "8d6f0b0e-2d1c-4a55-b7a9-1f0f5c3e9a01"   # unnamed
    assert a["progress"]["batchId"] == 1


def test_progress_non_finite_numbers_become_null():
    p = dict(load("rate_progress.json"), inputRowsPerSecond=float("nan"),
             processedRowsPerSecond=float("inf"))
    e = ev.from_progress(p)
    assert e["progress"]["inputRowsPerSecond"] is None
    json.dumps(e, allow_nan=False)


def test_started_idle_terminated_from_pyspark_classes():
    from pyspark.sql.streaming.listener import QueryIdleEvent, QueryStartedEvent, QueryTerminatedEvent

    rid = str(uuid.uuid4())
    s = ev.from_started(QueryStartedEvent.fromJson(
        {"id": KAFKA_ID, "runId": rid, "name": None, "timestamp": "2026-11-20T09:00:00.000Z"}))
    assert s == {"type": "started", "query_id": KAFKA_ID, "query": KAFKA_ID, "run_id": rid,
                 "timestamp": pytest.approx(ev.parse_timestamp("2026-11-20T09:00:00Z"))}
    i = ev.from_idle(QueryIdleEvent.fromJson(
        {"id": KAFKA_ID, "runId": rid, "timestamp": "2026-11-20T09:00:10.000Z"}), name="orders")
    assert i["type"] == "idle" and i["query"] == "orders"
    t = ev.from_terminated(QueryTerminatedEvent.fromJson(load("terminated_error.json")), now=12.0)
    assert t["type"] == "terminated" and t["timestamp"] == 12.0
    assert t["error_class"] == "FOREACH_BATCH_USER_FUNCTION_ERROR"
    assert t["exception"].startswith("org.apache.spark")
    clean = ev.from_terminated(QueryTerminatedEvent.fromJson(
        {"id": KAFKA_ID, "runId": rid, "exception": None, "errorClassOnException": None}), name="orders")
    assert clean["error_class"] is None and clean["exception"] is None and clean["query"] == "orders"
    for e in (s, i, t, clean):
        assert validate_event(json.loads(json.dumps(e))) == e


def test_long_exception_is_truncated():
    t = ev.from_terminated(SimpleNamespace(id=KAFKA_ID, exception="x" * 10_000, errorClassOnException=None))
    assert len(t["exception"]) == ev.MAX_EXCEPTION_CHARS


def test_timestamps():
    assert ev.parse_timestamp("2026-11-20T09:15:02.118Z") == pytest.approx(1795166102.118)
    assert ev.parse_timestamp(12) == 12.0
    assert ev.parse_timestamp("12.5") == 12.5
    for bad in (None, "", "yesterday", float("nan"), True, [1]):
        assert ev.parse_timestamp(bad) is None


GOOD = {"type": "progress", "query_id": "q", "query": "name", "timestamp": 1.0, "progress": {}}


@pytest.mark.parametrize("obj, field", [
    ([1, 2], ""),
    ({"query_id": "q"}, "type"),
    ({"type": "bogus", "query_id": "q"}, "type"),
    ({"type": "started", "timestamp": 1}, "query_id"),
    ({"type": "started", "query_id": 7, "timestamp": 1}, "query_id"),
    ({"type": "started", "query_id": "", "timestamp": 1}, "query_id"),
    ({"type": "started", "query_id": "q" * 500, "timestamp": 1}, "query_id"),
    ({"type": "started", "query_id": "q\n", "timestamp": 1}, "query_id"),
    ({"type": "started", "query_id": "q", "query": ["x"], "timestamp": 1}, "query"),
    ({"type": "started", "query_id": "q"}, "timestamp"),
    ({"type": "started", "query_id": "q", "timestamp": "soon"}, "timestamp"),
    ({"type": "started", "query_id": "q", "timestamp": True}, "timestamp"),
    ({"type": "progress", "query_id": "q", "timestamp": 1}, "progress"),
    ({"type": "progress", "query_id": "q", "timestamp": 1, "progress": "{}"}, "progress"),
    ({"type": "terminated", "query_id": "q", "timestamp": 1, "error_class": 3}, "error_class"),
    ({"type": "terminated", "query_id": "q", "timestamp": 1, "exception": {"a": 1}}, "exception"),
    ({"type": "producer_transactions"}, "app"),
    ({"type": "producer_transactions", "app": "a"}, "records"),
    ({"type": "producer_transactions", "app": "a", "records": {}}, "records"),
    ({"type": "producer_transactions", "app": "a", "records": [5]}, "records[0]"),
    ({"type": "producer_transactions", "app": "a", "records": [{"outcome": "committed"}]},
     "records[0].transactional_id"),
    ({"type": "producer_transactions", "app": "a", "records": [
        {"transactional_id": "t", "outcome": "committed", "duration_seconds": 1},
        {"transactional_id": "t", "outcome": "lost", "duration_seconds": 1}]}, "records[1].outcome"),
    ({"type": "producer_transactions", "app": "a", "records": [
        {"transactional_id": "t", "outcome": "aborted", "duration_seconds": "1"}]}, "records[0].duration_seconds"),
    ({"type": "producer_transactions", "app": "a", "records": [
        {"transactional_id": "t", "outcome": "aborted", "duration_seconds": -1}]}, "records[0].duration_seconds"),
    ({"type": "producer_transactions", "app": "a", "records": [
        {"transactional_id": "t", "outcome": "aborted", "duration_seconds": 1, "commit_seconds": "x"}]},
     "records[0].commit_seconds"),
    ({"type": "producer_transactions", "app": "a", "records": [
        {"transactional_id": "t", "outcome": "aborted", "duration_seconds": 1, "error": 5}]}, "records[0].error"),
])
def test_validation_names_the_bad_field(obj, field):
    with pytest.raises(EventValidationError) as info:
        validate_event(obj)
    assert info.value.field == field


def test_validation_of_batches_prefixes_the_index():
    with pytest.raises(EventValidationError) as info:
        validate_payload({"events": [GOOD, dict(GOOD, query_id=None)]})
    assert info.value.field == "events[1].query_id"
    with pytest.raises(EventValidationError) as info:
        validate_payload({"events": "nope"})
    assert info.value.field == "events"
    assert validate_payload(GOOD) == [GOOD]
    assert validate_payload({"events": []}) == []


def test_validation_normalises():
    e = validate_event({"type": "idle", "query_id": "q", "timestamp": "2026-11-20T09:15:02.118Z",
                        "extra": "ignored"})
    assert e == {"type": "idle", "query_id": "q", "query": "q", "timestamp": pytest.approx(1795166102.118)}


def test_deeply_nested_progress_is_rejected():
    deep: dict = {}
    cur = deep
    for _ in range(50):
        cur["a"] = {}
        cur = cur["a"]
    with pytest.raises(EventValidationError) as info:
        validate_event(dict(GOOD, progress=deep))
    assert info.value.field == "progress"


def test_converted_names_always_validate():
    long_name = "n" * 500
    s = ev.from_started(SimpleNamespace(id=KAFKA_ID, runId="r", name="a\nb\tc", timestamp=None), now=1.0)
    assert s["query"] == "a b c"
    p = ev.from_progress(dict(load("rate_progress.json"), name=long_name))
    assert p["query"] == "n" * ev.MAX_ID_CHARS
    blank = ev.from_progress(dict(load("rate_progress.json"), name="   "))
    assert blank["query"] == blank["query_id"]
    for e in (s, p, blank):
        validate_event(json.loads(json.dumps(e)))
