"""A query's trigger mode: parsing the JVM's text, the probe thread, the series, the page."""

from __future__ import annotations

import threading

import pytest
from prometheus_client.parser import text_string_to_metric_families

from txnwatch.exporter.spark.page import spark_section
from txnwatch.spark_listener.events import EventValidationError, from_trigger, validate_event
from txnwatch.spark_listener.serve import render_text
from txnwatch.spark_listener.state import SparkQueryState
from txnwatch.spark_listener.trigger import NoJvmSide, TriggerProbe, jvm_trigger_text, parse_trigger


@pytest.mark.parametrize(("text", "mode", "interval", "known"), [
    ("ProcessingTimeTrigger(1000)", "ProcessingTime", 1.0, True),
    ("ProcessingTimeTrigger(0)", "ProcessingTime", None, True),          # as fast as possible
    ("AvailableNowTrigger", "AvailableNow", None, True),
    ("AvailableNowTrigger$", "AvailableNow", None, True),
    ("OneTimeTrigger", "Once", None, True),
    ("ContinuousTrigger(2000)", "Continuous", 2.0, True),
    ("RealTimeTrigger(300000)", "RealTime", 300.0, True),
    ("org.apache.spark.sql.execution.streaming.RealTimeTrigger(5000)", "RealTime", 5.0, True),
    ("PipelinedTrigger(250)", "Pipelined", 0.25, False),                 # a mode from a later Spark
    ("SomethingElse", "SomethingElse", None, False),
    ("ProcessingTimeTrigger(soon)", "ProcessingTime", None, True),
    ("<not a trigger>", "unknown", None, False),
])
def test_parse_trigger(text, mode, interval, known):
    info = parse_trigger(text)
    assert (info.mode, info.interval_seconds, info.known) == (mode, interval, known)
    assert info.detail == text


def samples(state: SparkQueryState) -> dict[tuple, float]:
    out = {}
    for fam in text_string_to_metric_families(render_text(state)):
        for s in fam.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def test_the_trigger_event_becomes_an_info_series_and_an_interval():
    st = SparkQueryState()
    st.apply({"type": "started", "query_id": "q1", "query": "orders", "timestamp": 1.0})
    assert not [k for k in samples(st) if k[0] == "spark_streaming_query_trigger_info"]
    event = validate_event(from_trigger("q1", "RealTime", 300.0, name="orders", now=2.0))
    assert st.apply(event)
    smp = samples(st)
    lb = (("query", "orders"), ("query_id", "q1"))
    assert smp[("spark_streaming_query_trigger_info", (*lb, ("trigger", "RealTime")))] == 1
    assert smp[("spark_streaming_trigger_interval_seconds", lb)] == 300
    # a restart under another trigger replaces it: one info series per query
    st.apply(from_trigger("q1", "ProcessingTime", None, name="orders", now=3.0))
    smp = samples(st)
    assert [k for k in smp if k[0] == "spark_streaming_query_trigger_info"] == [
        ("spark_streaming_query_trigger_info", (*lb, ("trigger", "ProcessingTime")))]
    assert ("spark_streaming_trigger_interval_seconds", lb) not in smp


@pytest.mark.parametrize(("event", "field"), [
    ({"type": "trigger", "query_id": "q", "timestamp": 1}, "trigger"),
    ({"type": "trigger", "query_id": "q", "timestamp": 1, "trigger": ""}, "trigger"),
    ({"type": "trigger", "query_id": "q", "timestamp": 1, "trigger": "x" * 65}, "trigger"),
    ({"type": "trigger", "query_id": "q", "timestamp": 1, "trigger": "RealTime", "interval_seconds": -1},
     "interval_seconds"),
    ({"type": "trigger", "query_id": "q", "timestamp": 1, "trigger": "RealTime", "interval_seconds": "5"},
     "interval_seconds"),
])
def test_a_bad_trigger_event_names_its_field(event, field):
    with pytest.raises(EventValidationError) as err:
        validate_event(event)
    assert err.value.field == field


