"""Ingest of Spark listener events: `POST /api/v1/spark/events` (a Flask Blueprint).

The body is one event or `{"events": [...]}` (schema: txnwatch/spark_listener/events.py,
txnwatch/exporter/openapi-ingest.yaml, served at GET /api/v1/openapi.yaml). Checks, in order:
- 401 when the bearer token is missing or wrong (constant-time compare);
- 413 when the body is larger than `max_bytes`;
- 400 with `{"error": ..., "field": ...}` naming the bad field for anything that is not
  valid JSON or does not match the schema (the whole request is rejected, nothing applied);
- 202 with `{"accepted": n}` otherwise.
Valid events go into the same `SparkQueryState` the driver-side `serve()` renders, so the
exporter exports identical spark_streaming_* series. Bad input never yields a 5xx.
"""

from __future__ import annotations

import hmac
import json
import logging
import time

from flask import Blueprint, Response, jsonify, request

from txnwatch.spark_listener.events import EventValidationError, validate_payload
from txnwatch.spark_listener.state import SparkQueryState

log = logging.getLogger(__name__)

INGEST_PATH = "/api/v1/spark/events"
MAX_EVENTS_PER_REQUEST = 5000


def _reject_constant(name: str) -> None:
    raise ValueError(f"{name} is not valid JSON")


def _error(status: int, message: str, field: str | None = None) -> tuple[Response, int]:
    body: dict[str, object] = {"error": message}
    if field is not None:
        body["field"] = field
    resp = jsonify(body)
    if status == 401:
        resp.headers["WWW-Authenticate"] = 'Bearer realm="txnwatch"'
    return resp, status


def make_ingest_blueprint(state: SparkQueryState, token: str | None, max_bytes: int = 1_000_000,
                          require_token: bool = True, name: str = "spark_ingest") -> Blueprint:
    """The ingest Blueprint; register it on the exporter's Flask app (no url_prefix needed).

    `require_token=True` with no token is a configuration error (ValueError): the endpoint
    would otherwise be open. Pass `require_token=False` to accept unauthenticated events.
    """
    if require_token and not token:
        raise ValueError("the Spark ingest endpoint needs a token (or require_token=False)")
    expected = token.encode() if token else None
    bp = Blueprint(name, __name__)

    @bp.post(INGEST_PATH)
    def ingest():
        if expected is not None:
            header = request.headers.get("Authorization", "")
            scheme, _, given = header.partition(" ")
            ok = scheme.lower() == "bearer" and hmac.compare_digest(given.strip().encode(), expected)
            if not ok:
                state.count_dropped("unauthorized")
                return _error(401, "missing or invalid bearer token", "Authorization")
        length = request.content_length
        if length is not None and length > max_bytes:
            state.count_dropped("too_large")
            return _error(413, f"body larger than {max_bytes} bytes", "body")
        raw = request.stream.read(max_bytes + 1)
        if len(raw) > max_bytes:
            state.count_dropped("too_large")
            return _error(413, f"body larger than {max_bytes} bytes", "body")
        try:
            payload = json.loads(raw, parse_constant=_reject_constant)
        except (ValueError, RecursionError) as exc:
            state.count_dropped("bad_request")
            msg = str(exc) if isinstance(exc, ValueError) else "nested too deeply"
            return _error(400, f"body is not valid JSON: {msg}"[:300], "body")
        try:
            events = validate_payload(payload)
        except EventValidationError as exc:
            state.count_dropped("bad_request")
            return _error(400, exc.message, exc.field or "body")
        except RecursionError:
            state.count_dropped("bad_request")
            return _error(400, "nested too deeply", "body")
        if len(events) > MAX_EVENTS_PER_REQUEST:
            state.count_dropped("bad_request")
            return _error(400, f"more than {MAX_EVENTS_PER_REQUEST} events in one request", "events")
        now = time.time()
        applied = sum(1 for e in events if state.apply(e, now))
        return jsonify({"accepted": len(events), "applied": applied}), 202

    @bp.errorhandler(Exception)
    def _unexpected(exc: Exception):  # pragma: no cover - a safety net, tested via state errors
        from werkzeug.exceptions import HTTPException

        if isinstance(exc, HTTPException):
            return _error(exc.code or 400, exc.description or exc.name)
        state.count_error("ingest", exc)
        return _error(400, "could not process the request", "body")

    return bp
