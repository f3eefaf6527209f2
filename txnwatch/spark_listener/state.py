"""SparkQueryState: listener events in, spark_streaming_* / kafka_producer_* series out.

One instance lives in the driver (behind `serve(port)`) or in the exporter (behind the
ingest endpoint); both apply the same event dicts (see `events.py`) and render through
the same `render()`, so the two ways out export identical series.

Rules worth knowing:
- Labels are `query` (name, or id when unnamed) and `query_id`; runId and batchId are
  never labels. The `query` label follows the latest started/progress event's name.
- Histograms and the input-rows counter count *executed* micro-batches only: a
  progress event whose durationMs has none of addBatch/getBatch/walCommit/commitOffsets
  is a no-data trigger (Spark reports one every noDataProgressEventInterval) and only
  refreshes the gauges. A batch (runId, batchId) is counted once, so a re-delivered
  event (forwarder retry) is not double counted.
- Expiry: a query (or producer app) with no event for `ttl_seconds` is forgotten, active
  or not. Running queries keep themselves alive: Spark reports progress every trigger,
  and no-data progress or QueryIdleEvents while idle (every 10 s by default), so the
  default TTL of 15 min only removes queries whose driver went away or that terminated.
  `ttl_seconds=None` disables expiry.
- Nothing in an event makes `apply` raise: odd values are skipped; internal failures are
  counted in txnwatch_listener_errors_total{stage} and logged once per stage.

The `producer_transactions` events go to a ProducerTransactions (txnwatch/producer_state.py,
which the producer wrapper's own collector uses too), applied, expired and rendered under
this state's lock. The rest is one state machine (apply) and its render, whose every series
is derived from the same per-query records under that lock; cutting it in two would put the
records' invariants (batches counted once, expiry) on both sides of a module boundary.
"""

from __future__ import annotations

import ast
import json
import logging
import re
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from txnwatch.metrics import (
    BATCH_BUCKETS,
    CATALOG,
    COMMIT_BUCKETS,
    FamilyWriter,
    Histogram,
)
from txnwatch.metrics.values import label_value, num
from txnwatch.producer_state import ProducerTransactions

from .events import parse_timestamp

log = logging.getLogger(__name__)

DEFAULT_TTL_SECONDS = 900.0
EXECUTED_PHASES = ("addBatch", "getBatch", "walCommit", "commitOffsets")
_LAG_STATS = {"minOffsetsBehindLatest": "min", "maxOffsetsBehindLatest": "max",
              "avgOffsetsBehindLatest": "avg"}
_EXC_CLASS = re.compile(r"^\s*([A-Za-z_$][\w$]*(?:\.[A-Za-z_$][\w$]*)*)(?::|\s*$)", re.M)
_MAX_REPR_CHARS = 1_000_000


def _bounds(name: str, default: tuple[float, ...]) -> tuple[float, ...]:
    spec = CATALOG.get(name)
    return spec.buckets if spec is not None and spec.buckets else default


_B_BATCH = _bounds("spark_streaming_batch_duration_seconds", BATCH_BUCKETS)
_B_PHASE = _bounds("spark_streaming_batch_phase_seconds", BATCH_BUCKETS)
_B_COMMIT = _bounds("spark_streaming_commit_seconds", COMMIT_BUCKETS)


def error_class_of(error_class: str | None, exception: str | None) -> str:
    """The `error_class` label: Spark's error class, else the exception's class name,
    `none` for a clean stop and `unknown` when nothing usable was reported."""
    if error_class and str(error_class).strip():
        return label_value(str(error_class).strip())
    if not exception:
        return "none"
    m = _EXC_CLASS.match(exception)
    if m:
        return label_value(m.group(1).rsplit(".", 1)[-1])
    return "unknown"


def _maybe_json(v: Any) -> Any:
    """A nested value that may arrive as text: JSON (the JVM's progress), or a Python repr
    (PySpark 4.0's `fromJson`, used by Spark Connect listeners, stores offsets as
    `str(dict)`: `{'orders': {'0': 5}}`), read with literal_eval, which evaluates no code."""
    if isinstance(v, str):
        s = v.strip()
        if s[:1] in ("{", "["):
            try:
                return json.loads(s)
            except ValueError:
                pass
            if len(s) <= _MAX_REPR_CHARS:
                try:
                    out = ast.literal_eval(s)
                except (ValueError, SyntaxError, MemoryError, RecursionError):
                    return None
                return out if isinstance(out, Mapping | list) else None
            return None
    return v


