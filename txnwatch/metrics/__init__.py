"""The metric catalogue and a writer that turns samples into metric families.

Every series txnwatch exports is declared once here (name, type, help, labels,
buckets). Collectors write samples through `FamilyWriter`, which checks them against
the catalogue, so docs/metrics.md can be generated from this module and a bad value
in one series is dropped and counted instead of failing the whole scrape.
"""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    InfoMetricFamily,
    Metric,
)

from .exposition import FamilyChunk, escape_label, format_value

log = logging.getLogger(__name__)

# Commit latency: 1 ms to 60 s. Durations: up to 15 min (the broker's default
# transaction.max.timeout.ms) and one bucket past it.
COMMIT_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)
DURATION_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 900, 1800)
BATCH_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600)


@dataclass(frozen=True)
class MetricSpec:
    name: str          # without the _total suffix for counters (client_python adds it)
    kind: str          # gauge | counter | histogram | info
    help: str
    labels: tuple[str, ...]
    buckets: tuple[float, ...] = ()
    source: str = "exporter"   # exporter | tap | canary | client | spark | self

    @property
    def exposed_name(self) -> str:
        return self.name + "_total" if self.kind == "counter" else self.name


# The admin poller's families are served from its last completed poll, never fetched at
# scrape time: their HELP says so, and where to read how old that is.
AS_OF_LAST_POLL = "As of the last poll (see txnwatch_data_age_seconds)."

# An open transaction reads as alive while its last sign of life, the later of the coordinator's
# last change (kafka_transaction_state_unchanged_seconds) and its producer's last append
# (kafka_transaction_last_append_age_seconds), is at most this old. One number for the page,
# `txnwatch check` and KafkaTransactionHanging's description, so all three word a transaction
# alike; the alert rules cannot know the poll interval, so it is not derived from it.
ALIVE_WITHIN_SECONDS = 60.0


def _m(name, kind, help_, labels, buckets=(), source="exporter") -> MetricSpec:
    if source == "exporter":
        help_ = f"{help_} {AS_OF_LAST_POLL}"
    return MetricSpec(name, kind, help_, tuple(labels), tuple(buckets), source)


# "cluster" is the catalogue's name for the label that carries the configured Kafka cluster; it is
# exposed under the configured `cluster_label` (default kafka_cluster, see FamilyWriter).
C, CA = ("cluster",), ("cluster", "app")
OBSERVED_PREFIX = "spark_streaming_observed_"
# Not `cluster`: the label multi-cluster stacks attach to every target (and Thanos/Mimir as an
# external label), which would rename txnwatch's to exported_cluster or override it.
DEFAULT_CLUSTER_LABEL = "kafka_cluster"


def observed_suffix(observation: str, metric: str) -> str:
    """`<observation>_<metric>` as a metric-name fragment: lower case, runs of other
    characters as one underscore."""
    return re.sub(r"[^a-z0-9]+", "_", f"{observation}_{metric}".lower()).strip("_") or "unnamed"
CTP = ("cluster", "topic", "partition")
# the per-id series budget of open transactions (exporter/transaction_series.py)
PER_ID_BUDGET = (" At granularity signal and topic an open transaction has a series of its own while it carries a "
                 "signal (half its timeout used, 10 s or less left, a timeout above the broker's cap, a named app) "
                 "and its id for the linger after; the app's other open transactions are transactional_id=\"__other__\".")
Q = ("query", "query_id")

