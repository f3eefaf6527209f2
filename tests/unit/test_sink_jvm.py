"""Which writer the exactly-once sink chooses, and what it tells the JVM writer."""

from __future__ import annotations

import pytest

from txnwatch.producer import TransactionalProducer
from txnwatch.spark_listener.sink import ExactlyOnceKafkaSink, SinkConfig, UnsafeSinkSettings, jvm


def sink(**kw) -> ExactlyOnceKafkaSink:
    return ExactlyOnceKafkaSink("orders", "broker:9092", "out", broker_max_timeout_ms=None,
                                create_progress_topic=False, **kw)


@pytest.fixture
def jar(tmp_path, monkeypatch):
    """A jar where the package keeps it (a checkout builds it; the wheel ships it)."""
    path = tmp_path / "txnwatch-spark-sink.jar"
    path.write_bytes(b"PK")
    monkeypatch.setattr(jvm, "JAR", path)
    return path


def faulty_factory(cfg: SinkConfig, task: int) -> TransactionalProducer:
    return TransactionalProducer(cfg.producer_conf(task))


def test_the_jvm_writer_by_default(jar):
    assert sink().writer_in_use == "jvm"
    assert sink(producer_config={"linger.ms": 20, "acks": "all"}).writer_in_use == "jvm"
    assert sink(writer="python").writer_in_use == "python"


def test_python_where_the_jvm_writer_cannot_honour_the_settings(jar):
    assert sink(producer_factory=faulty_factory).writer_in_use == "python"
    tls = {"security.protocol": "SSL", "ssl.ca.location": "/ca.pem"}
    assert sink(client_config=tls).writer_in_use == "python"
    java_tls = {"security.protocol": "SSL", "ssl.truststore.location": "/ca.jks"}
    assert sink(client_config=tls, jvm_client_config=java_tls).writer_in_use == "jvm"
    with pytest.raises(UnsafeSinkSettings, match="producer_factory of its own"):
        sink(producer_factory=faulty_factory, writer="jvm")
    with pytest.raises(UnsafeSinkSettings, match="ssl.ca.location.*jvm_client_config"):
        sink(client_config=tls, writer="jvm")
    with pytest.raises(UnsafeSinkSettings, match="writer must be one of auto, jvm, python"):
        sink(writer="scala")


def test_python_without_the_jar(tmp_path, monkeypatch):
    monkeypatch.setattr(jvm, "JAR", tmp_path / "missing.jar")
    assert sink().writer_in_use == "python"
    with pytest.raises(UnsafeSinkSettings, match="jar is missing.*build-sink-jar.sh"):
        sink(writer="jvm")
    assert jvm.with_sink_jar({"spark.jars": "a.jar"}) == {"spark.jars": "a.jar"}


def test_the_jar_joins_spark_jars(jar):
    assert jvm.with_sink_jar({"spark.jars": "a.jar,b.jar"}) == {"spark.jars": f"a.jar,b.jar,{jar}"}
    assert jvm.with_sink_jar({"spark.jars.packages": "g:a:1"}) == {"spark.jars.packages": "g:a:1",
                                                                  "spark.jars": str(jar)}


def test_the_write_options(jar):
    s = sink(num_tasks=3, transaction_timeout_ms=30_000, producer_config={"linger.ms": 20, "acks": "all"},
             client_config={"client.id": "c"})
    opts = jvm.options(s.config, 7, s.jvm_settings)
    assert opts == {"name": "orders", "bootstrap.servers": "broker:9092", "topic": "out",
                    "progress.topic": "txnwatch-progress.orders", "num.tasks": "3", "batch.id": "7",
                    "transaction.timeout.ms": "30000", "commit.timeout.seconds": "60.0",
                    "idle.close.seconds": "600.0", "client.client.id": "c", "producer.linger.ms": "20"}
    java = jvm.options(s.config, 7, jvm.JvmSettings({"security.protocol": "SSL"}, 30))
    assert java["idle.close.seconds"] == "30"
    assert java["client.security.protocol"] == "SSL" and "client.client.id" not in java


@pytest.mark.parametrize("message, missing", [
    ("[DATA_SOURCE_NOT_FOUND] Failed to find the data source: txnwatch-kafka-eos. Make sure ...", True),
    ("java.lang.ClassNotFoundException: Failed to find data source: txnwatch-kafka-eos.", True),
    ("java.lang.IllegalStateException: txnwatch-kafka-eos needs kafka-clients on the class path: add ...", True),
    ("Job aborted due to stage failure: ... ProducerFencedException", False),
    ("[DATA_SOURCE_NOT_FOUND] Failed to find the data source: parquet2.", False),
])
def test_what_counts_as_a_writer_that_does_not_load(message, missing):
    assert jvm.is_missing(RuntimeError(message)) is missing


