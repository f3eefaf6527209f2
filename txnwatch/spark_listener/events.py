"""The wire format of the Spark listener: plain JSON-able event dicts.

The same dicts flow into the driver-local `SparkQueryState` and, as JSON, to the
exporter's ingest endpoint, so both ways out export identical series.

Event schema (every event is a JSON object)::

    {"type": "started",    "query_id": str, "query": str, "timestamp": float, "run_id": str?}
    {"type": "progress",   "query_id": str, "query": str, "timestamp": float, "progress": {...}}
    {"type": "idle",       "query_id": str, "query": str, "timestamp": float}
    {"type": "terminated", "query_id": str, "query": str, "timestamp": float,
     "error_class": str | null, "exception": str | null}
    {"type": "trigger",    "query_id": str, "query": str, "timestamp": float,
     "trigger": str, "interval_seconds": float | null}
    {"type": "producer_transactions", "app": str, "timestamp": float?,
     "records": [{"transactional_id": str, "outcome": "committed" | "aborted" | null,
                  "duration_seconds": float, "commit_seconds": float | null,
                  "timeout_ms": float | null, "error": str | null}, ...]}

`query` is the query name, or the query id when the query is unnamed. `timestamp` is
unix seconds (an ISO-8601 string is accepted on input and normalised). `progress` is
the raw StreamingQueryProgress as a dict (its JSON form); `SparkQueryState` tolerates
missing keys and odd values inside it, so validation only checks that it is an object.

`from_started/from_progress/from_idle/from_terminated` convert PySpark listener
events (Spark 3.4 to 4.x shapes); `from_trigger` the trigger the listener looked up
(`trigger.py`: `trigger` is Spark's mode name, e.g. `ProcessingTime` or `RealTime`). `validate_event` checks an untrusted dict and returns
the normalised event or raises `EventValidationError(field, message)`.
"""

from __future__ import annotations

import json
import math
import time
import uuid
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

Event = dict[str, Any]

EVENT_TYPES = ("started", "progress", "idle", "terminated", "trigger", "producer_transactions")
QUERY_EVENT_TYPES = ("started", "progress", "idle", "terminated", "trigger")
OUTCOMES = ("committed", "aborted")

MAX_ID_CHARS = 200          # query ids, names, apps, transactional ids, error names
MAX_EXCEPTION_CHARS = 2000  # the exception text kept on a terminated event
MAX_RECORDS = 10_000        # records per producer_transactions event
MAX_DEPTH = 32              # nesting inside a progress object
MAX_TRIGGER_CHARS = 64      # a trigger mode name


class EventValidationError(ValueError):
    """An event failed validation; `field` names the bad field (e.g. `events[2].query_id`)."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message

    def prefixed(self, prefix: str) -> EventValidationError:
        return EventValidationError(f"{prefix}.{self.field}" if self.field else prefix, self.message)


# --------------------------------------------------------------------------- helpers

def parse_timestamp(value: Any) -> float | None:
    """Unix seconds from a number or an ISO-8601 string (Spark's `2026-11-20T09:15:02.118Z`)."""
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        v = float(value)
        return v if math.isfinite(v) else None
    if isinstance(value, str):
        s = value.strip()
        if not s:
            return None
        try:
            return float(s) if s.replace(".", "", 1).isdigit() else _iso(s)
        except ValueError:
            return None
    return None


def _iso(s: str) -> float:
    dt = datetime.fromisoformat(s[:-1] + "+00:00" if s.endswith(("Z", "z")) else s)
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    return dt.timestamp()


def jsonable(obj: Any, depth: int = 0) -> Any:
    """A JSON-safe copy: UUIDs and other objects to str, Rows to dicts, NaN/inf to None."""
    if depth > MAX_DEPTH:
        return None
    if obj is None or isinstance(obj, bool | int | str):
        return obj
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, Mapping):
        return {str(k): jsonable(v, depth + 1) for k, v in obj.items()}
    as_dict = getattr(obj, "asDict", None)   # pyspark.sql.Row (observedMetrics)
    if callable(as_dict):
        try:
            return jsonable(as_dict(recursive=True), depth + 1)
        except Exception:  # noqa: BLE001 - fall through to str()
            pass
    if isinstance(obj, list | tuple | set | frozenset):
        return [jsonable(v, depth + 1) for v in obj]
    return str(obj)


def _attr(obj: Any, name: str) -> Any:
    """obj.name, calling it when it is a method (py4j-style), None when absent."""
    try:
        v = getattr(obj, name)
    except Exception:  # noqa: BLE001 - a property that raises counts as absent
        return None
    if callable(v) and not isinstance(v, str | bytes | uuid.UUID):
        try:
            v = v()
        except Exception:  # noqa: BLE001
            return None
    return v


def _text(v: Any) -> str | None:
    if v is None:
        return None
    s = str(v)
    return s or None