def _topic_offsets(v: Any) -> dict[str, dict[str, float]] | None:
    """{"topic": {"partition": offset}} (possibly a JSON string) or None."""
    v = _maybe_json(v)
    if not isinstance(v, Mapping) or not v:
        return None
    out: dict[str, dict[str, float]] = {}
    for topic, parts in v.items():
        if not isinstance(parts, Mapping):
            return None
        po = {}
        for p, off in parts.items():
            f = num(off)
            if f is not None and f >= 0:
                po[str(p)] = f
        out[str(topic)] = po
    return out


def source_lag(source: Mapping[str, Any]) -> dict[tuple[str, str], float]:
    """(topic, stat) -> offsets behind latest for one entry of progress.sources."""
    out: dict[tuple[str, str], float] = {}
    metrics = _maybe_json(source.get("metrics"))
    if isinstance(metrics, Mapping):
        for key, stat in _LAG_STATS.items():
            f = num(metrics.get(key))
            if f is not None:
                out[("", stat)] = f
    latest = _topic_offsets(source.get("latestOffset"))
    end = _topic_offsets(source.get("endOffset"))
    if latest is not None and end is not None:
        for topic, parts in latest.items():
            ends = end.get(topic)
            if ends is None:
                continue
            behind = [max(0.0, off - ends[p]) for p, off in parts.items() if p in ends]
            if behind:
                out[(topic, "total")] = sum(behind)
    return out


def source_partitions(source: Mapping[str, Any]) -> dict[tuple[str, str], tuple[float, float | None]]:
    """(topic, partition) -> (endOffset, latestOffset - endOffset or None) for one entry of
    progress.sources (Kafka-shaped offsets only)."""
    end = _topic_offsets(source.get("endOffset"))
    if end is None:
        return {}
    latest = _topic_offsets(source.get("latestOffset")) or {}
    out: dict[tuple[str, str], tuple[float, float | None]] = {}
    for topic, parts in end.items():
        lt = latest.get(topic, {})
        for p, off in parts.items():
            out[(topic, p)] = (off, max(0.0, lt[p] - off) if p in lt else None)
    return out


@dataclass(frozen=True)
class SourcePosition:
    """Where a query reads one Kafka partition, as of its last progress event."""
    query: str
    query_id: str
    source: str
    topic: str
    partition: int
    offset: float
    behind_latest: float | None


@dataclass(frozen=True)
class QueryCard:
    """What the page shows of one query."""
    query: str
    query_id: str
    active: bool
    batch_id: float | None
    last_batch_seconds: float | None
    input_rate: float | None
    processed_rate: float | None
    offsets_behind: float | None
    last_progress_ts: float | None
    terminated_with: str | None
    trigger: str | None = None
    trigger_interval: float | None = None


@dataclass
class _Query:
    query: str
    query_id: str
    last_seen: float
    active: bool = True
    batch_id: float | None = None
    last_batch: tuple[Any, Any] | None = None
    last_progress_ts: float | None = None
    batch: Histogram = field(default_factory=lambda: Histogram(_B_BATCH))
    commit: Histogram = field(default_factory=lambda: Histogram(_B_COMMIT))
    phases: dict[str, Histogram] = field(default_factory=dict)
    input_rows: float = 0.0
    input_rate: float | None = None
    processed_rate: float | None = None
    lag: dict[tuple[str, str, str], float] = field(default_factory=dict)
    partitions: dict[tuple[str, str, str], tuple[float, float | None]] = field(default_factory=dict)
    last_batch_seconds: float | None = None
    output_rows: float = 0.0
    last_termination: str | None = None
    state_rows: dict[str, float] = field(default_factory=dict)
    state_memory: dict[str, float] = field(default_factory=dict)
    watermark_delay: float | None = None
    observed: dict[tuple[str, str], float] = field(default_factory=dict)
    idle_events: int = 0
    terminations: dict[str, int] = field(default_factory=dict)
    trigger: str | None = None
    trigger_interval: float | None = None


