"""Where a sink's transaction records go, and what survives the pickling Spark Connect
does to a foreachBatch function (PySpark's own CloudPickleSerializer, as foreachBatch
uses it)."""

from __future__ import annotations

import pickle

import pytest
from pyspark.serializers import CloudPickleSerializer

from txnwatch.spark_listener import SparkQueryState, TxnWatchListener
from txnwatch.spark_listener.forwarder import Forwarder
from txnwatch.spark_listener.serve import render_text
from txnwatch.spark_listener.sink import ExactlyOnceKafkaSink, ForwardTo, SinkMetrics, SinkNotPortable

EVENT = {"type": "producer_transactions", "app": "a", "timestamp": 1.0, "records": []}


def _sink(metrics):
    # no broker: the progress topic is not created and the timeout cap not asked for
    return ExactlyOnceKafkaSink("orders", "127.0.0.1:1", "out", metrics=metrics, create_progress_topic=False,
                                broker_max_timeout_ms=None)


def test_a_local_destination_gets_events_in_this_process():
    state, seen = SparkQueryState(), []
    SinkMetrics(state, "s").emit({**EVENT, "records": [{"transactional_id": "t", "outcome": "committed",
                                                        "duration_seconds": 0.1, "commit_seconds": 0.01,
                                                        "timeout_ms": 60000, "error": None}]})
    assert "kafka_producer_transactions_total" in render_text(state)
    SinkMetrics(seen.append, "s").emit(EVENT)
    assert seen == [EVENT]


def test_emit_never_raises():
    def broken(_event):
        raise RuntimeError("boom")
    SinkMetrics(broken, "s").emit(EVENT)        # logged, not raised


@pytest.mark.parametrize("local", [SparkQueryState(), print, TxnWatchListener(state=SparkQueryState())],
                         ids=["state", "callable", "listener-without-forwarder"])
def test_a_sink_whose_metrics_live_in_this_process_refuses_pickling_and_says_what_to_do(local):
    sink = _sink(local)
    with pytest.raises(SinkNotPortable) as ei:
        CloudPickleSerializer().dumps(sink)           # what Spark Connect's foreachBatch does
    msg = str(ei.value)
    assert "sink orders" in msg and "Spark Connect" in msg
    assert "forward_url" in msg and "ForwardTo(" in msg


def test_a_forwarding_sink_travels_as_its_address_and_never_shows_the_token():
    fwd = Forwarder("http://exporter:10129", "s3cret", flush_interval=60)
    try:
        listener = TxnWatchListener(state=SparkQueryState(), forwarder=fwd)
        for metrics in (listener, fwd, ForwardTo("http://exporter:10129/", "s3cret"), "http://exporter:10129"):
            sink = _sink(metrics)
            copy = pickle.loads(CloudPickleSerializer().dumps(sink))
            route = copy.metrics.route
            assert route.url.rstrip("/").startswith("http://exporter:10129")
            assert copy.metrics._local is None and copy.metrics._forwarder is None   # built on first use there
            assert (copy.name, copy.num_tasks, copy.config) == (sink.name, sink.num_tasks, sink.config)
        assert "s3cret" not in repr(ForwardTo("http://x", "s3cret"))
    finally:
        fwd.close(0.1)


def test_a_metrics_object_of_an_unknown_kind_is_refused_by_name():
    with pytest.raises(TypeError, match="got int"):
        SinkMetrics(3, "s")


def test_an_exporter_that_does_not_answer_is_waited_for_once_then_not_until_it_drains():
    import socket

    with socket.socket() as s:          # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    travelled = pickle.loads(pickle.dumps(SinkMetrics(ForwardTo(f"http://127.0.0.1:{port}"), "s")))
    try:
        assert travelled._waiting
        travelled.emit(EVENT)               # not delivered within the wait: stop waiting
        assert not travelled._waiting
        travelled.emit(EVENT)               # still queued or retrying: no wait
        assert not travelled._waiting
    finally:
        travelled.close(0.1)