def progress_dict(progress: Any) -> dict[str, Any]:
    """The progress of a QueryProgressEvent as a JSON-able dict.

    Spark 4: StreamingQueryProgress is a dict subclass (used directly, no JVM call).
    Spark 3.4/3.5: `.json` (a property, or a method on some builds) returns the JSON text;
    `jsonValue` is accepted too. A plain dict or JSON string is taken as is.
    """
    if isinstance(progress, str | bytes):
        out = json.loads(progress)
    elif isinstance(progress, Mapping):
        out = {k: progress[k] if k not in ("id", "runId") else str(progress[k]) for k in progress}
    else:
        out = None
        for name in ("json", "jsonValue"):
            v = _attr(progress, name)
            if isinstance(v, str | bytes):
                out = json.loads(v)
                break
            if isinstance(v, Mapping):
                out = v
                break
        if out is None:
            raise TypeError(f"cannot read progress of type {type(progress).__name__}")
    if not isinstance(out, Mapping):
        raise TypeError("progress is not an object")
    return jsonable(out)


def _name(v: Any) -> str | None:
    """An id/name that validate_event accepts: control characters become spaces, at most
    MAX_ID_CHARS characters, None when blank."""
    s = _text(v)
    if s is None:
        return None
    if any(ord(c) < 32 for c in s):
        s = "".join(" " if ord(c) < 32 else c for c in s)
    s = s[:MAX_ID_CHARS]
    return s if s.strip() else None


def _query_label(query_id: str, name: str | None) -> str:
    name = _name(name)
    return name if name else query_id


# --------------------------------------------------------------------------- from Spark

def from_started(event: Any, now: float | None = None) -> Event:
    qid = _name(_attr(event, "id")) or ""
    name = _text(_attr(event, "name"))
    ts = parse_timestamp(_attr(event, "timestamp"))
    out: Event = {"type": "started", "query_id": qid, "query": _query_label(qid, name),
                  "timestamp": ts if ts is not None else (time.time() if now is None else now)}
    run_id = _name(_attr(event, "runId"))
    if run_id:
        out["run_id"] = run_id
    return out


def from_progress(event: Any, now: float | None = None) -> Event:
    progress = event if isinstance(event, Mapping) else _attr(event, "progress")
    p = progress_dict(progress)
    qid = _name(p.get("id")) or ""
    ts = parse_timestamp(p.get("timestamp"))
    return {"type": "progress", "query_id": qid, "query": _query_label(qid, _text(p.get("name"))),
            "timestamp": ts if ts is not None else (time.time() if now is None else now),
            "progress": p}


def from_idle(event: Any, name: str | None = None, now: float | None = None) -> Event:
    qid = _name(_attr(event, "id")) or ""
    ts = parse_timestamp(_attr(event, "timestamp"))
    return {"type": "idle", "query_id": qid, "query": _query_label(qid, name),
            "timestamp": ts if ts is not None else (time.time() if now is None else now)}


def from_terminated(event: Any, name: str | None = None, now: float | None = None) -> Event:
    qid = _name(_attr(event, "id")) or ""
    exc = _text(_attr(event, "exception"))
    return {"type": "terminated", "query_id": qid, "query": _query_label(qid, name),
            "timestamp": time.time() if now is None else now,
            "error_class": _name(_attr(event, "errorClassOnException")),
            "exception": exc[:MAX_EXCEPTION_CHARS] if exc else None}


def from_trigger(query_id: str, mode: str, interval_seconds: float | None, name: str | None = None,
                 now: float | None = None) -> Event:
    qid = _name(query_id) or ""
    return {"type": "trigger", "query_id": qid, "query": _query_label(qid, name),
            "timestamp": time.time() if now is None else now,
            "trigger": _name(mode) or "unknown", "interval_seconds": interval_seconds}


# --------------------------------------------------------------------------- validation

def _req_str(obj: Mapping, field: str, max_chars: int = MAX_ID_CHARS) -> str:
    if field not in obj or obj[field] is None:
        raise EventValidationError(field, "is required")
    return _str(obj[field], field, max_chars)


def _str(v: Any, field: str, max_chars: int = MAX_ID_CHARS) -> str:
    if not isinstance(v, str):
        raise EventValidationError(field, f"must be a string, got {type(v).__name__}")
    if not v.strip():
        raise EventValidationError(field, "must not be empty")
    if len(v) > max_chars:
        raise EventValidationError(field, f"longer than {max_chars} characters")
    if any(ord(c) < 32 for c in v):
        raise EventValidationError(field, "contains control characters")
    return v


def _opt_str(obj: Mapping, field: str, max_chars: int = MAX_ID_CHARS) -> str | None:
    v = obj.get(field)
    return None if v is None else _str(v, field, max_chars)


def _num(v: Any, field: str, *, nullable: bool = False, min_value: float | None = 0.0) -> float | None:
    if v is None:
        if nullable:
            return None
        raise EventValidationError(field, "is required")
    if isinstance(v, bool) or not isinstance(v, int | float):
        raise EventValidationError(field, f"must be a number, got {type(v).__name__}")
    f = float(v)
    if not math.isfinite(f):
        raise EventValidationError(field, "must be finite")
    if min_value is not None and f < min_value:
        raise EventValidationError(field, f"must be >= {min_value:g}")
    return f


