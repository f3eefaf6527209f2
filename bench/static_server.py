"""The control for a scrape's latency: a threaded stdlib HTTP server that sends the same
gzipped exposition bytes on every GET and does nothing else, so it sleeps between scrapes
(bench_poll_cost.py --control). What it waits for on a scrape is the machine's, not an
exporter's work.

    python bench/static_server.py BODY.gz PORT
"""

from __future__ import annotations

import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path


def main() -> None:
    body, port = Path(sys.argv[1]).read_bytes(), int(sys.argv[2])

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self) -> None:   # noqa: N802 (the stdlib's name)
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
            self.send_header("Content-Encoding", "gzip")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args) -> None:
            pass

    ThreadingHTTPServer(("127.0.0.1", port), Handler).serve_forever()


if __name__ == "__main__":
    main()