def test_the_page_says_what_a_trigger_mode_means():
    st = SparkQueryState()
    for qid, mode, interval in (("a", "ProcessingTime", 1.0), ("b", "RealTime", 300.0), ("c", "Pipelined", 0.25)):
        st.apply({"type": "started", "query_id": qid, "query": qid, "timestamp": 1.0})
        st.apply(from_trigger(qid, mode, interval, name=qid))
    st.apply({"type": "started", "query_id": "d", "query": "d", "timestamp": 1.0})
    html = spark_section(st.cards(), [], [], now=10.0)
    assert "ProcessingTime 1s" in html
    assert "RealTime 300s" in html and "batches last the whole trigger" in html
    assert "Pipelined 0.25s: a trigger mode txnwatch does not know" in html
    assert "not known yet" in html


def test_the_probe_asks_once_per_run_off_the_callers_thread_and_counts_failures():
    asked, emitted, errors, threads = [], [], [], set()

    def lookup(qid):
        threads.add(threading.current_thread().name)
        asked.append(qid)
        if qid == "broken":
            raise RuntimeError("py4j gone")
        if qid == "late" and asked.count("late") == 1:
            return None            # not registered yet: asked again on the next event
        return "RealTimeTrigger(5000)"

    probe = TriggerProbe(lookup, lambda qid, info: emitted.append((qid, info.mode, info.interval_seconds)),
                         lambda stage, exc: errors.append((stage, str(exc))))
    try:
        for qid, run in (("q", "run-1"), ("q", "run-1"), ("broken", "run-1"), ("late", "run-1"), ("q", "run-2")):
            probe.request(qid, run)
        probe.wait_idle()
        assert asked == ["q", "broken", "late", "q"]    # once per (query, run)
        assert emitted == [("q", "RealTime", 5.0), ("q", "RealTime", 5.0)]
        probe.request("late", "run-1")
        probe.request("broken", "run-1")                   # a failure is not retried for the run
        probe.wait_idle()
    finally:
        probe.close()
    assert emitted[-1] == ("late", "RealTime", 5.0)
    assert errors == [("trigger", "py4j gone")]
    assert threads == {"txnwatch-trigger-probe"}


def test_a_full_probe_queue_drops_the_request_and_asks_again_later():
    release, taken = threading.Event(), threading.Event()
    asked = []

    def lookup(qid):
        asked.append(qid)
        taken.set()
        release.wait(10)
        return "ProcessingTimeTrigger(1000)"

    probe = TriggerProbe(lookup, lambda qid, info: None, lambda stage, exc: None, max_pending=1)
    try:
        probe.request("a", "r")          # taken by the thread, which blocks in lookup
        assert taken.wait(30), "the probe thread never took the first request"
        probe.request("b", "r")          # queued
        probe.request("c", "r")          # queue full: dropped, not remembered
        assert probe.dropped == 1
        release.set()
        probe.wait_idle()
        probe.request("c", "r")
        probe.wait_idle()
    finally:
        probe.close()
    assert asked == ["a", "b", "c"]


def test_a_session_without_a_jvm_is_asked_once_per_run_and_counts_no_error():
    class ConnectQuery:          # Spark Connect's StreamingQuery: no _jsq
        pass

    class Streams:
        def __init__(self):
            self.asked = 0

        def get(self, qid):
            self.asked += 1
            return ConnectQuery() if qid == "q" else None

    class Session:
        streams = Streams()

    spark = Session()
    with pytest.raises(NoJvmSide):
        jvm_trigger_text(spark, "q")
    assert jvm_trigger_text(spark, "gone") is None
    errors, emitted = [], []
    probe = TriggerProbe(lambda qid: jvm_trigger_text(spark, qid), lambda q, i: emitted.append(q),
                         lambda stage, exc: errors.append(stage))
    try:
        for _ in range(3):
            probe.request("q", "run-1")
            probe.wait_idle()
    finally:
        probe.close()
    assert spark.streams.asked == 3 and emitted == [] and errors == []   # 2 direct calls + 1 by the probe
