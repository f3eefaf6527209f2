"""Fuzzing the Spark ingest endpoint (issue 9): schemathesis drives the real Flask app from
the OpenAPI document the exporter publishes, and hypothesis throws arbitrary bodies at it.
Only clear 4xx answers (or 202), never a 5xx; memory stays bounded by the query cap."""

from __future__ import annotations

import json

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schemathesis.checks import not_a_server_error

from txnwatch.config import load_config
from txnwatch.exporter.runtime.service import Exporter
from txnwatch.exporter.serve.app import create_app

pytestmark = pytest.mark.faults
TOKEN = "fuzz-token-123"


def make_app():
    # A cluster on a closed port: the exporter is never started, so no Kafka I/O happens.
    cfg = load_config({"bootstrap_servers": "127.0.0.1:9", "host": "127.0.0.1", "ingest_token": TOKEN}, env={})
    exporter = Exporter(cfg)
    return exporter, create_app(exporter)


EXPORTER, APP = make_app()
SCHEMA = schemathesis.openapi.from_wsgi("/api/v1/openapi.yaml", APP)


@SCHEMA.parametrize()
@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
def test_schema_driven_fuzz_never_gets_a_server_error(case):
    response = case.call(headers={"Authorization": f"Bearer {TOKEN}"})
    assert response.status_code < 500, (response.status_code, response.text[:500])
    if case.method.upper() == "POST":
        assert response.status_code in (202, 400, 401, 413, 415), response.status_code
    else:  # schemathesis also probes other methods: OPTIONS 200, anything else 405
        assert response.status_code in (200, 405), (case.method, response.status_code)
    if response.status_code in (400, 401, 413):
        body = response.json()
        assert body["error"], body  # a message that names the problem
    case.validate_response(response, checks=[not_a_server_error])


json_values = st.recursive(
    st.none() | st.booleans() | st.floats(allow_nan=True) | st.integers() | st.text(max_size=50),
    lambda children: st.lists(children, max_size=5) | st.dictionaries(st.text(max_size=20), children, max_size=6),
    max_leaves=30)
event_like = st.fixed_dictionaries(
    {"type": st.sampled_from(["started", "progress", "idle", "terminated", "producer_transactions", "x"])},
    optional={"query_id": json_values, "query": json_values, "timestamp": json_values, "progress": json_values,
              "records": json_values, "app": json_values, "error_class": json_values})


@given(body=st.binary(max_size=2000) | json_values.map(lambda v: json.dumps(v).encode())
       | event_like.map(lambda v: json.dumps(v).encode())
       | st.lists(event_like, max_size=5).map(lambda v: json.dumps({"events": v}).encode()))
@settings(max_examples=400, deadline=None, suppress_health_check=list(HealthCheck))
def test_arbitrary_bodies_get_4xx_or_202_never_5xx(body):
    client = APP.test_client()
    r = client.post("/api/v1/spark/events", data=body, headers={"Authorization": f"Bearer {TOKEN}",
                                                                  "Content-Type": "application/json"})
    assert r.status_code in (202, 400, 413), (r.status_code, r.data[:300])
    if r.status_code != 202:
        assert r.get_json()["error"]


def test_memory_is_bounded_by_the_query_cap():
    client = APP.test_client()
    state = EXPORTER.spark_state
    for i in range(state.max_queries + 300):
        client.post("/api/v1/spark/events", json={"type": "started", "query_id": f"q-{i}", "query": f"n-{i}",
                                                  "timestamp": 1_800_000_000},
                    headers={"Authorization": f"Bearer {TOKEN}"})
    assert len(state.queries()) <= state.max_queries
    assert state.dropped().get("query_limit", 0) >= 300 or len(state.queries()) < state.max_queries


def test_oversized_and_unauthenticated_requests():
    client = APP.test_client()
    big = b'{"events": [' + b'{"type": "idle"},' * 100_000 + b'{"type": "idle"}]}'
    r = client.post("/api/v1/spark/events", data=big, headers={"Authorization": f"Bearer {TOKEN}"})
    assert r.status_code == 413 and "larger than" in r.get_json()["error"]
    r = client.post("/api/v1/spark/events", json={"type": "idle"}, headers={"Authorization": "Bearer wrong"})
    assert r.status_code == 401
