"""What the exporter knows that one survey of the cluster cannot, for `txnwatch abort --exporter
URL` (read from its /metrics):
* the Spark queries reading the partitions an abort would free: Spark's Kafka source commits no
  offsets to a consumer group, so the cluster cannot name them; the txnwatch listener's progress
  events give each query's next offset per topic partition (spark_streaming_source_partition_offset);
* how long each open transaction's coordinator state has been unchanged: the transaction-log
  tap reads the coordinator's last update, and the poller has watched the state across polls
  (kafka_transaction_state_unchanged_seconds)."""

from __future__ import annotations

import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass, replace

from prometheus_client.parser import text_string_to_metric_families

from ..exporter.model import TP
from .plan import BlockedQuery, Transaction

POSITION_FAMILY = "spark_streaming_source_partition_offset"
UNCHANGED_FAMILY = "kafka_transaction_state_unchanged_seconds"
FETCH_TIMEOUT_SECONDS = 10.0


@dataclass(frozen=True, slots=True)
class QueryPosition:
    query: str
    query_id: str
    offset: int            # the next offset the query reads


class ExporterUnreadable(Exception):
    """The exporter's /metrics could not be read or parsed (the message says which and why)."""


@dataclass(frozen=True)
class ExporterView:
    positions: Mapping[TP, tuple[QueryPosition, ...]]     # the queries reading each partition
    unchanged_seconds: Mapping[str, float]                # transactional id -> its state's age


def parse(metrics_text: str) -> ExporterView:
    """The exporter's view from an exposition of its metrics. A query seen on a partition twice
    (two Kafka sources of one query) keeps its lower offset: that source is the one held back.
    An id with two series (the tap's and the poller's) keeps the lower age: the later change."""
    found: dict[TP, dict[str, QueryPosition]] = {}
    unchanged: dict[str, float] = {}
    try:
        for family in text_string_to_metric_families(metrics_text):
            if family.name == POSITION_FAMILY:
                for s in family.samples:
                    tp = (s.labels.get("topic", ""), int(s.labels.get("partition", "-1")))
                    q = QueryPosition(s.labels.get("query", ""), s.labels.get("query_id", ""), int(s.value))
                    seen = found.setdefault(tp, {})
                    if q.query_id not in seen or q.offset < seen[q.query_id].offset:
                        seen[q.query_id] = q
            elif family.name == UNCHANGED_FAMILY:
                for s in family.samples:
                    tid = s.labels.get("transactional_id", "")
                    unchanged[tid] = min(s.value, unchanged.get(tid, s.value))
    except ValueError as exc:
        raise ExporterUnreadable(f"its metrics do not parse ({exc})") from None
    return ExporterView({tp: tuple(sorted(qs.values(), key=lambda q: (q.query, q.query_id)))
                         for tp, qs in found.items()}, unchanged)


def with_view(txn: Transaction, view: ExporterView) -> Transaction:
    """The transaction with each pin's reading queries (where each reads, its lag against the
    partition's LSO and HWM) and, for an id the exporter exports, its state's age."""
    pins = tuple(replace(p, queries=tuple(
        BlockedQuery(q.query, q.query_id, q.offset, max(p.lso - q.offset, 0), max(p.hwm - q.offset, 0))
        for q in view.positions.get((p.topic, p.partition), ()))) for p in txn.pins)
    unchanged = view.unchanged_seconds.get(txn.transactional_id) if txn.coordinator_holds else None
    return replace(txn, pins=pins, state_unchanged_seconds=unchanged)


def read_metrics(base_url: str, bearer_token: str | None = None, timeout: float = FETCH_TIMEOUT_SECONDS) -> str:
    """GET <base_url>/metrics (the exporter's default telemetry path, or the full URL when it
    already names one)."""
    url = base_url if base_url.rstrip("/").endswith("/metrics") else base_url.rstrip("/") + "/metrics"
    request = urllib.request.Request(url, headers={"Accept": "text/plain"})
    if bearer_token:
        request.add_header("Authorization", f"Bearer {bearer_token}")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as resp:
            return resp.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as exc:
        raise ExporterUnreadable(f"GET {url}: HTTP {exc.code} {exc.reason}") from None
    except (urllib.error.URLError, OSError) as exc:
        raise ExporterUnreadable(f"GET {url}: {getattr(exc, 'reason', exc)}") from None
