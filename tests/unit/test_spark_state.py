"""SparkQueryState on recorded progress shapes (no Spark, no I/O)."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from txnwatch.metrics import CATALOG, OBSERVED_PREFIX, FamilyWriter
from txnwatch.spark_listener.events import from_progress, from_terminated, parse_timestamp, validate_event
from txnwatch.spark_listener.serve import render_text
from txnwatch.spark_listener.state import SparkQueryState, error_class_of, source_lag

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "spark"
KAFKA_ID = "5f1c9a1e-0b7d-4c55-9a51-2b8e6f2d7c10"


def load(name: str) -> dict:
    return json.loads((FIX / name).read_text())


def samples(state: SparkQueryState, include_self: bool = True) -> dict[tuple, float]:
    """{(sample name, sorted label items): value} from the text exposition."""
    out = {}
    for fam in text_string_to_metric_families(render_text(state, include_self=include_self)):
        for s in fam.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def get(smp: dict, metric_name: str, /, **labels) -> float:
    key = (metric_name, tuple(sorted((k, str(v)) for k, v in labels.items())))
    return smp[key]


def names(smp: dict) -> set[str]:
    return {k[0] for k in smp}


def behind(smp: dict, metric_name: str, /, **labels) -> list[float]:
    """The values of `metric_name` whose labels include `labels`, sorted (one per partition)."""
    want = {(k, str(v)) for k, v in labels.items()}
    return sorted(v for (n, lb), v in smp.items() if n == metric_name and want <= set(lb))


def progress_event(p: dict) -> dict:
    return from_progress(p)


def test_kafka_source_progress_gives_every_series():
    st = SparkQueryState()
    assert st.apply(progress_event(load("kafka_progress.json")))
    smp = samples(st)
    q = {"query": "orders-enrich", "query_id": KAFKA_ID}
    assert get(smp, "spark_streaming_query_active", **q) == 1
    assert get(smp, "spark_streaming_batch_id", **q) == 412
    assert get(smp, "spark_streaming_batch_duration_seconds_count", **q) == 1
    assert get(smp, "spark_streaming_batch_duration_seconds_sum", **q) == pytest.approx(1.84)
    assert get(smp, "spark_streaming_batch_duration_seconds_bucket", le="2.5", **q) == 1
    assert get(smp, "spark_streaming_batch_duration_seconds_bucket", le="1.0", **q) == 0
    for phase, ms in {"addBatch": 1502, "commitOffsets": 61, "getBatch": 2, "latestOffset": 9,
                      "queryPlanning": 38, "triggerExecution": 1840, "walCommit": 72}.items():
        assert get(smp, "spark_streaming_batch_phase_seconds_sum", phase=phase, **q) == pytest.approx(ms / 1000)
    assert get(smp, "spark_streaming_commit_seconds_sum", **q) == pytest.approx(0.133)
    assert get(smp, "spark_streaming_commit_seconds_bucket", le="0.25", **q) == 1
    assert get(smp, "spark_streaming_commit_seconds_bucket", le="0.1", **q) == 0
    assert get(smp, "spark_streaming_input_rows_total", **q) == 2400
    # rates are PromQL's job (rate() of the counters): no *_per_second gauges
    assert not any(n.endswith("_per_second") for n in names(smp))
    src = "KafkaV2[Subscribe[orders]]"
    lag = "spark_streaming_source_partition_behind_latest_offsets"
    assert behind(smp, lag, source=src, topic="orders", **q) == [0, 90]   # 89410-89320, 89190-89190
    assert get(smp, "spark_streaming_state_rows", operator="stateStoreSave", **q) == 18211
    assert get(smp, "spark_streaming_state_memory_bytes", operator="stateStoreSave", **q) == 6291456
    assert get(smp, "spark_streaming_watermark_delay_seconds", **q) == pytest.approx(30.216)
    # one family per observed metric: each in its own unit
    assert get(smp, "spark_streaming_observed_quality_rows", **q) == 2400
    assert get(smp, "spark_streaming_observed_quality_bad_rows", **q) == 3
    assert "spark_streaming_observed_quality_label" not in names(smp)      # not numeric
    assert get(smp, "spark_streaming_last_progress_timestamp_seconds", **q) == pytest.approx(
        parse_timestamp("2026-11-20T09:15:02.118Z"))
    assert get(smp, "spark_streaming_idle_events_total", **q) == 0


def test_offsets_as_json_strings_and_multiple_topics():
    st = SparkQueryState()
    st.apply(progress_event(load("kafka_progress_string_offsets.json")))
    smp = samples(st)
    q = {"query": "orders-enrich", "query_id": KAFKA_ID}
    src = "KafkaV2[Subscribe[orders,refunds]]"
    lag = "spark_streaming_source_partition_behind_latest_offsets"
    assert sum(behind(smp, lag, source=src, topic="orders", **q)) == 180 + 10
    assert max(behind(smp, lag, source=src, topic="orders", **q)) == 180
    assert sum(behind(smp, lag, source=src, topic="refunds", **q)) == 0


def test_source_lag_ignores_non_kafka_offsets():
    assert source_lag({"startOffset": 0, "endOffset": 3, "latestOffset": 3}) == {}
    assert source_lag({"endOffset": '{"logOffset":4}', "latestOffset": '{"logOffset":5}'}) == {}
    assert source_lag({"metrics": None, "latestOffset": "[1,2]"}) == {}


def test_rate_source_unnamed_query_uses_id_and_no_lag():
    st = SparkQueryState()
    st.apply(progress_event(load("rate_progress.json")))
    smp = samples(st)
    qid = "8d6f0b0e-2d1c-4a55-b7a9-1f0f5c3e9a01"
    q = {"query": qid, "query_id": qid}
    assert get(smp, "spark_streaming_input_rows_total", **q) == 60
    assert get(smp, "spark_streaming_batch_duration_seconds_sum", **q) == pytest.approx(0.312)
    assert "spark_streaming_source_partition_behind_latest_offsets" not in names(smp)
    assert "spark_streaming_state_rows" not in names(smp)
    assert "spark_streaming_watermark_delay_seconds" not in names(smp)


def test_no_data_trigger_refreshes_gauges_only_and_batches_count_once():
    st = SparkQueryState()
    ev = progress_event(load("rate_progress.json"))
    st.apply(ev)
    st.apply(json.loads(json.dumps(ev)))        # the same batch re-delivered (forwarder retry)
    st.apply(progress_event(load("rate_progress_nodata.json")))
    smp = samples(st)
    qid = "8d6f0b0e-2d1c-4a55-b7a9-1f0f5c3e9a01"
    q = {"query": qid, "query_id": qid}
    assert get(smp, "spark_streaming_batch_duration_seconds_count", **q) == 1
    assert get(smp, "spark_streaming_batch_phase_seconds_count", phase="latestOffset", **q) == 1
    assert get(smp, "spark_streaming_input_rows_total", **q) == 60
    assert get(smp, "spark_streaming_batch_id", **q) == 1           # last *executed* batch
    assert get(smp, "spark_streaming_last_progress_timestamp_seconds", **q) == pytest.approx(
        parse_timestamp("2026-11-22T00:58:15.160Z"))


def test_stateful_query_watermark_and_operators():
    st = SparkQueryState()
    st.apply(progress_event(load("stateful_progress.json")))
    smp = samples(st)
    q = {"query": "probe", "query_id": "65891254-4d0d-40ca-ad91-3760fd386ef4"}
    assert get(smp, "spark_streaming_state_rows", operator="stateStoreSave", **q) == 4
    assert get(smp, "spark_streaming_state_memory_bytes", operator="stateStoreSave", **q) == 2312
    # two operators with the same name stay distinct series
    assert get(smp, "spark_streaming_state_rows", operator="dedupe", **q) == 7
    assert get(smp, "spark_streaming_state_rows", operator="dedupe#2", **q) == 3
    assert get(smp, "spark_streaming_watermark_delay_seconds", **q) == pytest.approx(3.727)


def test_epoch_watermark_is_not_a_delay():
    p = load("stateful_progress.json")
    p["eventTime"] = {"watermark": "1970-01-01T00:00:00.000Z"}
    st = SparkQueryState()
    st.apply(progress_event(p))
    assert "spark_streaming_watermark_delay_seconds" not in names(samples(st))


def test_terminated_with_error_counts_error_class():
    st = SparkQueryState()
    st.apply(progress_event(load("kafka_progress.json")))

    class Ev:  # the QueryTerminatedEvent attributes (PySpark exposes them as properties)
        def __init__(self, d):
            self.id, self.runId = d["id"], d["runId"]
            self.exception, self.errorClassOnException = d["exception"], d["errorClassOnException"]

    t = from_terminated(Ev(load("terminated_error.json")), name="orders-enrich", now=5.0)
    assert t["error_class"] == "FOREACH_BATCH_USER_FUNCTION_ERROR"
    st.apply(validate_event(json.loads(json.dumps(t))))
    smp = samples(st)
    q = {"query": "orders-enrich", "query_id": KAFKA_ID}
    assert get(smp, "spark_streaming_query_active", **q) == 0
    assert get(smp, "spark_streaming_query_terminations_total",
               error_class="FOREACH_BATCH_USER_FUNCTION_ERROR", **q) == 1
    # the query restarts (same id, new run) and then stops cleanly
    st.apply({"type": "started", "query_id": KAFKA_ID, "query": "orders-enrich", "timestamp": 6.0})
    assert get(samples(st), "spark_streaming_query_active", **q) == 1
    st.apply({"type": "terminated", "query_id": KAFKA_ID, "query": KAFKA_ID, "timestamp": 7.0,
              "error_class": None, "exception": None})
    smp = samples(st)
    assert get(smp, "spark_streaming_query_terminations_total", error_class="none", **q) == 1
    assert get(smp, "spark_streaming_query_active", **q) == 0


def test_error_class_without_spark_error_class():
    d = load("terminated_error_no_class.json")
    assert error_class_of(d["errorClassOnException"], d["exception"]) == "IllegalStateException"
    assert error_class_of(None, None) == "none"
    assert error_class_of("", "") == "none"
    assert error_class_of(None, "something odd happened here") == "unknown"
    assert error_class_of(None, "py4j.Py4JException: An exception was raised") == "Py4JException"


def test_spark34_progress_with_missing_keys_and_strings_never_raises():
    st = SparkQueryState()
    assert st.apply(progress_event(load("spark34_progress.json")))
    smp = samples(st)
    q = {"query": "legacy-etl", "query_id": "0b6a3c52-7e0b-4a7c-9f57-0c1a3d1e2f33"}
    assert get(smp, "spark_streaming_batch_id", **q) == 17
    assert get(smp, "spark_streaming_input_rows_total", **q) == 250
    # no batchDuration: triggerExecution (a numeric string) stands in
    assert get(smp, "spark_streaming_batch_duration_seconds_sum", **q) == pytest.approx(2.0)
    assert get(smp, "spark_streaming_batch_phase_seconds_sum", phase="getOffset", **q) == pytest.approx(0.012)
    assert ("spark_streaming_batch_phase_seconds_sum",
            tuple(sorted({**q, "phase": "walCommit"}.items()))) not in smp     # "oops"
    assert get(smp, "spark_streaming_commit_seconds_count", **q) == 0       # walCommit not numeric
    assert get(smp, "spark_streaming_state_rows", operator="operator0", **q) == 12
    assert "spark_streaming_state_memory_bytes" not in names(smp)
    assert "spark_streaming_watermark_delay_seconds" not in names(smp)
    assert "spark_streaming_source_partition_behind_latest_offsets" not in names(smp)
    assert get(smp, "spark_streaming_observed_n_a", **q) == 7
    assert st.errors() == {}


@pytest.mark.parametrize("bad", [
    {}, {"type": "progress"}, {"type": "progress", "query_id": 5}, {"type": "nope", "query_id": "x"},
    {"type": "progress", "query_id": "x", "progress": None},
    {"type": "progress", "query_id": "x", "progress": [1, 2]},
    {"type": "progress", "query_id": "x", "progress": {"durationMs": [1], "sources": {"a": 1},
                                                       "stateOperators": "x", "eventTime": 5,
                                                       "observedMetrics": 3, "batchId": {}}},
    {"type": "producer_transactions", "app": "a", "records": "x"},
    {"type": "producer_transactions", "app": "a", "records": [None, {"outcome": "maybe"}]},
])
def test_garbage_never_raises(bad):
    st = SparkQueryState()
    st.apply(bad)
    samples(st)   # renders fine
    assert "apply" not in st.errors()


def test_internal_failure_is_counted_and_logged_once(caplog, monkeypatch):
    st = SparkQueryState()

    def boom(*a, **k):
        raise RuntimeError("bug")

    monkeypatch.setattr(st, "_apply_progress", boom)
    ev = progress_event(load("rate_progress.json"))
    with caplog.at_level("WARNING"):
        assert st.apply(ev) is False
        assert st.apply(ev) is False
    assert st.errors() == {"apply": 2}
    assert sum("apply failed" in r.getMessage() for r in caplog.records) == 1
    assert get(samples(st), "txnwatch_listener_errors_total", stage="apply") == 2


def test_ttl_expiry():
    st = SparkQueryState(ttl_seconds=60)
    st.apply(progress_event(load("rate_progress.json")), now=1000)
    st.apply(progress_event(load("kafka_progress.json")), now=1050)
    st.expire(now=1070)
    assert len(st.queries()) == 1                 # the rate query (last event at 1000) expired
    st.apply({"type": "idle", "query_id": KAFKA_ID, "query": KAFKA_ID, "timestamp": 1100}, now=1100)
    st.expire(now=1150)
    assert st.queries() == [KAFKA_ID]             # idle events keep a query alive
    st.expire(now=1161)
    assert st.queries() == []
    never = SparkQueryState(ttl_seconds=None)
    never.apply(progress_event(load("rate_progress.json")), now=0)
    never.expire(now=1e12)
    assert len(never.queries()) == 1


def test_idle_event_keeps_known_name():
    st = SparkQueryState()
    st.apply(progress_event(load("kafka_progress.json")))
    st.apply({"type": "idle", "query_id": KAFKA_ID, "query": KAFKA_ID, "timestamp": 1.0})
    st.apply({"type": "idle", "query_id": KAFKA_ID, "timestamp": 2.0})
    smp = samples(st)
    assert get(smp, "spark_streaming_idle_events_total", query="orders-enrich", query_id=KAFKA_ID) == 2


def test_query_cap_drops_and_counts():
    st = SparkQueryState(max_queries=2)
    for i in range(4):
        st.apply({"type": "started", "query_id": f"q{i}", "query": f"q{i}", "timestamp": 1.0})
    assert len(st.queries()) == 2
    assert st.dropped() == {"query_limit": 2}
    assert get(samples(st), "txnwatch_listener_events_dropped_total", reason="query_limit") == 2


def test_producer_transactions():
    st = SparkQueryState(max_transactional_ids=2)
    ev = validate_event({"type": "producer_transactions", "app": "orders-sink", "records": [
        {"transactional_id": "t-0", "outcome": "committed", "duration_seconds": 1.5,
         "commit_seconds": 0.02, "timeout_ms": 60000, "error": None},
        {"transactional_id": "t-0", "outcome": "committed", "duration_seconds": 0.5,
         "commit_seconds": 0.004, "timeout_ms": 60000, "error": None},
        {"transactional_id": "t-1", "outcome": "aborted", "duration_seconds": 70.0,
         "commit_seconds": None, "timeout_ms": 60000, "error": "PRODUCER_FENCED"},
        {"transactional_id": "t-2", "outcome": "committed", "duration_seconds": 2.0,
         "commit_seconds": 0.5, "timeout_ms": 10000, "error": None},
    ]})
    assert st.apply(ev)
    smp = samples(st)
    a = {"app": "orders-sink"}
    assert get(smp, "kafka_producer_transaction_commit_seconds_count", **a) == 3
    assert get(smp, "kafka_producer_transaction_commit_seconds_sum", **a) == pytest.approx(0.524)
    assert get(smp, "kafka_producer_transaction_commit_seconds_bucket", le="0.005", **a) == 1
    assert get(smp, "kafka_producer_transaction_duration_seconds_count", outcome="committed", **a) == 3
    assert get(smp, "kafka_producer_transaction_duration_seconds_count", outcome="aborted", **a) == 1
    assert get(smp, "kafka_producer_transaction_duration_seconds_bucket", outcome="aborted", le="60.0",
               **a) == 0
    assert get(smp, "kafka_producer_transactions_total", transactional_id="t-0", outcome="committed",
               **a) == 2
    assert get(smp, "kafka_producer_transactions_total", transactional_id="t-1", outcome="aborted", **a) == 1
    # the third id is past the cap of 2: folded into __other__
    assert get(smp, "kafka_producer_transactions_total", transactional_id="__other__",
               outcome="committed", **a) == 1
    assert get(smp, "kafka_producer_transaction_errors_total", transactional_id="t-1",
               error="PRODUCER_FENCED", **a) == 1
    h = "kafka_producer_transaction_timeout_headroom_seconds"
    # the id's last transaction (its lowest over time is min_over_time's job)
    assert get(smp, h, transactional_id="t-0", **a) == pytest.approx(59.5)
    assert get(smp, h, transactional_id="t-1", **a) == pytest.approx(-10.0)


def test_every_rendered_series_is_in_the_catalogue_with_its_labels():
    st = SparkQueryState()
    for f in ("kafka_progress.json", "rate_progress.json", "stateful_progress.json", "spark34_progress.json"):
        st.apply(progress_event(load(f)))
    st.apply({"type": "idle", "query_id": KAFKA_ID, "timestamp": 1.0})
    st.apply({"type": "trigger", "query_id": KAFKA_ID, "timestamp": 1.5, "trigger": "RealTime",
              "interval_seconds": 300.0})
    st.apply({"type": "terminated", "query_id": KAFKA_ID, "timestamp": 2.0, "error_class": "X"})
    st.apply({"type": "producer_transactions", "app": "a", "records": [
        {"transactional_id": "t", "outcome": "aborted", "duration_seconds": 1, "commit_seconds": 0.1,
         "timeout_ms": 1000, "error": "E"}]})
    st.count_error("x")
    st.count_dropped("y")
    w = FamilyWriter()
    st.render(w)
    assert w.invalid == {}
    fams = {f.name: f for f in w.families()}
    template = OBSERVED_PREFIX + "<name>_<metric>"
    assert {n for n, s in CATALOG.items() if n.startswith("spark_streaming_") and s.source == "spark"} - {template} \
        <= set(fams)
    assert any(n.startswith(OBSERVED_PREFIX) for n in fams)
    for name, fam in fams.items():
        spec = CATALOG[template if name.startswith(OBSERVED_PREFIX) else name]
        for s in fam.samples:
            assert set(s.labels) - {"le"} == set(spec.labels), name
            assert "runId" not in s.labels and "batchId" not in s.labels


def test_concurrent_apply_and_render():
    st = SparkQueryState()
    base = load("rate_progress.json")
    errors = []

    def writer(k):
        try:
            for i in range(200):
                p = dict(base, id=f"q{k}", batchId=i)
                st.apply(from_progress(p))
        except Exception as exc:  # pragma: no cover
            errors.append(exc)

    def reader():
        try:
            for _ in range(50):
                samples(st)
        except Exception as exc:  # pragma: no cover
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(k,)) for k in range(4)] + [threading.Thread(target=reader)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    smp = samples(st)
    for k in range(4):
        assert get(smp, "spark_streaming_batch_duration_seconds_count", query=f"q{k}", query_id=f"q{k}") == 200


def test_app_cap_drops_and_counts():
    st = SparkQueryState(max_apps=1)
    rec = {"transactional_id": "t", "outcome": "committed", "duration_seconds": 1.0}
    assert st.apply({"type": "producer_transactions", "app": "a", "records": [rec]})
    assert not st.apply({"type": "producer_transactions", "app": "b", "records": [rec]})
    assert st.dropped() == {"app_limit": 1}
