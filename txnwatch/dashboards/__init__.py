"""Grafana dashboards for txnwatch (grafanalib definitions in `txnwatch.dashboards.build`).

Public API (loaded lazily, so `txnwatch.alerts` can import `txnwatch.dashboards.ids`
without pulling grafanalib in):
- `generate_dashboards(out_dir) -> list[Path]`
- `dashboard_queries() -> list[(dashboard_title, panel_title, expr)]`, variables match-all
- `FAULT_ONLY_PANELS` (panels with data only under a fault), `CONDITIONAL_PANELS` (only for
  some workloads) and `query_requirements(expr)` (kip664, broker_configs, tap, client,
  spark: what a setup must provide for a query to have data)
"""

from __future__ import annotations

from typing import Any

_LAZY = {"generate_dashboards", "dashboard_queries", "FAULT_ONLY_PANELS", "CONDITIONAL_PANELS",
         "dashboard_json", "expr_sources", "substitute_variables", "query_requirements"}

__all__ = sorted(_LAZY)


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        from txnwatch.dashboards import build

        return getattr(build, name)
    raise AttributeError(name)
