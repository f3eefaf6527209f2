"""The sink as a streaming query's own sink (`ExactlyOnceKafkaSink.write_stream`): its
transactions come back in the query's progress events, which one listener per session turns
into each sink's report (the foreachBatch form reports from its own call instead)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from pyspark.sql.streaming import StreamingQueryListener

from . import jvm

log = logging.getLogger(__name__)

Report = Callable[[int, list], None]


class StreamResults(StreamingQueryListener):
    """Hands each batch's task results, once, to the report of the sink that wrote it (by the
    sink name its progress carries). One per session, whatever the number of sinks: a
    classic session calls every Python listener for every query's progress, through py4j.
    A no-data batch's progress repeats the last batch's results: each query run's last batch
    is remembered."""

    def __init__(self) -> None:
        self.reports: dict[str, Report] = {}
        self._last: dict[str, int] = {}

    def onQueryStarted(self, event: Any) -> None:
        pass

    def onQueryProgress(self, event: Any) -> None:
        name = "?"
        try:
            progress = event.progress
            metrics = progress.sink.metrics
            name = (metrics or {}).get(jvm.METRIC_SINK)
            report = self.reports.get(name) if name else None
            got = None if report is None else jvm.stream_results(metrics, name)
            if got is None:
                return
            batch, results = got
            run = str(progress.runId)
            if self._last.get(run) == batch:
                return
            self._last[run] = batch
            report(batch, results)
        except Exception:  # noqa: BLE001 - a listener never fails the query; the batch is only not reported
            log.warning("sink %s: could not report a batch's transactions", name, exc_info=True)

    def onQueryIdle(self, event: Any) -> None:
        pass

    def onQueryTerminated(self, event: Any) -> None:
        self._last.pop(str(event.runId), None)


_LISTENERS: dict[int, StreamResults] = {}
_LOCK = threading.Lock()


def listen(session: Any, name: str, report: Report) -> StreamResults:
    """The session's listener (added once), now reporting the sink `name` to `report`: the
    newest sink object of that name, so a query restarted in this process with a new sink
    reports each batch once, not once per sink object made."""
    with _LOCK:
        listener = _LISTENERS.get(id(session))
        if listener is None:
            listener = _LISTENERS[id(session)] = StreamResults()
            session.streams.addListener(listener)
        listener.reports[name] = report
    return listener
