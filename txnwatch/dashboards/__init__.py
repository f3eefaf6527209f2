"""Grafana dashboards for txnwatch (grafanalib definitions in `txnwatch.dashboards.build`,
what their panels query in `txnwatch.dashboards.queries`).

Public API (loaded lazily, so `txnwatch.alerts` can import `txnwatch.dashboards.ids`
without pulling grafanalib in):
- `generate_dashboards(out_dir) -> list[Path]`
- `dashboard_queries() -> list[(dashboard_title, panel_title, expr)]`, variables match-all
- `FAULT_ONLY_PANELS` (panels with data only under a fault), `CONDITIONAL_PANELS` (only for
  some workloads) and `query_requirements(expr)` (kip664, broker_configs, tap, client,
  spark: what a setup must provide for a query to have data)
"""

from __future__ import annotations

import importlib
from typing import Any

_LAZY = {"generate_dashboards": "build", "dashboard_json": "build",
         "dashboard_queries": "queries", "FAULT_ONLY_PANELS": "queries", "CONDITIONAL_PANELS": "queries",
         "expr_sources": "queries", "substitute_variables": "queries", "query_requirements": "queries"}

__all__ = sorted(_LAZY)


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(f"txnwatch.dashboards.{_LAZY[name]}"), name)
    raise AttributeError(name)
