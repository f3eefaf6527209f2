"""The PySpark side under Spark Connect: the reference pipeline as `txnwatch pipeline
--remote local[2]` (PySpark starts a local Spark Connect server; the foreachBatch sink is
pickled and runs in the server's Python worker, the listener on the client), with the
session broker and a real exporter that both send their metrics to. The pipeline runs as
txnwatch_dev.spark.pipeline, which adds the sink's fault plan to the same flags.

Through a task that fails mid-transaction and the restart from the checkpoint: every
window is visible once to read_committed consumers, the failed attempt's rows are
aborted, and the exporter shows the sink's transactions (`kafka_producer_*`, forwarded from
the Connect server's Python process) and the listener's `spark_streaming_*` (forwarded
from the client), as in classic mode (test_pipeline.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests import compat
from tests.integration.helpers import (
    WINDOW,
    aborted_records,
    assert_exactly_once,
    cluster_config,
    make_input,
)
from txnwatch.spark_listener.sink import committed_attempts
from txnwatch_dev.transactions.workload import create_topics

pytestmark = [pytest.mark.integration, pytest.mark.spark]

TOKEN = "connect-ingest-token"


def run_pipeline(bootstrap: str, name: str, checkpoint: str, exporter_url: str, tmp_path, tag: str,
                 *extra: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "txnwatch_dev.spark.pipeline", "--remote", "local[2]", "--bootstrap", bootstrap,
           "--input-topic", f"{name}-in", "--output-topic", f"{name}-out", "--checkpoint", checkpoint,
           "--name", name, "--num-tasks", "2", "--trigger-seconds", "0.5", "--max-records-per-batch", "200",
           "--window", f"{WINDOW} seconds", "--watermark", "5 seconds", "--transaction-timeout-ms", "30000",
           "--broker-max-timeout-ms", "900000", "--forward-url", exporter_url, "--exit-when-idle", "3",
           "--timeout", "240", *extra]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=420,
                         env={**os.environ, "TXNWATCH_INGEST_TOKEN": TOKEN})
    (tmp_path / f"pipeline-{tag}.log").write_text(out.stdout + out.stderr)
    return out


def pipeline_topics_and_exporter(broker, unique_name: str, exporter_factory):
    """The pipeline's input (written) and output topics, and an exporter that watches the
    output and takes forwarded metrics: (name, the input written, the exporter)."""
    name = unique_name.replace("-", "_")
    create_topics(broker.bootstrap, [f"{name}-in", f"{name}-out"], partitions=2)
    expected = make_input(broker.bootstrap, f"{name}-in")
    cfg = cluster_config(broker.bootstrap, [f"{name}-out"])
    cfg["http"] = {**cfg.get("http", {}), "ingest_token": TOKEN}
    return name, expected, exporter_factory(cfg)


def test_pipeline_on_spark_connect_exactly_once_through_a_task_failure(broker, unique, tmp_path, exporter_factory,
                                                                       request):
    name, expected, exp = pipeline_topics_and_exporter(broker, unique("connect"), exporter_factory)
    checkpoint = str(tmp_path / "ckpt")
    flag = tmp_path / "failed-once"
    fault = {"batch": 3, "task": 1, "once_file": str(flag), "wait_others": True}

    failed = run_pipeline(broker.bootstrap, name, checkpoint, exp.url, tmp_path, "failing",
                          "--fault", f"fail_after_produce={json.dumps(fault)}")
    assert failed.returncode == 1, failed.stdout + failed.stderr[-4000:]
    assert flag.exists() and "injected failure in task 1 of batch 3" in failed.stderr, failed.stderr[-4000:]

    again = run_pipeline(broker.bootstrap, name, checkpoint, exp.url, tmp_path, "restarted")
    assert again.returncode == 0 and "stopped (idle)" in again.stdout, again.stdout + again.stderr[-4000:]

    records = assert_exactly_once(broker.bootstrap, f"{name}-out", expected)
    attempts = committed_attempts(broker.bootstrap, name)
    aborted = aborted_records(broker.bootstrap, f"{name}-out", records)
    assert aborted and len({r.attempt for r in aborted}) == 1          # the failed attempt's rows, aborted
    assert {r.attempt for r in records} <= set(attempts)

    # The sink's transactions, forwarded from the Connect server's Python worker, and the
    # listener's query series, forwarded from the client, in the exporter.
    tid1 = f"txnwatch.{name}.1"

    def shown():
        m = exp.metrics()
        return {(n, tuple(sorted((k, v) for k, v in dict(lb).items() if k in ("outcome", "transactional_id",
                                                                               "error")))): v
                for (n, lb), v in m.items() if n.startswith(("kafka_producer_transactions", "kafka_producer_transaction_errors"))
                } | {"spark_streaming series": len([1 for (n, _lb) in m if n.startswith("spark_streaming_")]),
                     "committed attempts": len(attempts)}
    m = exp.wait_metric(
        lambda m: (m.get_value("kafka_producer_transactions_total", app=name, transactional_id=tid1,
                               outcome="aborted") == 1
                   and sum(v for lb, v in m.select("kafka_producer_transactions_total", app=name)
                           if lb["outcome"] == "committed") >= len(attempts) - 1
                   and m.select("spark_streaming_batch_duration_seconds_count", query=name)), 60,
        what="the sink's transactions and the listener's series in the exporter", describe=shown)
    assert m.get_value("kafka_producer_transaction_errors_total", app=name, transactional_id=tid1,
                       error="_APPLICATION") == 1
    committed = sum(v for lb, v in m.select("kafka_producer_transactions_total", app=name)
                    if lb["outcome"] == "committed")
    # Each committed transaction counted once, but for task 0's commit of batch 3: the batch
    # failed (task 1), so the driver never got its results, and the replay skips it (as in
    # classic mode: docs/spark-sink.md, Metrics).
    assert committed == len(attempts) - 1, (committed, len(attempts))
    assert not m.select("kafka_producer_transaction_errors_total", error="PRODUCER_FENCED")
    import pyspark

    row = "Spark Connect, local[2]"
    compat.record(request.config, "spark", row, "PySpark run", pyspark.__version__)
    compat.record(request.config, "spark", row, "Exactly once through a task failure", "yes")
    compat.record(request.config, "spark", row, "Sink's kafka_producer_*", "forwarded from the server's Python worker")
    compat.record(request.config, "spark", row, "Listener's spark_streaming_*", "forwarded from the client")


def assert_every_transaction_once(broker, name: str, expected, exp, what: str) -> None:
    """Every window once for read_committed consumers, nothing aborted, and every committed
    transaction of the sink once in the exporter, by both task ids."""
    records = assert_exactly_once(broker.bootstrap, f"{name}-out", expected)
    attempts = committed_attempts(broker.bootstrap, name)
    assert {r.attempt for r in records} <= set(attempts)
    assert not aborted_records(broker.bootstrap, f"{name}-out", records)
    m = exp.wait_metric(
        lambda m: sum(v for lb, v in m.select("kafka_producer_transactions_total", app=name)
                      if lb["outcome"] == "committed") >= len(attempts), 60,
        what=f"every committed transaction of {what} in the exporter")
    committed = {lb["transactional_id"]: v for lb, v in m.select("kafka_producer_transactions_total", app=name)
                 if lb["outcome"] == "committed"}
    assert sum(committed.values()) == len(attempts), (committed, len(attempts))
    assert set(committed) == {f"txnwatch.{name}.0", f"txnwatch.{name}.1"}
    assert not m.select("kafka_producer_transactions_total", app=name, outcome="aborted")


def test_jvm_writer_on_spark_connect(broker, unique, tmp_path, exporter_factory):
    """The pipeline under Spark Connect on the sink's JVM writer (`--sink-writer jvm`: the jar on
    the local Connect server's spark.jars): every window once for read_committed consumers, and
    every committed transaction in the exporter once, forwarded from the server's foreachBatch
    worker, which got them back from the JVM tasks through the write's session configuration."""
    name, expected, exp = pipeline_topics_and_exporter(broker, unique("connect_jvm"), exporter_factory)
    run = run_pipeline(broker.bootstrap, name, str(tmp_path / "ckpt"), exp.url, tmp_path, "jvm", "--sink-writer", "jvm")
    assert run.returncode == 0 and "stopped (idle)" in run.stdout, run.stdout + run.stderr[-4000:]
    assert_every_transaction_once(broker, name, expected, exp, "the JVM writer")


def test_stream_form_on_spark_connect(broker, unique, tmp_path, exporter_factory):
    """The pipeline under Spark Connect with the sink as the query's own sink (`--sink-form
    stream`: no foreachBatch, no Python worker in the server): every window once for
    read_committed consumers, and every committed transaction in the exporter once, reported
    from the client's listener, which reads them from the query's progress events."""
    name, expected, exp = pipeline_topics_and_exporter(broker, unique("connect_stream"), exporter_factory)
    run = run_pipeline(broker.bootstrap, name, str(tmp_path / "ckpt"), exp.url, tmp_path, "stream",
                       "--sink-writer", "jvm", "--sink-form", "stream")
    assert run.returncode == 0 and "stopped (idle)" in run.stdout, run.stdout + run.stderr[-4000:]
    assert "(sink: stream form, jvm writer)" in run.stdout, run.stdout
    assert_every_transaction_once(broker, name, expected, exp, "the stream form")
