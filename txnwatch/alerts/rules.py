"""Prometheus alerting and recording rules for txnwatch, generated from a small config.

`AlertConfig` plays the role of a monitoring mixin's `_config`: thresholds, `for`
durations, label selectors (including a cluster selector for a Prometheus that holds
many clusters) and the base URLs of Grafana and the runbooks. `rule_groups(config)`
builds the rule groups; `generate_alerts(out_dir, config)` writes

- `rules.yml`: a Prometheus rule file (`rule_files:`), and
- `prometheusrule.yaml`: the same groups as a prometheus-operator PrometheusRule.

Every alert carries `severity`, a `summary`, a `description` quoting the value and
`runbook` (docs/runbooks/<AlertName>.md); with the config's base URLs also `runbook_url`
(<base>/<AlertName>.md) and `dashboard_url` (the Grafana panel that explains it,
`viewPanel=<id>`, with the alert's cluster/query as dashboard variables).

Which series each alert can use, and the limits of what they express, are written
next to each rule; docs/runbooks/<AlertName>.md says what to do. Rules are written with
the catalogue's `cluster` label and renamed to `cluster_label` by `rule_groups`
(alerts/labels.py), the user's selectors kept as written.

Over 600 lines on purpose: it is the rule catalogue (19 alerts and their recording rules,
each with its expression, thresholds and the texts an on-call reads), read top to bottom
by source; its helpers are at the top, the PromQL it shares with the dashboards (selectors,
outcomes, fencing errors, the abort ratio) in alerts/promql.py.
"""

from __future__ import annotations

import re
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from txnwatch.alerts.config import QUANTILES, SELECTORS, AlertConfig
from txnwatch.alerts.labels import mask_selectors, rename_in_promql, rename_in_template
from txnwatch.alerts.promql import ABORTED, COMMITTED, FENCED, abort_ratio, matchers
from txnwatch.apps import CANARY_APP
from txnwatch.dashboards import ids
from txnwatch.dashboards.ids import DashboardRef
from txnwatch.metrics import ALIVE_WITHIN_SECONDS
from txnwatch.trigger_modes import LONG_BATCH_MODES

INVALID_TIMEOUT = 'error="INVALID_TRANSACTION_TIMEOUT"'
FAILED = 'error_class!="none"'


# ---------------------------------------------------------------- helpers
def _num(x: float) -> str:
    return f"{x:g}"


def _expr(text: str) -> str:
    return textwrap.dedent(text).strip()


def _signal(expr: str, signal: str) -> str:
    """Tag one branch of an `or` with a `signal` label (empty-regex label_replace)."""
    body = textwrap.indent(expr, "  ")
    return f'label_replace(\n{body},\n  "signal", "{signal}", "__name__", ".*"\n)'


def _new_or_increased(metric: str, by: str, window: str) -> str:
    """A counter that increased within `window`, or appeared within it already above 0
    (increase() needs two samples, so a series born at 1 would otherwise never count)."""
    return (f"(sum by ({by}) (increase({metric}[{window}])) > 0)\n"
            f"or\n"
            f"((sum by ({by}) ({metric}) > 0) unless sum by ({by}) ({metric} offset {window}))")


def _sign_of_life(cfg: AlertConfig) -> str:
    """A template sentence on the producer of the alert's transactional id: alive while its last
    sign of life (the newer of the coordinator's last change and its last append, the two series
    of the id) is at most ALIVE_WITHIN_SECONDS old, as the page and `txnwatch check` word it. A
    producer streaming into a long transaction changes no coordinator state: its appends say it
    lives. Nothing is said when neither series is there (an id folded into __other__)."""
    query = (f'min({{__name__=~"kafka_transaction_state_unchanged_seconds|kafka_transaction_last_append_age_seconds",'
             f'{cfg.cluster_label}=%q,app=%q,transactional_id=%q}})')
    return ("{{ with printf `" + query + "` $labels.cluster $labels.app $labels.transactional_id | query }}"
            "{{ $s := . | first | value }}"
            f"{{{{ if le $s {ALIVE_WITHIN_SECONDS:.1f} }}}}"
            " Its producer is alive, slow (last sign of life {{ $s | humanizeDuration }} ago)."
            "{{ else }}"
            " No sign of life from its producer for {{ $s | humanizeDuration }}."
            "{{ end }}{{ end }}")


RUNBOOK_DIR = "docs/runbooks"      # in the txnwatch repository
# a partition in an alert's words; at granularity topic the exporter sums a topic's partitions
# (partition="all"), and the alert names the topic
PARTITION_WORDS = ('{{ $labels.topic }}{{ if eq $labels.partition "all" }} (one of its partitions: the exporter '
                   'sums them per topic){{ else }}-{{ $labels.partition }}{{ end }}')
VAR_CLUSTER = "{{ with $labels.cluster }}&var-cluster={{ . }}{{ end }}"
VAR_APP = "{{ with $labels.app }}&var-app={{ . }}{{ end }}"
VAR_QUERY = "{{ with $labels.query }}&var-query={{ . }}{{ end }}"


