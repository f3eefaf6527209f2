"""HTTP endpoints: the metrics (at http.telemetry_path, /metrics by default), /healthz, /readyz,
/ (the human page)."""

from __future__ import annotations

from flask import Flask, Response, request

from ..spark.ingest import INGEST_PATH, make_ingest_blueprint
from .auth import Authorizer
from .page import render_page
from .telemetry import TelemetryEndpoint, unauthorized


def create_app(exporter) -> Flask:
    app = Flask("txnwatch")
    app.config["exporter"] = exporter
    http = exporter.config.http
    authorized = Authorizer(http.web.basic_auth_users, http.auth_bearer_token)
    headers = dict(http.web.headers)
    # the scrapes skip Flask (telemetry.py); the page needs the same credentials
    app.wsgi_app = TelemetryEndpoint(app.wsgi_app, exporter, http.telemetry_path, authorized, headers)

    @app.before_request
    def require_auth():
        if request.path == "/" and not authorized(request.headers.get("Authorization", "")):
            status, challenge, body = unauthorized(authorized)
            return Response(body, status=status, headers=challenge)
        return None

    if headers:
        @app.after_request
        def add_headers(resp: Response) -> Response:
            resp.headers.update(headers)
            return resp

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

    @app.get("/api/v1/openapi.yaml")
    def openapi() -> Response:
        """The ingest endpoint's OpenAPI document (for clients and fuzzers)."""
        from importlib.resources import files

        return Response(files("txnwatch.exporter.spark").joinpath("openapi-ingest.yaml").read_bytes(),
                        mimetype="application/yaml")

    _register_ingest(app, exporter)

    return app


def _register_ingest(app: Flask, exporter) -> None:
    """POST /api/v1/spark/events: needs a bearer token unless the exporter listens on loopback only."""
    http = exporter.config.http
    loopback = http.loopback_only
    if http.ingest_token or loopback:
        app.register_blueprint(make_ingest_blueprint(exporter.spark_state, http.ingest_token,
                                                     http.ingest_max_bytes, require_token=not loopback))
        return

    @app.post(INGEST_PATH)
    def ingest_disabled() -> Response:
        return Response('{"error": "the Spark ingest endpoint is disabled: the exporter listens beyond '
                        'loopback and no http.ingest_token (TXNWATCH_INGEST_TOKEN) is set", "field": null}\n',
                        status=403, mimetype="application/json")