def _timestamp(obj: Mapping, required: bool) -> float | None:
    v = obj.get("timestamp")
    if v is None:
        if required:
            raise EventValidationError("timestamp", "is required")
        return None
    ts = parse_timestamp(v)
    if ts is None or (isinstance(v, str) and not v.strip()):
        raise EventValidationError("timestamp", "must be unix seconds or an ISO-8601 string")
    return ts


def _depth_ok(obj: Any, limit: int) -> bool:
    stack = [(obj, 0)]
    while stack:
        o, d = stack.pop()
        if d > limit:
            return False
        if isinstance(o, dict):
            stack.extend((v, d + 1) for v in o.values())
        elif isinstance(o, list):
            stack.extend((v, d + 1) for v in o)
    return True


def validate_event(obj: Any) -> Event:
    """Validate an untrusted event dict; return the normalised event.

    Raises EventValidationError(field, message) naming the first bad field.
    """
    if not isinstance(obj, dict):
        raise EventValidationError("", f"an event must be a JSON object, got {type(obj).__name__}")
    etype = obj.get("type")
    if etype is None:
        raise EventValidationError("type", "is required")
    if etype not in EVENT_TYPES:
        raise EventValidationError("type", f"must be one of {', '.join(EVENT_TYPES)}")
    if etype == "producer_transactions":
        return _validate_producer(obj)

    qid = _req_str(obj, "query_id")
    query = _opt_str(obj, "query") or qid
    ts = _timestamp(obj, required=True)
    out: Event = {"type": etype, "query_id": qid, "query": query, "timestamp": ts}
    if etype == "started":
        run_id = _opt_str(obj, "run_id")
        if run_id:
            out["run_id"] = run_id
    elif etype == "progress":
        p = obj.get("progress")
        if p is None:
            raise EventValidationError("progress", "is required")
        if not isinstance(p, dict):
            raise EventValidationError("progress", f"must be an object, got {type(p).__name__}")
        if not _depth_ok(p, MAX_DEPTH):
            raise EventValidationError("progress", f"nested deeper than {MAX_DEPTH} levels")
        out["progress"] = p
    elif etype == "terminated":
        out["error_class"] = _opt_str(obj, "error_class")
        exc = obj.get("exception")
        if exc is not None and not isinstance(exc, str):
            raise EventValidationError("exception", f"must be a string, got {type(exc).__name__}")
        out["exception"] = exc[:MAX_EXCEPTION_CHARS] if exc else None
    elif etype == "trigger":
        out["trigger"] = _req_str(obj, "trigger", MAX_TRIGGER_CHARS)
        out["interval_seconds"] = _num(obj.get("interval_seconds"), "interval_seconds", nullable=True)
    return out


def _validate_producer(obj: Mapping) -> Event:
    app = _req_str(obj, "app")
    ts = _timestamp(obj, required=False)
    records = obj.get("records")
    if records is None:
        raise EventValidationError("records", "is required")
    if not isinstance(records, list):
        raise EventValidationError("records", f"must be a list, got {type(records).__name__}")
    if len(records) > MAX_RECORDS:
        raise EventValidationError("records", f"more than {MAX_RECORDS} records")
    out_records = []
    for i, r in enumerate(records):
        try:
            out_records.append(_validate_record(r))
        except EventValidationError as exc:
            raise exc.prefixed(f"records[{i}]") from None
    out: Event = {"type": "producer_transactions", "app": app, "records": out_records}
    if ts is not None:
        out["timestamp"] = ts
    return out


def _validate_record(r: Any) -> dict[str, Any]:
    if not isinstance(r, dict):
        raise EventValidationError("", f"a record must be an object, got {type(r).__name__}")
    tid = _req_str(r, "transactional_id")
    outcome = r.get("outcome")
    if outcome not in OUTCOMES and outcome is not None:
        raise EventValidationError("outcome", "must be committed, aborted or null (an error outside a transaction)")
    error = _opt_str(r, "error")
    if outcome is None and not error:
        raise EventValidationError("error", "a record with a null outcome must name its error")
    return {
        "transactional_id": tid,
        "outcome": outcome,
        "duration_seconds": _num(r.get("duration_seconds"), "duration_seconds"),
        "commit_seconds": _num(r.get("commit_seconds"), "commit_seconds", nullable=True),
        "timeout_ms": _num(r.get("timeout_ms"), "timeout_ms", nullable=True),
        "error": error,
    }


def validate_payload(obj: Any) -> list[Event]:
    """A single event or {"events": [...]} -> validated events (fields prefixed events[i])."""
    if isinstance(obj, dict) and "events" in obj and "type" not in obj:
        events = obj["events"]
        if not isinstance(events, list):
            raise EventValidationError("events", f"must be a list, got {type(events).__name__}")
        out = []
        for i, e in enumerate(events):
            try:
                out.append(validate_event(e))
            except EventValidationError as exc:
                raise exc.prefixed(f"events[{i}]") from None
        return out
    return [validate_event(obj)]
