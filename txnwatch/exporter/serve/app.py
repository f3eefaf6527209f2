"""HTTP endpoints: /metrics, /healthz, /readyz, / (the human page)."""

from __future__ import annotations

import base64
import hmac

from flask import Flask, Response, request

from ...metrics.exposition import OPENMETRICS_CONTENT_TYPE, TEXT_CONTENT_TYPE, accepts_gzip, wants_openmetrics
from ..spark.ingest import INGEST_PATH, make_ingest_blueprint
from .page import render_page

LOOPBACK = {"127.0.0.1", "::1", "localhost"}


def create_app(exporter) -> Flask:
    app = Flask("txnwatch")
    app.config["exporter"] = exporter
    http = exporter.config.http
    protected = {"/metrics", "/"}

    @app.before_request
    def require_auth():
        if request.path in protected and not authorized(http, request.headers.get("Authorization", "")):
            scheme = "Basic" if http.auth_username else "Bearer"
            return Response("unauthorized\n", status=401, mimetype="text/plain",
                            headers={"WWW-Authenticate": f'{scheme} realm="txnwatch"'})
        return None

    @app.get("/metrics")
    def metrics() -> Response:
        # OpenMetrics when the scraper asks for it (Accept: application/openmetrics-text).
        om = wants_openmetrics(request.headers.get("Accept", ""))
        gz = accepts_gzip(request.headers.get("Accept-Encoding", ""))
        resp = Response(exporter.metrics(om, gz), content_type=OPENMETRICS_CONTENT_TYPE if om else TEXT_CONTENT_TYPE)
        if gz:
            resp.headers["Content-Encoding"] = "gzip"
        resp.headers["Vary"] = "Accept, Accept-Encoding"
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
    """POST /api/v1/spark/events: needs a bearer token unless the exporter listens on loopback."""
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


def authorized(http, header: str) -> bool:
    """Basic or bearer credentials, compared in constant time. No auth configured: open."""
    if not (http.auth_username or http.auth_bearer_token):
        return True
    scheme, _, value = header.partition(" ")
    value = value.strip()
    if http.auth_bearer_token and scheme.lower() == "bearer":
        return hmac.compare_digest(value.encode(), http.auth_bearer_token.encode())
    if http.auth_username and scheme.lower() == "basic":
        try:
            user, _, pw = base64.b64decode(value, validate=True).decode().partition(":")
        except (ValueError, UnicodeDecodeError):
            return False
        ok_user = hmac.compare_digest(user.encode(), http.auth_username.encode())
        ok_pw = hmac.compare_digest(pw.encode(), (http.auth_password or "").encode())
        return ok_user and ok_pw
    return False
