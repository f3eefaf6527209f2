"""The wheel is the product only: every module of `txnwatch` and its data, and none of the
test and demo harness (`txnwatch_dev`), built by pip from a copy of the checkout that has
the harness beside the package, as a checkout does."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]


def test_the_wheel_holds_the_package_and_no_harness(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    for tree in ("txnwatch", "txnwatch_dev"):
        shutil.copytree(ROOT / tree, src / tree, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    out = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp_path / "dist"),
                          str(src)], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout + out.stderr
    (wheel,) = (tmp_path / "dist").glob("txnwatch-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())

    harness = sorted(n for n in names if n.startswith("txnwatch_dev/") or "/devtools/" in n)
    assert not harness, f"harness modules in the wheel: {harness}"
    tops = {n.split("/")[0] for n in names}
    assert tops == {"txnwatch", wheel.name.split("-py3")[0] + ".dist-info"}, tops
    modules = {p.relative_to(ROOT).as_posix() for p in (ROOT / "txnwatch").rglob("*.py")}
    assert modules <= names, sorted(modules - names)
    assert "txnwatch/exporter/spark/openapi-ingest.yaml" in names
