"""Where a sink's transaction records go (`metrics=`), in classic PySpark and in Spark Connect.

Classic PySpark runs a foreachBatch function in the driver, next to the listener: the sink
hands its `producer_transactions` events to the listener's state or forwarder directly.
Spark Connect pickles the function and runs it in a Python process of the server, where
the client's listener (its lock, its thread, its local /metrics server) does not exist. A
sink that knows an exporter to forward to (a listener attached with `forward_url=`, a
`Forwarder`, `ForwardTo(url, token)` or the URL itself) travels as that address and
forwards from the server's process; one that only knows a local object refuses to be
pickled, with a message that says what to pass instead.
"""

from __future__ import annotations

import logging
import pickle
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

log = logging.getLogger(__name__)

# Forwarding from a process the sink does not own (a Spark Connect server's Python worker,
# ended without notice when its query stops), each batch waits this long for its records to
# reach the exporter (a POST on a healthy exporter takes milliseconds). An exporter that does
# not answer in time is not waited for again until the queue has drained.
DELIVERY_WAIT_SECONDS = 1.0


@dataclass(frozen=True)
class ForwardTo:
    """The exporter's ingest (`txnwatch serve`, POST /api/v1/spark/events) as a sink's
    metrics destination: `ExactlyOnceKafkaSink(..., metrics=ForwardTo(url, token))`."""
    url: str
    token: str | None = None

    def __repr__(self) -> str:     # the token never reaches a log line
        return f"ForwardTo({self.url!r}, token={'***' if self.token else None})"


class SinkNotPortable(pickle.PicklingError):
    """The sink's metrics destination lives only in this process (Spark Connect pickles
    foreachBatch functions); the message says what to pass instead."""


def _route(metrics: Any) -> ForwardTo | None:
    if isinstance(metrics, ForwardTo):
        return metrics
    if isinstance(metrics, str):
        return ForwardTo(metrics)
    forwarder = getattr(metrics, "forwarder", None)          # a TxnWatchListener
    if forwarder is None and hasattr(metrics, "submit") and hasattr(metrics, "url"):
        forwarder = metrics                                   # a Forwarder
    if forwarder is not None and getattr(forwarder, "url", None):
        return ForwardTo(forwarder.url, getattr(forwarder, "token", None))
    return None


def _local(metrics: Any) -> Callable[[dict], object] | None:
    if metrics is None or isinstance(metrics, (ForwardTo, str)):
        return None
    if hasattr(metrics, "emit"):
        return metrics.emit
    if hasattr(metrics, "apply"):
        return metrics.apply
    if hasattr(metrics, "submit"):
        return metrics.submit
    if callable(metrics):
        return metrics
    raise TypeError("metrics must be a TxnWatchListener, a SparkQueryState, a Forwarder, ForwardTo(url, token), "
                    f"the exporter's URL or a callable(event); got {type(metrics).__name__}")


class SinkMetrics:
    """A sink's way out for its events: `emit(event)` never raises (metrics never fail a
    batch). Pickled, it keeps only the forwarding address (see the module docstring)."""

    def __init__(self, metrics: Any, sink_name: str) -> None:
        self.sink_name = sink_name
        self._local = _local(metrics)
        self._route = _route(metrics)
        self._forwarder: Any = None
        self._waiting = True
        self._described = type(metrics).__name__

    @property
    def route(self) -> ForwardTo | None:
        return self._route

    def __bool__(self) -> bool:
        return self._local is not None or self._route is not None

    def emit(self, event: dict) -> None:
        try:
            if self._local is not None:
                self._local(event)
            elif self._route is not None:
                if self._forwarder is None:
                    from txnwatch.spark_listener.forwarder import Forwarder

                    self._forwarder = Forwarder(self._route.url, self._route.token)
                    log.info("sink %s: forwarding its transactions to %s", self.sink_name, self._forwarder.url)
                if not self._waiting and self._forwarder.idle():
                    self._waiting = True          # the exporter answers again
                self._forwarder.submit(event)
                if self._waiting and not self._forwarder.flush(DELIVERY_WAIT_SECONDS):
                    self._waiting = False
                    log.warning("sink %s: the exporter at %s did not take a batch's transaction records within "
                                "%.0f s; they stay queued and go when it answers, and batches no longer wait for "
                                "them meanwhile (what is queued when this process ends is lost)",
                                self.sink_name, self._forwarder.url, DELIVERY_WAIT_SECONDS)
        except Exception:  # noqa: BLE001 - metrics never fail a batch
            log.warning("sink %s: emitting metrics failed", self.sink_name, exc_info=True)

    def close(self, timeout: float = 5.0) -> None:
        if self._forwarder is not None:
            self._forwarder.close(timeout)

    def __getstate__(self) -> dict:
        if self._local is not None and self._route is None:
            raise SinkNotPortable(
                f"sink {self.sink_name}: its metrics go to a {self._described} of this process, and this "
                "session pickles the foreachBatch function to run it elsewhere (Spark Connect runs it in a "
                "Python process of the Spark Connect server). Give the sink an exporter to forward to: "
                "attach(spark, forward_url=<exporter URL>, token=...) and pass that listener, or pass "
                "metrics=ForwardTo(<exporter URL>, token) (see docs/spark-sink.md, Spark Connect).")
        return {"sink_name": self.sink_name, "route": self._route, "described": self._described}

    def __setstate__(self, state: dict) -> None:
        self.sink_name = state["sink_name"]
        self._route = state["route"]
        self._described = state["described"]
        self._local = None
        self._forwarder = None
        self._waiting = True
