"""The scrape endpoint served as plain WSGI in front of the Flask app (serve/telemetry.py):
the contract a scraper sees is the other endpoints' (credentials, the web config's headers,
content negotiation), on an exporter that is built but not started (no Kafka I/O)."""

from __future__ import annotations

import base64
import gzip
import time

import bcrypt
import pytest
import yaml

from txnwatch.config import parse_config
from txnwatch.exporter.runtime.service import Exporter
from txnwatch.exporter.serve.app import create_app
from txnwatch.metrics.exposition import OPENMETRICS_CONTENT_TYPE, TEXT_CONTENT_TYPE

TOKEN = "scrape-token-123"
PROMETHEUS = {"Accept": "application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5,*/*;q=0.1",
              "Accept-Encoding": "gzip", "User-Agent": "Prometheus/3.0.0",
              "X-Prometheus-Scrape-Timeout-Seconds": "10"}


def exporter(tmp_path, http: dict | None = None, web: dict | None = None) -> Exporter:
    http = {"host": "127.0.0.1", **(http or {})}
    if web is not None:
        (tmp_path / "web.yml").write_text(yaml.safe_dump(web))
        http["web_config_file"] = str(tmp_path / "web.yml")
    return Exporter(parse_config({"clusters": [{"name": "c", "bootstrap_servers": "127.0.0.1:9"}], "http": http}))


def test_a_scrape_gets_the_format_it_asks_for(tmp_path):
    client = create_app(exporter(tmp_path)).test_client()
    text = client.get("/metrics")
    assert text.status_code == 200
    assert text.headers["Content-Type"] == TEXT_CONTENT_TYPE
    assert text.headers["Vary"] == "Accept, Accept-Encoding"
    assert "Content-Encoding" not in text.headers
    assert b"# TYPE txnwatch_up gauge" in text.data
    assert int(text.headers["Content-Length"]) == len(text.data)

    om = client.get("/metrics", headers=PROMETHEUS)
    assert om.headers["Content-Type"] == OPENMETRICS_CONTENT_TYPE
    assert om.headers["Content-Encoding"] == "gzip"
    body = gzip.decompress(om.data)
    assert body.endswith(b"# EOF\n") and b"# TYPE txnwatch_up gauge" in body


def test_head_has_the_headers_and_no_body_and_other_methods_are_refused(tmp_path):
    client = create_app(exporter(tmp_path)).test_client()
    head = client.head("/metrics")
    assert head.status_code == 200 and head.data == b""
    assert int(head.headers["Content-Length"]) == len(client.get("/metrics").data)
    post = client.post("/metrics", data=b"x")
    assert post.status_code == 405 and post.headers["Allow"] == "GET, HEAD"
    # other paths are Flask's, as before
    assert client.get("/healthz").data == b"ok\n"
    assert client.get("/metrics/").status_code == 404


def test_a_scrape_is_counted_by_the_scrape_clock(tmp_path):
    exp = exporter(tmp_path)
    client = create_app(exp).test_client()
    client.get("/metrics", headers=PROMETHEUS)
    # a scraper that sends Prometheus's timeout header counts as settling from its first scrape
    assert exp.scrape_log.view(time.time()).settling == 1


@pytest.mark.parametrize("path", ["/metrics", "/"])
def test_credentials_are_checked_on_the_scrape_and_the_page(tmp_path, path):
    client = create_app(exporter(tmp_path, {"auth": {"bearer_token": TOKEN}},
                                 {"http_server_config": {"headers": {"X-Content-Type-Options": "nosniff"}}})
                        ).test_client()
    refused = client.get(path)
    assert refused.status_code == 401
    assert refused.headers["WWW-Authenticate"] == 'Bearer realm="txnwatch"'
    assert refused.headers["X-Content-Type-Options"] == "nosniff"
    assert refused.data == b"unauthorized\n"
    assert client.get(path, headers={"Authorization": "Bearer wrong"}).status_code == 401
    ok = client.get(path, headers={"Authorization": f"Bearer {TOKEN}"})
    assert ok.status_code == 200 and ok.headers["X-Content-Type-Options"] == "nosniff"
    assert TOKEN.encode() not in ok.data
    # unprotected paths carry the headers too, and need no credentials
    assert client.get("/healthz").headers["X-Content-Type-Options"] == "nosniff"


def test_basic_auth_users_from_the_web_config(tmp_path):
    hashed = bcrypt.hashpw(b"s3cret", bcrypt.gensalt(4)).decode()
    client = create_app(exporter(tmp_path, web={"basic_auth_users": {"prometheus": hashed}})).test_client()
    assert client.get("/metrics").headers["WWW-Authenticate"] == 'Basic realm="txnwatch"'
    good = base64.b64encode(b"prometheus:s3cret").decode()
    bad = base64.b64encode(b"prometheus:nope").decode()
    assert client.get("/metrics", headers={"Authorization": f"Basic {good}"}).status_code == 200
    assert client.get("/metrics", headers={"Authorization": f"Basic {bad}"}).status_code == 401
