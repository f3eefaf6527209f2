"""Run a real Alertmanager (Debian's `prometheus-alertmanager`) on a loopback port, and a
webhook receiver that records what it delivers: the alert chain's tests.

Never the packaged service: our own process, config and data directory."""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
import threading
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import yaml

from ..net import free_port
from ..procs import start_until_ready, stop_group

# Debian's `prometheus-alertmanager` package (0.25): its own paths, never whatever is first on PATH
DEBIAN_ALERTMANAGER = Path("/usr/bin/prometheus-alertmanager")
DEBIAN_AMTOOL = Path("/usr/bin/amtool")


def alertmanager_binary(name: Path = DEBIAN_ALERTMANAGER) -> str:
    """Debian's Alertmanager (or, with DEBIAN_AMTOOL, its amtool)."""
    if not os.access(name, os.X_OK):
        raise RuntimeError(f"{name} is missing: `apt-get install prometheus-alertmanager` (make bootstrap does it)")
    return str(name)


class AlertmanagerProcess:
    def __init__(self, config: dict, data_dir: str | Path | None = None) -> None:
        self.port, self.cluster_port = free_port(), free_port()
        self.dir = Path(data_dir) if data_dir else Path(tempfile.mkdtemp(prefix="txnwatch-am-"))
        self.dir.mkdir(parents=True, exist_ok=True)
        self.config_path = self.dir / "alertmanager.yml"
        self.config_path.write_text(yaml.safe_dump(config, sort_keys=False))
        self.log_path = self.dir / "alertmanager.log"
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 30) -> AlertmanagerProcess:
        self.proc = start_until_ready(
            [alertmanager_binary(), f"--config.file={self.config_path}", f"--storage.path={self.dir / 'data'}",
             f"--web.listen-address=127.0.0.1:{self.port}",
             f"--cluster.listen-address=127.0.0.1:{self.cluster_port}"],   # a cluster of one
            self.log_path, self.url + "/-/ready", "alertmanager", timeout)
        return self

    def alerts(self) -> list[dict]:
        """Every alert Alertmanager holds (API v2), with `status.state` active or suppressed
        and `status.inhibitedBy`."""
        with urllib.request.urlopen(self.url + "/api/v2/alerts", timeout=10) as r:
            return json.loads(r.read())

    def stop(self) -> None:
        if self.proc is not None:
            stop_group(self.proc, 15)


class WebhookReceiver:
    """An HTTP server that records every notification Alertmanager posts, by path."""

    def __init__(self) -> None:
        self.notifications: list[tuple[str, dict]] = []
        self._lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                with receiver._lock:
                    receiver.notifications.append((self.path, json.loads(body or b"{}")))
                self.send_response(200)
                self.end_headers()

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", free_port()), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}{path}"

    def start(self) -> WebhookReceiver:
        self.thread.start()
        return self

    def delivered(self, alertname: str | None = None, status: str = "firing") -> list[tuple[str, dict]]:
        """(receiver path, alert) for every alert delivered (with `status`), of `alertname`."""
        with self._lock:
            return [(path, a) for path, n in self.notifications for a in n.get("alerts", [])
                    if a.get("status") == status and alertname in (None, a["labels"].get("alertname"))]

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
