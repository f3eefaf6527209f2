"""`txnwatch pipeline` flags -> settings, and unsafe settings refused before a JVM starts;
the harness's faulted pipeline (txnwatch_dev.spark.pipeline) takes the same flags and a fault
plan."""

from __future__ import annotations

import pytest

from txnwatch import pipeline
from txnwatch_dev.spark import pipeline as faulted_pipeline
from txnwatch_dev.spark.sink_faults import SinkFaults

FLAGS = ["--bootstrap", "b:9092", "--input-topic", "in", "--output-topic", "out", "--checkpoint", "/c",
         "--name", "orders", "--num-tasks", "4", "--trigger-seconds", "5", "--max-records-per-batch", "0",
         "--sink", "spark-kafka", "--broker-max-timeout-ms", "none"]
FAULT = ["--fault", 'pause_before_commit={"batch": 2, "task": 0, "signal_file": "/tmp/x"}']


@pytest.mark.parametrize("faulted", [False, True])
def test_flags_to_settings(faulted):
    if faulted:
        _, s = faulted_pipeline.settings(FLAGS[:4] + FAULT + FLAGS[4:])
    else:
        s = pipeline.settings_from(pipeline.parse_args(FLAGS))
    assert (s.bootstrap, s.input_topic, s.output_topic, s.checkpoint, s.name) == ("b:9092", "in", "out", "/c",
                                                                                  "orders")
    assert s.num_tasks == 4 and s.trigger_seconds == 5 and s.max_records_per_batch is None
    assert s.sink == "spark-kafka" and s.broker_max_timeout_ms is None
    if faulted:
        assert s.producer_factory == SinkFaults.of(
            {"pause_before_commit": {"batch": 2, "task": 0, "signal_file": "/tmp/x"}})
    else:
        assert s.producer_factory is None
    d = pipeline.settings_from(pipeline.parse_args(["--bootstrap", "b", "--input-topic", "i",
                                                    "--output-topic", "o", "--checkpoint", "c"]))
    assert d.sink == "eos" and d.broker_max_timeout_ms == "discover"
    assert d.output_mode == "append" and d.transaction_timeout_ms == 60_000


def test_jvm_client_settings_reach_the_sink(capsys, monkeypatch):
    """--sink-jvm-client-config KEY=VALUE, repeatable, becomes the sink's jvm_client_config
    (Java's names); a flag without '=' exits 2 naming the form."""
    from txnwatch.spark_listener import sink as sink_module

    made = []
    monkeypatch.setattr(sink_module, "ExactlyOnceKafkaSink", lambda *a, **kw: made.append(kw))   # no broker here
    base = ["--bootstrap", "b", "--input-topic", "i", "--output-topic", "o", "--checkpoint", "c"]
    s = pipeline.settings_from(pipeline.parse_args(base + ["--sink-jvm-client-config", "batch.size=1",
                                                           "--sink-jvm-client-config", "sasl.jaas.config=a=b"]))
    assert s.sink_jvm_client_config == (("batch.size", "1"), ("sasl.jaas.config", "a=b"))
    pipeline.make_sink(s)
    pipeline.make_sink(pipeline.settings_from(pipeline.parse_args(base)))
    assert [kw["jvm_client_config"] for kw in made] == [{"batch.size": "1", "sasl.jaas.config": "a=b"}, None]
    with pytest.raises(SystemExit) as e:
        pipeline.parse_args(base + ["--sink-jvm-client-config", "batch.size"])
    assert e.value.code == 2 and "is not KEY=VALUE" in capsys.readouterr().err


def test_unsafe_settings_exit_2_before_spark(capsys, monkeypatch):
    def no_spark(*a, **k):
        raise AssertionError("must not start Spark")

    monkeypatch.setattr(pipeline, "spark_session", no_spark)
    rc = pipeline.main(["--bootstrap", "b", "--input-topic", "i", "--output-topic", "o", "--checkpoint", "c",
                        "--trigger-seconds", "30", "--transaction-timeout-ms", "45000",
                        "--broker-max-timeout-ms", "none"])
    assert rc == 2
    assert "2 x the trigger interval (30000 ms)" in capsys.readouterr().err
    rc = pipeline.main(["--bootstrap", "b", "--input-topic", "i", "--output-topic", "o", "--checkpoint", "c",
                        "--transaction-timeout-ms", "1000000", "--broker-max-timeout-ms", "900000"])
    assert rc == 2
    assert "transaction.max.timeout.ms=900000" in capsys.readouterr().err


def test_executed_batches():
    assert pipeline.executed({"durationMs": {"addBatch": 3}})
    assert not pipeline.executed({"durationMs": {"latestOffset": 1}})
    assert not pipeline.executed({})


def test_caught_up_compares_each_source_end_with_its_latest_offset():
    text = '{"in": {"0": 200, "1": 180}}'
    assert pipeline.caught_up({"sources": [{"endOffset": text, "latestOffset": text}]})      # 3.x: JSON text
    assert pipeline.caught_up({"sources": [{"endOffset": {"in": {"0": 5}}, "latestOffset": {"in": {"0": 5}}}]})
    assert not pipeline.caught_up({"sources": [{"endOffset": text, "latestOffset": '{"in": {"0": 400, "1": 180}}'}]})
    assert not pipeline.caught_up({"sources": [{"endOffset": {"in": {"0": 5}}, "latestOffset": {"in": {"0": 6}}},
                                               {"endOffset": "x", "latestOffset": "x"}]})
    assert pipeline.caught_up({"sources": [{"endOffset": text}]})       # no latest offset said: nothing to wait for
    assert pipeline.caught_up({})


def test_remote_with_the_eos_sink_needs_a_forward_url(capsys, monkeypatch):
    def no_spark(*a, **k):
        raise AssertionError("must not start Spark")

    monkeypatch.setattr(pipeline, "spark_session", no_spark)
    rc = pipeline.main(["--bootstrap", "b", "--input-topic", "i", "--output-topic", "o", "--checkpoint", "c",
                        "--remote", "sc://spark:15002"])
    assert rc == 2 and "--forward-url" in capsys.readouterr().err
