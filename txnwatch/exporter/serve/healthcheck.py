"""`txnwatch healthcheck`: the container's HEALTHCHECK. It asks /healthz where the serving
process says it listens (serve/record.py), which follows `serve`'s flags too; without such a
record, where the configuration (file, environment, the healthcheck's own flags) says."""

from __future__ import annotations

import socket
import ssl
import urllib.error
import urllib.parse
import urllib.request

from ...config import HttpConfig
from .record import Record

# A wildcard is asked on IPv4 loopback: `::` is dual-stack, and ::1 may be missing.
WILDCARDS = {"0.0.0.0": "127.0.0.1", "::": "127.0.0.1", "": "127.0.0.1"}


def from_config(http: HttpConfig) -> tuple[str, bool]:
    """(URL, client certificates required) of the configuration's first listen address."""
    address = http.listen[0]
    host = WILDCARDS.get(address.host, address.host)
    return f"{http.scheme}://{address.netloc(host)}", bool(http.tls and http.web.tls.client_cert_required)


def from_record(record: Record) -> tuple[str, bool]:
    return record.urls[0], record.client_certificates


def healthcheck(url: str, client_certificates: bool, timeout: float = 4.0) -> tuple[bool, str]:
    """(healthy, what was checked) for the server at `url` (scheme://host:port). Over TLS the
    server's certificate is not verified (this asks the local process whether it is alive, not
    who it is). Where client certificates are required the check cannot present one: it then
    checks that the port takes TLS connections."""
    target = urllib.parse.urlsplit(url)
    if client_certificates:
        try:
            with socket.create_connection((target.hostname, target.port), timeout=timeout):
                return True, f"{target.netloc} accepts connections (client certificates required: /healthz not asked)"
        except OSError as exc:
            return False, f"{target.netloc}: {exc}"
    ctx = None
    if target.scheme == "https":
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    health = f"{url}/healthz"
    try:
        with urllib.request.urlopen(health, timeout=timeout, context=ctx) as r:
            return r.status == 200, f"{health}: {r.status}"
    except urllib.error.HTTPError as exc:
        return False, f"{health}: {exc.code}"
    except (OSError, ValueError) as exc:
        return False, f"{health}: {getattr(exc, 'reason', exc)}"