def dashboard_url(cfg: AlertConfig, dash: DashboardRef, key: str, variables: str = VAR_CLUSTER) -> str:
    return (f"{cfg.dashboard_base_url.rstrip('/')}/d/{dash.uid}/{dash.slug}"
            f"?viewPanel={ids.panel_id(dash, key)}{variables}")


def runbook_url(cfg: AlertConfig, name: str) -> str:
    return f"{cfg.runbook_base_url.rstrip('/')}/{name}.md"


@dataclass(frozen=True)
class Alert:
    name: str
    expr: str
    for_: str
    severity: str
    summary: str
    description: str
    dashboard: DashboardRef
    panel: str
    variables: str = VAR_CLUSTER

    def rule(self, cfg: AlertConfig) -> dict[str, Any]:
        return {
            "alert": self.name,
            "expr": self.expr,
            "for": self.for_,
            "labels": {"severity": self.severity, **dict(cfg.extra_labels)},
            "annotations": {
                "summary": self.summary,
                "description": self.description,
                "runbook": f"{RUNBOOK_DIR}/{self.name}.md",
                **({"runbook_url": runbook_url(cfg, self.name)} if cfg.runbook_base_url else {}),
                **({"dashboard_url": dashboard_url(cfg, self.dashboard, self.panel, self.variables)}
                   if cfg.dashboard_base_url else {}),
            },
        }


# ---------------------------------------------------------------- recording rules
def recording_rules(cfg: AlertConfig) -> dict[str, list[dict[str, Any]]]:
    """Recording rules per group name (they live in the group of the alerts using them,
    so an alert sees the value recorded in the same evaluation)."""
    c = cfg.kafka_selector
    cl = cfg.client_selector
    tx = []
    tx.append({"record": "cluster_app:kafka_transactions:rate5m",
               "expr": f"sum by (cluster, app) (rate(kafka_transactions_total{matchers(c)}[5m]))"})
    tx.append({"record": "cluster_app:kafka_transactions_abort_ratio:rate5m",
               "expr": abort_ratio("kafka_transactions_total", "cluster, app", "5m",
                                   aborted=matchers(ABORTED, c), completed=matchers(c), multiline=True)})
    tx.append({"record": "app:kafka_producer_transactions:rate5m",
               "expr": f"sum by (app) (rate(kafka_producer_transactions_total{matchers(cl)}[5m]))"})
    tx.append({"record": "app:kafka_producer_transactions_abort_ratio:rate5m",
               "expr": abort_ratio("kafka_producer_transactions_total", "app", "5m",
                                   aborted=matchers(ABORTED, cl), completed=matchers(cl), multiline=True)})
    tx.append({"record": "cluster_app_reason:kafka_transaction_fencing_events:rate15m",
               "expr": "sum by (cluster, app, reason) "
                       f"(rate(kafka_transaction_fencing_events_total{matchers(c)}[15m]))"})
    tx.append({"record": "app:kafka_producer_transaction_fencing_errors:rate15m",
               "expr": "sum by (app) (rate(kafka_producer_transaction_errors_total"
                       f"{matchers(FENCED, cl)}[15m]))"})
    for q in QUANTILES:
        tx.append({"record": "cluster_app:kafka_transaction_completion_seconds:histogram_quantile_rate5m",
                   "expr": f"histogram_quantile({q}, sum by (cluster, app, le) (rate("
                           f"kafka_transaction_completion_seconds_bucket{matchers(COMMITTED, c)}[5m])))",
                   "labels": {"quantile": q}})
    for q in QUANTILES:
        tx.append({"record": "app:kafka_producer_transaction_commit_seconds:histogram_quantile_rate5m",
                   "expr": f"histogram_quantile({q}, sum by (app, le) (rate("
                           f"kafka_producer_transaction_commit_seconds_bucket{matchers(cl)}[5m])))",
                   "labels": {"quantile": q}})
    return {"txnwatch.transactions": tx}


