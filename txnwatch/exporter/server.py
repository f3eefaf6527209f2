"""`txnwatch serve`: the exporter on waitress (a production WSGI server)."""

from __future__ import annotations

import logging
import signal
import threading

from waitress import create_server

from ..config import Config
from .app import create_app
from .service import Exporter

log = logging.getLogger(__name__)


def serve(config: Config, ready_event: threading.Event | None = None) -> int:
    exporter = Exporter(config)
    app = create_app(exporter)
    server = create_server(app, host=config.http.host, port=config.http.port,
                           threads=config.http.threads, ident="txnwatch",
                           channel_timeout=30, clear_untrusted_proxy_headers=True)
    exporter.start()
    names = ", ".join(f"{c.name} ({c.bootstrap_servers})" for c in config.clusters)
    log.info("txnwatch serving on http://%s:%s/ for %s", config.http.host, server.effective_port, names)

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
