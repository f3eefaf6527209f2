"""The exporter's ingest endpoint (Flask test client, no network)."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from flask import Flask

from txnwatch.exporter.spark.ingest import INGEST_PATH, make_ingest_blueprint
from txnwatch.spark_listener.events import from_progress
from txnwatch.spark_listener.serve import render_text
from txnwatch.spark_listener.state import SparkQueryState

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "spark"
TOKEN = "s3cret-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


def load(name: str) -> dict:
    return json.loads((FIX / name).read_text())


def make_client(token: str | None = TOKEN, **kw):
    state = SparkQueryState()
    app = Flask("ingest-test")
    app.register_blueprint(make_ingest_blueprint(state, token, **kw))
    return app.test_client(), state


def events() -> list[dict]:
    qid = "5f1c9a1e-0b7d-4c55-9a51-2b8e6f2d7c10"
    return [
        {"type": "started", "query_id": qid, "query": "orders-enrich", "timestamp": 1.0},
        from_progress(load("kafka_progress.json")),
        from_progress(load("kafka_progress_string_offsets.json")),
        {"type": "idle", "query_id": qid, "query": "orders-enrich", "timestamp": 2.0},
        {"type": "terminated", "query_id": qid, "query": "orders-enrich", "timestamp": 3.0,
         "error_class": "FOREACH_BATCH_USER_FUNCTION_ERROR", "exception": "boom"},
        {"type": "producer_transactions", "app": "orders-sink", "records": [
            {"transactional_id": "t-0", "outcome": "committed", "duration_seconds": 1.5,
             "commit_seconds": 0.02, "timeout_ms": 60000, "error": None}]},
    ]


def test_batch_accepted_and_identical_to_direct_apply():
    client, state = make_client()
    resp = client.post(INGEST_PATH, json={"events": events()}, headers=AUTH)
    assert resp.status_code == 202, resp.get_json()
    assert resp.get_json() == {"accepted": 6, "applied": 6}
    direct = SparkQueryState()
    for e in events():
        direct.apply(e)
    assert render_text(state, include_self=False) == render_text(direct, include_self=False)
    assert "spark_streaming_query_terminations_total" in render_text(state)


def test_single_event_accepted():
    client, state = make_client()
    resp = client.post(INGEST_PATH, json=events()[1], headers=AUTH)
    assert resp.status_code == 202
    assert len(state.queries()) == 1


@pytest.mark.parametrize("headers", [
    {}, {"Authorization": "Bearer wrong"}, {"Authorization": TOKEN}, {"Authorization": f"Basic {TOKEN}"},
    {"Authorization": "Bearer "},
])
def test_bad_or_missing_token_is_401(headers):
    client, state = make_client()
    resp = client.post(INGEST_PATH, json=events()[0], headers=headers)
    assert resp.status_code == 401
    assert resp.get_json()["field"] == "Authorization"
    assert "Bearer" in resp.headers["WWW-Authenticate"]
    assert state.queries() == []


def test_token_required_unless_disabled():
    with pytest.raises(ValueError):
        make_ingest_blueprint(SparkQueryState(), None)
    client, _ = make_client(token=None, require_token=False)
    assert client.post(INGEST_PATH, json=events()[0]).status_code == 202


def test_too_large_is_413():
    client, state = make_client(max_bytes=2000)
    resp = client.post(INGEST_PATH, json={"events": events()}, headers=AUTH)
    assert resp.status_code == 413
    assert resp.get_json()["field"] == "body"
    assert state.dropped()["too_large"] == 1
    # without a Content-Length (chunked), the body is read up to the limit only
    resp = client.post(INGEST_PATH, input_stream=io.BytesIO(b'{"events": [' + b" " * 3000 + b"]}"),
                       headers={**AUTH, "Content-Type": "application/json"},
                       environ_base={"wsgi.input_terminated": True})
    assert resp.status_code == 413


@pytest.mark.parametrize("body, field", [
    (b"", "body"),
    (b"not json", "body"),
    (b'{"type": "started", "query_id": "q", "timestamp": NaN}', "body"),
    (b"[" * 100_000 + b"]" * 100_000, "body"),
    (b"[]", ""),
    (b"42", ""),
    (json.dumps({"type": "started"}).encode(), "query_id"),
    (json.dumps({"type": "what", "query_id": "q"}).encode(), "type"),
    (json.dumps({"events": {"a": 1}}).encode(), "events"),
    (json.dumps({"events": [{"type": "idle", "query_id": "q", "timestamp": 1}, {"type": "idle"}]}).encode(),
     "events[1].query_id"),
    (json.dumps({"type": "progress", "query_id": "q", "timestamp": 1, "progress": 5}).encode(), "progress"),
    (json.dumps({"type": "producer_transactions", "app": "a", "records": [
        {"transactional_id": "t", "outcome": "done", "duration_seconds": 1}]}).encode(), "records[0].outcome"),
])
def test_bad_payloads_are_400_naming_the_field(body, field):
    client, state = make_client()
    resp = client.post(INGEST_PATH, data=body, headers={**AUTH, "Content-Type": "application/json"})
    assert resp.status_code == 400, resp.data[:200]
    payload = resp.get_json()
    assert payload["error"]
    assert payload["field"] == (field or "body")
    assert state.queries() == []


def test_a_bad_event_rejects_the_whole_batch():
    client, state = make_client()
    batch = {"events": [events()[0], {"type": "idle", "query_id": 5, "timestamp": 1}]}
    resp = client.post(INGEST_PATH, json=batch, headers=AUTH)
    assert resp.status_code == 400
    assert resp.get_json()["field"] == "events[1].query_id"
    assert state.queries() == []


def test_odd_but_valid_progress_never_5xx():
    client, state = make_client()
    odd = {"type": "progress", "query_id": "q", "timestamp": 1,
           "progress": {"durationMs": {"addBatch": "x"}, "sources": [None, {"latestOffset": "{"}],
                        "stateOperators": {"a": 1}, "eventTime": [], "observedMetrics": "zz"}}
    resp = client.post(INGEST_PATH, json=odd, headers=AUTH)
    assert resp.status_code == 202
    assert state.queries() == ["q"]


def test_get_is_not_allowed():
    client, _ = make_client()
    assert client.get(INGEST_PATH, headers=AUTH).status_code == 405


def test_openapi_document_matches_the_endpoint():
    import yaml

    from txnwatch.spark_listener.events import EVENT_TYPES, OUTCOMES

    doc = yaml.safe_load((Path(__file__).resolve().parents[2] / "txnwatch" / "exporter" / "spark" / "openapi-ingest.yaml").read_text())
    op = doc["paths"][INGEST_PATH]["post"]
    schemas = doc["components"]["schemas"]
    assert set(schemas["Event"]["discriminator"]["mapping"]) == set(EVENT_TYPES)
    records = schemas["ProducerTransactionsEvent"]["properties"]["records"]["items"]
    assert records["properties"]["outcome"]["enum"] == [*OUTCOMES, None]   # null: an error outside a transaction
    assert {"202", "400", "401", "413"} <= set(op["responses"])
    client, state = make_client()
    for example in op["requestBody"]["content"]["application/json"]["examples"].values():
        resp = client.post(INGEST_PATH, json=example["value"], headers=AUTH)
        assert resp.status_code == 202, resp.get_json()
