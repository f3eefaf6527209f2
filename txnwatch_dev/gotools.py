"""Tools written in Go, built from the Go module proxy by scripts/bootstrap-go.sh into
~/.cache/txnwatch/go-bin (built once), and Go modules' files from the module cache."""

from __future__ import annotations

import os
import zipfile
from pathlib import Path

GO_BIN = Path(os.environ.get("TXNWATCH_GO_BIN", Path.home() / ".cache" / "txnwatch" / "go-bin"))
# the versions scripts/bootstrap-go.sh builds
HELM_VERSION = "v3.22.0"
PROMETHEUS_OPERATOR_VERSION = "v0.85.0"     # the newest the module proxy serves here
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