# ---------------------------------------------------------------- alerts
def transaction_alerts(cfg: AlertConfig) -> list[Alert]:
    c, cl = cfg.kafka_selector, cfg.client_selector
    out: list[Alert] = []

    # Hanging: three independent signals, tagged with `signal`.
    past = _signal(f"(min by (cluster, app, transactional_id) "
                   f"(kafka_transaction_timeout_headroom_seconds{matchers(c)}) < 0) * -1", "past_timeout")
    hanging = _signal(f"sum by (cluster, topic, partition) (kafka_transaction_hanging{matchers(c)}) > 0",
                      "hanging")
    stalled = _signal(
        f"(max by (cluster, topic, partition) (kafka_partition_lso_stalled_seconds{matchers(c)}) "
        f"> {_num(cfg.lso_stalled_hanging_seconds)})\n"
        f"  and on (cluster, topic, partition)\n"
        f"  (max by (cluster, topic, partition) "
        f"(delta(kafka_partition_high_watermark{matchers(c)}[{cfg.hwm_growth_window}])) > 0)",
        "lso_stalled")
    out.append(Alert(
        "KafkaTransactionHanging", f"{past}\nor\n{hanging}\nor\n{stalled}", cfg.hanging_for, "critical",
        "A Kafka transaction is hanging on cluster {{ $labels.cluster }}",
        '{{ if eq $labels.signal "past_timeout" }}'
        "Transaction {{ $labels.transactional_id }} (app {{ $labels.app }}) has been open "
        "{{ $value | humanizeDuration }} past its transaction.timeout.ms and the coordinator has not aborted it."
        + _sign_of_life(cfg) +
        '{{ else if eq $labels.signal "hanging" }}'
        "{{ $value }} hanging transaction(s) on " + PARTITION_WORDS + " (open past "
        "transaction.max.timeout.ms + 5 min with no live coordinator state, or, without KIP-664, a last stable "
        "offset stalled past the hanging threshold): read_committed consumers cannot read past it."
        "{{ else }}"
        "The last stable offset of " + PARTITION_WORDS + " has not moved for "
        "{{ $value | humanizeDuration }} while its high watermark keeps growing: read_committed consumers "
        "cannot read past an open transaction."
        "{{ end }}",
        ids.PARTITIONS, "hanging_table"))

    # The canary's transactions run with a timeout of one interval by design (its own alerts
    # say when its rounds fail): its headroom is always short and pages nobody.
    not_canary = f'app!="{CANARY_APP}"'
    out.append(Alert(
        "KafkaTransactionTimeoutHeadroomLow", _expr(f"""
            min by (cluster, app, transactional_id) (
              min_over_time(kafka_transaction_timeout_headroom_seconds{matchers(c, not_canary)}[{cfg.headroom_window}])
            ) < {_num(cfg.headroom_low_seconds)}
            or
            min by (app, transactional_id) (
              min_over_time(kafka_producer_transaction_timeout_headroom_seconds{matchers(cl)}[{cfg.headroom_window}])
            ) < {_num(cfg.headroom_low_seconds)}"""),
        cfg.headroom_for, "warning",
        "Transactions of {{ $labels.transactional_id }} keep running close to their timeout",
        "Transactional id {{ $labels.transactional_id }} (app {{ $labels.app }}) came within "
        "{{ $value | humanizeDuration }} of its transaction.timeout.ms in every "
        f"{cfg.headroom_window} window for {cfg.headroom_for} "
        f"(threshold {_num(cfg.headroom_low_seconds)}s). Transactions that reach the timeout are aborted "
        "and the producer is fenced.",
        ids.TRANSACTIONS, "headroom", VAR_CLUSTER + VAR_APP))

    out.append(Alert(
        "KafkaTransactionTwoPhaseCommitUndecided", _expr(f"""
            max by (cluster, app) (kafka_transaction_two_phase_oldest_age_seconds{matchers(c)})
              > {_num(cfg.two_phase_max_age_seconds)}"""),
        cfg.two_phase_for, "warning",
        "A two-phase-commit transaction of app {{ $labels.app }} has been open for {{ $value | humanizeDuration }}",
        "The oldest two-phase-commit transaction (KIP-939) of app {{ $labels.app }} "
        "{{ with $labels.cluster }}on cluster {{ . }} {{ end }}has been open {{ $value | humanizeDuration }} "
        f"(threshold {_num(cfg.two_phase_max_age_seconds)}s). The coordinator never aborts such a transaction: "
        "until its transaction manager commits or aborts it, the partitions it wrote hold their last stable "
        "offset and read_committed consumers wait.",
        ids.TRANSACTIONS, "two_phase", VAR_CLUSTER + VAR_APP))

    min_tx = _num(cfg.abort_ratio_min_transactions)
    ratio = _num(cfg.abort_ratio)
    # (not_canary: its aborts are planned, abort_every)
    out.append(Alert(
        "KafkaTransactionAbortRatioHigh", _expr(f"""
            (
              cluster_app:kafka_transactions_abort_ratio:rate5m{{{not_canary}}} > {ratio}
              and on (cluster, app) cluster_app:kafka_transactions:rate5m * 300 >= {min_tx}
            )
            or
            (
              app:kafka_producer_transactions_abort_ratio:rate5m{{{not_canary}}} > {ratio}
              and on (app) app:kafka_producer_transactions:rate5m * 300 >= {min_tx}
            )"""),
        cfg.abort_ratio_for, "warning",
        "App {{ $labels.app }} aborts {{ $value | humanizePercentage }} of its transactions",
        "{{ $value | humanizePercentage }} of the transactions of app {{ $labels.app }} "
        "{{ with $labels.cluster }}on cluster {{ . }} {{ end }}were aborted over the last 5m "
        f"(threshold {_num(cfg.abort_ratio * 100)}%, at least {min_tx} transactions in 5m).",
        ids.TRANSACTIONS, "abort_ratio", VAR_CLUSTER + VAR_APP))

    fpm = _num(cfg.fencing_per_minute)
    out.append(Alert(
        "KafkaTransactionFencingPersistent", _expr(f"""
            cluster_app_reason:kafka_transaction_fencing_events:rate15m{{reason!~"operator|startup_abort"}} * 60 > {fpm}
            or
            app:kafka_producer_transaction_fencing_errors:rate15m * 60 > {fpm}"""),
        cfg.fencing_for, "warning",
        "Producers of app {{ $labels.app }} are fenced again and again",
        "App {{ $labels.app }} has been fenced at {{ printf \"%.2f\" $value }} per minute "
        "{{ with $labels.reason }}(reason {{ . }}) {{ end }}over every 15m window for "
        f"{cfg.fencing_for} (threshold {fpm}/min). Each fence cut an open transaction off (restarts and tasks "
        "moving between workers take idle ids over and are not counted here); a steady rate means zombie "
        "instances or transactions timing out.",
        ids.TRANSACTIONS, "fencing", VAR_CLUSTER + VAR_APP))

    q, lat = cfg.commit_latency_quantile, _num(cfg.commit_latency_seconds)
    out.append(Alert(
        "KafkaTransactionCommitLatencyHigh", _expr(f"""
            cluster_app:kafka_transaction_completion_seconds:histogram_quantile_rate5m{{quantile="{q}"}} > {lat}
            or
            app:kafka_producer_transaction_commit_seconds:histogram_quantile_rate5m{{quantile="{q}"}} > {lat}"""),
        cfg.commit_latency_for, "warning",
        "Transaction commits of app {{ $labels.app }} are slow",
        f"p{_num(float(q) * 100)} commit latency of app {{{{ $labels.app }}}} is "
        "{{ $value | humanizeDuration }} "
        "({{ if $labels.cluster }}coordinator PrepareCommit to CompleteCommit{{ else }}"
        "producer commit_transaction() call{{ end }}; "
        f"threshold {lat}s).",
        ids.TRANSACTIONS, "commit_latency", VAR_CLUSTER + VAR_APP))

    out.append(Alert(
        "KafkaTransactionalIdNearExpiration",
        f"min by (cluster, app, transactional_id) (kafka_transactional_id_expiration_headroom_seconds{matchers(c)})"
        f" < {_num(cfg.id_expiration_headroom_seconds)}",
        cfg.id_expiration_for, "warning",
        '{{ if eq $labels.transactional_id "__newest__" }}The newest transactional id of app {{ $labels.app }} '
        "is close to expiring{{ else }}Transactional id {{ $labels.transactional_id }} is close to expiring{{ end }}",
        '{{ if eq $labels.transactional_id "__newest__" }}'
        "App {{ $labels.app }} names a transactional id per checkpoint (Flink's KafkaSink) and even its newest "
        "idle id expires in {{ $value | humanizeDuration }} (transactional.id.expiration.ms): it has committed "
        "nothing for that long. Its older ids expiring fails nobody; a restore from its last checkpoint commits "
        "under the newest, which the coordinator will no longer know."
        "{{ else }}"
        "Transactional id {{ $labels.transactional_id }} (app {{ $labels.app }}) has been idle so long that "
        "it expires in {{ $value | humanizeDuration }} (transactional.id.expiration.ms). The next "
        "transaction of that producer will fail with InvalidPidMappingException."
        "{{ end }}",
        ids.TRANSACTIONS, "expiration_headroom", VAR_CLUSTER + VAR_APP))

    # Cap: the broker rejects a transaction.timeout.ms above transaction.max.timeout.ms at
    # InitProducerId (INVALID_TRANSACTION_TIMEOUT), so an accepted open transaction normally
    # never exceeds the cap. What series can show it:
    #  - rejected: the instrumented producer's INVALID_TRANSACTION_TIMEOUT errors;
    #  - open_above_cap: an open transaction whose remaining headroom is above the cap
    #    (headroom <= timeout, so timeout > cap), e.g. after the cap was lowered;
    #  - client_above_cap: the instrumented producer's timeout - duration above the cap.
    tol = _num(cfg.cap_tolerance_seconds)
    rejected = _signal(_new_or_increased(
        f"kafka_producer_transaction_errors_total{matchers(INVALID_TIMEOUT, cl)}",
        "app, transactional_id", cfg.cap_window), "rejected")
    open_above = _signal(
        f"max by (cluster, app, transactional_id) "
        f"(max_over_time(kafka_transaction_timeout_headroom_seconds{matchers(c)}[{cfg.cap_window}]))\n"
        f"  > on (cluster) group_left ()\n"
        f"  (max by (cluster) (kafka_broker_transaction_max_timeout_seconds{matchers(c)}) + {tol})",
        "open_above_cap")
    client_above = _signal(
        f"max by (app, transactional_id) (max_over_time("
        f"kafka_producer_transaction_timeout_headroom_seconds{matchers(cl)}[{cfg.cap_window}]))\n"
        f"  > scalar(min(kafka_broker_transaction_max_timeout_seconds{matchers(c)})) + {tol}",
        "client_above_cap")
    out.append(Alert(
        "KafkaProducerTransactionTimeoutAboveBrokerCap",
        f"{rejected}\nor\n{open_above}\nor\n{client_above}", cfg.cap_for, "warning",
        "A producer's transaction.timeout.ms exceeds the broker's transaction.max.timeout.ms",
        '{{ if eq $labels.signal "rejected" }}'
        "The broker rejected InitProducerId of {{ $labels.transactional_id }} (app {{ $labels.app }}) "
        "with INVALID_TRANSACTION_TIMEOUT {{ printf \"%.0f\" $value }} time(s): its transaction.timeout.ms "
        "is above transaction.max.timeout.ms and the producer cannot start."
        "{{ else }}"
        "Transactional id {{ $labels.transactional_id }} (app {{ $labels.app }}) had "
        "{{ $value | humanizeDuration }} of timeout headroom, more than the broker's "
        "transaction.max.timeout.ms allows: its transaction.timeout.ms is above the cap."
        "{{ end }}",
        ids.TRANSACTIONS, "timeout_vs_cap", VAR_CLUSTER + VAR_APP))
    return out


