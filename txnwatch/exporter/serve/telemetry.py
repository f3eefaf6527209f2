"""The scrape endpoint (http.telemetry_path, /metrics by default) as plain WSGI, in front of the
Flask app that serves everything else.

A scrape is the request an exporter serves most, every few seconds for its whole life, and
what it sends is already rendered (the collector's cached chunks). Through Flask, its request
context, routing and Response object took about as much of the serving process's CPU as the
HTTP server's own parsing (bench/bench_web.py --compare measures a scrape's CPU against the
code before and a static server). Everything else (the page, health, ingest) stays in Flask.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

from ...metrics.exposition import OPENMETRICS_CONTENT_TYPE, TEXT_CONTENT_TYPE, accepts_gzip, wants_openmetrics
from ..in_flight import TIMEOUT_HEADER, wait_budget
from .auth import Authorizer

# The timeout header Prometheus sends, as WSGI spells a request header.
TIMEOUT_KEY = "HTTP_" + TIMEOUT_HEADER.upper().replace("-", "_")
SERVED = ("GET", "HEAD")


class TelemetryEndpoint:
    """WSGI middleware: the telemetry path answered here, any other path by `app`.

    The same contract as the other endpoints: the web config's users or the bearer token
    (401 with a challenge), the web config's extra headers on every answer, OpenMetrics or
    the text format and gzip as the scraper asks. Each scrape tells the exporter who came
    (its address and user agent: the scrape clock) and waits for a poll timed for it that
    runs late (in_flight.py)."""

    def __init__(self, app: Callable, exporter, path: str, authorized: Authorizer,
                 headers: Mapping[str, str]) -> None:
        self.app, self.exporter, self.path, self.authorized = app, exporter, path, authorized
        self.headers = list(headers.items())

    def __call__(self, environ: dict, start_response: Callable) -> Iterable[bytes]:
        if environ.get("PATH_INFO") != self.path:
            return self.app(environ, start_response)
        method = environ.get("REQUEST_METHOD", "GET")
        if not self.authorized(environ.get("HTTP_AUTHORIZATION", "")):
            status, headers, body = unauthorized(self.authorized)
        elif method not in SERVED:
            status, headers, body = "405 METHOD NOT ALLOWED", [("Allow", ", ".join(SERVED))], b""
        else:
            status, headers, body = "200 OK", *self.scrape(environ)
        start_response(status, [*headers, ("Content-Length", str(len(body))), *self.headers])
        return [b"" if method == "HEAD" else body]

    def scrape(self, environ: dict) -> tuple[list[tuple[str, str]], bytes]:
        timeout = environ.get(TIMEOUT_KEY)
        self.exporter.scrape_seen(f"{environ.get('REMOTE_ADDR')} {environ.get('HTTP_USER_AGENT', '')}",
                                  timeout is not None)
        # a poll timed for this scrape that runs late: its data, not the data a period old
        self.exporter.wait_for_late_polls(wait_budget(timeout))
        om = wants_openmetrics(environ.get("HTTP_ACCEPT", ""))
        gz = accepts_gzip(environ.get("HTTP_ACCEPT_ENCODING", ""))
        headers = [("Content-Type", OPENMETRICS_CONTENT_TYPE if om else TEXT_CONTENT_TYPE),
                   ("Vary", "Accept, Accept-Encoding")]
        if gz:
            headers.append(("Content-Encoding", "gzip"))
        return headers, self.exporter.metrics(om, gz)


def unauthorized(authorized: Authorizer) -> tuple[str, list[tuple[str, str]], bytes]:
    """The answer to a request without valid credentials, for every protected path."""
    return ("401 UNAUTHORIZED", [("Content-Type", "text/plain; charset=utf-8"),
                                 ("WWW-Authenticate", authorized.challenge)], b"unauthorized\n")
