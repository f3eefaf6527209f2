"""Spark's own Kafka source (`format("kafka")`, read_committed) on the session's Kafka broker,
with the listener forwarding to a real exporter that polls the same broker.

A query that has read a partition up to an LSO held by a hanging transaction (KAFKA-9144)
looks caught up to Spark (latest = the LSO, so 0 offsets behind) while records pile up
above it: the exporter, which knows the query's read position and the partition's LSO,
HWM and stall time, reports it blocked (`spark_streaming_source_blocked_seconds`, the
page), and tells it apart from a slow query reading below the LSO. `txnwatch abort` names the
query in its dry run (read from the exporter) and its abort unblocks it; the listener's
per-partition positions then equal the broker's offsets.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.integration.helpers import cluster_config
from txnwatch.producer import TransactionalProducer
from txnwatch.spark_listener import attach, detach
from txnwatch_dev.net import wait_for
from txnwatch_dev.transactions.hanging import make_hanging_transaction
from txnwatch_dev.transactions.workload import create_topics, watermarks

pytestmark = [pytest.mark.integration, pytest.mark.spark]

TRIGGER = "500 milliseconds"


def write_committed(bootstrap: str, topic: str, tid: str, per_partition: dict[int, int]) -> None:
    p = TransactionalProducer({"bootstrap.servers": bootstrap, "transactional.id": tid})
    p.init_transactions()
    p.begin()
    for part, n in per_partition.items():
        for i in range(n):
            p.produce(topic, value=f"{part}-{i}".encode(), partition=part)
    p.commit()


def txnwatch_abort(bootstrap: str, *args: str) -> dict:
    out = subprocess.run([sys.executable, "-m", "txnwatch.cli", "abort", "--bootstrap-servers", bootstrap,
                          "--output", "json", *args], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.startswith("{"), (out.returncode, out.stdout, out.stderr)
    return json.loads(out.stdout)


def start(spark, bootstrap: str, topic: str, name: str, max_offsets: int | None = None):
    r = (spark.readStream.format("kafka").option("kafka.bootstrap.servers", bootstrap).option("subscribe", topic)
         .option("startingOffsets", "earliest").option("kafka.isolation.level", "read_committed"))
    if max_offsets:
        r = r.option("maxOffsetsPerTrigger", max_offsets)
    return r.load().writeStream.queryName(name).format("noop").trigger(processingTime=TRIGGER).start()


def test_blocked_query_is_told_apart_from_a_slow_one_and_unblocks_after_abort(spark, broker, unique,
                                                                                exporter_factory, tmp_path):
    bs = broker.bootstrap
    held, slow_topic = unique("held"), unique("slow")
    create_topics(bs, [held], partitions=2)
    create_topics(bs, [slow_topic], partitions=1)
    write_committed(bs, held, unique("w"), {0: 10, 1: 10})
    made = make_hanging_transaction(bs, held, 0)          # LSO of held-0 stalls here for good
    write_committed(bs, held, unique("w"), {0: 20, 1: 5})  # invisible to read_committed on held-0
    write_committed(bs, slow_topic, unique("w"), {0: 400})
    wm = watermarks(bs, held, 2)
    assert wm[0][0] == made.offset and wm[0][1] > made.offset + 20, wm

    # every partition's series: the slow query's partition carries no signal of its own
    exp = exporter_factory(cluster_config(bs, [held, slow_topic], granularity="partition"))
    listener = attach(spark, forward_url=exp.url)
    q_held = q_slow = None
    try:
        q_held = start(spark, bs, held, "blocked_q")
        q_slow = start(spark, bs, slow_topic, "slow_q", max_offsets=2)   # 2 offsets per 0.5 s: minutes behind

        def blocked_state(m) -> bool:
            return (m.get_value("spark_streaming_source_blocked_seconds", kafka_cluster="test", query="blocked_q",
                                topic=held, partition=0) is not None
                    and m.get_value("spark_streaming_source_partition_offset", query="slow_q",
                                    topic=slow_topic, partition=0) is not None)

        m = exp.wait_metric(blocked_state, 120, what="the exporter to see the query blocked at held-0's LSO")
        # Spark says caught up: its position is the LSO and it is 0 behind its latest (= the LSO) ...
        assert m.get_value("spark_streaming_source_partition_offset", query="blocked_q", topic=held,
                           partition=0) == made.offset == m.get_value("kafka_partition_last_stable_offset",
                                                                       topic=held, partition=0)
        assert m.get_value("spark_streaming_source_partition_behind_latest_offsets", query="blocked_q",
                           topic=held, partition=0) == 0
        # ... while the broker holds records above it; the other partition is simply caught up.
        assert m.get_value("kafka_partition_high_watermark", topic=held, partition=0) == wm[0][1]
        assert m.get_value("spark_streaming_source_partition_offset", query="blocked_q", topic=held,
                           partition=1) == wm[1][1]
        assert m.get_value("spark_streaming_source_blocked_seconds", query="blocked_q", topic=held,
                           partition=1) is None
        # The slow query reads below its LSO: behind, never blocked.
        assert not m.select("spark_streaming_source_blocked_seconds", query="slow_q")
        assert m.get_value("spark_streaming_source_partition_offset", query="slow_q", topic=slow_topic,
                           partition=0) < m.get_value("kafka_partition_last_stable_offset", topic=slow_topic,
                                                      partition=0)
        def rows() -> dict[str, str]:
            status, page = exp.get("/")
            assert status == 200
            return {q: page[page.index(f"<td>{q}<br>"):].split("</tr>")[0] for q in ("blocked_q", "slow_q")}

        # each query's topics are matched from the worker's poll after the exporter first saw them
        def matched() -> dict[str, str] | None:
            r = rows()
            return None if "matched on a watched cluster" in "".join(r.values()) else r

        row = wait_for(matched, 30, what="both queries matched to the cluster's partitions on the page")
        assert "blocked by an open transaction" in row["blocked_q"] and f"{held}-0 on test" in row["blocked_q"]
        assert f"read up to the LSO {made.offset}" in row["blocked_q"]
        assert "behind</span>" in row["slow_q"] and "blocked by" not in row["slow_q"]

        # The runbook's fix: `txnwatch abort`, whose dry run names the query held behind the
        # transaction (from the exporter: Spark's source commits no group offsets) and changes
        # nothing; then the abort. The query reads what was held back.
        dry = txnwatch_abort(bs, "--partition", f"{held}:0", "--exporter", exp.url)
        [pinned] = dry["transactions"][0]["partitions"]
        assert [(q["query"], q["offset"], q["lag_lso"], q["lag_hwm"]) for q in pinned["spark_queries"]] == [
            ("blocked_q", made.offset, 0, wm[0][1] - made.offset)], pinned
        assert watermarks(bs, held, 2) == wm
        done = txnwatch_abort(bs, "--partition", f"{held}:0", "--yes", "--audit-log", str(tmp_path / "audit.jsonl"))
        assert [r["outcome"] for r in done["transactions"][0]["results"]] == ["aborted"], done
        after = watermarks(bs, held, 2)
        assert after[0][0] == after[0][1], after                 # LSO back at the HWM

        def caught_up(m) -> bool:
            return m.get_value("spark_streaming_source_partition_offset", query="blocked_q", topic=held,
                               partition=0) == after[0][1]

        m = exp.wait_metric(caught_up, 60, what="the query to read past the aborted transaction")
        assert not m.select("spark_streaming_source_blocked_seconds", query="blocked_q")
        # The listener's positions are the broker's offsets, partition by partition.
        for p, (lso, hwm) in after.items():
            assert m.get_value("spark_streaming_source_partition_offset", query="blocked_q", topic=held,
                               partition=p) == lso == hwm
        last = q_held.lastProgress
        assert q_held.exception() is None and q_slow.exception() is None, last
    finally:
        for q in (q_held, q_slow):
            if q is not None:
                q.stop()
        detach(spark, listener)
