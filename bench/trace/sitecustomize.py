"""Timings of an exporter's scrapes, publishes and garbage collections, for lining up a
bench's slow scrapes with what the processes were doing (issue 29, docs/benchmarks.md).

    TXNWATCH_TRACE=/tmp/trace PYTHONPATH=$PWD/bench/trace .venv/bin/python bench/bench_poll_cost.py ...

Python imports this file at start-up in every process whose PYTHONPATH names this folder
(the serving processes and workers the bench starts inherit it). Each writes
`$TXNWATCH_TRACE.<pid>`, one line per event: kind, start (time.monotonic(), one clock for
every process), duration in ms, thread, extra. Kinds: `scrape` (ExporterCollector.exposition),
`publish` (publish_chunks), `read` (the supervisor's look at a worker's files), `load` (one
file), `gc0` to `gc2` (collections over 2 ms). Lab use only: it wraps methods by name.
"""

import gc
import importlib.abc
import importlib.util
import os
import sys
import threading
import time

_path = os.environ.get("TXNWATCH_TRACE")
if _path:
    _out = open(f"{_path}.{os.getpid()}", "a", buffering=1)  # noqa: SIM115 - open for the process's life
    _lock = threading.Lock()

    def _write(kind: str, t0: float, t1: float, extra: str = "") -> None:
        with _lock:
            _out.write(f"{kind} {t0:.4f} {(t1 - t0) * 1000:.2f} {threading.current_thread().name} {extra}\n")

    _gc_started: dict[str, float] = {}

    def _on_gc(phase: str, info: dict) -> None:
        if phase == "start":
            _gc_started["t"] = time.monotonic()
            return
        t0 = _gc_started.get("t", time.monotonic())
        t1 = time.monotonic()
        if t1 - t0 > 0.002:
            _write(f"gc{info['generation']}", t0, t1, f"collected={info['collected']}")

    gc.callbacks.append(_on_gc)

    def _timed(cls, name: str, kind: str) -> None:
        inner = getattr(cls, name)

        def timed(*args, **kwargs):
            t0, c0 = time.monotonic(), time.thread_time()
            try:
                return inner(*args, **kwargs)
            finally:
                _write(kind, t0, time.monotonic(), f"cpu={(time.thread_time() - c0) * 1000:.2f}")
        setattr(cls, name, timed)

    _WRAP = {
        "txnwatch.exporter.serve.collector": [("ExporterCollector", "exposition", "scrape"),
                                              ("ExporterCollector", "publish_chunks", "publish")],
        "txnwatch.exporter.runtime.supervisor": [("WorkerRuntime", "_read", "read")],
        "txnwatch.exporter.runtime.published": [("PublishedFile", "load", "load")],
    }

    class _Finder(importlib.abc.MetaPathFinder):
        """Wraps the methods above once their module has run."""

        def find_spec(self, name, path, target=None):
            if name not in _WRAP:
                return None
            sys.meta_path.remove(self)
            try:
                spec = importlib.util.find_spec(name)
            finally:
                sys.meta_path.insert(0, self)
            run = spec.loader.exec_module

            def exec_module(module):
                run(module)
                for cls, method, kind in _WRAP[name]:
                    _timed(getattr(module, cls), method, kind)
            spec.loader.exec_module = exec_module
            return spec

    sys.meta_path.insert(0, _Finder())
