"""`txnwatch abort --exporter`: the Spark queries reading each pinned partition, from the
exporter's metrics (Spark's Kafka source commits no group offsets), with their lag against the
partition's LSO and HWM, and how long each transaction's coordinator state has been unchanged;
an exporter that cannot be read is a note, never a failed dry run."""

from __future__ import annotations

import http.server
import threading

import pytest

from txnwatch.kafka.answers import TxnDescription
from txnwatch.remediation.command import AbortOptions, with_exporter_view
from txnwatch.remediation.exporter_view import ExporterUnreadable, parse, read_metrics, with_view
from txnwatch.remediation.plan import Pin, Transaction
from txnwatch.remediation.report import decision_dict, render_text
from txnwatch.remediation.survey import Survey
from txnwatch.remediation.targets import target_of

EXPOSITION = """\
# HELP spark_streaming_source_partition_offset Per Kafka partition, the offset the query reads next.
# TYPE spark_streaming_source_partition_offset gauge
spark_streaming_source_partition_offset{query="orders_q",query_id="q-1",source="KafkaV2[Subscribe[orders]]",topic="orders",partition="0"} 40
spark_streaming_source_partition_offset{query="orders_q",query_id="q-1",source="KafkaV2[Subscribe[orders]]",topic="orders",partition="1"} 7
spark_streaming_source_partition_offset{query="join_q",query_id="q-2",source="KafkaV2[Subscribe[orders]]",topic="orders",partition="0"} 31
spark_streaming_source_partition_offset{query="join_q",query_id="q-2",source="KafkaV2[Subscribe[orders2]]",topic="orders",partition="0"} 35
# HELP kafka_partition_last_stable_offset LSO.
# TYPE kafka_partition_last_stable_offset gauge
kafka_partition_last_stable_offset{kafka_cluster="c",topic="orders",partition="0"} 40
# HELP kafka_transaction_state_unchanged_seconds now - the coordinator's last change.
# TYPE kafka_transaction_state_unchanged_seconds gauge
kafka_transaction_state_unchanged_seconds{kafka_cluster="c",app="orders",transactional_id="orders-tx"} 95
kafka_transaction_state_unchanged_seconds{kafka_cluster="c",app="orders",transactional_id="orders-tx"} 90
kafka_transaction_state_unchanged_seconds{kafka_cluster="c",app="orders",transactional_id="other-tx"} 5
"""


def transaction(coordinator=None) -> Transaction:
    pin = Pin("orders", 0, 40, 3, -1, 40, 52, None)
    return Transaction(1000, 4, "orders-tx", "orders", None, coordinator, "no_coordinator_state", (pin,))


def survey(txns=None) -> Survey:
    return Survey("c", "b:9092", 1_800_000_000_000, tuple(txns if txns is not None else (transaction(),)), True,
                  "User:ops")


def test_each_query_on_a_partition_once_at_its_lowest_position():
    reading = parse(EXPOSITION).positions
    assert [(q.query, q.offset) for q in reading[("orders", 0)]] == [("join_q", 31), ("orders_q", 40)]
    assert [(q.query, q.offset) for q in reading[("orders", 1)]] == [("orders_q", 7)]


def test_the_pins_carry_the_queries_lag_against_the_lso_and_the_hwm():
    txn = with_view(transaction(), parse(EXPOSITION))
    [pin] = txn.pins
    assert [(q.query, q.lag_lso, q.lag_hwm) for q in pin.queries] == [("join_q", 9, 21), ("orders_q", 0, 12)]
    assert txn.state_unchanged_seconds is None     # its coordinator holds no transaction of it


def test_the_coordinators_state_age_is_the_exporters_latest_for_a_transaction_it_holds():
    from txnwatch.remediation.plan import liveness

    now = 1_800_000_000_000
    held = TxnDescription("orders-tx", "Ongoing", 1000, 4, 60_000, now - 100_000, frozenset({("orders", 0)}))
    txn = with_view(transaction(held), parse(EXPOSITION))
    assert txn.state_unchanged_seconds == 90
    assert "its coordinator state unchanged for 90s (the exporter's)" in liveness(txn, now)


def test_unparseable_metrics_are_named():
    with pytest.raises(ExporterUnreadable, match="do not parse"):
        parse('spark_streaming_source_partition_offset{query="q" 1\n')


class _Exporter(http.server.BaseHTTPRequestHandler):
    body, seen = EXPOSITION.encode(), []

    def do_GET(self):   # noqa: N802 - http.server's name
        _Exporter.seen.append((self.path, self.headers.get("Authorization")))
        if self.path != "/metrics":
            self.send_error(404)
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.end_headers()
        self.wfile.write(self.body)

    def log_message(self, *args):
        pass


@pytest.fixture
def exporter():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Exporter)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    _Exporter.seen.clear()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def options(url=None, token=None) -> AbortOptions:
    return AbortOptions(target_of(True, None, None, None), exporter_url=url, exporter_token=token)


def test_the_dry_run_names_the_spark_queries_and_sends_the_configured_token(exporter):
    shown = with_exporter_view(survey(), options(exporter, "tok-3e1"))
    assert _Exporter.seen == [("/metrics", "Bearer tok-3e1")]
    assert read_metrics(exporter + "/metrics") == EXPOSITION   # a URL naming the path is taken as it is
    from txnwatch.remediation.plan import Flags, decide

    entry = decision_dict(decide(shown.transactions[0], shown.taken_at_ms, Flags(), True, "acl"), shown.taken_at_ms)
    assert entry["partitions"][0]["spark_queries"][0] == {"query": "join_q", "query_id": "q-2", "offset": 31,
                                                          "lag_lso": 9, "lag_hwm": 21}
    text = render_text({"dry_run": True, "cluster": "c", "principal": "User:ops", "target": "hanging",
                        "transactions": [{**entry, "verdict": "abort"}]})
    assert "Spark query join_q: lag 9 vs LSO, 21 vs HWM (reads from 31)" in text


def test_without_an_exporter_or_with_one_gone_the_plan_goes_on_with_a_note(exporter):
    assert "--exporter URL" in with_exporter_view(survey(), options()).notes[-1]
    gone = with_exporter_view(survey(), options("http://127.0.0.1:9"))
    assert gone.transactions == survey().transactions and "could not be read" in gone.notes[-1]
    missing = with_exporter_view(survey(), options(exporter + "/nothing/metrics"))
    assert "HTTP 404" in missing.notes[-1]
    assert with_exporter_view(survey(()), options()).notes == ()     # nothing to abort: nothing to say