def partition_alerts(cfg: AlertConfig) -> list[Alert]:
    c = cfg.kafka_selector
    # A read_committed consumer blocked behind a stalled LSO has read everything up to the
    # LSO (its lag against the LSO is usually 0); what it cannot work off is HWM - committed
    # (the read_uncommitted lag). Blocked = that lag > 0, the committed offset not
    # moving, and the partition's LSO stalled. A read_uncommitted consumer keeps committing
    # and is not matched.
    blocked = _expr(f"""
        max by (cluster, group, topic, partition) (
          kafka_consumergroup_read_uncommitted_lag_offsets{matchers(c)}
        ) > 0
        and on (cluster, group, topic, partition)
        (
          max by (cluster, group, topic, partition) (
            changes(kafka_consumergroup_committed_offset{matchers(c)}[{cfg.blocked_committed_window}])
          ) == 0
        )
        and on (cluster, topic, partition)
        (
          max by (cluster, topic, partition) (kafka_partition_lso_stalled_seconds{matchers(c)})
          >= {_num(cfg.blocked_lso_stalled_seconds)}
        )""")
    return [
        Alert("KafkaReadCommittedConsumerBlocked", blocked, cfg.blocked_for, "warning",
              "Group {{ $labels.group }} is blocked behind a stalled last stable offset",
              "Consumer group {{ $labels.group }} has not committed on " + PARTITION_WORDS + " "
              f"for {cfg.blocked_committed_window} while the partition's last stable offset has been stalled "
              f"for at least {_num(cfg.blocked_lso_stalled_seconds)}s; {{{{ printf \"%.0f\" $value }}}} "
              "offset(s) past its position are held back by an open transaction.",
              ids.PARTITIONS, "blocked_groups"),
        # Per partition of the log, not per broker count: a single node whose min ISR is capped
        # at its RF 1 is fine, and three live brokers do not help a partition whose ISR shrank.
        Alert("KafkaTransactionStateLogBelowMinIsr",
              f"max by (cluster) (kafka_transaction_state_log_partitions_below_min_isr{matchers(c)}) > 0",
              cfg.min_isr_for, "critical",
              "__transaction_state partitions of cluster {{ $labels.cluster }} are below their minimum ISR",
              "{{ $value }} __transaction_state partition(s) of cluster {{ $labels.cluster }} are offline or have "
              "fewer in-sync replicas than they need: the coordinator cannot write them, so InitProducerId and "
              "commits block for every transactional id that hashes to them. The page and txnwatch check "
              "name the partitions.",
              ids.PARTITIONS, "brokers_min_isr"),
    ]


