"""The chart as a release ships it: scripts/package-chart.sh (what a release runs, into dist/)
packages it into a temporary directory. The package holds the chart's files but not ci/,
names the chart's version and, as appVersion, txnwatch's (the image tag by default), passes
`helm lint --strict`, and renders exactly what the chart's directory renders."""

from __future__ import annotations

import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
import yaml

import txnwatch
from tests.integration.helm_helpers import CHART, ROOT, VALUES, helm, render, template_args, workload
from txnwatch_dev.gotools import tool

pytestmark = [pytest.mark.integration]

CHART_VERSION = "0.3.0"
# beside the values files: the settings the templates adapt the bundled files to
RENDERINGS = {**{name: (path, ()) for name, path in VALUES.items()},
              "mixin": (None, ("config.cluster_label=kcluster", "prometheusRule.routingLabels={namespace}",
                               "prometheusRule.runbookBaseUrl=https://wiki.example/runbooks",
                               "alertmanagerExample.enabled=true", "service.port=9000"))}


@pytest.fixture(scope="module")
def package(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    r = subprocess.run([str(ROOT / "scripts" / "package-chart.sh"), str(out)], capture_output=True, text=True,
                       timeout=300, env={**os.environ, "HELM": str(tool("helm")), "PYTHON": sys.executable})
    assert r.returncode == 0, r.stderr
    path = Path(r.stdout.strip())
    assert path.parent == out and path.is_file(), r.stdout
    return path


def test_the_package_holds_the_chart_and_names_its_versions(package):
    assert package.name == f"txnwatch-{CHART_VERSION}.tgz"
    with tarfile.open(package) as tar:
        names = set(tar.getnames())
    assert {"txnwatch/Chart.yaml", "txnwatch/values.yaml", "txnwatch/values.schema.json", "txnwatch/README.md",
            "txnwatch/files/sentinels.yaml", "txnwatch/files/prometheus-rules.yaml",
            "txnwatch/files/alertmanager.yml"} <= names
    assert len([n for n in names if n.startswith("txnwatch/files/dashboards/")]) == 5
    assert not [n for n in names if n.startswith("txnwatch/ci/")]
    chart = yaml.safe_load(helm("show", "chart", str(package)).stdout)
    assert chart["version"] == CHART_VERSION and chart["appVersion"] == txnwatch.__version__
    assert "0 chart(s) failed" in helm("lint", "--strict", str(package)).stdout


@pytest.mark.parametrize("name", sorted(RENDERINGS))
def test_the_package_renders_what_the_directory_renders(package, name):
    values, sets = RENDERINGS[name]
    from_package = helm(*template_args(values, *sets, chart=package)).stdout
    assert from_package == helm(*template_args(values, *sets, chart=CHART)).stdout
    assert "txnwatch_chart_sentinel" not in from_package and "sentinel.invalid" not in from_package


def test_the_image_tag_defaults_to_the_app_version():
    app_version = yaml.safe_load((CHART / "Chart.yaml").read_text())["appVersion"]
    image = workload(render(None))["spec"]["template"]["spec"]["containers"][0]["image"]
    assert image == f"ghcr.io/txnwatch/txnwatch:{app_version}" and app_version == txnwatch.__version__
    pinned = workload(render(None, "image.tag=0.2.0-rc1"))["spec"]["template"]["spec"]["containers"][0]["image"]
    assert pinned == "ghcr.io/txnwatch/txnwatch:0.2.0-rc1"
