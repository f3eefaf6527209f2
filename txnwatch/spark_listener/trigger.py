"""A query's trigger mode, looked up once per run off Spark's callback thread.

Neither Spark's progress nor its events name the trigger (through 4.3), yet it changes
what the numbers mean: a real-time-mode query (Spark 4.1+, `trigger(realTime=...)`)
runs each batch for the whole trigger duration by design and reports progress once per
batch (5 minutes by default), so "batch longer than the trigger" and "no progress for
a while" stop meaning "behind" and "stuck". The listener therefore asks the JVM which
trigger the query runs (`StreamExecution.trigger()`, one py4j call on its own thread,
never inside a callback: `onQueryStarted` runs while `start()` holds Spark's query-manager
lock) and sends a `trigger` event.

    parse_trigger("RealTimeTrigger(5000)") -> TriggerInfo("RealTime", 5.0, True, ...)
"""

from __future__ import annotations

import logging
import queue
import re
import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from txnwatch.trigger_modes import KNOWN_MODES

log = logging.getLogger(__name__)

_CLASS = re.compile(r"^\s*(?:[\w$]+\.)*([A-Za-z_]\w*?)(?:Trigger)?\$?(?:@[0-9a-fA-F]+)?\s*(?:\(\s*([^)]*)\))?\s*$")
_ALIASES = {"OneTime": "Once"}
MAX_DETAIL_CHARS = 200


@dataclass(frozen=True)
class TriggerInfo:
    """`mode` is Spark's trigger name without "Trigger" (`RealTime`, `ProcessingTime`, ...);
    `interval_seconds` its interval or batch duration (None where it has none); `known`
    whether txnwatch knows what the mode does to batches; `detail` the JVM's text."""
    mode: str
    interval_seconds: float | None
    known: bool
    detail: str


def parse_trigger(text: str) -> TriggerInfo:
    """The trigger from the text of a JVM Trigger object (its Scala case-class toString,
    e.g. `ProcessingTimeTrigger(1000)`, `AvailableNowTrigger`, `RealTimeTrigger(300000)`).
    Text it cannot read gives mode `unknown`."""
    detail = str(text)[:MAX_DETAIL_CHARS]
    m = _CLASS.match(str(text))
    if not m:
        return TriggerInfo("unknown", None, False, detail)
    mode = _ALIASES.get(m.group(1), m.group(1))
    interval = None
    arg = (m.group(2) or "").strip()
    if arg:
        try:
            ms = float(arg.split(",")[0])
            interval = ms / 1000.0 if ms > 0 else None
        except ValueError:
            interval = None
    return TriggerInfo(mode, interval, mode in KNOWN_MODES, detail)


class NoJvmSide(Exception):
    """The session has no JVM to ask (Spark Connect): the trigger stays unknown."""


def jvm_trigger_text(spark: Any, query_id: str) -> str | None:
    """The JVM's text of a running query's trigger; None when the query is not registered
    (yet, or any more); NoJvmSide when the session cannot say."""
    query = spark.streams.get(query_id)
    if query is None:
        return None
    jsq = getattr(query, "_jsq", None)
    if jsq is None:
        raise NoJvmSide(type(query).__name__)
    return str(jsq.streamingQuery().trigger().toString())


class TriggerProbe:
    """Looks up each run's trigger once, on a daemon thread with a bounded queue: a
    request never blocks the caller (a full queue drops it, counted)."""

    def __init__(self, lookup: Callable[[str], str | None], emit: Callable[[str, TriggerInfo], None],
                 on_error: Callable[[str, BaseException], None], max_pending: int = 256,
                 max_remembered: int = 4096) -> None:
        self._lookup, self._emit, self._on_error = lookup, emit, on_error
        self._queue: queue.Queue[tuple[str, str] | None] = queue.Queue(maxsize=max_pending)
        self._seen: OrderedDict[str, None] = OrderedDict()
        self._max_remembered = max_remembered
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self.dropped = 0

    def request(self, query_id: str, run_id: str | None) -> None:
        """Ask once per (query, run): a restarted query may run another trigger."""
        key = f"{query_id}/{run_id or ''}"
        with self._lock:
            if key in self._seen:
                return
            self._seen[key] = None
            while len(self._seen) > self._max_remembered:
                self._seen.popitem(last=False)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="txnwatch-trigger-probe", daemon=True)
                self._thread.start()
        try:
            self._queue.put_nowait((query_id, key))
        except queue.Full:
            with self._lock:
                self.dropped += 1
                self._seen.pop(key, None)

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            try:
                if item is None:
                    return
                self._probe(*item)
            finally:
                self._queue.task_done()

    def _probe(self, query_id: str, key: str) -> None:
        try:
            text = self._lookup(query_id)
        except NoJvmSide:         # asked once per run, not counted: nothing is wrong
            return
        except Exception as exc:  # noqa: BLE001 - a lookup failure is counted, never raised
            self._on_error("trigger", exc)
            return
        if text is None:      # not registered yet (or gone): the next progress asks again
            with self._lock:
                self._seen.pop(key, None)
            return
        info = parse_trigger(text)
        if not info.known:
            log.warning("txnwatch listener: query %s runs trigger %r, a mode txnwatch does not know: "
                        "its batch-duration and stall alerts may not fit it", query_id, info.detail)
        try:
            self._emit(query_id, info)
        except Exception as exc:  # noqa: BLE001
            self._on_error("trigger", exc)

    def wait_idle(self) -> None:
        """Until every request so far was looked up (tests)."""
        self._queue.join()

    def close(self, timeout: float = 2.0) -> None:
        with self._lock:
            thread = self._thread
        if thread is None:
            return
        try:
            self._queue.put_nowait(None)
        except queue.Full:
            return
        thread.join(timeout)
