"""The HTTP server: waitress (a production WSGI server), or cheroot where TLS is configured."""

from __future__ import annotations

import gc
import threading

from waitress import create_server

from ...config import HttpConfig


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


def make_server(app, http: HttpConfig):
    """The WSGI server for `app` on the configured address: waitress, or cheroot with TLS.
    Both have run(), close() and effective_port."""
    if http.tls:
        return _TLSServer(app, http)
    return create_server(app, host=http.host, port=http.port, threads=http.threads, ident="txnwatch",
                         channel_timeout=30, clear_untrusted_proxy_headers=True,
                         # big clusters make multi-MB bodies: keep them in memory
                         outbuf_overflow=256 * 1024 * 1024, send_bytes=256 * 1024)
