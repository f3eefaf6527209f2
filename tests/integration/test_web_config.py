"""The web configuration file (exporter-toolkit's format) served to real clients: a real
Prometheus scraping over mutual TLS with basic auth; a certificate rotated on disk and
picked up without a restart; a wrong client certificate, a wrong password and plain HTTP
refused; `txnwatch healthcheck` (the image's HEALTHCHECK) on the configured port and scheme.
"""

from __future__ import annotations

import base64
import hashlib
import os
import shutil
import socket
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request

import bcrypt
import pytest
import yaml

from tests.integration.helpers import cluster_config
from txnwatch_dev.net import wait_for
from txnwatch_dev.observability.exporter_proc import ExporterProcess
from txnwatch_dev.observability.prometheus import PrometheusProcess
from txnwatch_dev.pki import make_ca

pytestmark = [pytest.mark.integration]

SCRAPE_PW, AGENT_PW = "scrape-pw-7f3", "agent-pw-19c"


def basic(user: str, password: str) -> dict:
    return {"Authorization": "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()}


def client_context(ca, client=None) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=str(ca.cert))
    if client is not None:
        ctx.load_cert_chain(str(client.cert), str(client.key))
    return ctx


def served_fingerprint(port: int, ctx: ssl.SSLContext) -> str:
    with socket.create_connection(("127.0.0.1", port), timeout=5) as raw, \
            ctx.wrap_socket(raw, server_hostname="127.0.0.1") as tls:
        return hashlib.sha256(tls.getpeercert(binary_form=True)).hexdigest()


def fingerprint(cert) -> str:
    return hashlib.sha256(ssl.PEM_cert_to_DER_cert(cert.read_text())).hexdigest()


@pytest.fixture
def pki(tmp_path):
    ca, clients_ca, rogue_ca = make_ca(tmp_path / "pki", "server-ca"), make_ca(tmp_path / "pki", "clients-ca"), \
        make_ca(tmp_path / "pki", "rogue-ca")
    web = tmp_path / "web"
    server = ca.issue("tls", "localhost", server=True, directory=web)
    shutil.copy(clients_ca.cert, web / "clients-ca.crt")
    return {"ca": ca, "web": web, "server": server, "prometheus": clients_ca.issue("prometheus", "prometheus"),
            "rogue": rogue_ca.issue("rogue", "prometheus"), "rotated": ca.issue("rotated", "localhost", server=True)}


def write_web_config(path, **tls) -> None:
    path.write_text(yaml.safe_dump({
        "tls_server_config": {"cert_file": "tls.crt", "key_file": "tls.key", **tls},   # relative to the file
        "http_server_config": {"headers": {"X-Content-Type-Options": "nosniff"}},
        "basic_auth_users": {"prometheus": bcrypt.hashpw(SCRAPE_PW.encode(), bcrypt.gensalt(10)).decode(),
                             "agent": bcrypt.hashpw(AGENT_PW.encode(), bcrypt.gensalt(10)).decode()}}))


def plain_http_status(port: int) -> int:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5) as r:
            return r.status
    except urllib.error.HTTPError as exc:
        return exc.code
    except OSError:
        return 0


def scraped_after(prom: PrometheusProcess, t: float) -> bool:
    """Prometheus's own view of the target: healthy, last scraped after `t`."""
    from datetime import datetime

    targets = prom.api("targets")["activeTargets"]
    return any(tg["health"] == "up" and datetime.fromisoformat(tg["lastScrape"].replace("Z", "+00:00")).timestamp() > t
               for tg in targets)


def healthcheck(exp: ExporterProcess) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "txnwatch.cli", "healthcheck", "--config", str(exp.config_path),
                           *exp.extra_args], capture_output=True, text=True, timeout=30)


