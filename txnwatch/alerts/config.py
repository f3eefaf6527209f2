"""The alerts' and dashboards' shared settings, like a monitoring mixin's `_config`:
thresholds, `for` durations, label selectors and link bases. A leaf: `alerts.rules` and
`dashboards.build` both read it, it imports neither."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

QUANTILES = ("0.5", "0.95", "0.99")
LABEL_NAME = r"[a-zA-Z_][a-zA-Z0-9_]*"
# the settings that hold PromQL matchers (passed through as written)
SELECTORS = ("exporter_job_selector", "cluster_selector", "client_selector", "spark_selector")


@dataclass(frozen=True)
class AlertConfig:
    """Thresholds, durations and selectors of the generated rules (a mixin's `_config`).

    Selectors are PromQL label matchers without braces, e.g. `kafka_cluster=~"prod-.*"`, used as
    written (with the label names the series have in Prometheus).
    Durations are Prometheus duration strings.
    """

    # -- label names: the exporter's `cluster_label` (the label of the Kafka cluster's name)
    cluster_label: str = "kafka_cluster"
    # -- selectors
    # the scrape job(s) of the exporter: `up`, and every series the exporter serves (Kafka-side and
    # txnwatch_*), so another exporter's series of a similar name never enter a txnwatch alert
    exporter_job_selector: str = 'job="txnwatch"'
    cluster_selector: str = ""                 # which Kafka clusters, e.g. kafka_cluster=~"prod-.*"
    client_selector: str = ""                  # kafka_producer_* (instrumented producers, Spark sink)
    spark_selector: str = ""                   # spark_streaming_*
    # -- links: none unless set (a made-up default would be a link that does not resolve).
    # Every alert names its runbook (`runbook`: docs/runbooks/<Alert>.md); with a base URL
    # it also gets `runbook_url` (<base>/<Alert>.md), and with Grafana's URL `dashboard_url`.
    dashboard_base_url: str = ""
    runbook_base_url: str = ""
    extra_labels: Mapping[str, str] = field(default_factory=dict)   # added to every alert
    # -- routing: target labels every aggregation and join keeps (e.g. namespace, job, team), so an
    # alert still carries what Alertmanager routes on; none by default
    routing_labels: tuple[str, ...] = ()
    # -- prometheus-operator manifest
    prometheus_rule_name: str = "txnwatch"
    prometheus_rule_namespace: str = ""
    prometheus_rule_labels: Mapping[str, str] = field(
        default_factory=lambda: {"app.kubernetes.io/name": "txnwatch", "role": "alert-rules"})

    # -- KafkaTransactionHanging
    hanging_for: str = "2m"
    lso_stalled_hanging_seconds: float = 600    # LSO stalled this long while the HWM grows
    hwm_growth_window: str = "10m"
    # -- KafkaTransactionTimeoutHeadroomLow
    headroom_low_seconds: float = 5
    headroom_window: str = "5m"                 # min_over_time window; `for` must exceed it
    headroom_for: str = "15m"
    # -- KafkaTransactionAbortRatioHigh (recording window: 5m)
    abort_ratio: float = 0.10
    abort_ratio_min_transactions: float = 10    # completed transactions in the 5m window
    abort_ratio_for: str = "15m"
    # -- KafkaTransactionFencingPersistent (recording window: 15m)
    fencing_per_minute: float = 0.1
    fencing_for: str = "30m"
    # -- KafkaTransactionCommitLatencyHigh (recording window: 5m)
    commit_latency_quantile: str = "0.99"       # one of QUANTILES
    commit_latency_seconds: float = 2.5
    commit_latency_for: str = "15m"
    # -- KafkaTransactionalIdNearExpiration
    id_expiration_headroom_seconds: float = 86400
    id_expiration_for: str = "15m"
    # -- KafkaReadCommittedConsumerBlocked
    blocked_lso_stalled_seconds: float = 300
    blocked_committed_window: str = "10m"
    blocked_for: str = "5m"
    # -- KafkaTransactionTwoPhaseCommitUndecided
    two_phase_max_age_seconds: float = 3600     # a prepared 2PC transaction open longer pages
    two_phase_for: str = "5m"
    # -- KafkaTransactionStateLogBelowMinIsr
    min_isr_for: str = "5m"
    # -- KafkaProducerTransactionTimeoutAboveBrokerCap
    cap_tolerance_seconds: float = 5            # clock skew between broker and exporter
    cap_window: str = "15m"
    cap_for: str = "5m"
    # -- SparkStreamingQueryStalled
    spark_stalled_seconds: float = 600
    spark_stalled_for: str = "2m"
    spark_idle_window: str = "5m"              # idle queries (QueryIdleEvents) are not stalled
    # -- SparkStreamingQueryFallingBehind
    spark_trigger_interval_seconds: float = 60  # default trigger interval of the queries
    spark_trigger_intervals: Mapping[str, float] = field(default_factory=dict)  # query -> seconds
    spark_behind_factor: float = 1.0            # mean batch duration > factor * trigger
    spark_behind_window: str = "10m"
    spark_behind_for: str = "15m"
    # -- SparkStreamingQueryBlockedByOpenTransaction
    spark_blocked_seconds: float = 300          # the partition's LSO stalled this long at the query's position
    spark_blocked_for: str = "2m"
    # -- SparkStreamingQueryFailed
    spark_failure_window: str = "15m"
    spark_failed_for: str = "1m"
    # -- transactional canary
    canary_failing_seconds: float = 60          # no round ended as intended for this long (6 intervals of 10 s)
    canary_failing_for: str = "0m"              # the window above is the "for"
    canary_failure_window: str = "2m"           # failures counted over this window name the stage and error
    canary_visibility_seconds: float = 5        # p99 produce-to-visible per partition above this
    canary_visibility_window: str = "10m"
    canary_visibility_for: str = "10m"
    canary_violation_window: str = "15m"
    # -- exporter
    exporter_down_for: str = "5m"
    source_failing_for: str = "5m"

    def __post_init__(self) -> None:
        if self.commit_latency_quantile not in QUANTILES:
            raise ValueError(f"commit_latency_quantile must be one of {QUANTILES}")
        bad = [x for x in self.routing_labels if not re.fullmatch(LABEL_NAME, x) or x == "le"]
        if bad:
            raise ValueError(f"routing_labels: {bad} are not label names one can aggregate by")
        if not re.fullmatch(LABEL_NAME, self.cluster_label) or self.cluster_label.startswith("__"):
            raise ValueError(f"cluster_label: {self.cluster_label!r} is not a label name (the exporter's "
                             "cluster_label setting, e.g. kafka_cluster)")

    @property
    def kafka_selector(self) -> str:
        """Matchers for the series the exporter serves: its job(s), then the clusters."""
        return ", ".join(m for m in (self.exporter_job_selector, self.cluster_selector) if m)

    def replace(self, **changes: Any) -> AlertConfig:
        return dataclasses.replace(self, **changes)

    @classmethod
    def from_mapping(cls, values: Mapping[str, Any] | None) -> AlertConfig:
        """An AlertConfig from a mapping (e.g. a YAML file's `alerts:` section). Unknown keys
        and wrong types raise ValueError naming the key."""
        values = dict(values or {})
        fields = {f.name: f for f in dataclasses.fields(cls)}
        unknown = sorted(set(values) - set(fields))
        if unknown:
            raise ValueError(f"unknown alert setting(s): {', '.join(unknown)}")
        defaults = cls()
        out: dict[str, Any] = {}
        for key, value in values.items():
            default = getattr(defaults, key)
            if isinstance(default, Mapping):
                ok = isinstance(value, Mapping)
            elif isinstance(default, tuple):
                ok = isinstance(value, list | tuple) and all(isinstance(v, str) for v in value)
                value = tuple(value) if ok else value
            elif isinstance(default, int | float) and not isinstance(default, bool):
                ok = isinstance(value, int | float) and not isinstance(value, bool)
                value = float(value) if ok else value
            else:
                ok = isinstance(value, type(default))
            if not ok:
                raise ValueError(f"alert setting {key}: expected {type(default).__name__}, got {value!r}")
            if key.endswith("_for") or key.endswith("_window"):
                if not re.fullmatch(r"(\d+[smhdwy])+", value):
                    raise ValueError(f"alert setting {key}: {value!r} is not a Prometheus duration")
            out[key] = value
        return cls(**out)
