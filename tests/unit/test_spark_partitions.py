"""Per-partition read positions of Kafka-source queries, from every progress shape, and the
exporter's blocked-vs-behind classification against the partitions' LSO (no Spark, no I/O)."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from txnwatch.exporter.model import ClusterSnapshot, HangingTransaction, OpenTransaction, PartitionState
from txnwatch.exporter.spark.blocked import BEHIND, BLOCKED, CAUGHT_UP, classify
from txnwatch.exporter.spark.page import spark_section
from txnwatch.metrics import FamilyWriter
from txnwatch.spark_listener.events import from_progress
from txnwatch.spark_listener.state import SourcePosition, SparkQueryState, source_partitions

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "spark"
REAL_ID = "ac46441c-9214-495f-801c-29bd5795f7ac"


def load(name: str) -> dict:
    return json.loads((FIX / name).read_text())


def with_offsets_as(p: dict, encode) -> dict:
    p = copy.deepcopy(p)
    for s in p["sources"]:
        for k in ("startOffset", "endOffset", "latestOffset"):
            if s.get(k) is not None:
                s[k] = encode(s[k])
    return p


# The same real Spark 4.0 Kafka-source progress in the shapes listeners receive it:
SHAPES = {
    "nested objects (JSON of the JVM event, 4.1+ fromJson)": lambda p: p,
    "JSON strings (3.4/3.5 SourceProgress.json)": lambda p: with_offsets_as(p, json.dumps),
    "Python repr strings (4.0 fromJson, Spark Connect)": lambda p: with_offsets_as(p, str),
}


@pytest.mark.parametrize("shape", SHAPES)
def test_real_progress_gives_per_partition_positions_in_every_shape(shape):
    p = SHAPES[shape](load("kafka_progress_spark40_real.json"))
    st = SparkQueryState()
    assert st.apply(from_progress(p))
    pos = {(x.topic, x.partition): (x.offset, x.behind_latest) for x in st.positions()}
    # endOffset {"0": 298, "1": 300}, latestOffset {"0": 508, "1": 512}
    assert pos == {("in2", 0): (298, 210), ("in2", 1): (300, 212)}
    w = FamilyWriter()
    st.render(w)
    fams = {f.name: f for f in w.families()}
    by_part = {s.labels["partition"]: s.value for s in fams["spark_streaming_source_partition_offset"].samples}
    assert by_part == {"0": 298, "1": 300}
    behind = {s.labels["partition"]: s.value
              for s in fams["spark_streaming_source_partition_behind_latest_offsets"].samples}
    assert behind == {"0": 210, "1": 212}
    s0 = fams["spark_streaming_source_partition_offset"].samples[0]
    assert s0.labels["source"] == "KafkaV2[Subscribe[in2]]" and s0.labels["query_id"] == REAL_ID
    # the Kafka sink's numOutputRows (193) is counted
    assert [s.value for s in fams["spark_streaming_sink_output_rows"].samples] == [193]
    # no aggregate over partitions as a label value: PromQL's min/max/avg/sum of the per-partition series
    assert "spark_streaming_source_offsets_behind_latest" not in fams


def test_foreach_batch_sink_reports_no_output_rows_and_first_batch_has_no_start():
    p = load("kafka_progress_spark40_real.json")
    p["sink"] = {"description": "ForeachBatchSink", "numOutputRows": -1}
    p["sources"][0]["startOffset"] = None
    st = SparkQueryState()
    st.apply(from_progress(p))
    w = FamilyWriter()
    st.render(w)
    fams = {f.name: f for f in w.families()}
    assert [s.value for s in fams["spark_streaming_sink_output_rows"].samples] == [0]
    assert len(st.positions()) == 2


def test_odd_offsets_are_skipped_not_raised():
    assert source_partitions({"endOffset": "{not json"}) == {}
    assert source_partitions({"endOffset": "__import__('os').system('true')"}) == {}   # never evaluated
    assert source_partitions({"endOffset": {"t": {"0": "x", "1": 5}}, "latestOffset": None}) == {("t", "1"): (5, None)}
    assert source_partitions({"endOffset": 17}) == {}    # a rate source's offset


def test_partition_cap_counts_what_it_drops():
    p = load("kafka_progress_spark40_real.json")
    p["sources"][0]["endOffset"] = {"in2": {str(i): i for i in range(10)}}
    st = SparkQueryState(max_partitions_per_query=4)
    st.apply(from_progress(p))
    assert len(st.positions()) == 4
    assert st.dropped() == {"partition_limit": 6}


def test_terminated_query_has_no_positions_to_classify():
    st = SparkQueryState()
    st.apply(from_progress(load("kafka_progress_spark40_real.json")))
    st.apply({"type": "terminated", "query_id": REAL_ID, "timestamp": 1.0, "error_class": None,
              "exception": None})
    assert st.positions() == []
    assert st.cards()[0].active is False


# ----------------------------------------------------------------------------- classification

def snap(name: str, parts: dict, hanging=(), open_txns=None) -> ClusterSnapshot:
    return ClusterSnapshot(name, 0.0, 0.1, partitions={(p.topic, p.partition): p for p in parts.values()},
                           hanging=tuple(hanging), open_transactions=open_txns)


def pos(topic: str, partition: int, offset: int, query="q", qid="id-1") -> SourcePosition:
    return SourcePosition(query, qid, "KafkaV2[Subscribe[t]]", topic, partition, offset, 0.0)


def part(topic, p, lso, hwm, stalled=None) -> PartitionState:
    return PartitionState(topic, p, hwm, lso, stalled_since=None if stalled is None else 100.0,
                          stalled_seconds=stalled or 0.0)


def test_read_up_to_a_stalled_lso_is_blocked_below_it_is_behind():
    s = snap("c1", {0: part("t", 0, 50, 81, stalled=95), 1: part("t", 1, 82, 82), 2: part("t", 2, 60, 90, 30)},
             hanging=[HangingTransaction("t", 0, 1234, 0, 50, 95.0, None, "producer_state")])
    out, ambiguous = classify([pos("t", 0, 50), pos("t", 1, 82), pos("t", 2, 40), pos("other", 0, 1)],
                              {"c1": s, "down": None})
    by = {st.partition: st for st in out}
    assert ambiguous == [] and len(out) == 3            # "other" is on no watched cluster
    assert by[0].state == BLOCKED and by[0].stalled_seconds == 95 and by[0].held_back == 31
    assert by[0].behind_lso == 0 and "producer id 1234" in by[0].holder and "offset 50" in by[0].holder
    assert by[1].state == CAUGHT_UP and by[1].holder is None
    assert by[2].state == BEHIND and by[2].behind_lso == 20     # slow, though its LSO is stalled too


def test_a_moving_open_transaction_is_not_blocked_until_the_stall_minimum():
    s = snap("c1", {0: part("t", 0, 50, 60, stalled=3)})
    (st,), _ = classify([pos("t", 0, 50)], {"c1": s}, min_stall_seconds=10)
    assert st.state == CAUGHT_UP
    (st,), _ = classify([pos("t", 0, 50)], {"c1": s}, min_stall_seconds=0)
    assert st.state == BLOCKED


def test_holder_named_from_kip664_open_transactions():
    t = OpenTransaction("orders-tx-1", "orders", 7, 3, "Ongoing", 0, 60000, (("t", 0),), 42.0, 18.0)
    s = snap("c1", {0: part("t", 0, 50, 60, stalled=40)}, open_txns=(t,))
    (st,), _ = classify([pos("t", 0, 50)], {"c1": s})
    assert st.holder == "open transaction orders-tx-1 (Ongoing, open 42s)"


def test_same_topic_on_two_clusters_is_not_guessed():
    a = snap("a", {0: part("t", 0, 50, 81, stalled=95)})
    b = snap("b", {0: part("t", 0, 10, 10)})
    out, ambiguous = classify([pos("t", 0, 50)], {"a": a, "b": b})
    assert out == [] and ambiguous == [pos("t", 0, 50)]


def test_page_tells_blocked_from_behind():
    st = SparkQueryState()
    st.apply(from_progress(load("kafka_progress_spark40_real.json")))
    (card,) = st.cards()
    assert (card.batch_id, card.last_batch_seconds, card.offsets_behind) == (1, 0.334, 422)
    s = snap("c1", {0: part("in2", 0, 298, 400, stalled=120), 1: part("in2", 1, 350, 350)},
             hanging=[HangingTransaction("in2", 0, 9, 0, 298, 120.0, "stuck-id", "producer_state")])
    statuses, ambiguous = classify(st.positions(), {"c1": s})
    html = spark_section([card], statuses, ambiguous, now=card.last_progress_ts + 5)
    assert "blocked by an open transaction" in html and "in2-0 on c1" in html
    assert "102 record(s) held back" in html and "transactional id stuck-id" in html
    assert "5s ago" in html and ">0.33s<" in html and ">422<" in html
    s = snap("c1", {0: part("in2", 0, 400, 400), 1: part("in2", 1, 350, 350)})
    statuses, _ = classify(st.positions(), {"c1": s})
    html = spark_section([card], statuses, [])
    assert "blocked by" not in html and "152 readable record(s) not read yet on 2 partition(s)" in html
    assert "no Kafka partition matched on a watched cluster (yet" in spark_section([card], [], [])