def test_prometheus_scrapes_over_mutual_tls_with_basic_auth_and_a_rotation_needs_no_restart(broker, pki, tmp_path):
    web_config = pki["web"] / "web-config.yml"
    write_web_config(web_config, client_auth_type="RequireAndVerifyClientCert", client_ca_file="clients-ca.crt")
    mtls = client_context(pki["ca"], pki["prometheus"])
    exp = ExporterProcess(cluster_config(broker.bootstrap), log_path=tmp_path / "exporter.log",
                          extra_args=["--web.config.file", str(web_config)], tls_client=mtls,
                          headers=basic("prometheus", SCRAPE_PW)).start()
    prom = PrometheusProcess([f"127.0.0.1:{exp.port}"], log_path=tmp_path / "prometheus.log", scrape={
        "scheme": "https",
        "tls_config": {"ca_file": str(pki["ca"].cert), "cert_file": str(pki["prometheus"].cert),
                       "key_file": str(pki["prometheus"].key)},
        "basic_auth": {"username": "prometheus", "password": SCRAPE_PW}}).start()
    try:
        # 1. a real Prometheus scrapes it: target up, the exporter's series stored
        wait_for(lambda: prom.query('up{job="txnwatch"} == 1') and prom.query("txnwatch_build_info"), 60,
                 what="Prometheus scraping the exporter over mTLS with basic auth")
        status, _ = exp.get("/metrics")
        assert status == 200
        assert exp.get("/metrics", basic("agent", AGENT_PW))[0] == 200        # a second user
        # 2. refused: a wrong password, no credentials, a certificate of another CA, no
        # certificate, plain HTTP
        assert exp.get("/metrics", basic("prometheus", AGENT_PW))[0] == 401
        assert exp.get("/", {"Authorization": ""})[0] == 401
        assert exp.get("/healthz", {"Authorization": ""})[0] == 200              # probes stay open
        for ctx in (client_context(pki["ca"], pki["rogue"]), client_context(pki["ca"])):
            with pytest.raises((ssl.SSLError, ConnectionError)):
                with socket.create_connection(("127.0.0.1", exp.port), timeout=5) as raw, \
                        ctx.wrap_socket(raw, server_hostname="127.0.0.1") as tls:
                    # TLS 1.3: the server's verdict on the client certificate arrives after
                    # the client's side of the handshake, at the first read
                    tls.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
                    if not tls.recv(100):
                        raise ConnectionError("closed")
        assert plain_http_status(exp.port) != 200                              # cheroot: 400, "speaks HTTPS"
        # 3. the certificate rotated on disk (as a Secret volume swaps its files): new
        # connections get the new one, from the same process
        before = served_fingerprint(exp.port, mtls)
        assert before == fingerprint(pki["server"].cert)
        for suffix in ("key", "crt"):                                          # key first: the pair
            tmp = pki["web"] / f".tls.{suffix}.new"                            # is briefly mismatched
            shutil.copy(pki["rotated"].cert if suffix == "crt" else pki["rotated"].key, tmp)
            os.replace(tmp, pki["web"] / f"tls.{suffix}")
        wait_for(lambda: served_fingerprint(exp.port, mtls) == fingerprint(pki["rotated"].cert), 30,
                 what="the rotated certificate served")
        rotated_at = time.time()
        wait_for(lambda: scraped_after(prom, rotated_at), 60, what="Prometheus scraping on after the rotation")
        assert exp.proc.poll() is None                                        # the same process
        assert "web TLS: reloaded" in exp.log()
        # 4. the healthcheck: client certificates required, so it checks the port
        hc = healthcheck(exp)
        assert hc.returncode == 0 and "accepts connections" in hc.stdout, hc
        log = exp.log()
        assert SCRAPE_PW not in log and AGENT_PW not in log
    finally:
        prom.stop()
        exp.stop()


def test_tls_without_client_certificates_and_the_healthcheck_follows_port_and_scheme(broker, pki, tmp_path):
    web_config = pki["web"] / "web-config.yml"
    write_web_config(web_config, min_version="TLS13")
    exp = ExporterProcess(cluster_config(broker.bootstrap), log_path=tmp_path / "exporter.log",
                          extra_args=["--web.config.file", str(web_config)], tls_client=client_context(pki["ca"]),
                          headers=basic("prometheus", SCRAPE_PW)).start()
    try:
        hc = healthcheck(exp)
        assert hc.returncode == 0 and f"https://127.0.0.1:{exp.port}/healthz: 200" in hc.stdout, hc
        with urllib.request.urlopen(urllib.request.Request(exp.url + "/metrics", headers=basic("agent", AGENT_PW)),
                                    context=exp.tls_client, timeout=5) as r:
            req_headers = dict(r.headers)
        assert req_headers.get("X-Content-Type-Options") == "nosniff"
        old = ssl.create_default_context(cafile=str(pki["ca"].cert))
        old.maximum_version = ssl.TLSVersion.TLSv1_2                            # below min_version
        with pytest.raises(ssl.SSLError):
            served_fingerprint(exp.port, old)
    finally:
        exp.stop()
    down = healthcheck(exp)
    assert down.returncode == 1 and f"https://127.0.0.1:{exp.port}/healthz" in down.stderr, down
