"""What the chart's tests share (tests/integration/test_helm*.py import it, never each other):
Helm as bootstrap built it, in a home of its own, and `helm template` of the chart (its
directory or a package) parsed into manifests."""

from __future__ import annotations

import subprocess
from pathlib import Path

import yaml

from txnwatch_dev.gotools import tool

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "txnwatch"
VALUES = {"default": None, **{p.name.removesuffix("-values.yaml"): p for p in sorted((CHART / "ci").glob("*.yaml"))}}
KUBERNETES = "1.37.0"      # the newest release kubernetes-validate knows


def helm(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    out = subprocess.run([str(tool("helm")), *args], capture_output=True, text=True, timeout=120,
                         env={"HOME": "/tmp", "PATH": "/usr/bin:/bin", "HELM_CACHE_HOME": "/tmp/helm-cache",
                              "HELM_CONFIG_HOME": "/tmp/helm-config", "HELM_DATA_HOME": "/tmp/helm-data"})
    if check and out.returncode != 0:
        raise AssertionError(f"helm {' '.join(args)}: {out.stderr}{out.stdout}")
    return out


def template_args(values: Path | None, *sets: str, chart: Path = CHART, release: str = "txnwatch") -> list[str]:
    args = ["template", release, str(chart), "--namespace", "monitoring", "--kube-version", KUBERNETES]
    if values:
        args += ["-f", str(values)]
    for s in sets:
        args += ["--set", s]
    return args


def render(values: Path | None, *sets: str, chart: Path = CHART, release: str = "txnwatch") -> list[dict]:
    return [d for d in yaml.safe_load_all(helm(*template_args(values, *sets, chart=chart, release=release)).stdout)
            if d]


def refusal(*sets: str, values: Path | None = None) -> str:
    """What `helm template` says when it refuses these values (it must)."""
    out = helm(*template_args(values, *sets), check=False)
    assert out.returncode != 0, f"helm template accepted {sets} {values or ''}"
    return out.stderr


def one(docs: list[dict], kind: str | tuple[str, ...], name: str | None = None) -> dict:
    kinds = (kind,) if isinstance(kind, str) else kind
    found = [d for d in docs if d["kind"] in kinds and (name is None or d["metadata"]["name"] == name)]
    assert len(found) == 1, f"{len(found)} {kinds} {name or ''} rendered"
    return found[0]


def workload(docs: list[dict]) -> dict:
    return one(docs, ("Deployment", "StatefulSet"))


def exporter_config(docs: list[dict]) -> dict:
    return yaml.safe_load(one(docs, "ConfigMap", "txnwatch")["data"]["txnwatch.yaml"])
