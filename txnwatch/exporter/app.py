"""HTTP endpoints: /metrics, /healthz, /readyz, / (the human page)."""

from __future__ import annotations

from flask import Flask, Response, request
from prometheus_client.exposition import choose_encoder

from .page import render_page


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

    return app
