"""The sink as a streaming query's own sink (`ExactlyOnceKafkaSink.write_stream`): its
transactions come back in the query's progress events, which this listener turns into the
sink's report (the foreachBatch form reports from its own call instead)."""

from __future__ import annotations

import logging
import threading
from typing import Any

from pyspark.sql.streaming import StreamingQueryListener

from . import jvm

log = logging.getLogger(__name__)


class StreamResults(StreamingQueryListener):
    """Hands each batch's task results, once, to `report(batch, results)`. A no-data batch's
    progress repeats the last batch's results: each query run's last batch is remembered."""

    def __init__(self, name: str, report: Any) -> None:
        self.name = name
        self.report = report
        self._last: dict[str, int] = {}

    def onQueryStarted(self, event: Any) -> None:
        pass

    def onQueryProgress(self, event: Any) -> None:
        try:
            progress = event.progress
            got = jvm.stream_results(progress.sink.metrics, self.name)
            if got is None:
                return
            batch, results = got
            run = str(progress.runId)
            if self._last.get(run) == batch:
                return
            self._last[run] = batch
            self.report(batch, results)
        except Exception:  # noqa: BLE001 - a listener never fails the query; the batch is only not reported
            log.warning("sink %s: could not report a batch's transactions", self.name, exc_info=True)

    def onQueryIdle(self, event: Any) -> None:
        pass

    def onQueryTerminated(self, event: Any) -> None:
        pass


_LISTENERS: dict[tuple[int, str], StreamResults] = {}
_LOCK = threading.Lock()


def listen(session: Any, name: str, report: Any) -> StreamResults:
    """The session's listener for the sink `name` (added once), now reporting to `report`:
    the newest sink object of that name, so a query restarted in this process with a new sink
    reports each batch once, not once per sink object made."""
    key = (id(session), name)
    with _LOCK:
        listener = _LISTENERS.get(key)
        if listener is None:
            listener = _LISTENERS[key] = StreamResults(name, report)
            session.streams.addListener(listener)
        else:
            listener.report = report
    return listener
