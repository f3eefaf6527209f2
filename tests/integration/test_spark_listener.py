"""The listener with real PySpark streaming queries (local mode, the session's one SparkSession).

Both ways out are exercised for real: serve(port) scraped over HTTP, and forwarding to a
Flask app with the ingest blueprint on the exporter's HTTP server.
"""

from __future__ import annotations

import statistics
import threading

import pyspark
import pytest
from flask import Flask, Response

from tests import compat
from tests.integration.helpers import scrape, stop, value
from txnwatch.exporter.spark.ingest import make_ingest_blueprint
from txnwatch.spark_listener import attach, detach
from txnwatch.spark_listener.serve import render_text
from txnwatch.spark_listener.state import SparkQueryState
from txnwatch_dev.net import free_port, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.spark]

TOKEN = "integration-token"
TRIGGER = "300 milliseconds"


# ----------------------------------------------------------------------------- helpers



def for_query(samples: dict, query: str, prefix: str = "spark_streaming_") -> dict:
    return {k: v for k, v in samples.items() if k[0].startswith(prefix) and ("query", query) in k[1]}




SPARK_VERSION = tuple(int(x) for x in pyspark.__version__.split(".")[:2])


def executed_batches(query) -> int:
    return sum(1 for p in query.recentProgress if "addBatch" in (p.get("durationMs") or {}))




def windowed_count(spark, name: str):
    from pyspark.sql import functions as F

    df = spark.readStream.format("rate").option("rowsPerSecond", 20).load()
    agg = (df.withWatermark("timestamp", "1 second")
           .groupBy(F.window("timestamp", "1 second")).count())
    return (agg.writeStream.queryName(name).outputMode("append").format("memory")
            .trigger(processingTime=TRIGGER).start())


class IngestServer:
    """A tiny exporter: Flask + the ingest blueprint + /metrics, on the exporter's server."""

    def __init__(self, token: str = TOKEN) -> None:
        from txnwatch.config import HttpConfig
        from txnwatch.config.web import WebConfig
        from txnwatch.exporter.serve.server import make_server

        self.state = SparkQueryState()
        app = Flask("tiny-exporter")
        app.register_blueprint(make_ingest_blueprint(self.state, token))
        app.add_url_rule("/metrics", "metrics",
                         lambda: Response(render_text(self.state), mimetype="text/plain"))
        self.port = free_port()
        self.server = make_server(app, HttpConfig(host="127.0.0.1", port=self.port, threads=2), WebConfig())
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.thread.start()
        self.url = f"http://127.0.0.1:{self.port}"

    def close(self) -> None:
        self.server.close()


@pytest.fixture
def ingest_server():
    srv = IngestServer()
    yield srv
    srv.close()


# ----------------------------------------------------------------------------- tests

def test_stateful_watermark_query_served_from_the_driver(spark, unique):
    name = unique("windowed").replace("-", "_")
    listener = attach(spark, serve_port=0, host="127.0.0.1")
    url = f"http://127.0.0.1:{listener.server.port}/metrics"
    query = windowed_count(spark, name)
    try:
        def ready():
            s = scrape(url)
            return (value(s, "spark_streaming_watermark_delay_seconds", name) is not None
                    and (value(s, "spark_streaming_state_rows", name, operator="stateStoreSave") or 0) > 0
                    and s)
        smp = wait_for(ready, 90, what="watermark and state metrics")
        assert value(smp, "spark_streaming_query_active", name) == 1
        assert value(smp, "spark_streaming_batch_id", name) >= 1
        assert value(smp, "spark_streaming_batch_duration_seconds_count", name) >= 2
        for phase in ("addBatch", "walCommit", "commitOffsets", "queryPlanning", "triggerExecution"):
            assert value(smp, "spark_streaming_batch_phase_seconds_count", name, phase=phase) >= 1, phase
        assert value(smp, "spark_streaming_commit_seconds_count", name) >= 2
        assert value(smp, "spark_streaming_input_rows_total", name) > 0
        assert value(smp, "spark_streaming_state_memory_bytes", name, operator="stateStoreSave") > 0
        # the watermark trails the progress timestamp by at least the 1 s delay threshold
        assert value(smp, "spark_streaming_watermark_delay_seconds", name) >= 1.0
        assert value(smp, "spark_streaming_last_progress_timestamp_seconds", name) > 1.7e9
        # the listener looked the trigger up in the JVM (its own thread, once per run)
        smp = wait_for(lambda: (s := scrape(url)) and value(s, "spark_streaming_trigger_interval_seconds", name)
                       is not None and s, 30, what="the query's trigger")
        assert value(smp, "spark_streaming_query_trigger_info", name, trigger="ProcessingTime") == 1
        assert value(smp, "spark_streaming_trigger_interval_seconds", name) == pytest.approx(0.3)
        ids = {dict(lb)["query_id"] for (_, lb) in for_query(smp, name)}
        assert ids == {str(query.id)}
        assert all("runId" not in dict(lb) and "batchId" not in dict(lb) for (_, lb) in smp)
    finally:
        stop(query)
        wait_for(lambda: value(scrape(url), "spark_streaming_query_active", name) == 0, 30,
                 what="the termination event")
        smp = scrape(url)
        assert value(smp, "spark_streaming_query_terminations_total", name, error_class="none") == 1
        detach(spark, listener)
    assert listener.errors() == {}


