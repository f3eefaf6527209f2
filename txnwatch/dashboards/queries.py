"""What the dashboards ask of Prometheus, for the tests and the end-to-end checks: every
panel's query with its variables filled in, which panels have data only under a fault or
a particular workload, and what a setup must provide for a query to have data."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

from txnwatch.dashboards import ids
from txnwatch.dashboards.build import dashboard_json
from txnwatch.dashboards.names import metric_names, source_of

# Panels that only have data while something is wrong (dashboard title, panel title):
# counters born on the first event, or queries filtered to the unhealthy (`> 0`).
FAULT_ONLY_PANELS: list[tuple[str, str]] = [
    (ids.OVERVIEW.title, "Groups behind a stalled LSO"),
    (ids.OVERVIEW.title, "Fencing rate"),
    (ids.OVERVIEW.title, "Canary failures and violations"),
    (ids.TRANSACTIONS.title, "Timeouts and id expirations"),
    (ids.TRANSACTIONS.title, "Fencing events"),
    (ids.TRANSACTIONS.title, "Producer transaction errors"),
    (ids.PARTITIONS.title, "Hanging transactions and stalled LSOs"),
    (ids.PARTITIONS.title, "Groups blocked behind a stalled LSO"),
    (ids.SPARK.title, "Terminations by error class"),
    (ids.SPARK.title, "Blocked by an open transaction"),
    (ids.EXPORTER.title, "Poll errors by cause"),
    (ids.EXPORTER.title, "Series folded or dropped"),
]

# Panels that need a particular workload (not a fault): reason per panel.
CONDITIONAL_PANELS: dict[tuple[str, str], str] = {
    (ids.SPARK.title, "State store rows"): "a stateful query",
    (ids.SPARK.title, "State store memory"): "a stateful query",
    (ids.SPARK.title, "Watermark delay"): "a query with a watermark",
    (ids.SPARK.title, "Idle events"): "an idle query (no new data)",
    (ids.TRANSACTIONS.title, "Two-phase-commit transactions (KIP-939)"): "an open two-phase-commit transaction",
}

# What a setup must provide for a query to have data (see `query_requirements`).
KIP664_SERIES = frozenset({"kafka_transaction_open", "kafka_transaction_oldest_open_age_seconds",
                           "kafka_transaction_timeout_headroom_seconds", "kafka_transaction_epoch_bumps_total"})
BROKER_CONFIG_SERIES = frozenset({"kafka_broker_transaction_max_timeout_seconds",
                                  "kafka_broker_transactional_id_expiration_seconds",
                                  "kafka_broker_producer_id_expiration_seconds",
                                  "kafka_broker_transaction_state_log_min_isr_replicas",
                                  "kafka_broker_transaction_state_log_replication_factor",
                                  "kafka_topic_retention_seconds"})


def query_requirements(expr: str) -> frozenset[str]:
    """What must exist for `expr` to return data, beyond the exporter's poller:
    "kip664" (broker with the KIP-664 admin APIs), "broker_configs" (DescribeConfigs
    values), "tap" (transaction-log tap), "client" (instrumented producer / Spark sink),
    "spark" (the Spark listener), "canary" (a cluster with `canary:` on)."""
    out = set()
    for name in metric_names(expr):
        if name in KIP664_SERIES:
            out.add("kip664")
        elif name in BROKER_CONFIG_SERIES:
            out.add("broker_configs")
        elif source_of(name) in ("tap", "client", "spark", "canary"):
            out.add(source_of(name))
    return frozenset(out)


VAR_RE = re.compile(r"\$(?:\{(\w+)\}|(\w+))")


def substitute_variables(expr: str, rate_interval: str = "1m", values: Mapping[str, str] | None = None) -> str:
    """Grafana variables -> match-all values (or the regular expression `values` gives a
    variable), so an expr can be sent to Prometheus directly."""
    def sub(m: re.Match) -> str:
        name = m.group(1) or m.group(2)
        if name in ("__rate_interval", "__interval", "__range"):
            return rate_interval
        return (values or {}).get(name, ".*")
    return VAR_RE.sub(sub, expr)


def iter_panels(dash_json: dict[str, Any]) -> Iterable[dict[str, Any]]:
    for p in dash_json.get("panels", []):
        yield p
        yield from p.get("panels", []) or []


def dashboard_queries(rate_interval: str = "1m", values: Mapping[str, str] | None = None) -> list[tuple[str, str, str]]:
    """(dashboard title, panel title, expr) for every target of every panel, with template
    variables replaced by match-all (`=~".*"`, or `values`) and $__rate_interval by `rate_interval`."""
    out = []
    for dash in ids.DASHBOARDS:
        dj = dashboard_json(dash)
        for p in iter_panels(dj):
            for t in p.get("targets", []):
                out.append((dj["title"], p["title"], substitute_variables(t["expr"], rate_interval, values)))
    return out


def expr_sources(expr: str) -> set[str]:
    """Catalogue sources (exporter, tap, client, spark, self) of the series an expr reads;
    `up` counts as "prometheus"."""
    return {source_of(n) for n in metric_names(expr)}
