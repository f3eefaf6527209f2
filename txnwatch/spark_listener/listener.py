"""TxnWatchListener: a StreamingQueryListener that turns events into txnwatch events.

Each callback converts the Spark event into a plain dict (`events.py`) and hands it to
the sinks: the driver-local `SparkQueryState` (rendered by `serve(port)`) and/or a
`Forwarder` to the exporter's ingest endpoint. A callback does O(small) work: one
conversion, a dict update under a lock and a non-blocking queue put. It never raises
into Spark; its own failures are counted in txnwatch_listener_errors_total{stage}.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from pyspark.sql.streaming import StreamingQueryListener

from . import events as ev
from .forwarder import Forwarder
from .serve import serve
from .state import SparkQueryState
from .trigger import TriggerInfo, TriggerProbe, jvm_trigger_text

log = logging.getLogger(__name__)

Sink = Callable[[dict[str, Any]], object]
_MAX_NAMES = 1000


class TxnWatchListener(StreamingQueryListener):
    """Records query events into `state` and/or forwards them through `forwarder`.

    `sinks` are extra callables receiving every event dict (their failures are counted
    too). `callback_seconds` accumulates the time spent in callbacks (for the benchmark).
    With `spark` (attach passes it) each run's trigger mode is looked up on a thread of
    its own (`trigger.py`) and sent as a `trigger` event.
    """

    def __init__(self, state: SparkQueryState | None = None, forwarder: Forwarder | None = None,
                 sinks: list[Sink] | None = None, spark: Any = None) -> None:
        super().__init__()
        self._probe = (TriggerProbe(lambda qid: jvm_trigger_text(spark, qid), self._emit_trigger,
                                    self._count_error) if spark is not None else None)
        self.state = state
        self.forwarder = forwarder
        self.sinks = list(sinks or [])
        self._names: OrderedDict[str, str] = OrderedDict()   # query_id -> query name
        self._lock = threading.Lock()
        self._errors: dict[str, int] = {}
        self._logged: set[str] = set()
        self.events = 0
        self.callback_seconds = 0.0
        self.counts: dict[str, int] = {}      # callbacks seen, by event type
        self.server: Any = None               # the MetricsServer when attach() served /metrics
        self._running: set[str] = set()       # query ids seen started or progressing, not yet terminated

    # ------------------------------------------------------------------ Spark callbacks
    def onQueryStarted(self, event: Any) -> None:
        self._handle("started", event)

    def onQueryProgress(self, event: Any) -> None:
        self._handle("progress", event)

    def onQueryIdle(self, event: Any) -> None:
        self._handle("idle", event)

    def onQueryTerminated(self, event: Any) -> None:
        self._handle("terminated", event)

    # ------------------------------------------------------------------ internals
    def _track(self, kind: str, query_id: str | None) -> None:
        if not query_id:
            return
        with self._lock:
            if kind == "terminated":
                self._running.discard(query_id)
            elif kind in ("started", "progress") and len(self._running) < _MAX_NAMES:
                self._running.add(query_id)

    def not_terminated(self) -> set[str]:
        """Queries this listener saw run and not (yet) terminate."""
        with self._lock:
            return set(self._running)

    def errors(self) -> dict[str, int]:
        with self._lock:
            return dict(self._errors)

    def _count_error(self, stage: str, exc: BaseException) -> None:
        with self._lock:
            self._errors[stage] = self._errors.get(stage, 0) + 1
            first = stage not in self._logged
            self._logged.add(stage)
        if self.state is not None:
            self.state.count_error(stage, exc)    # counts and logs once
        elif first:
            log.warning("txnwatch listener: %s failed (logged once, then counted)", stage, exc_info=exc)

    def _name_of(self, query_id: str) -> str | None:
        with self._lock:
            return self._names.get(query_id)

    def _remember(self, query_id: str, name: str | None) -> None:
        if not query_id or not name or name == query_id:
            return
        with self._lock:
            self._names[query_id] = name
            self._names.move_to_end(query_id)
            while len(self._names) > _MAX_NAMES:
                self._names.popitem(last=False)

    def _emit_trigger(self, query_id: str, info: TriggerInfo) -> None:
        self.emit(ev.from_trigger(query_id, info.mode, info.interval_seconds, name=self._name_of(query_id)))

    def _convert(self, kind: str, event: Any) -> dict[str, Any]:
        if kind == "started":
            out = ev.from_started(event)
            self._remember(out["query_id"], out["query"])
            if self._probe is not None:
                self._probe.request(out["query_id"], out.get("run_id"))
        elif kind == "progress":
            out = ev.from_progress(event)
            self._remember(out["query_id"], out["query"])
            if self._probe is not None:       # a query started before the listener was attached
                run_id = out["progress"].get("runId")
                self._probe.request(out["query_id"], str(run_id) if run_id else None)
        elif kind == "idle":
            qid = str(getattr(event, "id", "") or "")
            out = ev.from_idle(event, name=self._name_of(qid))
        else:
            qid = str(getattr(event, "id", "") or "")
            out = ev.from_terminated(event, name=self._name_of(qid))
        return out

    def _handle(self, kind: str, event: Any) -> None:
        t0 = time.perf_counter()
        try:
            try:
                out = self._convert(kind, event)
            except Exception as exc:  # noqa: BLE001 - never raise into Spark
                self._count_error("convert", exc)
                return
            self._track(kind, out.get("query_id"))
            self.emit(out)
        finally:
            dt = time.perf_counter() - t0
            with self._lock:
                self.events += 1
                self.callback_seconds += dt
                self.counts[kind] = self.counts.get(kind, 0) + 1

    def emit(self, event: dict[str, Any]) -> None:
        """Hand an event dict to every sink (also used for producer_transactions events)."""
        if self.state is not None:
            self.state.apply(event)           # never raises, counts its own failures
        if self.forwarder is not None:
            try:
                self.forwarder.submit(event)  # never blocks
            except Exception as exc:  # noqa: BLE001
                self._count_error("forward", exc)
        for sink in self.sinks:
            try:
                sink(event)
            except Exception as exc:  # noqa: BLE001
                self._count_error("sink", exc)

    def close(self, timeout: float = 5.0) -> None:
        """Flush and stop the forwarder and the metrics server attached by `attach`."""
        if self._probe is not None:
            self._probe.close()
        if self.forwarder is not None:
            self.forwarder.close(timeout)
        if self.server is not None:
            self.server.close()
            self.server = None


def attach(spark: Any, serve_port: int | None = None, forward_url: str | None = None,
           token: str | None = None, *, host: str = "0.0.0.0", state: SparkQueryState | None = None,
           ttl_seconds: float | None = None, forwarder_options: dict[str, Any] | None = None,
           sinks: list[Sink] | None = None) -> TxnWatchListener:
    """Create a TxnWatchListener, register it with `spark.streams` and start its ways out.

    - `serve_port`: expose /metrics from the driver on this port (0 picks a free one;
      the listener's `server.port` tells which).
    - `forward_url`: forward events to the exporter at this base URL (ingest path added),
      with `token` as the bearer token. `forwarder_options` go to `Forwarder`.
    Local state is kept when `serve_port` or `state` is given. Forwarder drops are
    counted in that state too (txnwatch_listener_events_dropped_total{reason}).
    """
    if serve_port is None and forward_url is None and state is None and not sinks:
        raise ValueError("attach() needs serve_port, forward_url, state or sinks: nothing to export to")
    if state is None and serve_port is not None:
        state = SparkQueryState() if ttl_seconds is None else SparkQueryState(ttl_seconds=ttl_seconds)
    forwarder = None
    if forward_url is not None:
        opts = dict(forwarder_options or {})
        if state is not None:
            opts.setdefault("on_drop", lambda reason, n: state.count_dropped(reason, n))
            opts.setdefault("on_error", lambda stage, exc: state.count_error(stage, exc))
        forwarder = Forwarder(forward_url, token, **opts)
    listener = TxnWatchListener(state=state, forwarder=forwarder, sinks=sinks, spark=spark)
    if serve_port is not None:
        listener.server = serve(serve_port, host=host, state=state)
    spark.streams.addListener(listener)
    return listener


def detach(spark: Any, listener: TxnWatchListener, timeout: float = 5.0) -> None:
    """Unregister the listener and close its forwarder and server."""
    try:
        if is_connect(spark):
            _await_terminated_events(spark, listener, timeout)
        spark.streams.removeListener(listener)
    finally:
        listener.close(timeout)


def is_connect(spark: Any) -> bool:
    """A Spark Connect session (pyspark.sql.connect), not a classic one."""
    return type(spark).__module__.startswith("pyspark.sql.connect")


def _await_terminated_events(spark: Any, listener: TxnWatchListener, timeout: float) -> None:
    """Until every query the listener saw run has either delivered its terminated event or
    is still active (at most `timeout` s). PySpark Connect's client listener bus deadlocks
    when its last listener is removed while an event is on its way (remove() joins the event
    thread while holding the lock that thread needs to post it: SPARK-59623, open for
    PySpark 4.3): a query stopped just before detach() has its terminated event in flight."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            active = {str(q.id) for q in spark.streams.active}
        except Exception:  # noqa: BLE001 - a session going away: nothing more to wait for
            return
        if not listener.not_terminated() - active or time.monotonic() >= deadline:
            return
        time.sleep(0.05)