def test_failing_query_counts_its_error_class(spark, unique):
    name = unique("failing").replace("-", "_")
    listener = attach(spark, serve_port=0, host="127.0.0.1")
    url = f"http://127.0.0.1:{listener.server.port}/metrics"

    def explode(df, batch_id):
        if batch_id >= 1:
            raise ValueError("boom from foreachBatch")

    query = (spark.readStream.format("rate").option("rowsPerSecond", 10).load()
             .writeStream.queryName(name).foreachBatch(explode).trigger(processingTime=TRIGGER).start())
    # Spark 3.5+ names the error class (QueryTerminatedEvent.errorClassOnException); before,
    # the listener falls back to the exception's class name
    named = SPARK_VERSION >= (3, 5)

    def terminations(s) -> dict[str, float]:
        return {dict(lb)["error_class"]: v for (n, lb), v in s.items()
                if n == "spark_streaming_query_terminations_total" and ("query", name) in lb}

    try:
        with pytest.raises(Exception, match="boom from foreachBatch"):
            query.awaitTermination(90)
        smp = wait_for(lambda: (s := scrape(url)) and (
            terminations(s) == {"FOREACH_BATCH_USER_FUNCTION_ERROR": 1} if named else
            len(terminations(s)) == 1 and list(terminations(s).values()) == [1]
            and "none" not in terminations(s)) and s, 30, what="the termination")
        assert value(smp, "spark_streaming_query_active", name) == 0
        assert value(smp, "spark_streaming_batch_id", name) == 0       # batch 0 completed, 1 failed
        assert value(smp, "spark_streaming_query_terminations_total", name, error_class="none") is None
    finally:
        stop(query)
        detach(spark, listener)
    assert listener.errors() == {}


def test_both_ways_out_export_identical_series(spark, unique, ingest_server, request):
    name = unique("twoways").replace("-", "_")
    listener = attach(spark, serve_port=0, host="127.0.0.1", forward_url=ingest_server.url, token=TOKEN,
                      forwarder_options={"flush_interval": 0.05})
    driver_url = f"http://127.0.0.1:{listener.server.port}/metrics"
    query = windowed_count(spark, name)
    try:
        wait_for(lambda: executed_batches(query) >= 3 and query.lastProgress["eventTime"].get(
            "watermark", "1970").startswith("20"), 90, what="three batches and a watermark")
    finally:
        stop(query)
    try:
        wait_for(lambda: value(scrape(driver_url), "spark_streaming_query_active", name) == 0, 30,
                 what="the termination on the driver")
        assert listener.forwarder.flush(30)
        driver = for_query(scrape(driver_url), name)
        exporter = for_query(scrape(ingest_server.url + "/metrics"), name)
    finally:
        detach(spark, listener)
    assert listener.forwarder.dropped == {}
    assert value(driver, "spark_streaming_batch_duration_seconds_count", name) >= 3
    assert value(driver, "spark_streaming_watermark_delay_seconds", name) is not None
    assert value(driver, "spark_streaming_state_rows", name, operator="stateStoreSave") is not None
    assert driver == exporter
    assert ingest_server.state.errors() == {}
    compat.record(request.config, "spark", "classic", "Listener's spark_streaming_*",
                  "served and forwarded from the driver")


def test_exporter_down_never_hurts_the_query(spark, unique):
    name = unique("exporter-down").replace("-", "_")
    closed = f"http://127.0.0.1:{free_port()}"          # nothing listens there
    listener = attach(spark, forward_url=closed, token=TOKEN,
                      forwarder_options={"max_queue": 2, "max_retries": 1, "backoff": 0.05,
                                         "flush_interval": 0.05, "timeout": 1.0})
    query = (spark.readStream.format("rate").option("rowsPerSecond", 50).load()
             .writeStream.queryName(name).format("memory").trigger(processingTime=TRIGGER).start())
    try:
        wait_for(lambda: executed_batches(query) >= 5 and listener.forwarder.dropped_total > 0, 90,
                 what="five batches and some dropped events")
        assert query.isActive and query.exception() is None
        # (Spark 3.4's progress has no batchDuration: its triggerExecution is the same span)
        batch_ms = [p.get("batchDuration", p["durationMs"].get("triggerExecution")) for p in query.recentProgress
                    if "addBatch" in p["durationMs"]]
    finally:
        stop(query)
        detach(spark, listener, timeout=0.5)
    assert listener.forwarder.sent == 0
    assert set(listener.forwarder.dropped) <= {"send_failed", "queue_full", "closed"}
    assert listener.errors() == {}
    # Recorded numbers, not a timing threshold on the query: the listener's own time per
    # event is a small fraction of a micro-batch, so it cannot change batch times measurably.
    per_event = listener.callback_seconds / max(1, listener.events)
    assert per_event < 0.05 * (statistics.mean(batch_ms) / 1000.0), (per_event, batch_ms)
