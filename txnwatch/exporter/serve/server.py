"""The HTTP server: cheroot (CherryPy's production WSGI server), plain or with TLS from the
web config, one stack for both (bench/bench_scrape.py measures each)."""

from __future__ import annotations

import threading

from ...config import HttpConfig
from ...config.web import WebConfig


class Server:
    def __init__(self, app, http: HttpConfig, web: WebConfig) -> None:
        from cheroot import wsgi

        self._server = wsgi.Server((http.host, http.port), app, numthreads=http.threads, server_name="txnwatch",
                                   # an idle or stuck client's connection is dropped after this long
                                   timeout=30, shutdown_timeout=5)
        self.tls = None
        if web.tls is not None:
            from .tls import ReloadingContext, ssl_adapter

            self.tls = ReloadingContext(web.tls)
            self._server.ssl_adapter = ssl_adapter(self.tls)
        self._server.prepare()            # binds: a taken port fails here, before serving is announced
        self.effective_port = self._server.bind_addr[1]

    def run(self) -> None:
        self._server.serve()

    def close(self) -> None:
        threading.Thread(target=self._server.stop, daemon=True).start()


def make_server(app, http: HttpConfig, web: WebConfig) -> Server:
    """The WSGI server for `app` on the configured address (run(), close(), effective_port)."""
    return Server(app, http, web)
