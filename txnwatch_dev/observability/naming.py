"""Prometheus's naming rules ("Writing exporters", "Metric and label naming") as checks of
txnwatch's catalogue and of a real scrape: what `promtool check metrics` does not see.

Each check returns a list of problems (empty: clean), so a test can show them all at once."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping

from prometheus_client.parser import text_string_to_metric_families

from txnwatch.metrics import CATALOG, DEFAULT_CLUSTER_LABEL, OBSERVED_PREFIX, MetricSpec

# The last word of a name says what is counted or measured.
UNITS = {"seconds", "bytes", "offsets", "records", "replicas", "rows", "total", "info", "ratio"}

# Families without a unit word, and why that is right for each: a position in a log, a
# 0/1 state, a count of the named things, a level or an id. A new family either ends in a
# unit or is added here with its reason.
UNITLESS: Mapping[str, str] = {
    "kafka_partition_high_watermark": "an offset (a position, not an amount)",
    "kafka_partition_last_stable_offset": "an offset (a position)",
    "kafka_consumergroup_committed_offset": "an offset (a position)",
    "spark_streaming_source_partition_offset": "an offset (a position)",
    "spark_streaming_batch_id": "an id",
    "kafka_cluster_feature_level": "a feature level",
    "kafka_broker_transaction_state_log_replication_factor": "a broker setting: a number of replicas by name",
    "kafka_transaction_open": "a count of transactions (the name's subject)",
    "kafka_transaction_two_phase_open": "a count of transactions",
    "kafka_transaction_hanging": "a count of transactions",
    "kafka_transactional_ids": "a count of transactional ids",
    "kafka_cluster_brokers": "a count of brokers",
    "kafka_cluster_groups": "a count of groups",
    "kafka_broker_missing_replicas": "a count of partitions (a replica each)",
    "kafka_transaction_state_log_partitions_below_min_isr": "a count of partitions",
    "kafka_partition_unavailable": "0/1 state",
    "kafka_consumergroup_unavailable": "0/1 state",
    "spark_streaming_query_active": "0/1 state",
    "txnwatch_up": "0/1 state",
    "txnwatch_capability": "0/1 state",
    "txnwatch_tap_rebuilt": "0/1 state",
    "txnwatch_tap_partitions": "a count of partitions",
    "txnwatch_series": "a count of series (as Prometheus's own prometheus_tsdb_head_series)",
}

# Names other common Kafka exporters use (kafka_exporter 1.9, KMinion 2.x, Strimzi's JMX
# rules' prefixes): a rule that reads one must never pick up both.
OTHER_EXPORTERS = {
    "kafka_brokers", "kafka_broker_info", "kafka_topic_partitions", "kafka_topic_partition_current_offset",
    "kafka_topic_partition_oldest_offset", "kafka_topic_partition_in_sync_replica", "kafka_topic_partition_leader",
    "kafka_topic_partition_leader_is_preferred", "kafka_topic_partition_replicas",
    "kafka_topic_partition_under_replicated_partition", "kafka_consumergroup_current_offset",
    "kafka_consumergroup_current_offset_sum", "kafka_consumergroup_lag", "kafka_consumergroup_lag_sum",
    "kafka_consumergroup_members", "kafka_consumergroupzookeeper_lag_zookeeper", "kafka_consumer_lag_millis",
}
OTHER_PREFIXES = ("kminion_", "kafka_server_", "kafka_controller_", "kafka_network_", "kafka_log_",
                  "kafka_cluster_partition_", "kafka_coordinator_")

# Label names that split one measurement, hold an aggregate, or say nothing.
BAD_LABELS = {"type", "stat", "statistic", "isolation", "aggregate", "min", "max", "avg", "quantile", "le",
              "cluster"}     # `cluster` is the catalogue's symbol: exposed under cluster_label

# Families whose values may be negative (a timeout already passed); everywhere else a
# negative value would be a sentinel.
MAY_BE_NEGATIVE = {"kafka_transaction_timeout_headroom_seconds", "kafka_producer_transaction_timeout_headroom_seconds",
                   "kafka_transactional_id_expiration_headroom_seconds", "spark_streaming_watermark_delay_seconds"}


def _specs() -> Iterable[MetricSpec]:
    return (s for s in CATALOG.values() if not s.name.startswith(OBSERVED_PREFIX))


def catalogue_problems() -> list[str]:
    out = []
    for spec in _specs():
        name, last = spec.name, spec.name.rsplit("_", 1)[-1]
        if spec.kind == "counter" and name.endswith("_total"):
            out.append(f"{name}: counter declared with _total (the writer adds it)")
        if spec.kind != "counter" and name.endswith("_total"):
            out.append(f"{name}: a {spec.kind} named like a counter")
        if spec.kind == "info" and name.endswith("_info"):
            out.append(f"{name}: info declared with _info (the writer adds it)")
        if spec.kind == "gauge" and name.endswith("_info") and "1 for" not in spec.help:
            out.append(f"{name}: _info gauge whose HELP does not say it is 1")
        if last not in UNITS and name not in UNITLESS and spec.kind not in ("info", "counter"):
            out.append(f"{name}: ends in {last!r}, not a unit ({sorted(UNITS)}) and not in UNITLESS")
        if "per_second" in name or name.endswith("_rate"):
            out.append(f"{name}: a rate exported as a gauge (leave rates to rate())")
        if "messages" in name:
            out.append(f"{name}: counts offsets (markers included), not messages")
        exposed = spec.exposed_name
        if spec.kind == "info":
            exposed = name + "_info"
        if exposed in OTHER_EXPORTERS or exposed.startswith(OTHER_PREFIXES):
            out.append(f"{exposed}: a name another Kafka exporter uses")
        bad = (set(spec.labels) - {"cluster"}) & BAD_LABELS
        if bad:
            out.append(f"{name}: label(s) {sorted(bad)}")
        if "(-1" in spec.help or "-1:" in spec.help:
            out.append(f"{name}: HELP documents a -1 sentinel")
    stale = set(UNITLESS) - {s.name for s in _specs()}
    out += [f"UNITLESS lists {n}, which the catalogue no longer has" for n in sorted(stale)]
    return out


def scrape_problems(text: str, cluster_label: str = DEFAULT_CLUSTER_LABEL) -> list[str]:
    """Problems in a real /metrics body: families outside the catalogue, labels other than
    the catalogue's (with `cluster` exposed as `cluster_label`), negative sentinels."""
    out = []
    for fam in text_string_to_metric_families(text):
        if fam.name.startswith(("process_", "python_")):
            continue
        base = fam.name
        if base.endswith("_info") and getattr(CATALOG.get(base[:-5]), "kind", "") == "info":
            base = base[:-5]
        spec = CATALOG.get(base) or (CATALOG.get(OBSERVED_PREFIX + "<name>_<metric>")
                                     if base.startswith(OBSERVED_PREFIX) else None)
        if spec is None:
            out.append(f"{base}: not in the catalogue")
            continue
        want = {cluster_label if k == "cluster" else k for k in spec.labels}
        for s in fam.samples:
            labels = set(s.labels) - {"le"}
            if labels != want:
                out.append(f"{s.name}{sorted(s.labels)}: labels are not the catalogue's {sorted(want)}")
            if "cluster" in s.labels and cluster_label != "cluster":
                out.append(f"{s.name}: exposes `cluster` (clashes with target labels)")
            if s.value < 0 and base not in MAY_BE_NEGATIVE and not math.isinf(s.value):
                out.append(f"{s.name}{dict(s.labels)} = {s.value}: negative (a sentinel?)")
            if s.name.endswith("_info") and s.value != 1:
                out.append(f"{s.name}: info series with value {s.value}")
    return out
