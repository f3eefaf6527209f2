"""Expose the listener's metrics from the Spark driver: `serve(port)`.

A prometheus_client HTTP server on its own thread, with its own registry holding one
`SparkStateCollector`: every scrape renders the current `SparkQueryState` through the
catalogue-checked `FamilyWriter` (the same code the exporter's ingest side uses).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.registry import Collector

from txnwatch.metrics import FamilyWriter

from .state import SparkQueryState

_default_state: SparkQueryState | None = None


def default_state() -> SparkQueryState:
    """The process-wide state `serve()` renders when none is given."""
    global _default_state
    if _default_state is None:
        _default_state = SparkQueryState()
    return _default_state


class SparkStateCollector(Collector):
    """Renders a SparkQueryState on every collect()."""

    def __init__(self, state: SparkQueryState, include_self: bool = True) -> None:
        self.state = state
        self.include_self = include_self

    def collect(self):
        writer = FamilyWriter()
        self.state.render(writer, include_self=self.include_self)
        yield from writer.families()

    def describe(self):
        return []   # unchecked collector: families vary with the queries seen


@dataclass
class MetricsServer:
    """A running /metrics server; `port` is the bound port (useful with port 0)."""

    server: Any
    thread: Any
    state: SparkQueryState
    registry: CollectorRegistry

    @property
    def port(self) -> int:
        return self.server.server_address[1]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def serve(port: int, host: str = "0.0.0.0", state: SparkQueryState | None = None) -> MetricsServer:
    """Serve /metrics (any path, as prometheus_client does) on host:port from this process."""
    state = state if state is not None else default_state()
    registry = CollectorRegistry(auto_describe=False)
    registry.register(SparkStateCollector(state))
    server, thread = start_http_server(port, addr=host, registry=registry)
    return MetricsServer(server, thread, state, registry)


def render_text(state: SparkQueryState, include_self: bool = True) -> str:
    """The Prometheus text exposition of `state` (what a scrape of serve() returns)."""
    from prometheus_client import generate_latest

    registry = CollectorRegistry(auto_describe=False)
    registry.register(SparkStateCollector(state, include_self=include_self))
    return generate_latest(registry).decode()