CATALOG: dict[str, MetricSpec] = {s.name: s for s in [
    # --- Kafka side: transactions (KIP-664 poller and/or transaction-log tap)
    _m("kafka_transaction_open", "gauge", "Open transactions (Ongoing or Prepare*) right now.", CA),
    _m("kafka_transaction_oldest_open_age_seconds", "gauge",
       "Age of the oldest open transaction with a timeout (now - transaction start); two-phase-commit "
       "transactions have their own series.", CA),
    _m("kafka_transaction_two_phase_open", "gauge",
       "Open two-phase-commit transactions (KIP-939: transaction timeout Integer.MAX_VALUE, never aborted "
       "by the coordinator; an external transaction manager ends them). Also counted in "
       "kafka_transaction_open.", CA),
    _m("kafka_transaction_two_phase_oldest_age_seconds", "gauge",
       "Age of the oldest open two-phase-commit transaction (now - transaction start).", CA),
    _m("kafka_transaction_timeout_headroom_seconds", "gauge",
       "start + transaction.timeout.ms - now for open transactions; the minimum per series. "
       "Negative means the transaction is past its timeout. Not for two-phase-commit transactions "
       "(they never time out)." + PER_ID_BUDGET, CA + ("transactional_id",)),
    _m("kafka_transaction_state_unchanged_seconds", "gauge",
       "now - the coordinator's last change of an open transaction's state (status, producer id and "
       "epoch, partitions); the maximum per series. With the transaction-log tap, from the id's last "
       "record (TransactionLastUpdateTimestampMs); with the poller alone, from the poll that first saw "
       "that state (a transaction first seen counts from its start). A producer appending records to "
       "partitions already in its transaction changes no coordinator state: its appends are "
       "kafka_transaction_last_append_age_seconds." + PER_ID_BUDGET, CA + ("transactional_id",)),
    _m("kafka_transaction_last_append_age_seconds", "gauge",
       "now - the last append of an open transaction's producer on any of its partitions, as their "
       "leaders report it (DescribeProducers' last timestamp: the record time of its last batch, the "
       "producer's clock unless the topic uses LogAppendTime); the maximum per series. Read for the "
       "watched partitions whose LSO the transaction holds; absent where none was described (no KIP-664, "
       "no READ on the topic). Comes from the poller also when the tap runs." + PER_ID_BUDGET,
       CA + ("transactional_id",)),
    _m("kafka_transactions", "counter", "Completed transactions by outcome (committed|aborted).",
       CA + ("outcome",), source="tap"),
    _m("kafka_transaction_duration_seconds", "histogram",
       "Transaction duration from start to completion.", CA + ("outcome",), DURATION_BUCKETS, "tap"),
    _m("kafka_transaction_completion_seconds", "histogram",
       "Completion latency: PrepareCommit/PrepareAbort to CompleteCommit/CompleteAbort.",
       CA + ("outcome",), COMMIT_BUCKETS, "tap"),
    _m("kafka_transaction_fencing_events", "counter",
       "Open transactions cut off by a fence, from the coordinator's log: reason=timeout (the "
       "coordinator aborted a transaction past its transaction.timeout.ms), new_instance (another "
       "instance's InitProducerId aborted the open transaction of the id: a zombie cut off), operator "
       "(Admin.fenceProducers / kafka-transactions.sh forceTerminateTransaction, told apart by its 30 s "
       "timeout; open or idle), startup_abort (a Flink KafkaSink starting up aborted a transaction its "
       "failed run left open). Re-initialisations of idle ids are "
       "kafka_transactional_id_reinitializations_total.",
       CA + ("reason",), source="tap"),
    _m("kafka_transactional_id_reinitializations", "counter",
       "InitProducerId for a transactional id the coordinator already had, with no transaction open: "
       "a restart, a task moved to another worker or executor, a pool's re-initialisation (churn, not "
       "a fault; it fences an idle producer of the id, if one is left).", CA, source="tap"),
    _m("kafka_transaction_timeouts", "counter",
       "Transactions the coordinator aborted because start + timeout had passed.", CA, source="tap"),
    _m("kafka_transactional_id_expirations", "counter",
       "Transactional ids the coordinator expired (tombstones in __transaction_state).", CA, source="tap"),
    _m("kafka_transactional_ids", "gauge", "Transactional ids known to the coordinator's log.", CA,
       source="tap"),
    _m("kafka_transactional_id_expiration_headroom_seconds", "gauge",
       "transactional.id.expiration.ms - idle time, for idle (not open) transactional ids; min per series. "
       "An app of Flink's KafkaSink id scheme (an id per checkpoint, never used again) has one series, "
       "transactional_id=\"__newest__\": its newest idle id's, the one a restore from its last checkpoint "
       "commits; ids past the per-id cap are transactional_id=\"__other__\".",
       CA + ("transactional_id",), source="tap"),
    _m("kafka_transaction_epoch_bumps", "counter",
       "Producer epoch changes seen between polls of DescribeTransactions (KIP-664 poller).", CA),
    _m("kafka_transaction_hanging_ended", "counter",
       "Hanging transactions the poller saw end (their partition's LSO moved past them), by how: markers "
       "(abort markers written straight to the partition, an operator's abort: txnwatch abort or "
       "kafka-transactions.sh abort; the coordinator's state of the producer did not change), producer (a later "
       "transaction of the same producer ended and its markers closed the partition too), coordinator (that "
       "later transaction was aborted past its timeout), unknown (found by a stalled LSO, without KIP-664).",
       CA + ("how",)),
    _m("kafka_transaction_hanging", "gauge",
       "Hanging transactions per partition: open longer than transaction.max.timeout.ms (+5 min) "
       "with no live coordinator state (KIP-664), or, without KIP-664, an LSO stalled below the HWM "
       "for longer than the hanging threshold.", CTP),
    # --- Kafka side: partitions and groups
    _m("kafka_partition_high_watermark", "gauge", "High watermark (read_uncommitted end offset).", CTP),
    _m("kafka_partition_last_stable_offset", "gauge", "Last stable offset (read_committed end offset).", CTP),
    _m("kafka_partition_lso_lag_offsets", "gauge",
       "High watermark - last stable offset: offsets (records and transaction markers) held back by "
       "open transactions.", CTP),
    _m("kafka_partition_lso_stalled_seconds", "gauge",
       "How long the LSO has stayed below the HWM without advancing (0 when it is caught up).", CTP),
    _m("kafka_partition_unavailable", "gauge",
       "1 for a partition whose offsets this poll could not read: cause=offline (no leader), "
       "invalid_offset (an answer without offsets: its leader just died) or the error of its leader's "
       "answer (timeout, kafka_<error>). Its other series keep the last values "
       "read; every other partition's are current.", CTP + ("cause",)),
    _m("kafka_consumergroup_read_committed_lag_offsets", "gauge",
       "Last stable offset - committed offset: what a read_committed consumer of the group can still "
       "read (offsets, transaction markers included); 0 where only transaction markers (and aborted "
       "records) lie between them: a gap of at most 5 offsets that has not moved since the last poll is "
       "read once to tell.", ("cluster", "group", "topic", "partition")),
    _m("kafka_consumergroup_read_uncommitted_lag_offsets", "gauge",
       "High watermark - committed offset: the lag a read_uncommitted consumer (and kafka_exporter's "
       "kafka_consumergroup_lag) sees; above the read_committed lag while transactions are open.",
       ("cluster", "group", "topic", "partition")),
    _m("kafka_consumergroup_unavailable", "gauge",
       "1 for a consumer group whose committed offsets this poll could not read (its coordinator did "
       "not answer; cause as in txnwatch_poll_errors_total): its lag series keep the last values read.",
       ("cluster", "group", "cause")),
    _m("kafka_consumergroup_committed_offset", "gauge", "Committed offset of a consumer group.",
       ("cluster", "group", "topic", "partition")),
    _m("kafka_cluster_brokers", "gauge", "Live brokers in the cluster metadata.", C),
    _m("kafka_cluster_feature_level", "gauge",
       "The cluster's finalized feature levels (ApiVersions), e.g. feature=\"transaction.version\": 2 when "
       "4.x clients bump the epoch at every commit (KIP-890), group.version, share.version.",
       ("cluster", "feature")),
    _m("kafka_cluster_groups", "gauge",
       "Groups the brokers list, by group_type (ListGroups v5, refreshed with the broker configs): classic and "
       "consumer (KIP-848) groups have committed-offset and lag series; share groups (KIP-932) have no "
       "committed offsets and are only counted here (and named on the page).", ("cluster", "group_type")),
    _m("kafka_broker_transaction_max_timeout_seconds", "gauge",
       "Broker transaction.max.timeout.ms (the cap on producers' transaction.timeout.ms).", C),
    _m("kafka_broker_transactional_id_expiration_seconds", "gauge",
       "Broker transactional.id.expiration.ms.", C),
    _m("kafka_broker_producer_id_expiration_seconds", "gauge", "Broker producer.id.expiration.ms.", C),
    _m("kafka_broker_transaction_state_log_min_isr_replicas", "gauge",
       "Broker transaction.state.log.min.isr (each partition's effective minimum is "
       "kafka_transaction_state_log_partition_min_isr_replicas).", C),
    _m("kafka_broker_transaction_state_log_replication_factor", "gauge",
       "Broker transaction.state.log.replication.factor.", C),
    _m("kafka_transaction_state_log_partition_isr_replicas", "gauge",
       "In-sync replicas of each __transaction_state partition (cluster metadata).", C + ("partition",)),
    _m("kafka_transaction_state_log_partition_min_isr_replicas", "gauge",
       "The ISR each __transaction_state partition needs for the coordinator's writes: the topic's "
       "min.insync.replicas, capped at its replica count (as the leader's append check reads it).",
       C + ("partition",)),
    _m("kafka_transaction_state_log_partitions_below_min_isr", "gauge",
       "__transaction_state partitions offline or with fewer in-sync replicas than they need: "
       "InitProducerId and EndTxn block for every transactional id that hashes to them.", C),
    _m("kafka_broker_missing_replicas", "gauge",
       "Partitions (watched ones and __transaction_state) that list this broker as a replica while it "
       "is absent from the cluster metadata: a broker that is down.", C + ("broker",)),
    _m("kafka_topic_retention_seconds", "gauge", "Topic retention.ms (+Inf: infinite, retention.ms=-1).",
       ("cluster", "topic")),
    # --- client side: the instrumented transactional producer / Spark sink
    # Histograms per app only: per-id buckets would multiply series by ~16.
    _m("kafka_producer_transaction_commit_seconds", "histogram", "commit_transaction() call latency.",
       ("app",), COMMIT_BUCKETS, "client"),
    _m("kafka_producer_transaction_duration_seconds", "histogram",
       "begin_transaction() to commit/abort completion.", ("app", "outcome"),
       DURATION_BUCKETS, "client"),
    _m("kafka_producer_transactions", "counter", "Transactions finished by the producer, by outcome.",
       ("app", "transactional_id", "outcome"), source="client"),
    _m("kafka_producer_transaction_errors", "counter",
       "Transaction errors by librdkafka error name (PRODUCER_FENCED, INVALID_PRODUCER_EPOCH, ...).",
       ("app", "transactional_id", "error"), source="client"),
    _m("kafka_producer_transaction_timeout_headroom_seconds", "gauge",
       "transaction.timeout.ms - duration of the id's last transaction (its lowest over a window: "
       "min_over_time).", ("app", "transactional_id"), source="client"),
    # --- Spark side (listener)
    _m("spark_streaming_query_active", "gauge", "1 while the query runs, 0 after it terminated.", Q,
       source="spark"),
    _m("spark_streaming_batch_id", "gauge", "Last completed micro-batch id.", Q, source="spark"),
    _m("spark_streaming_query_trigger_info", "gauge",
       "1 for the query's trigger mode (ProcessingTime, AvailableNow, Once, Continuous, RealTime; "
       "another name is a mode txnwatch does not know), looked up by the listener once per run.",
       Q + ("trigger",), source="spark"),
    _m("spark_streaming_trigger_interval_seconds", "gauge",
       "The query's trigger interval (RealTime: its batch duration, which is also how often it "
       "reports progress).", Q, source="spark"),
    _m("spark_streaming_batch_duration_seconds", "histogram", "Micro-batch duration (batchDuration).", Q,
       BATCH_BUCKETS, "spark"),
    _m("spark_streaming_batch_phase_seconds", "histogram",
       "Micro-batch phase durations (durationMs keys: addBatch, walCommit, ...).", Q + ("phase",),
       BATCH_BUCKETS, "spark"),
    _m("spark_streaming_commit_seconds", "histogram", "walCommit + commitOffsets per micro-batch.", Q,
       COMMIT_BUCKETS, "spark"),
    _m("spark_streaming_input_rows", "counter", "Input rows processed.", Q, source="spark"),
    _m("spark_streaming_source_partition_offset", "gauge",
       "Per Kafka partition, the offset the query reads next: its last micro-batch's endOffset.",
       Q + ("source", "topic", "partition"), source="spark"),
    _m("spark_streaming_source_partition_behind_latest_offsets", "gauge",
       "Per Kafka partition, latestOffset - endOffset of the last micro-batch (read_committed: "
       "latest is the partition's last stable offset, so 0 behind can still mean blocked).",
       Q + ("source", "topic", "partition"), source="spark"),
    _m("spark_streaming_source_blocked_seconds", "gauge",
       "Per Kafka partition a query has read up to its last stable offset while an open transaction "
       "holds that offset below the high watermark: how long the LSO has been stalled (only while blocked).",
       ("cluster",) + Q + ("topic", "partition"), source="exporter"),
    _m("spark_streaming_sink_output_rows", "counter",
       "Rows the query's sink reported written (sink.numOutputRows; foreachBatch sinks report none).",
       Q, source="spark"),
    _m("spark_streaming_state_rows", "gauge", "State store rows per operator.", Q + ("operator",),
       source="spark"),
    _m("spark_streaming_state_memory_bytes", "gauge", "State store memory per operator.", Q + ("operator",),
       source="spark"),
    _m("spark_streaming_watermark_delay_seconds", "gauge",
       "Progress timestamp - event-time watermark.", Q, source="spark"),
    # One family per observed metric (Dataset.observe): each is the query's own measurement, in its
    # own unit, so they never share a family. FamilyWriter.add_observed names them.
    _m(OBSERVED_PREFIX + "<name>_<metric>", "gauge",
       "A numeric observedMetrics value (Dataset.observe(name, ...), column metric), in the unit the "
       "query computes it in; names sanitised to [a-z0-9_].", Q, source="spark"),
    _m("spark_streaming_last_progress_timestamp_seconds", "gauge", "Timestamp of the last progress event.",
       Q, source="spark"),
    _m("spark_streaming_idle_events", "counter", "QueryIdleEvents received.", Q, source="spark"),
    _m("spark_streaming_query_terminations", "counter", "Query terminations by error class (none when clean).",
       Q + ("error_class",), source="spark"),
    # --- transactional canary (`canary:` per cluster, opt-in)
    _m("txnwatch_canary_init_seconds", "gauge",
       "Duration of the canary producer's last InitProducerId (init_transactions), successful or not.", C,
       source="canary"),
    _m("txnwatch_canary_commit_seconds", "histogram",
       "Canary commit call latency (commit_transaction of a round's transaction).", C, COMMIT_BUCKETS,
       source="canary"),
    _m("txnwatch_canary_visibility_seconds", "histogram",
       "Canary end-to-end visibility per partition: produce start to the record returned by a "
       "read_committed consumer.", ("cluster", "partition"), COMMIT_BUCKETS, source="canary"),
    _m("txnwatch_canary_rounds", "counter",
       "Canary rounds completed, by outcome (committed|aborted: one in abort_every is aborted on purpose).",
       ("cluster", "outcome"), source="canary"),
    _m("txnwatch_canary_failures", "counter",
       "Canary failures by stage (topic|init|begin|produce|commit|abort|visibility_timeout) and librdkafka "
       "error name (visibility_timeout: a committed record not visible within the timeout, error timed_out).",
       ("cluster", "stage", "error"), source="canary"),
    _m("txnwatch_canary_visibility_timeouts", "counter",
       "Per canary partition, canary records not visible to the read_committed consumer in time: the partition "
       "took no record within the round's interval (leader unavailable), or a committed one was not returned.",
       ("cluster", "partition"), source="canary"),
    _m("txnwatch_canary_visibility_violations", "counter",
       "Records of aborted canary transactions a read_committed consumer returned. Must stay 0: anything "
       "else is a broker or client bug.", C, source="canary"),
    _m("txnwatch_canary_last_success_timestamp_seconds", "gauge",
       "Unix time of the canary's last round whose transaction ended as intended (committed or aborted).", C,
       source="canary"),
    # --- transaction-log tap (its own position and progress)
    _m("txnwatch_tap_records_applied", "counter",
       "Records of __transaction_state decoded and applied by the transaction-log tap (rebuild included).",
       C, source="self"),
    _m("txnwatch_tap_records_skipped", "counter",
       "Records of __transaction_state the tap could not decode and skipped, by reason "
       "(unknown_key_version|unknown_value_version|unknown_status|truncated|malformed).",
       ("cluster", "reason"), source="self"),
    _m("txnwatch_tap_lag_records", "gauge",
       "Records of __transaction_state not yet read by the tap (end offsets - next offsets).", C,
       source="self"),
    _m("txnwatch_tap_partitions", "gauge", "Partitions of __transaction_state the tap reads.", C,
       source="self"),
    _m("txnwatch_tap_rebuilt", "gauge",
       "1 once the tap has rebuilt state from the log as of its start, else 0. Records of the rebuild "
       "are not counted, except those of a log created after the tap started (stamped after it saw none).",
       C, source="self"),
    _m("txnwatch_tap_last_record_timestamp_seconds", "gauge",
       "Timestamp of the last __transaction_state record the tap applied.", C, source="self"),
    # --- self
    _m("txnwatch_up", "gauge", "1 when the source's last poll succeeded.", ("cluster", "source"),
       source="self"),
    _m("txnwatch_poll_duration_seconds", "gauge", "Duration of the source's last poll.",
       ("cluster", "source"), source="self"),
    _m("txnwatch_poll_errors", "counter",
       "Poll errors by cause (timeout, auth, tls, authorization, unreachable, ...; group_offsets_<cause>: "
       "groups left out of a poll while the others answered; worker_exit / worker_stalled: the cluster's "
       "worker process).", ("cluster", "source", "cause"),
       source="self"),
    _m("txnwatch_polls", "counter",
       "Polls the admin poller made, successful or not: with process_cpu_seconds_total, the CPU a poll costs; "
       "timed to the scrapes (poll_schedule scrapes), about one per scrape.", ("cluster", "source"),
       source="self"),
    _m("txnwatch_last_success_timestamp_seconds", "gauge", "Unix time of the source's last successful poll.",
       ("cluster", "source"), source="self"),
    _m("txnwatch_data_age_seconds", "gauge",
       "Age of the data a source last published (now - when it was taken): grows while a source or its "
       "worker process is down or stalled, whose last data keeps being served.", ("cluster", "source"),
       source="self"),
    _m("txnwatch_shard", "info",
       "On a replica started with --total-shards: which share of the work it has (see txnwatch.sharding).",
       ("shard", "total_shards"), source="self"),
    _m("txnwatch_scrape_waits", "counter",
       "Scrapes that came while a poll ran past its usual length and waited for its data, by outcome "
       "(served: the poll's data came; timed_out: a quarter of the scraper's timeout passed and the data "
       "before was served). Only scrapers that send their timeout (X-Prometheus-Scrape-Timeout-Seconds) wait.",
       ("cluster", "outcome"), source="self"),
    _m("txnwatch_scrape_wait_seconds", "counter",
       "Seconds scrapes spent waiting for a poll that ran past its usual length (txnwatch_scrape_waits_total), "
       "in all.", ("cluster",), source="self"),
    _m("txnwatch_worker_restarts", "counter",
       "Times the cluster's worker process (http.worker_processes) was restarted after it exited or stalled.",
       ("cluster",), source="self"),
    _m("txnwatch_capability", "gauge",
       "1 when the cluster supports the API: the KIP-664 calls (list_transactions, describe_transactions, "
       "describe_producers), their filters list_transactions_duration_filter (KIP-994, 3.8+) and "
       "list_transactions_id_pattern (KIP-1152, 4.1+), and offset_fetch_batched (committed offsets of many "
       "groups per OffsetFetch v8, KIP-709; 0: one request per group).",
       ("cluster", "api"), source="self"),
    _m("txnwatch_series", "gauge",
       "Series this exposition carries per metric family, named as in the text format (a counter's "
       "with _total); each sample line is one series (a histogram's buckets, _sum and _count each "
       "count). Watch it against the series budget your Prometheus takes from one target.",
       ("family",), source="self"),
    _m("txnwatch_series_dropped", "counter",
       "Series folded into transactional_id=\"__other__\" by the per-id cap, or dropped as invalid.",
       ("cluster", "metric", "reason"), source="self"),
    _m("txnwatch_listener_errors", "counter",
       "Failures inside the Spark listener, its forwarder or the ingest, by stage "
       "(convert|apply|render|forward|...); each stage is logged once, then only counted.",
       ("stage",), source="self"),
    _m("txnwatch_listener_events_dropped", "counter",
       "Spark listener events not applied or not delivered, by reason (queue_full, send_failed, "
       "rejected, query_limit, ...).", ("reason",), source="self"),
    _m("txnwatch_build", "info", "txnwatch version, the source revision it was built from, and Python version.",
       ("version", "revision", "python"), source="self"),
]}


