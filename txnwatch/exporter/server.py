"""`txnwatch serve`: the exporter on waitress (a production WSGI server)."""

from __future__ import annotations

import gc
import logging
import signal
import threading

from waitress import create_server

from ..config import Config
from .app import create_app
from .service import Exporter

log = logging.getLogger(__name__)


class _TLSServer:
    """waitress has no TLS; with certificate files configured the same WSGI app is served by
    cheroot (CherryPy's production WSGI server) with its built-in TLS adapter."""

    def __init__(self, app, http) -> None:
        from cheroot import wsgi
        from cheroot.ssl.builtin import BuiltinSSLAdapter

        self._server = wsgi.Server((http.host, http.port), app, numthreads=http.threads,
                                   server_name="txnwatch")
        self._server.ssl_adapter = BuiltinSSLAdapter(http.tls_cert_file, http.tls_key_file)
        self.effective_port = http.port

    def run(self) -> None:
        self._server.safe_start()

    def close(self) -> None:
        threading.Thread(target=self._server.stop, daemon=True).start()


GC_THRESHOLDS = (10_000, 50, 1000)


def tune_gc() -> None:
    """Scrape latency: a poll of a big cluster allocates ~20k futures (the client library
    makes one per partition), which with CPython's default thresholds triggers full
    collections that hold the GIL for ~170 ms at 10k partitions (bench/bench_scrape.py,
    docs/benchmarks.md). Freeze what startup built and collect young objects in bigger,
    rarer steps; full collections become rare. Snapshots hold no reference cycles, so
    they are still freed by reference counting as soon as the next one replaces them."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)


def serve(config: Config, ready_event: threading.Event | None = None, shard=None) -> int:
    exporter = Exporter(config, shard=shard)
    app = create_app(exporter)
    http = config.http
    if http.tls:
        server = _TLSServer(app, http)
    else:
        server = create_server(app, host=http.host, port=http.port, threads=http.threads, ident="txnwatch",
                               channel_timeout=30, clear_untrusted_proxy_headers=True,
                               # big clusters make multi-MB bodies: keep them in memory
                               outbuf_overflow=256 * 1024 * 1024, send_bytes=256 * 1024)
    tune_gc()
    exporter.start()
    names = ", ".join(f"{c.name} ({c.bootstrap_servers})" for c in config.clusters if c.name in exporter.clusters)
    if exporter.shard.sharded:
        names += f"; shard {exporter.shard.index} of {exporter.shard.total}"
    log.info("txnwatch serving on %s://%s:%s/ for %s", "https" if http.tls else "http", http.host,
             server.effective_port, names)

    def shutdown(signum, _frame) -> None:
        log.info("received %s, shutting down", signal.Signals(signum).name)
        server.close()

    signal.signal(signal.SIGTERM, shutdown)
    signal.signal(signal.SIGINT, shutdown)
    if ready_event:
        ready_event.set()
    try:
        server.run()
    except OSError:
        pass  # closed by the signal handler
    finally:
        exporter.stop()
    return 0
