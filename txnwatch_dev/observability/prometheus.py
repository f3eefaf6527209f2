"""Run a real Prometheus 3 (built by scripts/bootstrap-prometheus.sh) on a loopback port: tests,
demo and benchmarks.

Never a packaged service: our own process, config, rules and a throwaway TSDB."""

from __future__ import annotations

import functools
import json
import os
import subprocess
import tempfile
import urllib.parse
import urllib.request
from pathlib import Path

import yaml

from ..gotools import PROMETHEUS_HOME, prometheus3
from ..net import free_port
from ..procs import start_until_ready, stop_group


def prometheus_binary() -> str:
    return str(prometheus3("prometheus"))


def promtool_binary() -> str:
    """Prometheus 3's promtool."""
    return str(prometheus3("promtool"))


DEBIAN_PROMTOOL = Path("/usr/bin/promtool")      # where Debian's `prometheus` package puts it
DEBIAN_PROMTOOL_RELEASE = "2.42."


@functools.cache
def debian_promtool() -> str:
    """Debian's promtool (2.42): the alert unit tests run on it as well as on Prometheus 3's,
    for users still on 2.x (range selectors there include the window's left edge). Found at its
    package's own path and checked by the version it reports, never taken from PATH, where a
    Prometheus user's own promtool 3 often comes first."""
    try:
        out = subprocess.run([str(DEBIAN_PROMTOOL), "--version"], capture_output=True, text=True, timeout=30)
    except OSError:
        raise RuntimeError(f"Debian's promtool is not installed at {DEBIAN_PROMTOOL}: `apt-get install prometheus` "
                           "(make bootstrap does it)") from None
    first = (out.stdout or out.stderr).splitlines()[0] if (out.stdout or out.stderr) else ""
    if f"version {DEBIAN_PROMTOOL_RELEASE}" not in first:
        raise RuntimeError(f"{DEBIAN_PROMTOOL} reports {first!r}, not Debian's promtool {DEBIAN_PROMTOOL_RELEASE}x: "
                           "reinstall Debian's package (apt-get install --reinstall prometheus)")
    return str(DEBIAN_PROMTOOL)


class PrometheusProcess:
    def __init__(self, targets: list[str], rule_files: list[str | os.PathLike] = (), port: int | None = None,
                 interval: str = "1s", job: str = "txnwatch", log_path: str | os.PathLike | None = None,
                 data_dir: str | os.PathLike | None = None, target_labels: dict[str, str] | None = None,
                 alertmanagers: list[str] = (), scrape: dict | None = None) -> None:
        """`scrape`: more of the scrape job's settings (scheme, tls_config, basic_auth)."""
        self.port = port or free_port()
        self.dir = Path(data_dir) if data_dir else Path(tempfile.mkdtemp(prefix="txnwatch-prom-"))
        self.dir.mkdir(parents=True, exist_ok=True)
        config = {"global": {"scrape_interval": interval, "evaluation_interval": interval},
                  "rule_files": [str(Path(r).resolve()) for r in rule_files],
                  "scrape_configs": [{"job_name": job,
                                      "static_configs": [{"targets": targets, "labels": target_labels or {}}],
                                      **(scrape or {})}]}
        if alertmanagers:
            config["alerting"] = {"alertmanagers": [{"static_configs": [{"targets": list(alertmanagers)}]}]}
        self.config_path = self.dir / "prometheus.yml"
        self.config_path.write_text(yaml.safe_dump(config))
        self.log_path = Path(log_path) if log_path else self.dir / "prometheus.log"
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 60) -> PrometheusProcess:
        self.proc = start_until_ready(
            [prometheus_binary(), f"--config.file={self.config_path}", f"--storage.tsdb.path={self.dir / 'data'}",
             f"--web.listen-address=127.0.0.1:{self.port}", "--storage.tsdb.retention.time=1d",
             "--web.enable-lifecycle"],
            self.log_path, self.url + "/-/ready", "prometheus", timeout,
            cwd=PROMETHEUS_HOME)   # its web UI is served from ./static (no assets built into the binary)
        return self

    def page_url(self, page: str, **params: str) -> str:
        """The URL of one of Prometheus 3's UI pages ("alerts", "query", "targets", "rules"),
        with query parameters (the query page's `g0.expr`...)."""
        return f"{self.url}/{page}" + ("?" + urllib.parse.urlencode(params) if params else "")

    def api(self, path: str, **params) -> dict:
        url = f"{self.url}/api/v1/{path}"
        if params:
            url += "?" + urllib.parse.urlencode(params)
        with urllib.request.urlopen(url, timeout=10) as r:
            body = json.loads(r.read())
        if body.get("status") != "success":
            raise RuntimeError(f"prometheus {path}: {body}")
        return body["data"]

    def query(self, expr: str) -> list[dict]:
        return self.api("query", query=expr)["result"]

    def alerts(self) -> list[dict]:
        return self.api("alerts")["alerts"]

    def firing(self, name: str) -> list[dict]:
        return [a for a in self.alerts() if a["labels"].get("alertname") == name and a["state"] == "firing"]

    def stop(self) -> None:
        stop_group(self.proc, 15)
