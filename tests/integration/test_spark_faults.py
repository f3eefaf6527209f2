"""Spark-side faults (issue 9): the exporter's ingest stalled while queries run, two queries
with the same name, and a driver restart from the checkpoint. Real queries, real exporter."""

from __future__ import annotations

import pytest

from tests.integration.helpers import cluster_config
from txnwatch.spark_listener import attach, detach
from txnwatch_dev.net import wait_for
from txnwatch_dev.proxy import KafkaProxy

pytestmark = [pytest.mark.integration, pytest.mark.spark, pytest.mark.faults]


def rate_query(spark, name: str, checkpoint: str | None = None, rows: int = 20):
    df = spark.readStream.format("rate").option("rowsPerSecond", rows).load()
    w = df.writeStream.queryName(name).format("noop").trigger(processingTime="300 milliseconds")
    if checkpoint:
        w = w.option("checkpointLocation", checkpoint)
    return w.start()


def batches(q) -> int:
    return (q.lastProgress or {}).get("batchId", -1)


def test_stalled_ingest_never_slows_or_fails_queries(spark, broker, exporter_factory):
    """Fault: the exporter stops answering (a stalled TCP proxy in front of it).
    Expected: the query keeps running batch after batch and nothing raises; once the
    exporter answers again the queued events arrive."""
    exp = exporter_factory(cluster_config(broker.bootstrap))
    proxy = KafkaProxy("127.0.0.1", exp.port).start()  # a plain TCP proxy: works for HTTP too
    proxy.stall()
    listener = attach(spark, forward_url=f"http://127.0.0.1:{proxy.port}",
                      forwarder_options={"timeout": 1.0, "max_retries": 50, "backoff": 0.2, "max_backoff": 1.0})
    q = rate_query(spark, "stalled-ingest")
    try:
        wait_for(lambda: batches(q) >= 8, 90, what="8 batches while the exporter is stalled")
        assert q.isActive and q.exception() is None
        assert not listener.errors() or set(listener.errors()) <= {"forward"}
        assert exp.metrics().get_value("spark_streaming_batch_id", query="stalled-ingest") is None
        proxy.resume()
        exp.wait_metric(lambda m: (m.get_value("spark_streaming_batch_id", query="stalled-ingest") or -1) >= 5,
                        timeout=60, what="queued events delivered after the stall")
    finally:
        q.stop()
        detach(spark, listener)
        proxy.stop()


def test_two_queries_with_the_same_name_stay_apart(spark, broker, exporter_factory):
    exp = exporter_factory(cluster_config(broker.bootstrap))
    listener = attach(spark, forward_url=exp.url)
    # Spark refuses two *active* queries with one name in a session; another session (like
    # another driver) can share it. Listeners belong to a session's query manager.
    other = spark.newSession()
    other_listener = attach(other, forward_url=exp.url)
    q1, q2 = rate_query(spark, "same-name"), None
    try:
        q2 = rate_query(other, "same-name")
        wait_for(lambda: batches(q1) >= 3 and batches(q2) >= 3, 90, what="both queries running")
        m = exp.wait_metric(lambda m: len(m.select("spark_streaming_query_active", query="same-name")) == 2,
                            timeout=60, what="two series for the two queries")
        ids = {lbl["query_id"] for lbl, _ in m.select("spark_streaming_query_active", query="same-name")}
        assert ids == {str(q1.id), str(q2.id)}
    finally:
        q1.stop()
        if q2 is not None:
            q2.stop()
        detach(spark, listener)
        detach(other, other_listener)


def test_driver_restart_from_checkpoint_continues_the_series(spark, broker, exporter_factory, tmp_path):
    """Fault: the driver goes away and a new one restarts the query from its checkpoint.
    Expected: the same query id keeps one series; batch ids continue and counters never
    go backwards."""
    exp = exporter_factory(cluster_config(broker.bootstrap))
    ckpt = str(tmp_path / "ckpt")
    first = attach(spark, forward_url=exp.url)
    q = rate_query(spark, "restarted", ckpt)
    query_id = str(q.id)
    wait_for(lambda: batches(q) >= 4, 90, what="first run's batches")
    q.stop()
    # The termination event reaches listeners asynchronously; wait for it before the
    # old driver's listener goes away with it.
    m1 = exp.wait_metric(lambda m: m.get_value("spark_streaming_query_active", query="restarted") == 0,
                         timeout=30, what="the termination of the first run")
    detach(spark, first)
    rows1 = m1.get_value("spark_streaming_input_rows_total", query="restarted")
    batch1 = m1.get_value("spark_streaming_batch_id", query="restarted")
    second = attach(spark, forward_url=exp.url)  # the new driver
    q = rate_query(spark, "restarted", ckpt)
    try:
        assert str(q.id) == query_id  # the checkpoint keeps the query id
        m2 = exp.wait_metric(lambda m: (m.get_value("spark_streaming_batch_id", query="restarted") or -1)
                             > batch1 + 2, timeout=90, what="batches of the restarted run")
        assert m2.get_value("spark_streaming_query_active", query="restarted") == 1
        assert m2.get_value("spark_streaming_input_rows_total", query="restarted") >= rows1
        assert len(m2.select("spark_streaming_query_active", query="restarted")) == 1
    finally:
        q.stop()
        detach(spark, second)
