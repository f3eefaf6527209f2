"""Tools written in Go, built once from the Go module proxy by bootstrap (scripts/bootstrap-go.sh
into ~/.cache/txnwatch/go-bin; scripts/bootstrap-prometheus.sh, Prometheus 3 with its web UI, into
~/.cache/txnwatch/prometheus/<version>), and Go modules' files from the module cache."""

from __future__ import annotations

import os
import zipfile
from pathlib import Path

GO_BIN = Path(os.environ.get("TXNWATCH_GO_BIN", Path.home() / ".cache" / "txnwatch" / "go-bin"))
# the versions scripts/bootstrap-go.sh builds
HELM_VERSION = "v3.22.0"
PROMETHEUS_OPERATOR_VERSION = "v0.85.0"     # the newest the module proxy serves here
# the versions scripts/bootstrap-prometheus.sh builds: Prometheus 3.16.0 (module v0.316.0,
# the newest the module proxy serves here) and the pnpm its web UI's lockfile asks for (< 13)
PROMETHEUS_VERSION = "v0.316.0"
PROMETHEUS_RELEASE = "3.16.0"     # what that module version reports
PNPM_VERSION = "12.21.0"
PROMETHEUS_HOME = Path(os.environ.get("TXNWATCH_PROMETHEUS_HOME", Path.home() / ".cache" / "txnwatch" / "prometheus")) \
    / PROMETHEUS_VERSION
CRDS = ("monitoring.coreos.com_servicemonitors.yaml", "monitoring.coreos.com_podmonitors.yaml",
        "monitoring.coreos.com_prometheusrules.yaml")


class GoToolMissing(RuntimeError):
    pass


def tool(name: str) -> Path:
    path = GO_BIN / name
    if not os.access(path, os.X_OK):
        raise GoToolMissing(f"{path} is missing: run `make bootstrap` (scripts/bootstrap-go.sh builds it from the "
                            "Go module proxy)")
    return path


def prometheus3(name: str = "prometheus") -> Path:
    """Prometheus 3's `prometheus` or `promtool`, as scripts/bootstrap-prometheus.sh built it."""
    path = PROMETHEUS_HOME / name
    if not os.access(path, os.X_OK) or not (PROMETHEUS_HOME / ".complete").is_file():
        raise GoToolMissing(f"{path} is missing: run `make bootstrap` (scripts/bootstrap-prometheus.sh builds "
                            f"Prometheus {PROMETHEUS_VERSION} and its web UI once)")
    return path


def _gomodcache() -> Path:
    return Path(os.environ.get("GOMODCACHE") or Path(os.environ.get("GOPATH", Path.home() / "go")) / "pkg" / "mod")


def prometheus_operator_crds() -> dict[str, str]:
    """The Prometheus Operator's CRDs (file name -> YAML) from its module's zip in the Go
    module cache (scripts/bootstrap-go.sh downloads it)."""
    z = (_gomodcache() / "cache" / "download" / "github.com" / "prometheus-operator" / "prometheus-operator" / "@v"
         / f"{PROMETHEUS_OPERATOR_VERSION}.zip")
    if not z.is_file():
        raise GoToolMissing(f"{z} is missing: run `make bootstrap` (scripts/bootstrap-go.sh downloads it)")
    prefix = f"github.com/prometheus-operator/prometheus-operator@{PROMETHEUS_OPERATOR_VERSION}/example/" \
             "prometheus-operator-crd/"
    with zipfile.ZipFile(z) as zf:
        return {name: zf.read(prefix + name).decode() for name in CRDS}
