"""Spark 4.1+'s real-time mode on a real broker: the listener tells it apart.

A real-time query (Kafka source, Spark's Kafka sink, `trigger(realTime=...)`) runs each
batch for its whole trigger; the listener looks its trigger up and exports it, so the
alerts leave its batch durations alone (tests/alerts/spark.yml shows the rules). Runs on
the newest PySpark only (make test's main venv); the oldest PySpark has no real-time mode.
"""

from __future__ import annotations

import pyspark
import pytest
from confluent_kafka import Producer

from tests.integration.helpers import scrape, stop, value
from txnwatch.spark_listener import attach, detach
from txnwatch_dev.net import wait_for
from txnwatch_dev.transactions.workload import create_topics

pytestmark = [pytest.mark.integration, pytest.mark.spark]

SPARK_VERSION = tuple(int(x) for x in pyspark.__version__.split(".")[:2])


def test_a_real_time_mode_query_is_reported_as_such(spark, broker, unique, tmp_path):
    assert SPARK_VERSION >= (4, 1), f"PySpark {pyspark.__version__} has no real-time mode: run on the newest PySpark"
    source, sink = unique("rtm-in"), unique("rtm-out")
    name = unique("rtm").replace("-", "_")
    create_topics(broker.bootstrap, [source, sink], partitions=2)
    listener = attach(spark, serve_port=0, host="127.0.0.1")
    url = f"http://127.0.0.1:{listener.server.port}/metrics"
    query = (spark.readStream.format("kafka").option("kafka.bootstrap.servers", broker.bootstrap)
             .option("subscribe", source).option("startingOffsets", "earliest").load()
             .selectExpr("key", "value").writeStream.queryName(name).format("kafka")
             .option("kafka.bootstrap.servers", broker.bootstrap).option("topic", sink)
             .option("checkpointLocation", str(tmp_path / "ck")).outputMode("update")
             .trigger(realTime="5 seconds").start())
    try:
        producer = Producer({"bootstrap.servers": broker.bootstrap})
        for i in range(200):
            producer.produce(source, value=b"r%d" % i)
        assert producer.flush(30) == 0
        smp = wait_for(lambda: (s := scrape(url)) and (value(s, "spark_streaming_batch_duration_seconds_count",
                                                              name) or 0) >= 1 and s,
                       120, what="a real-time batch")
        assert value(smp, "spark_streaming_query_trigger_info", name, trigger="RealTime") == 1
        assert value(smp, "spark_streaming_trigger_interval_seconds", name) == 5
        # a real-time batch lasts its trigger: the reason the alerts must know the mode
        assert value(smp, "spark_streaming_batch_duration_seconds_sum", name) >= 4.5
        assert value(smp, "spark_streaming_input_rows_total", name) > 0
    finally:
        stop(query)
        detach(spark, listener)
    assert listener.errors() == {}