def test_the_stream_form_options_take_the_batch_from_spark(jar):
    s = sink(num_tasks=3, partitioning="input")
    opts = jvm.options(s.config, None, s.jvm_settings, s.partitioning)
    assert "batch.id" not in opts and opts["partitioning"] == "input" and opts["num.tasks"] == "3"
    assert "partitioning" not in jvm.options(s.config, 7, s.jvm_settings)     # a foreachBatch batch comes laid out


def results_metrics(name="orders", batch="4", results='{"batch": 4, "results": [{"task": 0}]}') -> dict:
    return {jvm.METRIC_SINK: name, jvm.METRIC_BATCH: batch, jvm.METRIC_RESULTS: results}


def test_stream_results_are_read_from_the_sink_metrics_of_this_sink_only(caplog):
    assert jvm.stream_results(results_metrics(), "orders") == (4, [{"task": 0}])
    assert jvm.stream_results(results_metrics(name="other"), "orders") is None
    assert jvm.stream_results({}, "orders") is None and jvm.stream_results(None, "orders") is None
    assert jvm.stream_results(results_metrics(results="{not json"), "orders") is None
    assert jvm.stream_results(results_metrics(batch="x"), "orders") is None
    assert "unreadable results" in caplog.text


class Progress:
    def __init__(self, run: str, metrics: dict) -> None:
        self.runId, self.sink = run, type("Sink", (), {"metrics": metrics})()


class Event:
    def __init__(self, run: str, metrics: dict) -> None:
        self.progress = Progress(run, metrics)
        self.runId = run


def test_each_batch_is_reported_once_per_query_run_to_its_sink():
    """A no-data batch's progress repeats the last batch's results; a restarted run may
    replay the batch (its tasks then report `replayed`): reported again, as a new run's. One
    listener serves every sink of the session; another sink's batches are not this one's."""
    from txnwatch.spark_listener.sink.stream import StreamResults

    got, other = [], []
    listener = StreamResults()
    listener.reports["orders"] = lambda batch, results: got.append(batch)
    listener.reports["other"] = lambda batch, results: other.append(batch)
    for run, batch in (("a", "0"), ("a", "1"), ("a", "1"), ("b", "1"), ("b", "2")):
        listener.onQueryProgress(Event(run, results_metrics(batch=batch)))
    listener.onQueryProgress(Event("c", results_metrics(name="other", batch="3")))
    listener.onQueryProgress(Event("d", results_metrics(name="unknown", batch="3")))
    listener.onQueryProgress(Event("d", {}))
    assert got == [0, 1, 1, 2] and other == [3]
    listener.onQueryTerminated(Event("a", {}))
    assert "a" not in listener._last


def test_a_report_that_fails_never_reaches_the_query(caplog):
    from txnwatch.spark_listener.sink.stream import StreamResults

    def broken(batch, results):
        raise RuntimeError("boom")

    listener = StreamResults()
    listener.reports["orders"] = broken
    listener.onQueryProgress(Event("a", results_metrics()))
    assert "sink orders: could not report" in caplog.text


def test_one_listener_per_session_reporting_to_the_newest_sink_of_a_name():
    from txnwatch.spark_listener.sink import stream

    class Streams:
        def __init__(self):
            self.added = []

        def addListener(self, listener):   # noqa: N802 - PySpark's name
            self.added.append(listener)

    session = type("Session", (), {})()
    session.streams = Streams()
    first, newer, other = (lambda b, r: None), (lambda b, r: None), (lambda b, r: None)
    try:
        a = stream.listen(session, "orders", first)
        b = stream.listen(session, "orders", newer)
        c = stream.listen(session, "payments", other)
        assert a is b is c and session.streams.added == [a]
        assert a.reports == {"orders": newer, "payments": other}
    finally:
        stream._LISTENERS.pop(id(session), None)


def test_the_idle_close_must_be_positive(jar):
    with pytest.raises(UnsafeSinkSettings, match="jvm_idle_close_seconds must be > 0"):
        sink(jvm_idle_close_seconds=0)


def test_the_stream_form_needs_the_jvm_writer(jar):
    with pytest.raises(UnsafeSinkSettings, match="write_stream needs the JVM writer"):
        sink(writer="python").write_stream(object())