class FamilyWriter:
    """Accumulates samples per catalogue metric; yields exposition chunks (fast path, see
    txnwatch.metrics.exposition) or prometheus_client families (for registry-based users).

    A sample with a missing label or a non-finite/invalid value is dropped and counted
    in `invalid` instead of raising, so one broken series never fails a scrape. Samples
    are kept as plain tuples: a big snapshot renders without building client objects.
    """

    def __init__(self, catalog: Mapping[str, MetricSpec] = CATALOG,
                 cluster_label: str = DEFAULT_CLUSTER_LABEL) -> None:
        self._catalog = catalog
        self._samples: dict[str, list[tuple]] = {}
        self._info: dict[str, dict[str, str]] = {}
        self._observed: dict[str, MetricSpec] = {}      # per-query observed metrics' families
        self._observed_keys: set[tuple] = set()
        # catalogue label name -> exposed name: the Kafka cluster's label is configurable
        self._exposed = {"cluster": cluster_label}
        self.invalid: dict[str, int] = {}
        self._lines: dict[str, list[bytes]] = {}        # sample lines formatted by the caller

    def _spec(self, name: str) -> MetricSpec:
        return self._observed.get(name) or self._catalog[name]

    def _label_names(self, spec: MetricSpec) -> tuple[str, ...]:
        return tuple([self._exposed.get(k, k) for k in spec.labels])

    def add_observed(self, labels: Mapping[str, object], observation: str, metric: str,
                     value: float | int | None) -> None:
        """A Spark observedMetrics value: family spark_streaming_observed_<observation>_<metric>."""
        full = OBSERVED_PREFIX + observed_suffix(observation, metric)
        key = (full, tuple(sorted((k, str(v)) for k, v in labels.items())))
        if key in self._observed_keys:    # two names that sanitise alike: keep the first
            self._bad(full, f"{observation}.{metric} sanitises to a name already written")
            return
        if full not in self._observed:
            template = self._catalog[OBSERVED_PREFIX + "<name>_<metric>"]
            self._observed[full] = MetricSpec(
                full, "gauge", f"observedMetrics {observation}.{metric} (Dataset.observe), in the query's unit.",
                template.labels, source=template.source)
        self._observed_keys.add(key)
        self.add(full, labels, value)

    def _bad(self, name: str, why: str) -> None:
        self.invalid[name] = self.invalid.get(name, 0) + 1
        log.debug("dropped a sample of %s: %s", name, why)

    def add(self, name: str, labels: Mapping[str, object], value: float | int | None) -> None:
        """A gauge or counter sample. `None` means unknown: nothing is written."""
        if value is None:
            return
        try:
            spec = self._spec(name)
            v = float(value)
            if v != v or (spec.kind == "counter" and (v < 0 or v == math.inf)):
                raise ValueError(f"value {value!r}")
            values = tuple([str(labels[k]) for k in spec.labels])
        except (KeyError, TypeError, ValueError) as exc:
            self._bad(name, repr(exc))
            return
        bucket = self._samples.get(name)
        if bucket is None:
            bucket = self._samples[name] = []
        bucket.append((values, v))

    def exposed_label(self, name: str) -> str:
        """The label name `name` is exported as (the cluster's label is configurable)."""
        return self._exposed.get(name, name)

    def add_lines(self, name: str, body: bytes) -> None:
        """Sample lines of catalogue gauge `name`, formatted by the caller (poll/render.py keeps
        them per topic and group between polls): `chunks()` adds them as they are. Only the
        exposition path takes them; `families()` refuses a writer that has any."""
        if self._spec(name).kind != "gauge":
            raise ValueError(f"add_lines takes gauges only, not {name}")
        if body:
            self._lines.setdefault(name, []).append(body)

    def histogram(self, name: str, labels: Mapping[str, object], bucket_counts: Sequence[int],
                  total: float) -> None:
        """A histogram sample from per-bucket (non-cumulative) counts; the last count is +Inf."""
        try:
            spec = self._catalog[name]
            if len(bucket_counts) != len(spec.buckets) + 1:
                raise ValueError(f"{len(bucket_counts)} bucket counts for {len(spec.buckets)} bounds")
            cumulative, acc = [], 0
            for n in bucket_counts:
                acc += int(n)
                cumulative.append(acc)
            values = tuple(str(labels[k]) for k in spec.labels)
            total = float(total)
        except (KeyError, TypeError, ValueError) as exc:
            self._bad(name, repr(exc))
            return
        self._samples.setdefault(name, []).append((values, (cumulative, total)))

    def info(self, name: str, values: Mapping[str, str]) -> None:
        self._catalog[name]  # noqa: B018 - must be a catalogue metric
        self._info[name] = {k: str(v) for k, v in values.items()}

    # ----------------------------------------------------------------- output
    def chunks(self) -> dict:
        """{family name: FamilyChunk} formatted directly from the stored tuples."""
        out = {}
        for name, samples in self._samples.items():
            spec = self._spec(name)
            names = self._label_names(spec)
            lines: list[str] = []
            if spec.kind == "histogram":
                bounds = [*map(_fmt_bound, spec.buckets), "+Inf"]
                for values, (cumulative, total) in samples:
                    lbl = ",".join(f'{k}="{escape_label(v)}"' for k, v in zip(names, values, strict=True))
                    sep = "," if lbl else ""
                    for bound, acc in zip(bounds, cumulative, strict=True):
                        lines.append(f'{name}_bucket{{{lbl}{sep}le="{bound}"}} {acc}.0\n')
                    brace = f"{{{lbl}}}" if lbl else ""
                    lines.append(f"{name}_count{brace} {cumulative[-1]}.0\n")
                    lines.append(f"{name}_sum{brace} {format_value(total)}\n")
            else:
                sample = spec.exposed_name
                keys = [f'{k}="' for k in names]
                if keys:
                    for values, v in samples:
                        lbl = '",'.join([kq + escape_label(x) for kq, x in zip(keys, values, strict=True)])
                        lines.append(f'{sample}{{{lbl}"}} {format_value(v)}\n')
                else:
                    lines.extend(f"{sample} {format_value(v)}\n" for _, v in samples)
            out[name] = FamilyChunk(name, spec.kind, spec.help, "".join(lines).encode())
        for name, bodies in self._lines.items():
            spec = self._spec(name)
            prev = out[name].body if name in out else b""
            out[name] = FamilyChunk(name, spec.kind, spec.help, prev + b"".join(bodies))
        for name, values in self._info.items():
            spec = self._catalog[name]
            lbl = ",".join(f'{k}="{escape_label(v)}"' for k, v in values.items())
            out[name] = FamilyChunk(name, "info", spec.help, f"{name}_info{{{lbl}}} 1.0\n".encode())
        return out

    def families(self) -> Iterable[Metric]:
        """prometheus_client metric families (for a CollectorRegistry)."""
        if self._lines:
            raise TypeError(f"families(): {', '.join(sorted(self._lines))} came as formatted lines (add_lines); "
                            "use chunks()")
        out: list[Metric] = []
        for name, samples in self._samples.items():
            spec = self._spec(name)
            cls = {"gauge": GaugeMetricFamily, "counter": CounterMetricFamily,
                   "histogram": HistogramMetricFamily}[spec.kind]
            fam = cls(spec.name, spec.help, labels=list(self._label_names(spec)))
            if spec.kind == "histogram":
                bounds = [*map(_fmt_bound, spec.buckets), "+Inf"]
                for values, (cumulative, total) in samples:
                    fam.add_metric(list(values), list(zip(bounds, cumulative, strict=True)), total)
            else:
                for values, v in samples:
                    fam.add_metric(list(values), v)
            out.append(fam)
        for name, values in self._info.items():
            fam = InfoMetricFamily(name, self._catalog[name].help, labels=[])
            fam.add_metric([], values)
            out.append(fam)
        return out


def _fmt_bound(b: float) -> str:
    return repr(float(b)) if not float(b).is_integer() else f"{float(b):.1f}"


class Histogram:
    """A tiny, picklable histogram accumulator matching a catalogue spec's buckets."""

    __slots__ = ("bounds", "counts", "sum")

    def __init__(self, bounds: Sequence[float]) -> None:
        self.bounds = tuple(bounds)
        self.counts = [0] * (len(self.bounds) + 1)
        self.sum = 0.0

    def observe(self, value: float) -> None:
        import bisect

        self.counts[bisect.bisect_left(self.bounds, value)] += 1
        self.sum += value

    def add(self, other: Histogram) -> None:
        """Count `other`'s observations too (same buckets)."""
        for i, n in enumerate(other.counts):
            self.counts[i] += n
        self.sum += other.sum

    def copy(self) -> Histogram:
        h = Histogram(self.bounds)
        h.counts = list(self.counts)
        h.sum = self.sum
        return h

    @property
    def count(self) -> int:
        return sum(self.counts)
