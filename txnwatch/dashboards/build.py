"""Grafana dashboards for txnwatch, defined with grafanalib.

Five dashboards (see `ids.DASHBOARDS`): an overview for 3 a.m., transactions,
partitions & consumers, Spark queries and the exporter's own health. Every panel has a
description, a unit and thresholds; panel ids are fixed in `ids.PANEL_IDS` because
alerts link to them (`viewPanel=<id>`). Queries only use series of the metric
catalogue (`txnwatch.metrics.CATALOG`) and `up`, never recording rules, so the
dashboards work against a Prometheus that does not load txnwatch's rules.

Template variables on every dashboard: datasource, then chained job, instance, cluster and
app, transactional_id, query (plus topic/group on partitions & consumers); all are
multi-value with an "All" of `.*`, used as `label=~"$var"`. Panels are written with the
catalogue's `cluster` label; `dashboard_json` renames it to the configured `cluster_label`.

Over 600 lines on purpose: it is the panel catalogue (about 60 panels, each a few lines
of title, description, queries and thresholds) read top to bottom like the dashboards
themselves; the helpers are at the top, the PromQL shared with the alerts (selectors,
outcomes, fencing errors, the abort ratio) is alerts/promql.py, and what the panels query
is dashboards/queries.py.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from grafanalib._gen import DashboardEncoder
from grafanalib.core import (
    Dashboard,
    DashboardLink,
    Heatmap,
    Stat,
    Table,
    Target,
    Template,
    Templating,
    Time,
    TimeSeries,
    YAxis,
)

from txnwatch.alerts.config import AlertConfig
from txnwatch.alerts.labels import rename_in_promql, rename_in_template
from txnwatch.alerts.promql import ABORTED, COMMITTED, FENCED, abort_ratio, matchers
from txnwatch.dashboards import ids
from txnwatch.dashboards.ids import DashboardRef

# Every panel queries the datasource the `datasource` variable picks, its rates over Grafana's
# $__rate_interval (at least four scrape intervals, whatever the zoom).
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
RATE_INTERVAL = "$__rate_interval"

# Matchers of the template variables, joined by `matchers(...)`; a panel function names the
# selectors it uses most after what they pick (cluster_app = matchers(CLUSTER, APP)). The series
# the exporter serves carry its scrape job and instance (variables of every dashboard), then the
# Kafka cluster.
EXPORTER_TARGET = 'job=~"$job", instance=~"$instance"'
CLUSTER = EXPORTER_TARGET + ', cluster=~"$cluster"'
APP = 'app=~"$app"'
TRANSACTIONAL_ID = 'transactional_id=~"$transactional_id"'
QUERY = 'query=~"$query"'
TOPIC = 'topic=~"$topic"'
GROUP = 'group=~"$group"'
NOT_TRIGGER = 'phase!="triggerExecution"'      # the micro-batch phases, not the whole batch


# ---------------------------------------------------------------- thresholds
# (the values shown on panels follow the alerts': AlertConfig, the file both commands read)
GREEN, YELLOW, ORANGE, RED, BLUE = "green", "yellow", "orange", "red", "blue"


def steps(base: str, *pairs: tuple[float, str]) -> list[dict[str, Any]]:
    """Grafana threshold steps: a base colour, then (value, colour) in ascending order."""
    return [{"color": base, "value": None}] + [{"color": c, "value": v} for v, c in pairs]


# ---------------------------------------------------------------- panels
@dataclass
class Panel:
    """A panel spec: rendered to a grafanalib panel by `render()`."""

    key: str
    title: str
    description: str
    unit: str
    targets: list[tuple[str, str]]          # (expr, legend)
    kind: str = "ts"                       # ts | stat | table | heatmap
    thresholds: list[dict[str, Any]] = field(default_factory=lambda: steps(GREEN))
    w: int = 12
    h: int = 8
    stack: bool = False
    links: list[dict[str, Any]] = field(default_factory=list)
    threshold_style: str = "off"            # ts: off | line | area | line+area
    instant: bool = False


def _targets(p: Panel, fmt: str = "time_series", instant: bool = False) -> list[Target]:
    return [Target(expr=e, legendFormat=lg, refId=chr(ord("A") + i), format=fmt, instant=instant,
                   datasource=DATASOURCE, intervalFactor=1)
            for i, (e, lg) in enumerate(p.targets)]


def render(p: Panel, panel_id: int, x: int, y: int) -> Any:
    grid = {"h": p.h, "w": p.w, "x": x, "y": y}
    common = dict(title=p.title, description=p.description, dataSource=DATASOURCE, id=panel_id, gridPos=grid,
                  links=p.links, thresholds=p.thresholds)
    if p.kind == "ts":
        return TimeSeries(targets=_targets(p), unit=p.unit, fillOpacity=20 if p.stack else 0,
                          stacking={"mode": "normal", "group": "A"} if p.stack else {},
                          legendDisplayMode="table", legendPlacement="bottom",
                          legendCalcs=["lastNotNull", "max"], tooltipMode="multi",
                          thresholdsStyleMode=p.threshold_style, **common)
    if p.kind == "stat":
        return Stat(targets=_targets(p, instant=p.instant), format=p.unit, reduceCalc="lastNotNull",
                    colorMode="background", graphMode="area", textMode="value_and_name", **common)
    if p.kind == "table":
        return Table(targets=_targets(p, fmt="table", instant=True), unit=p.unit,
                     displayMode="color-background", filterable=True,
                     transformations=[{"id": "merge", "options": {}},
                                      {"id": "organize", "options": {"excludeByName": {"Time": True}}}],
                     extraJson={"fieldConfig": {"defaults": {"thresholds": {"mode": "absolute",
                                                                            "steps": p.thresholds}}}},
                     **common)
    if p.kind == "heatmap":
        return Heatmap(targets=_targets(p, fmt="heatmap"), dataFormat="tsbuckets", yAxis=YAxis(format=p.unit),
                       yBucketBound="upper", hideZeroBuckets=True,
                       extraJson={
                           "options": {"calculate": False, "yAxis": {"unit": p.unit, "decimals": 0},
                                       "color": {"mode": "scheme", "scheme": "Oranges", "exponent": 0.5,
                                                 "fill": "dark-orange", "steps": 64},
                                       "cellValues": {"unit": "short"}, "rowsFrame": {"layout": "le"},
                                       "legend": {"show": True},
                                       "tooltip": {"show": True, "yHistogram": True}},
                           "fieldConfig": {"defaults": {"unit": p.unit}},
                       },
                       **common)
    raise ValueError(p.kind)


def link_to(dash: DashboardRef, title: str | None = None) -> dict[str, Any]:
    return {"title": title or f"Open {dash.title}", "targetBlank": False,
            "url": f"/d/{dash.uid}/{dash.slug}?${{__url_time_range}}&${{__all_variables}}"}


# ---------------------------------------------------------------- template variables
def _var(name: str, label: str, query: str) -> Template:
    return Template(name=name, label=label, query={"query": query, "refId": f"{name}-var"},
                    dataSource=DATASOURCE, includeAll=True, multi=True, allValue=".*", default="$__all",
                    refresh=2, sort=1)


def variables(extra: Iterable[Template] = ()) -> Templating:
    return Templating(list=[
        Template(name="datasource", label="Data source", query="prometheus", type="datasource",
                 default="default"),
        # chained: job -> instance -> cluster -> app (the exporter's series carry job and instance)
        _var("job", "Job", "label_values(txnwatch_up, job)"),
        _var("instance", "Instance", 'label_values(txnwatch_up{job=~"$job"}, instance)'),
        _var("cluster", "Cluster", 'label_values(txnwatch_up{job=~"$job", instance=~"$instance"}, cluster)'),
        _var("app", "App", 'label_values({__name__=~"kafka_transactions_total|kafka_transaction_open|'
                           'kafka_producer_transactions_total|kafka_transaction_timeout_headroom_seconds", '
                           'cluster=~"$cluster"}, app)'),
        _var("transactional_id", "Transactional id",
             'label_values({__name__=~"kafka_transaction_timeout_headroom_seconds|'
             'kafka_transactional_id_expiration_headroom_seconds|kafka_producer_transactions_total", '
             'app=~"$app"}, transactional_id)'),
        _var("query", "Spark query", "label_values(spark_streaming_query_active, query)"),
        *extra,
    ])


def quantiles(metric: str, by: str, selector: str, legend: str,
              qs: tuple[str, ...] = ("0.5", "0.95", "0.99")) -> list[tuple[str, str]]:
    return [(f"histogram_quantile({q}, sum by ({by}, le) (rate({metric}_bucket{selector}[{RATE_INTERVAL}])))",
             f"p{float(q) * 100:g} {legend}") for q in qs]


def abort_ratio_targets() -> list[tuple[str, str]]:
    """The abort ratio from the coordinator's log (per cluster/app) and from instrumented
    producers (per app): the same two queries on the overview and the transactions dashboard."""
    return [
        (abort_ratio("kafka_transactions_total", "cluster, app", RATE_INTERVAL,
                     aborted=matchers(CLUSTER, APP, ABORTED), completed=matchers(CLUSTER, APP)),
         "{{cluster}}/{{app}} (broker)"),
        (abort_ratio("kafka_producer_transactions_total", "app", RATE_INTERVAL,
                     aborted=matchers(APP, ABORTED), completed=matchers(APP)),
         "{{app}} (client)"),
    ]


# ---------------------------------------------------------------- dashboards
def overview(cfg: AlertConfig) -> list[Panel]:
    cluster, cluster_app, query = matchers(CLUSTER), matchers(CLUSTER, APP), matchers(QUERY)
    return [
        Panel("open", "Open transactions",
              "Transactions open right now (Ongoing or Prepare*) across the selected clusters and apps. "
              "From the KIP-664 poller (ListTransactions/DescribeTransactions).", "short",
              [(f"sum(kafka_transaction_open{cluster_app})", "open")], kind="stat",
              thresholds=steps(GREEN, (1000, YELLOW)), w=4, h=5, links=[link_to(ids.TRANSACTIONS)]),
        Panel("hanging", "Hanging transactions",
              "Partitions' hanging transactions: open past transaction.max.timeout.ms (+5 min) with no live "
              "coordinator state (kafka-transactions.sh find-hanging), or, without KIP-664, an LSO stalled "
              "below the HWM longer than the hanging threshold. Anything above 0 blocks read_committed "
              "consumers.", "short",
              [(f"sum(kafka_transaction_hanging{cluster})", "hanging")], kind="stat",
              thresholds=steps(GREEN, (1, RED)), w=4, h=5, links=[link_to(ids.PARTITIONS)]),
        Panel("stalled_partitions", "Stalled partitions",
              "Partitions whose last stable offset has been stuck below the high watermark for more than a minute.",
              "short", [(f"sum(kafka_partition_lso_stalled_seconds{cluster} > bool 60)", "stalled")], kind="stat",
              thresholds=steps(GREEN, (1, ORANGE)), w=4, h=5, links=[link_to(ids.PARTITIONS)]),
        Panel("blocked_groups", "Groups behind a stalled LSO",
              "Consumer group partitions with messages past their position on a partition whose LSO is "
              "stalled: read_committed consumers there cannot progress.", "short",
              [(f"count(max by (cluster, group, topic, partition) "
                f"(kafka_consumergroup_read_uncommitted_lag_offsets{cluster}) > 0 "
                f"and on (cluster, topic, partition) (kafka_partition_lso_stalled_seconds{cluster} > 0))",
                "blocked")],
              kind="stat", thresholds=steps(GREEN, (1, ORANGE)), w=4, h=5, links=[link_to(ids.PARTITIONS)]),
        Panel("sources_up", "Exporter sources up",
              "Sources (poller, tap) whose last poll succeeded, out of all sources. Red when any is failing: "
              "the other panels then show stale data.", "percentunit",
              [(f"avg(txnwatch_up{cluster})", "up")], kind="stat",
              thresholds=steps(RED, (0.999, GREEN)), w=4, h=5, links=[link_to(ids.EXPORTER)]),
        Panel("spark_active", "Active Spark queries",
              "Spark Structured Streaming queries currently running (spark_streaming_query_active).", "short",
              [(f"sum(spark_streaming_query_active{query})", "active")], kind="stat",
              thresholds=steps(BLUE), w=4, h=5, links=[link_to(ids.SPARK)]),
        Panel("oldest_age", "Oldest open transaction vs its timeout",
              "Age of the oldest open transaction per app, the smallest remaining timeout headroom of any "
              "open transaction (start + transaction.timeout.ms - now; negative = past its timeout) and the "
              "broker's transaction.max.timeout.ms.", "s",
              [(f"max by (cluster, app) (kafka_transaction_oldest_open_age_seconds{cluster_app})",
                "oldest {{cluster}}/{{app}}"),
               (f"min by (cluster, app) (kafka_transaction_timeout_headroom_seconds{cluster_app})",
                "min headroom {{cluster}}/{{app}}"),
               (f"max by (cluster) (kafka_broker_transaction_max_timeout_seconds{cluster})",
                "max timeout {{cluster}}")],
              thresholds=steps(GREEN, (cfg.headroom_low_seconds, YELLOW)), links=[link_to(ids.TRANSACTIONS)]),
        Panel("abort_ratio", "Abort ratio",
              "Share of transactions that aborted, from the coordinator's log (tap, per cluster/app) and "
              "from instrumented producers (client, per app). The alert fires above "
              f"{cfg.abort_ratio:.0%}.", "percentunit",
              abort_ratio_targets(),
              thresholds=steps(GREEN, (cfg.abort_ratio, RED)), threshold_style="line",
              links=[link_to(ids.TRANSACTIONS)]),
        Panel("fencing_rate", "Fencing rate",
              "Producers fenced per minute: by the coordinator (tap: reason new_instance or timeout) and as "
              "PRODUCER_FENCED / INVALID_PRODUCER_EPOCH errors seen by instrumented producers. An occasional "
              f"fence is normal; the alert fires on a steady rate above {cfg.fencing_per_minute:g}/min.", "cpm",
              [(f"sum by (cluster, app, reason) "
                f"(rate(kafka_transaction_fencing_events_total{cluster_app}[{RATE_INTERVAL}])) * 60",
                "{{cluster}}/{{app}} {{reason}}"),
               (f"sum by (app) (rate(kafka_producer_transaction_errors_total"
                f"{matchers(APP, FENCED)}[{RATE_INTERVAL}])) * 60", "{{app}} (client)")],
              thresholds=steps(GREEN, (cfg.fencing_per_minute, RED)), threshold_style="line",
              links=[link_to(ids.TRANSACTIONS)]),
        Panel("commit_latency", "Commit latency p99",
              "p99 commit latency: coordinator PrepareCommit to CompleteCommit (tap) and the producer's "
              "commit_transaction() call (client).", "s",
              quantiles("kafka_transaction_completion_seconds", "cluster, app", matchers(CLUSTER, APP, COMMITTED),
                        "{{cluster}}/{{app}} (broker)", ("0.99",))
              + quantiles("kafka_producer_transaction_commit_seconds", "app", matchers(APP), "{{app}} (client)",
                          ("0.99",)),
              thresholds=steps(GREEN, (cfg.commit_latency_seconds, RED)), threshold_style="line",
              links=[link_to(ids.TRANSACTIONS)]),
        Panel("spark_behind", "Spark queries behind their sources",
              "Offsets each Spark query is behind the latest offsets of its Kafka sources (summed over their "
              "partitions). Growing means the query does not keep up; see the Spark queries dashboard.", "short",
              [(f"sum by (query, source, topic) (spark_streaming_source_partition_behind_latest_offsets{query})",
                "{{query}} {{topic}}")],
              thresholds=steps(GREEN), w=24, links=[link_to(ids.SPARK)]),
        # --- the transactional canary (opt-in per cluster: `canary:`)
        Panel("canary_success", "Canary: since its last transaction",
              "Seconds since the canary's last round ended as intended (committed, or aborted on purpose). "
              "The canary commits one small transaction to every canary partition each interval (default 10 s): "
              "a value growing past a few intervals means a transaction cannot commit on this cluster right now.",
              "s", [(f"time() - max by (cluster) (txnwatch_canary_last_success_timestamp_seconds{cluster})",
                     "{{cluster}}")],
              kind="stat", thresholds=steps(GREEN, (cfg.canary_failing_seconds, RED)), w=6, h=5),
        Panel("canary_commit", "Canary commit latency p99",
              "p99 of the canary's commit_transaction() call: what any transactional producer of the cluster "
              "pays to commit right now.", "s",
              quantiles("txnwatch_canary_commit_seconds", "cluster", cluster, "{{cluster}}", ("0.99",)),
              thresholds=steps(GREEN, (cfg.commit_latency_seconds, RED)), threshold_style="line", w=6, h=5),
        Panel("canary_visibility", "Canary visibility p99 per partition",
              "p99 from the canary's produce to a read_committed consumer returning the record, per canary "
              "partition (one per broker, each led by a different broker): a slow broker shows on its partition.",
              "s", quantiles("txnwatch_canary_visibility_seconds", "cluster, partition", cluster,
                             "{{cluster}} p{{partition}}", ("0.99",)),
              thresholds=steps(GREEN, (cfg.canary_visibility_seconds, RED)), threshold_style="line", w=6, h=5),
        Panel("canary_failures", "Canary failures and violations",
              "Canary failures per minute by stage and error, and visibility violations (a read_committed "
              "consumer returned an aborted canary record: must stay 0).", "cpm",
              [(f"sum by (cluster, stage, error) "
                f"(rate(txnwatch_canary_failures_total{cluster}[{RATE_INTERVAL}])) * 60",
                "{{cluster}} {{stage}} {{error}}"),
               (f"sum by (cluster) (txnwatch_canary_visibility_violations_total{cluster})",
                "{{cluster}} violations")],
              thresholds=steps(GREEN), w=6, h=5),
    ]


def transactions(cfg: AlertConfig) -> list[Panel]:
    cluster, app, app_id = matchers(CLUSTER), matchers(APP), matchers(APP, TRANSACTIONAL_ID)
    cluster_app, cluster_app_id = matchers(CLUSTER, APP), matchers(CLUSTER, APP, TRANSACTIONAL_ID)
    committed = matchers(CLUSTER, APP, COMMITTED)
    return [
        Panel("commit_latency", "Commit latency (coordinator)",
              "PrepareCommit to CompleteCommit: how long the coordinator takes to write commit markers to "
              "every partition of a transaction (transaction-log tap), quantiles per app.", "s",
              quantiles("kafka_transaction_completion_seconds", "cluster, app", committed, "{{cluster}}/{{app}}"),
              thresholds=steps(GREEN, (cfg.commit_latency_seconds, RED)), threshold_style="line"),
        Panel("client_commit_latency", "Commit latency (producer)",
              "commit_transaction() call latency of instrumented producers and the Spark sink, quantiles per "
              "app; includes flushing the transaction's outstanding messages.", "s",
              quantiles("kafka_producer_transaction_commit_seconds", "app", app, "{{app}}"),
              thresholds=steps(GREEN, (cfg.commit_latency_seconds, RED)), threshold_style="line"),
        Panel("duration", "Transaction duration",
              "Start to completion of transactions: coordinator view (tap, by outcome) and producer view "
              "(begin_transaction() to commit/abort). Compare with transaction.timeout.ms.", "s",
              quantiles("kafka_transaction_duration_seconds", "cluster, app, outcome", cluster_app,
                        "{{cluster}}/{{app}} {{outcome}} (broker)", ("0.5", "0.99"))
              + quantiles("kafka_producer_transaction_duration_seconds", "app, outcome", app,
                          "{{app}} {{outcome}} (client)", ("0.5", "0.99")),
              thresholds=steps(GREEN), w=24),
        Panel("completion_heatmap", "Commit latency heatmap (coordinator)",
              "Distribution of PrepareCommit to CompleteCommit latency over time.", "s",
              [(f"sum by (le) (increase(kafka_transaction_completion_seconds_bucket{committed}[{RATE_INTERVAL}]))",
                "{{le}}")],
              kind="heatmap", w=8),
        Panel("client_commit_heatmap", "Commit latency heatmap (producer)",
              "Distribution of commit_transaction() call latency over time.", "s",
              [(f"sum by (le) (increase(kafka_producer_transaction_commit_seconds_bucket{app}[{RATE_INTERVAL}]))",
                "{{le}}")],
              kind="heatmap", w=8),
        Panel("duration_heatmap", "Transaction duration heatmap",
              "Distribution of transaction durations (producer view) over time.", "s",
              [(f"sum by (le) (increase(kafka_producer_transaction_duration_seconds_bucket{app}[{RATE_INTERVAL}]))",
                "{{le}}")],
              kind="heatmap", w=8),
        Panel("outcomes", "Commits and aborts",
              "Completed transactions per second by outcome: coordinator's log (tap) per cluster/app and "
              "instrumented producers per app.", "ops",
              [(f"sum by (cluster, app, outcome) (rate(kafka_transactions_total{cluster_app}[{RATE_INTERVAL}]))",
                "{{cluster}}/{{app}} {{outcome}} (broker)"),
               (f"sum by (app, outcome) (rate(kafka_producer_transactions_total{app_id}[{RATE_INTERVAL}]))",
                "{{app}} {{outcome}} (client)")],
              thresholds=steps(GREEN), stack=False),
        Panel("abort_ratio", "Abort ratio",
              f"Share of aborted transactions per app. The alert fires above {cfg.abort_ratio:.0%} with at "
              f"least {cfg.abort_ratio_min_transactions:g} transactions in 5 minutes.", "percentunit",
              abort_ratio_targets(),
              thresholds=steps(GREEN, (cfg.abort_ratio, RED)), threshold_style="line"),
        Panel("client_outcomes_by_id", "Transactions by transactional id (top 20)",
              "Transactions per second per transactional id and outcome, from instrumented producers.", "ops",
              [(f"topk(20, sum by (app, transactional_id, outcome) "
                f"(rate(kafka_producer_transactions_total{app_id}[{RATE_INTERVAL}])))",
                "{{transactional_id}} {{outcome}}")],
              thresholds=steps(GREEN), w=24),
        Panel("timeouts", "Timeouts and id expirations",
              "Transactions the coordinator aborted because start + transaction.timeout.ms passed, and "
              "transactional ids it expired after transactional.id.expiration.ms of idleness (tap).", "short",
              [(f"sum by (cluster, app) (increase(kafka_transaction_timeouts_total{cluster_app}[{RATE_INTERVAL}]))",
                "{{cluster}}/{{app}} timeouts"),
               (f"sum by (cluster, app) "
                f"(increase(kafka_transactional_id_expirations_total{cluster_app}[{RATE_INTERVAL}]))",
                "{{cluster}}/{{app}} expired ids")],
              thresholds=steps(GREEN, (1, RED)), w=8),
        Panel("fencing", "Fencing events",
              "Open transactions cut off per minute by reason: new_instance (another instance's "
              "InitProducerId aborted the open transaction of the id: a zombie), timeout (the coordinator "
              "aborted it), operator (kafka-transactions.sh forceTerminateTransaction) or startup_abort (a "
              "Flink sink's start-up), and fencing errors seen by producers. Idle ids taken over are "
              f"re-initialisations, not fences. The alert fires on more than {cfg.fencing_per_minute:g}/min "
              f"sustained for {cfg.fencing_for}.", "cpm",
              [(f"sum by (cluster, app, reason) "
                f"(rate(kafka_transaction_fencing_events_total{cluster_app}[{RATE_INTERVAL}])) * 60",
                "{{cluster}}/{{app}} {{reason}}"),
               (f"sum by (app, transactional_id) (rate(kafka_producer_transaction_errors_total"
                f"{matchers(APP, TRANSACTIONAL_ID, FENCED)}[{RATE_INTERVAL}])) * 60",
                "{{transactional_id}} (client)")],
              thresholds=steps(GREEN, (cfg.fencing_per_minute, RED)), threshold_style="line", w=8),
        Panel("reinits", "Re-initialisations (restart churn)",
              "InitProducerIds per minute that took an idle transactional id over: restarts, tasks moved to "
              "another worker or executor (the Spark sink), a pool's re-init (Flink). Churn, not a fault: "
              "nothing is paged on it; a new instance that cuts an open transaction off is a fence (new_instance).",
              "cpm",
              [(f"sum by (cluster, app) "
                f"(rate(kafka_transactional_id_reinitializations_total{cluster_app}[{RATE_INTERVAL}])) * 60",
                "{{cluster}}/{{app}}")],
              thresholds=steps(GREEN), w=8),
        Panel("producer_errors", "Producer transaction errors",
              "Transaction errors of instrumented producers by librdkafka error name (PRODUCER_FENCED, "
              "INVALID_PRODUCER_EPOCH, INVALID_TRANSACTION_TIMEOUT, ...).", "short",
              [(f"sum by (app, transactional_id, error) "
                f"(increase(kafka_producer_transaction_errors_total{app_id}[{RATE_INTERVAL}]))",
                "{{transactional_id}} {{error}}")],
              thresholds=steps(GREEN, (1, RED)), w=8),
        Panel("open", "Open transactions",
              "Open transactions per app and the age of the oldest (KIP-664 poller).", "short",
              [(f"sum by (cluster, app) (kafka_transaction_open{cluster_app})", "{{cluster}}/{{app}}")],
              thresholds=steps(GREEN)),
        Panel("headroom", "Timeout headroom of open transactions",
              "start + transaction.timeout.ms - now for open transactions, the minimum per transactional id "
              f"(by default an id has its own series once its transaction used half its timeout or has 10 s "
              f"or less left; the app's other open transactions, and ids past the cap, are __other__). Yellow below {cfg.headroom_low_seconds:g}s, red "
              "below 0: past its timeout and not aborted means the transaction hangs.", "s",
              [(f"min by (cluster, app, transactional_id) "
                f"(kafka_transaction_timeout_headroom_seconds{cluster_app_id})",
                "{{cluster}}/{{transactional_id}}")],
              thresholds=steps(RED, (0, YELLOW), (cfg.headroom_low_seconds, GREEN)), threshold_style="line"),
        Panel("two_phase", "Two-phase-commit transactions (KIP-939)",
              "Open two-phase-commit transactions per app and the age of the oldest. They carry the timeout "
              "Integer.MAX_VALUE: the coordinator never aborts them, an external transaction manager commits "
              "or aborts them, and read_committed consumers wait behind them meanwhile. Not in the headroom "
              f"panels. The alert fires when one stays open longer than {cfg.two_phase_max_age_seconds:g}s.", "s",
              [(f"max by (cluster, app) (kafka_transaction_two_phase_oldest_age_seconds{cluster_app})",
                "oldest {{cluster}}/{{app}}"),
               (f"sum by (cluster, app) (kafka_transaction_two_phase_open{cluster_app})",
                "open {{cluster}}/{{app}}")],
              thresholds=steps(GREEN, (cfg.two_phase_max_age_seconds, RED)), threshold_style="line"),
        Panel("client_headroom", "Timeout headroom of completed transactions (producer)",
              "transaction.timeout.ms - duration of each instrumented producer's last transaction, and its "
              "lowest over the dashboard's interval: how close real transactions come to their timeout.", "s",
              [(f"min by (app, transactional_id) (kafka_producer_transaction_timeout_headroom_seconds{app_id})",
                "{{transactional_id}} last"),
               (f"min by (app, transactional_id) (min_over_time(kafka_producer_transaction_timeout_headroom_seconds"
                f"{app_id}[{RATE_INTERVAL}]))", "{{transactional_id}} lowest")],
              thresholds=steps(RED, (0, YELLOW), (cfg.headroom_low_seconds, GREEN)), threshold_style="line"),
        Panel("timeout_vs_cap", "Producer timeout vs broker cap",
              "The broker's transaction.max.timeout.ms against the largest timeout headroom seen per "
              "transactional id (open transactions and instrumented producers; headroom is a lower bound of "
              "the producer's transaction.timeout.ms). A producer above the cap is rejected with "
              "INVALID_TRANSACTION_TIMEOUT (Producer transaction errors panel).", "s",
              [(f"max by (cluster) (kafka_broker_transaction_max_timeout_seconds{cluster})", "cap {{cluster}}"),
               (f"max by (cluster, app, transactional_id) "
                f"(kafka_transaction_timeout_headroom_seconds{cluster_app_id})",
                "open {{transactional_id}}"),
               (f"max by (app, transactional_id) (kafka_producer_transaction_timeout_headroom_seconds"
                f"{app_id})", "client {{transactional_id}}")],
              thresholds=steps(GREEN)),
        Panel("expiration_headroom", "Transactional id expiration headroom",
              "transactional.id.expiration.ms - idle time of idle transactional ids (tap). At 0 the "
              "coordinator expires the id and its producer fails with InvalidPidMappingException. A Flink "
              "KafkaSink's ids (one per checkpoint) are one series per app, __newest__: its newest idle id's.", "s",
              [(f"min by (cluster, app, transactional_id) "
                f"(kafka_transactional_id_expiration_headroom_seconds{cluster_app_id})",
                "{{cluster}}/{{transactional_id}}")],
              thresholds=steps(RED, (cfg.id_expiration_headroom_seconds, GREEN))),
        Panel("transactional_ids", "Transactional ids",
              "Transactional ids in the coordinator's log per app (tap). Ids beyond the per-id series cap "
              "fold into transactional_id=\"__other__\" in the per-id panels.", "short",
              [(f"sum by (cluster, app) (kafka_transactional_ids{cluster_app})", "{{cluster}}/{{app}}")],
              thresholds=steps(GREEN), w=8),
        Panel("epoch_bumps", "Producer epoch bumps",
              "Producer epoch changes seen between polls (KIP-664 poller). Under transaction version 2 every "
              "commit bumps the epoch, so this is not a fencing rate there.", "ops",
              [(f"sum by (cluster, app) (rate(kafka_transaction_epoch_bumps_total{cluster_app}[{RATE_INTERVAL}]))",
                "{{cluster}}/{{app}}")],
              thresholds=steps(GREEN), w=8),
        Panel("broker_configs", "Broker transaction configs",
              "transaction.max.timeout.ms, transactional.id.expiration.ms and producer.id.expiration.ms as "
              "the brokers report them.", "s",
              [(f"max by (cluster) (kafka_broker_transaction_max_timeout_seconds{cluster})",
                "max timeout {{cluster}}"),
               (f"max by (cluster) (kafka_broker_transactional_id_expiration_seconds{cluster})",
                "id expiration {{cluster}}"),
               (f"max by (cluster) (kafka_broker_producer_id_expiration_seconds{cluster})",
                "producer id expiration {{cluster}}")],
              kind="stat", thresholds=steps(BLUE), w=8),
    ]


def partitions(cfg: AlertConfig) -> list[Panel]:
    cluster, cluster_topic = matchers(CLUSTER), matchers(CLUSTER, TOPIC)
    cluster_group_topic = matchers(CLUSTER, GROUP, TOPIC)
    return [
        Panel("hanging_table", "Hanging transactions and stalled LSOs",
              "Partitions with a hanging transaction or a stalled last stable offset: hanging count, how "
              "long the LSO has been stalled, HWM - LSO and the offsets. Confirm with `txnwatch check`; the "
              "hanging transaction starts at the LSO.", "short",
              [(f"sum by (cluster, topic, partition) (kafka_transaction_hanging{cluster_topic})", "hanging"),
               (f"max by (cluster, topic, partition) (kafka_partition_lso_stalled_seconds{cluster_topic}) > 0",
                "stalled s"),
               (f"max by (cluster, topic, partition) (kafka_partition_lso_lag_offsets{cluster_topic}) > 0",
                "lso lag"),
               (f"max by (cluster, topic, partition) (kafka_partition_last_stable_offset{cluster_topic})"
                f" and on (cluster, topic, partition) (kafka_partition_lso_lag_offsets{cluster_topic} > 0)", "lso"),
               (f"max by (cluster, topic, partition) (kafka_partition_high_watermark{cluster_topic})"
                f" and on (cluster, topic, partition) (kafka_partition_lso_lag_offsets{cluster_topic} > 0)", "hwm")],
              kind="table", thresholds=steps(GREEN, (1, RED)), w=24),
        Panel("lso_lag", "LSO lag (HWM - LSO), top 20",
              "Offsets held back by open transactions per partition. Commit/abort markers make this briefly "
              "1; a value that stays up is an open or hanging transaction.", "short",
              [(f"topk(20, max by (cluster, topic, partition) (kafka_partition_lso_lag_offsets{cluster_topic}))",
                "{{topic}}-{{partition}}")],
              thresholds=steps(GREEN)),
        Panel("lso_stalled", "LSO stalled time, top 20",
              "How long each partition's LSO has stayed below its HWM without advancing. Orange from "
              f"{cfg.blocked_lso_stalled_seconds:g}s (consumers blocked), red from "
              f"{cfg.lso_stalled_hanging_seconds:g}s (hanging).", "s",
              [(f"topk(20, max by (cluster, topic, partition) (kafka_partition_lso_stalled_seconds{cluster_topic}))",
                "{{topic}}-{{partition}}")],
              thresholds=steps(GREEN, (cfg.blocked_lso_stalled_seconds, ORANGE),
                               (cfg.lso_stalled_hanging_seconds, RED)),
              threshold_style="line"),
        Panel("group_lag", "Consumer lag: read_committed vs HWM",
              "Group lag against the last stable offset (what a read_committed consumer can still read) and "
              "against the high watermark (what a read_uncommitted one sees). A gap between the two that "
              "does not close is an open transaction holding the group back.", "short",
              [(f"sum by (cluster, group) (kafka_consumergroup_read_committed_lag_offsets{cluster_group_topic})",
                "{{group}} read_committed"),
               (f"sum by (cluster, group) (kafka_consumergroup_read_uncommitted_lag_offsets{cluster_group_topic})",
                "{{group}} read_uncommitted")],
              thresholds=steps(GREEN)),
        Panel("blocked_groups", "Groups blocked behind a stalled LSO",
              "Group partitions with messages past their position (lag against the HWM) on a partition whose "
              "LSO is stalled: the group cannot read past the open transaction.", "short",
              [(f"max by (cluster, group, topic, partition) "
                f"(kafka_consumergroup_read_uncommitted_lag_offsets{cluster_group_topic}) "
                f"and on (cluster, topic, partition) (kafka_partition_lso_stalled_seconds{cluster_topic} > 0)",
                "{{group}} {{topic}}-{{partition}}")],
              thresholds=steps(GREEN, (1, ORANGE))),
        Panel("committed_rate", "Committed offset progress",
              "Per-second advance of each group's committed offsets. Flat at 0 while lag > 0 means the group "
              "is stuck.", "ops",
              [(f"sum by (cluster, group, topic) "
                f"(deriv(kafka_consumergroup_committed_offset{cluster_group_topic}[{RATE_INTERVAL}]))",
                "{{group}} {{topic}}")],
              thresholds=steps(GREEN)),
        Panel("brokers_min_isr", "Transaction log ISR vs its minimum",
              "The smallest ISR among __transaction_state's partitions, the ISR they need "
              "(min.insync.replicas, capped at the replica count), the partitions below it (each blocks "
              "InitProducerId and commits of the transactional ids that hash to it) and the live brokers.", "short",
              [(f"min by (cluster) (kafka_transaction_state_log_partition_isr_replicas{cluster})",
                "smallest ISR {{cluster}}"),
               (f"max by (cluster) (kafka_transaction_state_log_partition_min_isr_replicas{cluster})",
                "min ISR {{cluster}}"),
               (f"max by (cluster) (kafka_transaction_state_log_partitions_below_min_isr{cluster})",
                "partitions below {{cluster}}"),
               (f"max by (cluster) (kafka_cluster_brokers{cluster})", "brokers {{cluster}}")],
              thresholds=steps(GREEN)),
        Panel("hwm_rate", "Write rate (HWM growth), top 20",
              "Offsets appended per second per partition. An LSO stalled while this is above 0 means new "
              "data is invisible to read_committed consumers.", "ops",
              [(f"topk(20, sum by (cluster, topic, partition) "
                f"(deriv(kafka_partition_high_watermark{cluster_topic}[{RATE_INTERVAL}])))",
                "{{topic}}-{{partition}}")],
              thresholds=steps(GREEN)),
    ]


def spark(cfg: AlertConfig) -> list[Panel]:
    query, query_phases, app = matchers(QUERY), matchers(QUERY, NOT_TRIGGER), matchers(APP)
    trig = cfg.spark_trigger_interval_seconds
    return [
        Panel("active", "Active queries",
              "Running streaming queries (1) and terminated ones still known (0).", "short",
              [(f"sum(spark_streaming_query_active{query})", "active")], kind="stat", thresholds=steps(BLUE),
              w=6, h=5),
        Panel("batch_id", "Last batch id", "Last completed micro-batch id per query.", "short",
              [(f"max by (query) (spark_streaming_batch_id{query})", "{{query}}")], kind="stat",
              thresholds=steps(BLUE), w=6, h=5),
        Panel("last_progress", "Time since last progress",
              "Seconds since each query's last progress event. Idle queries report QueryIdleEvents instead; "
              f"the stalled alert fires above {cfg.spark_stalled_seconds:g}s for an active, non-idle query.", "s",
              [(f"time() - max by (query) (spark_streaming_last_progress_timestamp_seconds{query})", "{{query}}")],
              kind="stat", thresholds=steps(GREEN, (trig, YELLOW), (cfg.spark_stalled_seconds, RED)), w=12, h=5),
        Panel("batch_vs_trigger", "Micro-batch duration vs trigger",
              "Mean and p99 micro-batch duration per query. Above the trigger interval "
              f"(default {trig:g}s, the line) the query falls behind its sources.", "s",
              [(f"sum by (query) (rate(spark_streaming_batch_duration_seconds_sum{query}[{RATE_INTERVAL}])) / "
                f"sum by (query) (rate(spark_streaming_batch_duration_seconds_count{query}[{RATE_INTERVAL}]))",
                "mean {{query}}")]
              + quantiles("spark_streaming_batch_duration_seconds", "query", query, "{{query}}", ("0.99",)),
              thresholds=steps(GREEN, (trig, RED)), threshold_style="line"),
        Panel("phases", "Micro-batch phases (mean per batch)",
              "Mean time per micro-batch in each durationMs phase (addBatch, getBatch, latestOffset, "
              "walCommit, commitOffsets, queryPlanning, ...), stacked. triggerExecution is the whole batch "
              "and is left out.", "s",
              [(f"sum by (query, phase) "
                f"(rate(spark_streaming_batch_phase_seconds_sum{query_phases}[{RATE_INTERVAL}]))"
                f" / sum by (query, phase) (rate(spark_streaming_batch_phase_seconds_count"
                f"{query_phases}[{RATE_INTERVAL}]))", "{{query}} {{phase}}")],
              thresholds=steps(GREEN), stack=True),
        Panel("commit", "Batch commit time",
              "walCommit + commitOffsets per micro-batch: the checkpoint's cost, quantiles per query.", "s",
              quantiles("spark_streaming_commit_seconds", "query", query, "{{query}}", ("0.5", "0.99")),
              thresholds=steps(GREEN)),
        Panel("rates", "Input vs processed rate",
              "Rows per second arriving (input), and the rate the micro-batches process them at (input rows "
              "over the time spent in batches). Processed below input for long means the query falls behind.",
              "suffix: rows/s",
              [(f"sum by (query) (rate(spark_streaming_input_rows_total{query}[{RATE_INTERVAL}]))",
                "input {{query}}"),
               (f"sum by (query) (rate(spark_streaming_input_rows_total{query}[{RATE_INTERVAL}])) / "
                f"sum by (query) (rate(spark_streaming_batch_duration_seconds_sum{query}[{RATE_INTERVAL}]))",
                "processed {{query}}")],
              thresholds=steps(GREEN)),
        Panel("source_lag", "Source offsets behind latest",
              "Offsets behind the latest available per source and topic: the sum and the largest over the "
              "topic's partitions (latestOffset - endOffset of the last micro-batch).", "short",
              [(f"sum by (query, source, topic) (spark_streaming_source_partition_behind_latest_offsets{query})",
                "{{query}} {{topic}} total"),
               (f"max by (query, source, topic) (spark_streaming_source_partition_behind_latest_offsets{query})",
                "{{query}} {{topic}} max")],
              thresholds=steps(GREEN)),
        Panel("partition_lag", "Offsets behind latest per partition, top 20",
              "latestOffset - endOffset of the last micro-batch per Kafka partition. A read_committed "
              "query's latest is the partition's last stable offset: 0 here does not mean it sees everything "
              "(see the next panel).",
              "short",
              [(f"topk(20, max by (query, topic, partition) "
                f"(spark_streaming_source_partition_behind_latest_offsets{query}))",
                "{{query}} {{topic}}-{{partition}}")],
              thresholds=steps(GREEN), w=12),
        Panel("blocked", "Blocked by an open transaction",
              "Partitions a query has read up to the last stable offset while an open transaction holds that "
              "LSO below the high watermark: how long the LSO has been stalled. Computed by the exporter "
              "from the listener's read positions and the poller's offsets; above "
              f"{cfg.spark_blocked_seconds:g}s fires SparkStreamingQueryBlockedByOpenTransaction.", "s",
              [(f"max by (cluster, query, topic, partition) "
                f"(spark_streaming_source_blocked_seconds{matchers(CLUSTER, QUERY)})",
                "{{query}} {{cluster}} {{topic}}-{{partition}}")],
              thresholds=steps(GREEN, (cfg.spark_blocked_seconds, RED)), w=12),
        Panel("state_rows", "State store rows",
              "Rows in each stateful operator's state store (stateful queries only).", "short",
              [(f"sum by (query, operator) (spark_streaming_state_rows{query})", "{{query}} {{operator}}")],
              thresholds=steps(GREEN), w=8),
        Panel("state_memory", "State store memory",
              "Memory used by each stateful operator's state store (stateful queries only).", "bytes",
              [(f"sum by (query, operator) (spark_streaming_state_memory_bytes{query})", "{{query}} {{operator}}")],
              thresholds=steps(GREEN), w=8),
        Panel("watermark", "Watermark delay",
              "Progress timestamp - event-time watermark (queries with a watermark only): how far event time lags.",
              "s", [(f"max by (query) (spark_streaming_watermark_delay_seconds{query})", "{{query}}")],
              thresholds=steps(GREEN), w=8),
        Panel("terminations", "Terminations by error class",
              "Query terminations in the interval by error class (none = clean stop). Any other class fires "
              "SparkStreamingQueryFailed.", "short",
              [(f"sum by (query, error_class) "
                f"(increase(spark_streaming_query_terminations_total{query}[{RATE_INTERVAL}]))",
                "{{query}} {{error_class}}")],
              thresholds=steps(GREEN, (1, RED))),
        Panel("sink_commit", "Kafka sink transactions (producer)",
              "What the queries' Kafka transactions cost: commit_transaction() p99 and transactions per "
              "second of the exactly-once sink, per app (the sink name).", "s",
              quantiles("kafka_producer_transaction_commit_seconds", "app", app, "{{app}}", ("0.99",))
              + quantiles("kafka_producer_transaction_duration_seconds", "app", app, "duration {{app}}", ("0.99",)),
              thresholds=steps(GREEN, (cfg.commit_latency_seconds, RED)), threshold_style="line"),
        Panel("idle", "Idle events",
              "QueryIdleEvents per minute: the query is running but its sources have no new data.", "cpm",
              [(f"sum by (query) (rate(spark_streaming_idle_events_total{query}[{RATE_INTERVAL}])) * 60",
                "{{query}}")],
              thresholds=steps(GREEN), w=24),
    ]


def exporter(cfg: AlertConfig) -> list[Panel]:
    cluster = matchers(CLUSTER)
    return [
        Panel("scrape_up", "Exporter scrape up",
              "1 when Prometheus could scrape the exporter (up). 0 pages as TxnwatchExporterDown.", "short",
              [(f"up{matchers(EXPORTER_TARGET)}", "{{instance}}")], thresholds=steps(RED, (1, GREEN)), w=8),
        Panel("sources_up", "Sources up",
              "1 when the source's last poll succeeded (poller: admin API; tap: transaction-log reader). 0 for "
              f"{cfg.source_failing_for} fires TxnwatchSourceFailing.", "short",
              [(f"min by (cluster, source) (txnwatch_up{cluster})", "{{cluster}} {{source}}")],
              thresholds=steps(RED, (1, GREEN)), w=8),
        Panel("since_success", "Time since last successful poll",
              "Seconds since each source's last successful poll: how stale the data is.", "s",
              [(f"time() - max by (cluster, source) (txnwatch_last_success_timestamp_seconds{cluster})",
                "{{cluster}} {{source}}")],
              thresholds=steps(GREEN, (60, YELLOW), (300, RED)), w=8),
        Panel("poll_duration", "Poll duration",
              "Duration of each source's last poll. Near the poll interval means polls run back to back.", "s",
              [(f"max by (cluster, source) (txnwatch_poll_duration_seconds{cluster})", "{{cluster}} {{source}}")],
              thresholds=steps(GREEN, (10, YELLOW), (30, RED))),
        Panel("poll_errors", "Poll errors by cause",
              "Poll errors per source and cause in the interval (timeouts, authentication, unknown topics, ...).",
              "short",
              [(f"sum by (cluster, source, cause) (increase(txnwatch_poll_errors_total{cluster}[{RATE_INTERVAL}]))",
                "{{cluster}} {{source}} {{cause}}")],
              thresholds=steps(GREEN, (1, RED))),
        Panel("capabilities", "Capabilities",
              "APIs each cluster supports (1) or lacks (0): without KIP-664 the poller falls back to "
              "LSO-based hanging detection and has no open-transaction or headroom series.", "short",
              [(f"max by (cluster, api) (txnwatch_capability{cluster})", "{{cluster}} {{api}}")],
              kind="stat", thresholds=steps(ORANGE, (1, GREEN))),
        Panel("series_dropped", "Series folded or dropped",
              "Series folded into transactional_id=\"__other__\" by the per-id cap, or dropped as invalid, "
              "per second.", "ops",
              [(f"sum by (cluster, metric, reason) (rate(txnwatch_series_dropped_total{cluster}[{RATE_INTERVAL}]))",
                "{{metric}} {{reason}}")],
              thresholds=steps(GREEN)),
        Panel("series", "Series exported, largest families",
              "Series each exporter's scrape carries, for its ten largest metric families (txnwatch_series): "
              "what to watch against the series budget your Prometheus takes from one target.", "short",
              [(f"topk(10, max by (instance, family) (txnwatch_series{matchers(EXPORTER_TARGET)}))",
                "{{instance}} {{family}}")],
              thresholds=steps(GREEN)),
        Panel("build", "Build", "txnwatch version and Python version of each exporter.", "short",
              [(f"max by (instance, version, revision, python) (txnwatch_build_info{matchers(EXPORTER_TARGET)})",
                "{{instance}} {{version}} {{revision}}")],
              kind="stat", thresholds=steps(BLUE), instant=True),
    ]


DEFINITIONS = {
    ids.OVERVIEW.uid: (overview, "At a glance: open and hanging transactions, stalled partitions, abort ratio, "
                                 "fencing, commit latency and Spark queries.", ()),
    ids.TRANSACTIONS.uid: (transactions, "Transaction latency, durations, outcomes, fencing, timeouts and "
                                         "headroom per app and transactional id.", ()),
    ids.PARTITIONS.uid: (partitions, "Last stable offsets, stalls, hanging transactions and the read_committed "
                                     "consumers behind them.",
                         (_var("topic", "Topic", 'label_values(kafka_partition_last_stable_offset{cluster=~"$cluster"}, topic)'),
                          _var("group", "Consumer group",
                               'label_values(kafka_consumergroup_committed_offset{cluster=~"$cluster"}, group)'))),
    ids.SPARK.uid: (spark, "Spark Structured Streaming queries: batch phases, commit time, rates, source lag, state "
                           "and the cost of their Kafka transactions.", ()),
    ids.EXPORTER.uid: (exporter, "txnwatch's own health: scrapes, sources, poll errors, capabilities and caps.", ()),
}


def _layout(panels: list[Panel], dash: DashboardRef) -> list[Any]:
    out, x, y, row_h = [], 0, 0, 0
    known = ids.PANEL_IDS[dash.uid]
    if {p.key for p in panels} != set(known):
        raise ValueError(f"{dash.uid}: panels {sorted(p.key for p in panels)} != ids {sorted(known)}")
    for p in panels:
        if x + p.w > 24:
            x, y, row_h = 0, y + row_h, 0
        out.append(render(p, known[p.key], x, y))
        x += p.w
        row_h = max(row_h, p.h)
    return out


def dashboard(dash: DashboardRef, cfg: AlertConfig | None = None) -> Dashboard:
    build, description, extra = DEFINITIONS[dash.uid]
    return Dashboard(
        title=dash.title, uid=dash.uid, description=description, tags=["txnwatch"],
        timezone="browser", time=Time("now-1h", "now"), refresh="30s", schemaVersion=39,
        graphTooltip=1, editable=True,
        templating=variables(extra),
        links=[DashboardLink(title="txnwatch", type="dashboards", tags=["txnwatch"], asDropdown=True,
                             includeVars=True, keepTime=True)],
        panels=_layout(build(cfg or AlertConfig()), dash),
    )


def dashboard_json(dash: DashboardRef, cfg: AlertConfig | None = None) -> dict[str, Any]:
    cfg = cfg or AlertConfig()
    out = json.loads(json.dumps(dashboard(dash, cfg).to_json_data(), cls=DashboardEncoder))
    label = cfg.cluster_label      # panels are written with the catalogue's `cluster`
    for var in out["templating"]["list"]:
        if var.get("includeAll"):
            var["current"] = {"selected": True, "text": ["All"], "value": ["$__all"]}
        if isinstance(var.get("query"), dict):
            var["query"]["query"] = rename_in_promql(var["query"]["query"], label)
    for panel in out["panels"]:
        for t in panel.get("targets", []):
            t["expr"] = rename_in_promql(t["expr"], label)
            if "query" in t:
                t["query"] = rename_in_promql(t["query"], label)
            t["legendFormat"] = rename_in_template(t.get("legendFormat", ""), label)
    return out


PROMETHEUS_URL = "http://localhost:9090"


def generate_provisioning(out_dir: str | Path, prometheus_url: str = PROMETHEUS_URL,
                          dashboards_path: str = "/var/lib/grafana/dashboards/txnwatch") -> list[Path]:
    """Grafana provisioning: a dashboard provider reading the generated JSON from
    `dashboards_path` (copy deploy/grafana/dashboards there) into a folder of its own, and, for
    a Grafana of its own (the demo's), a Prometheus datasource. That one never claims the
    default or a common name, so it cannot clash with an existing Grafana's: there, leave it
    out; the dashboards pick their datasource from a variable."""
    import yaml

    out = Path(out_dir)
    (out / "datasources").mkdir(parents=True, exist_ok=True)
    (out / "dashboards").mkdir(parents=True, exist_ok=True)
    header = "# Generated by txnwatch (scripts/regenerate.py); do not edit.\n"
    ds_header = header + ("# For a Grafana of txnwatch's own (the demo's). An existing Grafana keeps its datasources:\n"
                          "# leave this file out, the dashboards select theirs with the `datasource` variable.\n")
    ds = {"apiVersion": 1, "datasources": [{
        "name": "txnwatch-demo-prometheus", "type": "prometheus", "uid": "txnwatch-demo-prometheus",
        "access": "proxy", "url": prometheus_url, "isDefault": False, "editable": True,
        "jsonData": {"timeInterval": "15s"}}]}
    provider = {"apiVersion": 1, "providers": [{
        "name": "txnwatch", "orgId": 1, "folder": "txnwatch", "folderUid": "txnwatch", "type": "file",
        "disableDeletion": False, "allowUiUpdates": False, "updateIntervalSeconds": 60,
        "options": {"path": dashboards_path, "foldersFromFilesStructure": False}}]}
    paths = [out / "datasources" / "txnwatch.yaml", out / "dashboards" / "txnwatch.yaml"]
    for path, head, obj in zip(paths, (ds_header, header), (ds, provider), strict=True):
        path.write_text(head + yaml.safe_dump(obj, sort_keys=False))
    return paths


def generate_dashboards(out_dir: str | Path, cfg: AlertConfig | None = None) -> list[Path]:
    """Write one Grafana dashboard JSON file per dashboard into out_dir (thresholds and
    texts from `cfg`, the alerts' config)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for dash in ids.DASHBOARDS:
        path = out / dash.file
        path.write_text(json.dumps(dashboard_json(dash, cfg), indent=2, sort_keys=True) + "\n")
        paths.append(path)
    return paths