class SparkQueryState:
    """Thread-safe state of the Spark queries (and Spark-sink producers) seen in events."""

    def __init__(self, ttl_seconds: float | None = DEFAULT_TTL_SECONDS, max_queries: int = 1000,
                 max_keys_per_query: int = 64, max_transactional_ids: int = 500,
                 max_apps: int = 200, max_partitions_per_query: int = 500) -> None:
        self.ttl_seconds = ttl_seconds
        self.max_queries = max_queries
        self.max_keys = max_keys_per_query
        self.max_partitions = max_partitions_per_query
        self._lock = threading.Lock()
        self._queries: dict[str, _Query] = {}
        self._producers = ProducerTransactions(max_apps, max_transactional_ids, on_dropped=self._drop)
        self._errors: dict[str, int] = {}
        self._dropped: dict[str, int] = {}
        self._logged: set[str] = set()
        self._last_expire: float | None = None

    # ----------------------------------------------------------------- self metrics
    def count_error(self, stage: str, exc: BaseException | None = None) -> None:
        """Count a failure of the listener/ingest/forwarder; log it once per stage."""
        with self._lock:
            self._errors[stage] = self._errors.get(stage, 0) + 1
            first = stage not in self._logged
            self._logged.add(stage)
        if first:
            log.warning("txnwatch spark listener: %s failed (logged once per stage, then counted)",
                        stage, exc_info=exc)

    def count_dropped(self, reason: str, n: int = 1) -> None:
        with self._lock:
            self._drop(reason, n)

    def _drop(self, reason: str, n: int = 1) -> None:
        """count_dropped with the lock held."""
        self._dropped[reason] = self._dropped.get(reason, 0) + n

    def errors(self) -> dict[str, int]:
        with self._lock:
            return dict(self._errors)

    def dropped(self) -> dict[str, int]:
        with self._lock:
            return dict(self._dropped)

    def queries(self) -> list[str]:
        with self._lock:
            return sorted(self._queries)

    def topics(self) -> frozenset[str]:
        """The Kafka topics the active queries read (what the exporter needs partitions of)."""
        with self._lock:
            return frozenset(t for q in self._queries.values() if q.active for (_, t, _) in q.partitions)

    def positions(self) -> list[SourcePosition]:
        """Every (query, Kafka partition) read position of the active queries."""
        out = []
        with self._lock:
            for q in self._queries.values():
                if not q.active:
                    continue
                for (src, topic, part), (off, behind) in q.partitions.items():
                    try:
                        pnum = int(part)
                    except ValueError:
                        continue
                    out.append(SourcePosition(q.query, q.query_id, src, topic, pnum, off, behind))
        return out

    def cards(self) -> list[QueryCard]:
        with self._lock:
            out = []
            for q in sorted(self._queries.values(), key=lambda q: (q.query, q.query_id)):
                behind = [b for _, b in q.partitions.values() if b is not None]
                if not behind:
                    behind = [v for (_, _, stat), v in q.lag.items() if stat == "total"]
                out.append(QueryCard(q.query, q.query_id, q.active, q.batch_id, q.last_batch_seconds,
                                     q.input_rate, q.processed_rate, sum(behind) if behind else None,
                                     q.last_progress_ts, q.last_termination, q.trigger, q.trigger_interval))
            return out

    # ----------------------------------------------------------------- apply
    def apply(self, event: Mapping[str, Any], now: float | None = None) -> bool:
        """Apply one event dict. Never raises; returns False when it was not applied."""
        now = time.time() if now is None else now
        try:
            with self._lock:
                self._expire(now)
                etype = event.get("type")
                if etype == "producer_transactions":
                    return self._producers.apply(event.get("app"), event.get("records"), now)
                if etype not in ("started", "progress", "idle", "terminated", "trigger"):
                    self._drop("unknown_type")
                    return False
                q = self._query(event, now)
                if q is None:
                    return False
                if etype == "started":
                    q.active = True
                elif etype == "progress":
                    q.active = True
                    q.last_termination = None
                    self._apply_progress(q, event.get("progress"))
                elif etype == "idle":
                    q.active = True
                    q.idle_events += 1
                elif etype == "trigger":
                    self._apply_trigger(q, event)
                else:
                    q.active = False
                    ec = error_class_of(event.get("error_class"), event.get("exception"))
                    q.terminations[ec] = q.terminations.get(ec, 0) + 1
                    q.last_termination = ec
                return True
        except Exception as exc:  # noqa: BLE001 - never raise into Spark or the ingest
            self.count_error("apply", exc)
            return False

    def _query(self, event: Mapping[str, Any], now: float) -> _Query | None:
        qid = event.get("query_id")
        if not isinstance(qid, str) or not qid:
            self._drop("no_query_id")
            return None
        name = event.get("query") if isinstance(event.get("query"), str) and event.get("query") else qid
        q = self._queries.get(qid)
        if q is None:
            if len(self._queries) >= self.max_queries:
                self._drop("query_limit")
                return None
            q = self._queries[qid] = _Query(query=label_value(name), query_id=label_value(qid), last_seen=now)
        elif event.get("type") in ("started", "progress") and name != q.query_id:
            q.query = label_value(name)
        q.last_seen = now
        return q

    def _apply_trigger(self, q: _Query, event: Mapping[str, Any]) -> None:
        mode = event.get("trigger")
        if not isinstance(mode, str) or not mode.strip():
            self._errors["trigger_shape"] = self._errors.get("trigger_shape", 0) + 1
            return
        q.trigger = label_value(mode.strip())[:64]
        interval = num(event.get("interval_seconds"))
        q.trigger_interval = interval if interval is not None and interval > 0 else None

    def _apply_progress(self, q: _Query, p: Any) -> None:
        if not isinstance(p, Mapping):
            self._errors["progress_shape"] = self._errors.get("progress_shape", 0) + 1
            return
        ts = parse_timestamp(p.get("timestamp"))
        if ts is not None:
            q.last_progress_ts = ts
        durations = p.get("durationMs") if isinstance(p.get("durationMs"), Mapping) else {}
        executed = any(k in durations for k in EXECUTED_PHASES)
        batch_key = (p.get("runId"), p.get("batchId"))
        new_batch = executed and (batch_key[1] is None or batch_key != q.last_batch)
        if new_batch:
            q.last_batch = batch_key
            bid = num(p.get("batchId"))
            if bid is not None:
                q.batch_id = bid
            dur = num(p.get("batchDuration"))
            if dur is None:
                dur = num(durations.get("triggerExecution"))
            if dur is not None and dur >= 0:
                q.batch.observe(dur / 1000.0)
                q.last_batch_seconds = dur / 1000.0
            commit = [num(durations.get(k)) for k in ("walCommit", "commitOffsets")]
            commit = [c for c in commit if c is not None and c >= 0]
            if commit:
                q.commit.observe(sum(commit) / 1000.0)
            for phase, v in durations.items():
                f = num(v)
                if f is None or f < 0:
                    continue
                h = q.phases.get(phase)
                if h is None:
                    if len(q.phases) >= self.max_keys:
                        self._drop("key_limit")
                        continue
                    h = q.phases[label_value(phase)] = Histogram(_B_PHASE)
                h.observe(f / 1000.0)
            rows = num(p.get("numInputRows"))
            if rows is not None and rows > 0:
                q.input_rows += rows
            sink = p.get("sink")
            out_rows = num(sink.get("numOutputRows")) if isinstance(sink, Mapping) else None
            if out_rows is not None and out_rows > 0:    # -1: the sink does not say (foreachBatch)
                q.output_rows += out_rows
        rate = num(p.get("inputRowsPerSecond"))
        if rate is not None:
            q.input_rate = rate
        rate = num(p.get("processedRowsPerSecond"))
        if rate is not None:
            q.processed_rate = rate

        sources = p.get("sources")
        if isinstance(sources, list):
            lag: dict[tuple[str, str, str], float] = {}
            parts: dict[tuple[str, str, str], tuple[float, float | None]] = {}
            over = 0
            for i, s in enumerate(sources):
                if not isinstance(s, Mapping):
                    continue
                desc = s.get("description")
                src = label_value(desc) if isinstance(desc, str) and desc else f"source{i}"
                for (topic, stat), v in source_lag(s).items():
                    if len(lag) < self.max_keys:
                        lag[(src, label_value(topic), stat)] = v
                for (topic, part), pos in source_partitions(s).items():
                    if len(parts) < self.max_partitions:
                        parts[(src, label_value(topic), part)] = pos
                    else:
                        over += 1
            q.lag, q.partitions = lag, parts
            if over:
                self._drop("partition_limit", over)

        ops = p.get("stateOperators")
        if isinstance(ops, list):
            rows_by_op: dict[str, float] = {}
            mem_by_op: dict[str, float] = {}
            for i, op in enumerate(ops[: self.max_keys]):
                if not isinstance(op, Mapping):
                    continue
                name = op.get("operatorName")
                name = label_value(name) if isinstance(name, str) and name else f"operator{i}"
                if name in rows_by_op or name in mem_by_op:
                    name = f"{name}#{i}"
                r, m = num(op.get("numRowsTotal")), num(op.get("memoryUsedBytes"))
                if r is not None:
                    rows_by_op[name] = r
                if m is not None:
                    mem_by_op[name] = m
            q.state_rows, q.state_memory = rows_by_op, mem_by_op

        et = p.get("eventTime")
        if isinstance(et, Mapping):
            wm = parse_timestamp(et.get("watermark"))
            # Spark reports the epoch until the first watermark exists: no delay then.
            if wm is not None and wm > 0 and ts is not None:
                q.watermark_delay = round(ts - wm, 3)

        observed = _maybe_json(p.get("observedMetrics"))
        if isinstance(observed, Mapping):
            obs: dict[tuple[str, str], float] = {}
            for oname, row in observed.items():
                row = _maybe_json(row)
                if not isinstance(row, Mapping):
                    continue
                for metric, v in row.items():
                    f = num(v)
                    if f is not None and len(obs) < self.max_keys:
                        obs[(label_value(oname), label_value(metric))] = f
            q.observed = obs

    def _expire(self, now: float, force: bool = False) -> None:
        if self.ttl_seconds is None:
            return
        # at most once a second on the event path (O(queries)); always on render/expire()
        if not force and self._last_expire is not None and 0 <= now - self._last_expire < 1.0:
            return
        self._last_expire = now
        cutoff = now - self.ttl_seconds
        for qid in [k for k, q in self._queries.items() if q.last_seen < cutoff]:
            del self._queries[qid]
        self._producers.expire(cutoff)

    def expire(self, now: float | None = None) -> None:
        with self._lock:
            self._expire(time.time() if now is None else now, force=True)

    # ----------------------------------------------------------------- render
    def render(self, writer: FamilyWriter, now: float | None = None,
               include_self: bool = True) -> None:
        """Write every series into `writer` (a catalogue-checked FamilyWriter)."""
        now = time.time() if now is None else now
        try:
            with self._lock:
                self._expire(now, force=True)
                self._render_locked(writer, include_self)
        except Exception as exc:  # noqa: BLE001 - a scrape must not fail
            self.count_error("render", exc)

    def _render_locked(self, w: FamilyWriter, include_self: bool) -> None:
        for q in sorted(self._queries.values(), key=lambda q: (q.query, q.query_id)):
            lb = {"query": q.query, "query_id": q.query_id}
            w.add("spark_streaming_query_active", lb, 1 if q.active else 0)
            w.add("spark_streaming_batch_id", lb, q.batch_id)
            if q.trigger is not None:
                w.add("spark_streaming_query_trigger_info", {**lb, "trigger": q.trigger}, 1)
            w.add("spark_streaming_trigger_interval_seconds", lb, q.trigger_interval)
            w.histogram("spark_streaming_batch_duration_seconds", lb, q.batch.counts, q.batch.sum)
            for phase, h in sorted(q.phases.items()):
                w.histogram("spark_streaming_batch_phase_seconds", {**lb, "phase": phase}, h.counts, h.sum)
            w.histogram("spark_streaming_commit_seconds", lb, q.commit.counts, q.commit.sum)
            w.add("spark_streaming_input_rows", lb, q.input_rows)
            for (src, topic, part), (off, behind) in sorted(q.partitions.items()):
                plb = {**lb, "source": src, "topic": topic, "partition": part}
                w.add("spark_streaming_source_partition_offset", plb, off)
                w.add("spark_streaming_source_partition_behind_latest_offsets", plb, behind)
            w.add("spark_streaming_sink_output_rows", lb, q.output_rows)
            for op, v in sorted(q.state_rows.items()):
                w.add("spark_streaming_state_rows", {**lb, "operator": op}, v)
            for op, v in sorted(q.state_memory.items()):
                w.add("spark_streaming_state_memory_bytes", {**lb, "operator": op}, v)
            w.add("spark_streaming_watermark_delay_seconds", lb, q.watermark_delay)
            for (oname, metric), v in sorted(q.observed.items()):
                w.add_observed(lb, oname, metric, v)
            w.add("spark_streaming_last_progress_timestamp_seconds", lb, q.last_progress_ts)
            w.add("spark_streaming_idle_events", lb, q.idle_events)
            for ec, n in sorted(q.terminations.items()):
                w.add("spark_streaming_query_terminations", {**lb, "error_class": ec}, n)
        self._producers.render(w)
        if include_self:
            for stage, n in sorted(self._errors.items()):
                w.add("txnwatch_listener_errors", {"stage": stage}, n)
            for reason, n in sorted(self._dropped.items()):
                w.add("txnwatch_listener_events_dropped", {"reason": reason}, n)
