"""promtool (Debian's `prometheus` package) against the generated rules and dashboards.

Fails, never skips, when promtool is missing: `apt-get install -y prometheus`
(scripts/bootstrap.sh installs it)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from txnwatch.alerts import generate_alerts
from txnwatch.alerts.config import AlertConfig
from txnwatch.dashboards import dashboard_queries

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "deploy" / "prometheus" / "rules.yml"


@pytest.fixture(scope="module")
def promtool() -> str:
    path = shutil.which("promtool")
    assert path, "promtool not found: install Debian's prometheus package (apt-get install -y prometheus)"
    return path


def run(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    return subprocess.run(list(args), cwd=cwd, capture_output=True, text=True, timeout=300)


def test_check_committed_rules(promtool):
    r = run(promtool, "check", "rules", str(RULES))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "SUCCESS" in r.stdout


def test_check_rules_with_selectors_and_overrides(promtool, tmp_path):
    cfg = AlertConfig(cluster_selector='cluster=~"prod-.*"', client_selector='namespace="apps"',
                      spark_selector='namespace="spark"', exporter_job_selector='job=~"txnwatch|txnwatch-.*"',
                      spark_trigger_intervals={"orders": 300, "payments-eu": 30},
                      extra_labels={"team": "data"})
    rules, manifest = generate_alerts(tmp_path, cfg)
    r = run(promtool, "check", "rules", str(rules))
    assert r.returncode == 0, r.stdout + r.stderr
    # the PrometheusRule's spec is a rule file too
    spec = tmp_path / "spec.yml"
    spec.write_text(yaml.safe_dump(yaml.safe_load(manifest.read_text())["spec"]))
    r = run(promtool, "check", "rules", str(spec))
    assert r.returncode == 0, r.stdout + r.stderr


def test_promtool_unit_tests(promtool):
    files = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "tests" / "alerts").glob("*.yml"))
    assert files
    r = run(promtool, "test", "rules", *files)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.count("SUCCESS") == len(files), r.stdout


def test_sample_prometheus_config(promtool):
    r = run(promtool, "check", "config", str(ROOT / "deploy" / "prometheus" / "prometheus.yml"))
    assert r.returncode == 0, r.stdout + r.stderr


def test_every_dashboard_query_parses(promtool, tmp_path):
    queries = dashboard_queries()
    rules = [{"record": f"txnwatch_dashboard_query_{i}", "expr": expr} for i, (_, _, expr) in enumerate(queries)]
    path = tmp_path / "queries.yml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboard-queries", "rules": rules}]}))
    r = run(promtool, "check", "rules", str(path))
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"SUCCESS: {len(queries)} rules found" in r.stdout
