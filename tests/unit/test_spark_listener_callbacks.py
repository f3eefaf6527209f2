"""TxnWatchListener callbacks with PySpark event objects built from JSON (no JVM)."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest

from txnwatch.spark_listener.listener import TxnWatchListener, attach
from txnwatch.spark_listener.serve import render_text
from txnwatch.spark_listener.state import SparkQueryState

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "spark"
QID = "5f1c9a1e-0b7d-4c55-9a51-2b8e6f2d7c10"
RID = "a3e2c0f4-61b2-4f7a-8d0e-9c4b1e7a5d22"


def spark_events():
    from pyspark.sql.streaming.listener import (
        QueryIdleEvent,
        QueryProgressEvent,
        QueryStartedEvent,
        QueryTerminatedEvent,
    )

    return (
        QueryStartedEvent.fromJson({"id": QID, "runId": RID, "name": "orders-enrich",
                                    "timestamp": "2026-11-20T09:15:00.000Z"}),
        QueryProgressEvent.fromJson({"progress": json.loads((FIX / "kafka_progress.json").read_text())}),
        QueryIdleEvent.fromJson({"id": QID, "runId": RID, "timestamp": "2026-11-20T09:16:00.000Z"}),
        QueryTerminatedEvent.fromJson(json.loads((FIX / "terminated_error.json").read_text())),
    )


def test_callbacks_feed_state_and_sinks_with_the_query_name():
    state = SparkQueryState()
    seen = []
    listener = TxnWatchListener(state=state, sinks=[seen.append])
    started, progress, idle, terminated = spark_events()
    listener.onQueryStarted(started)
    listener.onQueryProgress(progress)
    listener.onQueryIdle(idle)
    listener.onQueryTerminated(terminated)
    assert [e["type"] for e in seen] == ["started", "progress", "idle", "terminated"]
    assert {e["query"] for e in seen} == {"orders-enrich"}      # idle/terminated carry no name
    assert listener.counts == {"started": 1, "progress": 1, "idle": 1, "terminated": 1}
    text = render_text(state)
    assert ('spark_streaming_query_terminations_total{error_class="FOREACH_BATCH_USER_FUNCTION_ERROR",'
            f'query="orders-enrich",query_id="{QID}"}} 1.0') in text
    assert listener.errors() == {}


def test_callbacks_never_raise():
    state = SparkQueryState()

    def bad_sink(event):
        raise RuntimeError("sink bug")

    listener = TxnWatchListener(state=state, sinks=[bad_sink])
    listener.onQueryProgress(object())                 # no progress at all
    listener.onQueryProgress(type("E", (), {"progress": "not json"})())
    listener.onQueryStarted(None)
    listener.onQueryTerminated(type("E", (), {"id": uuid.uuid4()})())
    errors = listener.errors()
    assert errors["convert"] == 2
    assert errors["sink"] == 2                          # started(None) and terminated still converted
    assert state.errors()["convert"] == 2


def test_producer_transactions_via_emit():
    state = SparkQueryState()
    listener = TxnWatchListener(state=state)
    listener.emit({"type": "producer_transactions", "app": "orders-sink", "records": [
        {"transactional_id": "t", "outcome": "committed", "duration_seconds": 0.3, "commit_seconds": 0.01,
         "timeout_ms": 60000, "error": None}]})
    assert ('kafka_producer_transactions_total{app="orders-sink",outcome="committed",transactional_id="t"} 1.0'
            in render_text(state))


def test_attach_needs_a_way_out():
    with pytest.raises(ValueError):
        attach(object())


def test_detach_from_a_connect_session_waits_for_the_terminated_event_in_flight():
    """PySpark Connect's listener bus deadlocks when its last listener is removed while an
    event is on its way (SPARK-59623): detach waits for a stopped query's terminated event
    (the reference pipeline hung at exit in 1 of 4 Connect runs before)."""
    import threading
    import time
    import types

    from txnwatch.spark_listener.listener import detach

    started, _progress, _idle, terminated = spark_events()
    listener = TxnWatchListener(state=SparkQueryState())
    listener.onQueryStarted(started)
    removed_when = []

    class Streams:
        active = []              # the query was stopped: its terminated event is still on its way

        def removeListener(self, lst):
            removed_when.append(set(lst.not_terminated()))

    ConnectSession = type("SparkSession", (), {"__module__": "pyspark.sql.connect.session"})
    spark = ConnectSession()
    spark.streams = Streams()
    threading.Timer(0.3, listener.onQueryTerminated, (terminated,)).start()
    t0 = time.monotonic()
    detach(spark, listener, timeout=10)
    assert removed_when == [set()] and time.monotonic() - t0 >= 0.25
    # a classic session removes at once; a query still active is not waited for
    listener.onQueryStarted(started)
    classic = types.SimpleNamespace(streams=Streams())
    detach(classic, listener, timeout=10)
    spark.streams.active = [types.SimpleNamespace(id=QID)]
    t0 = time.monotonic()
    detach(spark, listener, timeout=10)
    assert time.monotonic() - t0 < 1
