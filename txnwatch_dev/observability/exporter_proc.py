"""Run `txnwatch serve` as a child process and read its /metrics (tests, demo, benchmarks)."""

from __future__ import annotations

import os
import signal
import ssl
import subprocess
import sys
import tempfile
import urllib.error
import urllib.request
from pathlib import Path

import yaml

from ..net import free_port, wait_for
from .scrape import Metrics, parse_metrics


class ExporterProcess:
    def __init__(self, config: dict, port: int | None = None, env: dict | None = None,
                 log_path: str | os.PathLike | None = None, extra_args: list[str] | None = None,
                 tls_client: ssl.SSLContext | None = None, headers: dict | None = None,
                 cwd: str | os.PathLike | None = None, python: str | os.PathLike | None = None) -> None:
        """`tls_client`: the exporter serves HTTPS (its web config) and this context talks to
        it; `headers`: sent with every request of get() (credentials); `cwd`: where it runs
        (`python -m` imports txnwatch from there first: benchmarks run another checkout);
        `python`: another venv's interpreter (one whose confluent-kafka has GSSAPI)."""
        self.port = port or free_port()
        config = {**config, "http": {**config.get("http", {}), "host": "127.0.0.1", "port": self.port}}
        self._dir = tempfile.mkdtemp(prefix="txnwatch-exporter-")
        self.config_path = Path(self._dir) / "txnwatch.yaml"
        self.config_path.write_text(yaml.safe_dump(config))
        self.log_path = Path(log_path) if log_path else Path(self._dir) / "exporter.log"
        self._env = {**os.environ, **(env or {})}
        self.extra_args = list(extra_args or [])
        self.tls_client, self.headers = tls_client, dict(headers or {})
        self.proc: subprocess.Popen | None = None
        self.cwd = cwd
        self.python = str(python or sys.executable)

    @property
    def url(self) -> str:
        return f"{'https' if self.tls_client else 'http'}://127.0.0.1:{self.port}"

    def start(self, timeout: float = 30) -> ExporterProcess:
        log = open(self.log_path, "ab")
        self.proc = subprocess.Popen([self.python, "-m", "txnwatch.cli", "serve", "--config",
                                      str(self.config_path), *self.extra_args],
                                     stdout=log, stderr=subprocess.STDOUT, env=self._env,
                                     start_new_session=True, cwd=self.cwd)
        wait_for(lambda: self.proc.poll() is not None or self.get("/healthz")[0] == 200, timeout,
                 what=f"exporter /healthz on {self.url}")
        if self.proc.poll() is not None:
            raise RuntimeError(f"exporter exited {self.proc.returncode}: {self.log()[-3000:]}")
        return self

    def get(self, path: str, headers: dict | None = None, timeout: float = 5) -> tuple[int, str]:
        req = urllib.request.Request(self.url + path, headers={**self.headers, **(headers or {})})
        try:
            with urllib.request.urlopen(req, timeout=timeout, context=self.tls_client) as r:
                return r.status, r.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode()
        except OSError:
            return 0, ""

    def metrics(self) -> Metrics:
        status, body = self.get("/metrics")
        if status != 200:
            raise RuntimeError(f"/metrics answered {status}")
        return Metrics(parse_metrics(body))

    def wait_metric(self, predicate, timeout: float = 30, what: str = "metric condition",
                    describe=None) -> Metrics:
        """Wait until predicate(metrics) is truthy; returns those metrics. `describe()`: what
        the timeout's message adds (what the exporter showed instead)."""
        box: list[Metrics] = []

        def cond():
            m = self.metrics()
            if predicate(m):
                box.append(m)
                return True
            return False

        try:
            wait_for(cond, timeout, interval=0.2, what=what)
        except TimeoutError as exc:
            if describe is None:
                raise
            raise TimeoutError(f"{exc}; the exporter showed: {describe()}") from None
        return box[0]

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def kill(self, sig: int = signal.SIGKILL) -> None:
        if self.proc and self.proc.poll() is None:
            os.killpg(self.proc.pid, sig)
            self.proc.wait(15)

    def stop(self) -> None:
        self.kill(signal.SIGTERM)
