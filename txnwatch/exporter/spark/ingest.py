"""Ingest of Spark listener events: `POST /api/v1/spark/events` (a Flask Blueprint).

The body is one event or `{"events": [...]}` (schema: txnwatch/spark_listener/events.py,
txnwatch/exporter/openapi-ingest.yaml, served at GET /api/v1/openapi.yaml). Checks, in order:
- 401 when the bearer token is missing or wrong (constant-time compare);
- 413 when the body is larger than `max_bytes`. The body is read and discarded first, up to
  DISCARD_MAX_BYTES: cheroot closes the connection after a 413, and closing it with the body
  unread resets it, so a client that sends the whole body before reading (most do) would see a
  broken pipe instead of the answer. Past that bound the connection is closed unread;
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
# How much of an oversized body is read (and thrown away) so its client can read the 413; a
# larger one costs its sender a reset connection rather than this process the reading.
DISCARD_MAX_BYTES = 64 * 1024 * 1024
_CHUNK = 64 * 1024


def _reject_constant(name: str) -> None:
    raise ValueError(f"{name} is not valid JSON")


def _discard(stream, already: int) -> None:
    """Read the rest of a body (`already` bytes of it read) and drop it, up to DISCARD_MAX_BYTES."""
    left = DISCARD_MAX_BYTES - already
    while left > 0:
        chunk = stream.read(min(_CHUNK, left))
        if not chunk:
            return
        left -= len(chunk)


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

    def too_large(read: int):
        state.count_dropped("too_large")
        _discard(request.stream, read)
        return _error(413, f"body larger than {max_bytes} bytes", "body")

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
            return too_large(0 if length <= DISCARD_MAX_BYTES else DISCARD_MAX_BYTES)
        raw = request.stream.read(max_bytes + 1)
        if len(raw) > max_bytes:
            return too_large(len(raw))
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
