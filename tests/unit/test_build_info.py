"""txnwatch_build_info: the version written once, and the revision of the build."""

from __future__ import annotations

import subprocess
import tomllib
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

import txnwatch
from txnwatch import __version__
from txnwatch.exporter.serve.collector import ExporterCollector

ROOT = Path(__file__).resolve().parents[2]


def test_the_version_is_written_once():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert "version" not in project and "version" in project["dynamic"]
    assert tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["dynamic"]["version"] == \
        {"attr": "txnwatch.__version__"}


def test_revision_from_the_environment_then_the_checkout(monkeypatch):
    txnwatch.revision.cache_clear()
    monkeypatch.setenv(txnwatch.REVISION_ENV, "abc123")
    assert txnwatch.revision() == "abc123"
    txnwatch.revision.cache_clear()
    monkeypatch.delenv(txnwatch.REVISION_ENV)
    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short=12", "HEAD"], capture_output=True,
                          text=True).stdout.strip()
    assert txnwatch.revision() == (head or "unknown")
    txnwatch.revision.cache_clear()


def test_build_info_series_carries_version_and_revision(monkeypatch):
    txnwatch.revision.cache_clear()
    monkeypatch.setenv(txnwatch.REVISION_ENV, "r1")
    try:
        text = ExporterCollector().exposition(False).decode()
    finally:
        txnwatch.revision.cache_clear()
    [fam] = [f for f in text_string_to_metric_families(text) if f.name == "txnwatch_build_info"]
    assert fam.samples[0].labels["version"] == __version__ and fam.samples[0].labels["revision"] == "r1"
