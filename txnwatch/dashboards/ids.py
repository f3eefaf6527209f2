"""Stable dashboard uids and panel ids.

Alerts link to panels (`dashboard_url` ... `viewPanel=<id>`), so panel ids are fixed
here instead of being assigned by position: moving a panel never breaks an alert link.
This module imports nothing from txnwatch so that both `txnwatch.dashboards` and
`txnwatch.alerts` can use it.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class DashboardRef:
    uid: str
    title: str
    file: str

    @property
    def slug(self) -> str:
        return self.uid


OVERVIEW = DashboardRef("txnwatch-overview", "txnwatch / Overview", "overview.json")
TRANSACTIONS = DashboardRef("txnwatch-transactions", "txnwatch / Transactions", "transactions.json")
PARTITIONS = DashboardRef("txnwatch-partitions", "txnwatch / Partitions & consumers", "partitions.json")
SPARK = DashboardRef("txnwatch-spark", "txnwatch / Spark queries", "spark.json")
EXPORTER = DashboardRef("txnwatch-exporter", "txnwatch / Exporter health", "exporter.json")

DASHBOARDS: tuple[DashboardRef, ...] = (OVERVIEW, TRANSACTIONS, PARTITIONS, SPARK, EXPORTER)

# Panel ids per dashboard uid: key -> id. Keys are what alerts refer to.
PANEL_IDS: dict[str, dict[str, int]] = {
    OVERVIEW.uid: {
        "open": 1, "hanging": 2, "stalled_partitions": 3, "blocked_groups": 4, "sources_up": 5,
        "spark_active": 6, "oldest_age": 7, "abort_ratio": 8, "fencing_rate": 9,
        "commit_latency": 10, "spark_behind": 11,
        "canary_success": 12, "canary_commit": 13, "canary_visibility": 14, "canary_failures": 15,
    },
    TRANSACTIONS.uid: {
        "commit_latency": 1, "client_commit_latency": 2, "duration": 3,
        "completion_heatmap": 4, "client_commit_heatmap": 5, "duration_heatmap": 6,
        "outcomes": 7, "abort_ratio": 8, "client_outcomes_by_id": 9, "timeouts": 10,
        "fencing": 11, "producer_errors": 12, "open": 13, "headroom": 14, "client_headroom": 15,
        "timeout_vs_cap": 16, "expiration_headroom": 17, "transactional_ids": 18,
        "epoch_bumps": 19, "broker_configs": 20, "two_phase": 21, "reinits": 22,
    },
    PARTITIONS.uid: {
        "hanging_table": 1, "lso_lag": 2, "lso_stalled": 3, "group_lag": 4, "blocked_groups": 5,
        "committed_rate": 6, "brokers_min_isr": 7, "hwm_rate": 8,
    },
    SPARK.uid: {
        "active": 1, "batch_id": 2, "last_progress": 3, "batch_vs_trigger": 4, "phases": 5,
        "commit": 6, "rates": 7, "source_lag": 8, "state_rows": 9, "state_memory": 10,
        "watermark": 11, "terminations": 12, "sink_commit": 13, "idle": 14,
        "blocked": 15, "partition_lag": 16,
    },
    EXPORTER.uid: {
        "scrape_up": 1, "sources_up": 2, "since_success": 3, "poll_duration": 4, "poll_errors": 5,
        "capabilities": 6, "series_dropped": 7, "build": 8, "series": 9,
    },
}


def panel_id(dashboard: DashboardRef, key: str) -> int:
    return PANEL_IDS[dashboard.uid][key]
