"""`txnwatch healthcheck`: the container's HEALTHCHECK, on the configured port and scheme."""

from __future__ import annotations

import socket
import ssl
import urllib.error
import urllib.request

from ...config import HttpConfig

WILDCARDS = {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}


def healthcheck(http: HttpConfig, timeout: float = 4.0) -> tuple[bool, str]:
    """(healthy, what was checked). Over TLS the server's certificate is not verified (this
    asks the local process whether it is alive, not who it is). Where the web config requires
    a client certificate the check cannot present one: it then checks that the port takes TLS
    connections."""
    host = WILDCARDS.get(http.host, http.host)
    netloc = f"[{host}]:{http.port}" if ":" in host else f"{host}:{http.port}"
    url = f"{http.scheme}://{netloc}/healthz"
    ctx = None
    if http.tls:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
        if http.web.tls.client_cert_required:
            try:
                with socket.create_connection((host, http.port), timeout=timeout):
                    return True, f"{netloc} accepts connections (client certificates required: /healthz not asked)"
            except OSError as exc:
                return False, f"{netloc}: {exc}"
    try:
        with urllib.request.urlopen(url, timeout=timeout, context=ctx) as r:
            return r.status == 200, f"{url}: {r.status}"
    except urllib.error.HTTPError as exc:
        return False, f"{url}: {exc.code}"
    except (OSError, ValueError) as exc:
        return False, f"{url}: {getattr(exc, 'reason', exc)}"
