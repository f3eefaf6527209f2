"""HTTP endpoints: /metrics, /healthz, /readyz, / (the human page)."""

from __future__ import annotations

from flask import Flask, Response, request
from prometheus_client.exposition import choose_encoder

from .page import render_page

LOOPBACK = {"127.0.0.1", "::1", "localhost"}


def create_app(exporter) -> Flask:
    app = Flask("txnwatch")
    app.config["exporter"] = exporter

    @app.get("/metrics")
    def metrics() -> Response:
        # OpenMetrics when the scraper asks for it (Accept: application/openmetrics-text).
        encoder, content_type = choose_encoder(request.headers.get("Accept", ""))
        return Response(encoder(exporter.registry), content_type=content_type)

    @app.get("/healthz")
    def healthz() -> Response:
        return Response("ok\n", mimetype="text/plain")

    @app.get("/readyz")
    def readyz() -> Response:
        ready, status = exporter.ready()
        body = "".join(f"{name}: {'ready' if ok else 'not ready'}\n" for name, ok in status.items())
        return Response(("ready\n" if ready else "not ready\n") + body, status=200 if ready else 503,
                        mimetype="text/plain")

    @app.get("/")
    def index() -> Response:
        return Response(render_page(exporter), mimetype="text/html")

    _register_ingest(app, exporter)

    return app


def _register_ingest(app: Flask, exporter) -> None:
    """POST /api/v1/spark/events: needs a bearer token unless the exporter listens on loopback."""
    from .ingest import INGEST_PATH, make_ingest_blueprint

    http = exporter.config.http
    loopback = http.host in LOOPBACK
    if http.ingest_token or loopback:
        app.register_blueprint(make_ingest_blueprint(exporter.spark_state, http.ingest_token,
                                                     http.ingest_max_bytes, require_token=not loopback))
        return

    @app.post(INGEST_PATH)
    def ingest_disabled() -> Response:
        return Response('{"error": "the Spark ingest endpoint is disabled: the exporter listens beyond '
                        'loopback and no http.ingest_token (TXNWATCH_INGEST_TOKEN) is set", "field": null}\n',
                        status=403, mimetype="application/json")