def _seconds(duration: str) -> int:
    """A Prometheus duration of one unit ("10m") in seconds."""
    m = re.fullmatch(r"(\d+)(ms|s|m|h|d|w)", duration)
    if not m:
        raise ValueError(f"{duration!r}: expected a duration of one unit such as 10m")
    n, unit = int(m.group(1)), m.group(2)
    return {"ms": n // 1000, "s": n, "m": n * 60, "h": n * 3600, "d": n * 86400, "w": n * 604800}[unit]


def spark_alerts(cfg: AlertConfig) -> list[Alert]:
    s = cfg.spark_selector
    stalled = _expr(f"""
        (
          time() - max by (query, query_id) (spark_streaming_last_progress_timestamp_seconds{matchers(s)})
          > {_num(cfg.spark_stalled_seconds)}
        )
        and on (query, query_id) (max by (query, query_id) (spark_streaming_query_active{matchers(s)}) == 1)
        unless on (query, query_id)
        (sum by (query, query_id) (increase(spark_streaming_idle_events_total{matchers(s)}[{cfg.spark_idle_window}])) > 0)
        unless on (query, query_id)
        (
          time() - max by (query, query_id) (spark_streaming_last_progress_timestamp_seconds{matchers(s)})
          < 2 * max by (query, query_id) (spark_streaming_trigger_interval_seconds{matchers(s)})
        )""")

    def mean_batch(extra: str) -> str:
        w = cfg.spark_behind_window
        return (f"sum by (query, query_id) (rate(spark_streaming_batch_duration_seconds_sum{matchers(s, extra)}[{w}]))\n"
                f"  / sum by (query, query_id) (rate(spark_streaming_batch_duration_seconds_count{matchers(s, extra)}[{w}]))")

    branches = []
    for name, secs in sorted(cfg.spark_trigger_intervals.items()):
        branches.append((f'query="{name}"', secs))
    default_matchers = ", ".join(f'query!="{n}"' for n in sorted(cfg.spark_trigger_intervals))
    branches.append((default_matchers, cfg.spark_trigger_interval_seconds))
    behind = "\nor\n".join(
        f'label_replace(\n  ({mean_batch(m)})\n  > {_num(secs * cfg.spark_behind_factor)},\n'
        f'  "trigger_interval_seconds", "{_num(secs)}", "__name__", ".*"\n)'
        for m, secs in branches)
    # A real-time or continuous query's batch lasts its whole trigger by design: its batch
    # duration says nothing about falling behind.
    long_batch = matchers(s, 'trigger=~"' + "|".join(LONG_BATCH_MODES) + '"')
    behind = (f"(\n{textwrap.indent(behind, '  ')}\n)\nunless on (query, query_id)\n"
              f"max by (query, query_id) (spark_streaming_query_trigger_info{long_batch})")
    # Batches longer than the trigger alone are not falling behind: a query that takes all
    # that arrived in each batch keeps up at a latency of one batch (the healthy demo's
    # pipeline, 2 s trigger, ~5 s batches on 2 busy cores). Falling behind is its Kafka
    # backlog growing: the lowest of the last half window above the highest of the half
    # before (a minute apart, so no shared sample, whichever end a range includes).
    half = _seconds(cfg.spark_behind_window) // 2
    backlog = f"sum by (query, query_id) (spark_streaming_source_partition_behind_latest_offsets{matchers(s)})"
    behind = (f"{behind}\nand on (query, query_id)\n(\n"
              f"  min_over_time(({backlog})[{half - 60}s:])\n"
              f"  > max_over_time(({backlog})[{half}s:] offset {half}s)\n)")

    # The exporter emits spark_streaming_source_blocked_seconds only for a partition the query
    # has read up to its LSO while the LSO is stalled below the HWM (the listener's events
    # matched with the poller's partitions): its value is the LSO's stall time.
    blocked = _expr(f"""
        max by (cluster, query, query_id, topic, partition) (
          spark_streaming_source_blocked_seconds{matchers(cfg.kafka_selector)}
        ) >= {_num(cfg.spark_blocked_seconds)}""")
    failed = _new_or_increased(
        f"spark_streaming_query_terminations_total{matchers(FAILED, s)}",
        "query, query_id, error_class", cfg.spark_failure_window)
    return [
        Alert("SparkStreamingQueryStalled", stalled, cfg.spark_stalled_for, "critical",
              "Spark query {{ $labels.query }} makes no progress",
              "Active Spark query {{ $labels.query }} ({{ $labels.query_id }}) reported no progress for "
              "{{ $value | humanizeDuration }} and no idle events either: a micro-batch is stuck "
              "(a blocked sink, a hanging transaction, lost executors).",
              ids.SPARK, "last_progress", VAR_QUERY),
        Alert("SparkStreamingQueryFallingBehind", behind, cfg.spark_behind_for, "warning",
              "Spark query {{ $labels.query }} is slower than its trigger",
              "Micro-batches of {{ $labels.query }} take {{ $value | humanizeDuration }} on average over "
              f"{cfg.spark_behind_window}, longer than its trigger interval of "
              "{{ $labels.trigger_interval_seconds }}s, and its backlog on its Kafka sources keeps growing: "
              "the query falls further behind its sources.",
              ids.SPARK, "batch_vs_trigger", VAR_QUERY),
        Alert("SparkStreamingQueryBlockedByOpenTransaction", blocked, cfg.spark_blocked_for, "warning",
              "Spark query {{ $labels.query }} is blocked by an open transaction on "
              "{{ $labels.topic }}-{{ $labels.partition }}",
              "Spark query {{ $labels.query }} ({{ $labels.query_id }}) has read {{ $labels.topic }}-"
              "{{ $labels.partition }} on cluster {{ $labels.cluster }} up to its last stable offset, which an "
              "open transaction has held below the high watermark for {{ $value | humanizeDuration }}. The query "
              "reads read_committed, so it sees no new data from that partition while records keep arriving; "
              "its offsets behind latest read 0 because its latest is the LSO.",
              ids.SPARK, "blocked", VAR_QUERY),
        Alert("SparkStreamingQueryFailed", failed, cfg.spark_failed_for, "critical",
              "Spark query {{ $labels.query }} terminated with an error",
              "Spark query {{ $labels.query }} ({{ $labels.query_id }}) terminated with error class "
              "{{ $labels.error_class }} ({{ printf \"%.0f\" $value }} time(s) in the last "
              f"{cfg.spark_failure_window}).",
              ids.SPARK, "terminations", VAR_QUERY),
    ]


def exporter_alerts(cfg: AlertConfig) -> list[Alert]:
    job = matchers(cfg.exporter_job_selector)
    up_sel = matchers(cfg.kafka_selector)
    return [
        Alert("TxnwatchExporterDown", f"up{job} == 0\nor\nabsent(up{job})", cfg.exporter_down_for, "critical",
              "txnwatch exporter is down",
              "{{ if $labels.instance }}Prometheus has failed to scrape the txnwatch exporter at "
              "{{ $labels.instance }}{{ else }}Prometheus has no txnwatch scrape target "
              f"({cfg.exporter_job_selector}){{{{ end }}}} for {cfg.exporter_down_for}: transaction, LSO and "
              "consumer alerts cannot fire.",
              ids.EXPORTER, "scrape_up", ""),
        Alert("TxnwatchSourceFailing", _expr(f"""
            (time() - txnwatch_last_success_timestamp_seconds{up_sel}) and (txnwatch_up{up_sel} == 0)
            or
            (txnwatch_up{up_sel} == 0) unless txnwatch_last_success_timestamp_seconds{up_sel}"""),
              cfg.source_failing_for, "warning",
              "txnwatch {{ $labels.source }} cannot poll cluster {{ $labels.cluster }}",
              "The txnwatch {{ $labels.source }} source of cluster {{ $labels.cluster }} "
              "({{ $labels.instance }}) has failed every poll for "
              f"{cfg.source_failing_for} "
              "({{ if gt $value 0.0 }}last success {{ $value | humanizeDuration }} ago"
              "{{ else }}no successful poll since the exporter started{{ end }}); its series are stale. "
              "See txnwatch_poll_errors_total by cause.",
              ids.EXPORTER, "sources_up"),
    ]


def canary_alerts(cfg: AlertConfig) -> list[Alert]:
    c = matchers(cfg.kafka_selector)
    failing = _expr(f"""
        sum by (cluster, stage, error) (increase(txnwatch_canary_failures_total{c}[{cfg.canary_failure_window}])) > 0
        unless on (cluster)
        (time() - txnwatch_canary_last_success_timestamp_seconds{c} < {_num(cfg.canary_failing_seconds)})""")
    slow = _expr(f"""
        histogram_quantile(0.99, sum by (cluster, partition, le)
          (rate(txnwatch_canary_visibility_seconds_bucket{c}[{cfg.canary_visibility_window}])))
        > {_num(cfg.canary_visibility_seconds)}""")
    violated = f"increase(txnwatch_canary_visibility_violations_total{c}[{cfg.canary_violation_window}]) > 0"
    return [
        Alert("TxnwatchCanaryFailing", failing, cfg.canary_failing_for, "critical",
              "Transactions cannot commit on cluster {{ $labels.cluster }} (canary failing at {{ $labels.stage }})",
              "The txnwatch canary on cluster {{ $labels.cluster }} has not completed a transaction for over "
              f"{_num(cfg.canary_failing_seconds)}s; it fails at stage {{{{ $labels.stage }}}} with "
              "{{ $labels.error }} ({{ printf \"%.0f\" $value }} time(s) in the last "
              f"{cfg.canary_failure_window}). Applications' transactions on this cluster are most likely failing "
              "the same way.", ids.OVERVIEW, "canary_failures"),
        Alert("TxnwatchCanaryVisibilitySlow", slow, cfg.canary_visibility_for, "warning",
              "Committed records take {{ $value | humanizeDuration }} to become visible on "
              "{{ $labels.cluster }} partition {{ $labels.partition }} of the canary",
              "p99 time from the canary's produce to a read_committed consumer returning the record is "
              "{{ $value | humanizeDuration }} on canary partition {{ $labels.partition }} of cluster "
              f"{{{{ $labels.cluster }}}} (threshold {_num(cfg.canary_visibility_seconds)}s over "
              f"{cfg.canary_visibility_window}): transaction markers or the LSO of that partition's leader are slow.",
              ids.OVERVIEW, "canary_visibility"),
        Alert("TxnwatchCanaryVisibilityViolation", violated, "0m", "critical",
              "read_committed returned an aborted record on cluster {{ $labels.cluster }}",
              "A read_committed consumer returned {{ printf \"%.0f\" $value }} record(s) of aborted canary "
              f"transactions on cluster {{{{ $labels.cluster }}}} in the last {cfg.canary_violation_window}. "
              "Aborted records must never be visible to read_committed readers: this is a broker or client bug, "
              "and exactly-once pipelines on this cluster may be reading aborted data.",
              ids.OVERVIEW, "canary_failures"),
    ]


def alerts(cfg: AlertConfig | None = None) -> list[Alert]:
    cfg = cfg or AlertConfig()
    return (transaction_alerts(cfg) + partition_alerts(cfg) + spark_alerts(cfg) + canary_alerts(cfg)
            + exporter_alerts(cfg))


_GROUPING = re.compile(r"\b(by|on)\s*\(([^)]*)\)")


def with_routing_labels(expr: str, labels: tuple[str, ...]) -> str:
    """`expr` with `labels` added to every `by (...)` and `on (...)`: aggregations and joins
    keep the target labels an Alertmanager routes on (every join here matches series of one
    source, so both sides carry the same ones)."""
    if not labels:
        return expr

    def add(m: re.Match) -> str:
        have = [x.strip() for x in m.group(2).split(",") if x.strip()]
        return f"{m.group(1)} ({', '.join(have + [x for x in labels if x not in have])})"
    return _GROUPING.sub(add, expr)


def rule_groups(cfg: AlertConfig | None = None) -> list[dict[str, Any]]:
    cfg = cfg or AlertConfig()
    masked, restore = mask_selectors(cfg, SELECTORS)
    groups = _rule_groups(masked)
    for g in groups:
        for r in g["rules"]:
            expr = rename_in_promql(r["expr"], cfg.cluster_label)
            r["expr"] = restore(with_routing_labels(expr, cfg.routing_labels))
            for part in ("labels", "annotations"):
                for k, v in (r.get(part) or {}).items():
                    r[part][k] = restore(rename_in_template(v, cfg.cluster_label))
    return groups


def _rule_groups(cfg: AlertConfig) -> list[dict[str, Any]]:
    rec = recording_rules(cfg)
    groups = [
        ("txnwatch.transactions", transaction_alerts(cfg)),
        ("txnwatch.partitions", partition_alerts(cfg)),
        ("txnwatch.spark", spark_alerts(cfg)),
        ("txnwatch.canary", canary_alerts(cfg)),
        ("txnwatch.exporter", exporter_alerts(cfg)),
    ]
    return [{"name": name, "rules": rec.get(name, []) + [a.rule(cfg) for a in alist]}
            for name, alist in groups]


def prometheus_rule(cfg: AlertConfig | None = None) -> dict[str, Any]:
    cfg = cfg or AlertConfig()
    meta: dict[str, Any] = {"name": cfg.prometheus_rule_name, "labels": dict(cfg.prometheus_rule_labels)}
    if cfg.prometheus_rule_namespace:
        meta["namespace"] = cfg.prometheus_rule_namespace
    return {"apiVersion": "monitoring.coreos.com/v1", "kind": "PrometheusRule", "metadata": meta,
            "spec": {"groups": rule_groups(cfg)}}


# ---------------------------------------------------------------- output
class _Dumper(yaml.SafeDumper):
    pass


def _str_rep(dumper: yaml.SafeDumper, data: str) -> yaml.Node:
    style = "|" if "\n" in data else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", data, style=style)


_Dumper.add_representer(str, _str_rep)

HEADER = ("# Generated by txnwatch (txnwatch.alerts.rules.generate_alerts); do not edit.\n"
          "# Regenerate with scripts/regenerate.py.\n")


def dump_yaml(obj: Any, header: str = HEADER) -> str:
    return header + yaml.dump(obj, Dumper=_Dumper, sort_keys=False, width=120, allow_unicode=True)


EXPORTER_PORT = 10129


def prometheus_config(cfg: AlertConfig | None = None, targets: tuple[str, ...] = (f"localhost:{EXPORTER_PORT}",),
                      scrape_interval: str = "15s") -> dict[str, Any]:
    """A sample prometheus.yml: scrapes txnwatch (job "txnwatch", as the exporter-down alert
    expects) and loads rules.yml."""
    return {
        "global": {"scrape_interval": scrape_interval, "evaluation_interval": scrape_interval},
        "rule_files": ["rules.yml"],
        "alerting": {"alertmanagers": [{"static_configs": [{"targets": ["localhost:9093"]}]}]},
        "scrape_configs": [
            {"job_name": "txnwatch", "scrape_interval": scrape_interval, "scrape_timeout": "10s",
             "static_configs": [{"targets": list(targets)}]},
        ],
    }


def generate_alerts(out_dir: str | Path, config: AlertConfig | None = None) -> list[Path]:
    """Write rules.yml (Prometheus rule file) and prometheusrule.yaml into out_dir."""
    cfg = config or AlertConfig()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    rules_path = out / "rules.yml"
    rules_path.write_text(dump_yaml({"groups": rule_groups(cfg)}))
    manifest_path = out / "prometheusrule.yaml"
    manifest_path.write_text(dump_yaml(prometheus_rule(cfg)))
    return [rules_path, manifest_path]
