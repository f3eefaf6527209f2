"""The HTTP servers: one cheroot server (CherryPy's production WSGI server) per listen address,
each in a thread of its own, all serving one app, plain or with TLS from the web config (one
stack for both: bench/bench_scrape.py measures each). Every address is bound (serve/listen.py)
before any is served, so a bad one fails the start before serving is announced."""

from __future__ import annotations

import threading

from ...config import HttpConfig
from ...config.web import WebConfig
from .listen import Bound, bind_all


def _cheroot_server(bound: Bound, app, threads: int):
    """cheroot's server on the socket bound already: its prepare() asks bind() for a socket,
    and gets this one (binding here would lose the errno that says what went wrong)."""
    from cheroot import wsgi

    class _Prebound(wsgi.Server):
        def bind(self, family, type, proto=0):   # noqa: A002 - cheroot's signature
            self.socket = bound.sock
            self.bind_addr = self.resolve_real_bind_addr(bound.sock)
            return bound.sock

    return _Prebound(bound.sock.getsockname()[:2], app, numthreads=threads, server_name="txnwatch",
                     # an idle or stuck client's connection is dropped after this long
                     timeout=30, shutdown_timeout=5)


class Servers:
    def __init__(self, app, http: HttpConfig, web: WebConfig, source: str | None = None) -> None:
        self.bound = bind_all(http.listen, source)     # a ConfigError naming the setting when one fails
        self.scheme = web.scheme
        self.tls = None
        self._servers = [_cheroot_server(b, app, http.threads) for b in self.bound]
        if web.tls is not None:
            from .tls import ReloadingContext, ssl_adapter

            self.tls = ReloadingContext(web.tls)      # one context (and one reload) for every address
            for s in self._servers:
                s.ssl_adapter = ssl_adapter(self.tls)
        for s in self._servers:
            s.prepare()

    @property
    def urls(self) -> list[str]:
        """Where it listens: http://[::]:10129 for every interface."""
        return [f"{self.scheme}://{b.netloc()}" for b in self.bound]

    @property
    def local_urls(self) -> list[str]:
        """How a client on this host reaches each address (a wildcard by loopback)."""
        return [f"{self.scheme}://{b.local_netloc()}" for b in self.bound]

    @property
    def effective_port(self) -> int:
        return self.bound[0].sock.getsockname()[1]

    def run(self) -> None:
        """Serve every address until close()."""
        threads = [threading.Thread(target=self._serve, args=(s,), name=f"http {b.netloc()}", daemon=True)
                   for s, b in zip(self._servers, self.bound, strict=True)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()

    @staticmethod
    def _serve(server) -> None:
        try:
            server.serve()
        except OSError:
            pass        # its socket closed by close()

    def close(self) -> None:
        for s in self._servers:
            threading.Thread(target=s.stop, daemon=True).start()


def make_server(app, http: HttpConfig, web: WebConfig, source: str | None = None) -> Servers:
    """The WSGI servers for `app` on the configured addresses (run(), close(), urls)."""
    return Servers(app, http, web, source)
