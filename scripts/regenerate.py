#!/usr/bin/env python
"""Regenerate the committed deployment files under deploy/ (or --out DIR):

deploy/grafana/dashboards/*.json             txnwatch.dashboards.generate_dashboards
deploy/grafana/provisioning/{datasources,dashboards}/txnwatch.yaml
deploy/prometheus/rules.yml, prometheusrule.yaml   txnwatch.alerts.generate_alerts
deploy/prometheus/prometheus.yml             a sample scrape config loading rules.yml
deploy/alertmanager/alertmanager.yml         txnwatch.alerts.alertmanager: routes and inhibitions
charts/txnwatch/files/                       the same rules, dashboards and Alertmanager example for the
                                             Helm chart (a chart cannot read files outside itself)

tests/unit/test_deploy_drift.py regenerates into a temporary directory and fails when
the committed files differ.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


SAMPLE_HEADER = ("# Sample Prometheus config for txnwatch (scripts/regenerate.py); adapt targets and\n"
                 "# alertmanagers. The job name must match AlertConfig.exporter_job_selector.\n")


ALERTMANAGER_HEADER = ("# Alertmanager for txnwatch's alerts (scripts/regenerate.py; txnwatch/alerts/alertmanager.py):\n"
                       "# critical to `pager`, the rest to `tickets`, grouped by alert, Kafka cluster and app; a\n"
                       "# cause inhibits its symptoms. Replace the two webhook receivers with yours.\n")


CHART_FILES = ROOT / "charts" / "txnwatch" / "files"


def regenerate(deploy_dir: str | Path, chart_files: str | Path | None = None) -> list[Path]:
    from txnwatch.alerts import generate_alerts
    from txnwatch.alerts.alertmanager import alertmanager_config
    from txnwatch.alerts.rules import dump_yaml, prometheus_config
    from txnwatch.dashboards import generate_dashboards
    from txnwatch.dashboards.build import generate_provisioning

    out = Path(deploy_dir)
    paths = generate_dashboards(out / "grafana" / "dashboards")
    paths += generate_provisioning(out / "grafana" / "provisioning")
    paths += generate_alerts(out / "prometheus")
    sample = out / "prometheus" / "prometheus.yml"
    sample.write_text(dump_yaml(prometheus_config(), header=SAMPLE_HEADER))
    paths.append(sample)
    am = out / "alertmanager" / "alertmanager.yml"
    am.parent.mkdir(parents=True, exist_ok=True)
    am.write_text(dump_yaml(alertmanager_config(), header=ALERTMANAGER_HEADER))
    paths.append(am)
    if chart_files is not None:
        paths += _chart_files(out, Path(chart_files))
    return paths


def _chart_files(deploy: Path, files: Path) -> list[Path]:
    import shutil

    copies = {deploy / "prometheus" / "rules.yml": files / "prometheus-rules.yaml",
              deploy / "alertmanager" / "alertmanager.yml": files / "alertmanager.yml"}
    copies.update({p: files / "dashboards" / p.name for p in sorted((deploy / "grafana" / "dashboards").glob("*.json"))})
    for src, dst in copies.items():
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src, dst)
    return list(copies.values())


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(ROOT / "deploy"), help="deploy directory (default: %(default)s)")
    ap.add_argument("--chart-files", default=str(CHART_FILES), help="the chart's files/ (default: %(default)s)")
    args = ap.parse_args(argv)
    for p in regenerate(args.out, args.chart_files):
        print(p)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
