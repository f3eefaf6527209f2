"""A Spark 4 Python streaming data source reading Kafka through confluent-kafka.

For where the JVM connector (spark-sql-kafka-0-10) cannot be installed. Same row
schema as Spark's Kafka source, so a pipeline can switch between the two:

    from txnwatch.spark_listener.kafka_source import KafkaDataSource
    spark.dataSource.register(KafkaDataSource)
    df = (spark.readStream.format("txnwatch_kafka")
          .option("kafka.bootstrap.servers", "broker:9092").option("subscribe", "orders")
          .option("startingOffsets", "earliest").option("maxRecordsPerBatch", 50000).load())

- Source offset: {"topic": {"partition": next offset}} (per-partition offsets, JSON).
- Reads read_committed and never plans past a partition's last stable offset (LSO),
  so a batch's offset range is fixed when planned and replays read the same records
  (deterministic batches, which the exactly-once sink needs); the broker skips aborted
  transactions' records. An LSO reported below the planned start (a new leader that
  lost records in an unclean election; some Kafka-compatible brokers report 0 while a
  transaction is open) never moves a partition's offset backwards.
- maxRecordsPerBatch (alias maxOffsetsPerTrigger) limits offsets per micro-batch,
  shared fairly between partitions; Trigger.AvailableNow reads to the LSO seen at start.
- Options starting with `kafka.` go to librdkafka (security settings, ...).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows, SupportsTriggerAvailableNow

SCHEMA = ("key BINARY, value BINARY, topic STRING, partition INT, offset LONG, "
          "timestamp TIMESTAMP, timestampType INT")
FORMAT = "txnwatch_kafka"
_EOF = -191
_ROWS_PER_ARROW_BATCH = 8192


@dataclass
class KafkaRange(InputPartition):
    topic: str
    partition: int
    start: int
    end: int
    conf: tuple


def client_conf(options: dict[str, str]) -> dict[str, str]:
    conf = {k[len("kafka."):]: v for k, v in options.items() if k.startswith("kafka.")}
    if "bootstrap.servers" not in conf:
        raise ValueError("option kafka.bootstrap.servers is required")
    return conf


def fair_share(available: dict[Any, int], budget: int) -> dict[Any, int]:
    """Split `budget` offsets between partitions with `available` offsets each
    (water-filling: small partitions get all they have, the rest share equally)."""
    out = {k: 0 for k in available}
    items = sorted(((v, k) for k, v in available.items() if v > 0), key=lambda t: t[0])
    remaining = max(0, budget)
    for i, (avail, k) in enumerate(items):
        share = remaining // (len(items) - i)
        take = min(avail, share)
        out[k] = take
        remaining -= take
    # hand out the rounding remainder one offset at a time
    for avail, k in reversed(items):
        if remaining <= 0:
            break
        extra = min(avail - out[k], remaining)
        out[k] += extra
        remaining -= extra
    return out


class KafkaStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, options: dict[str, str]) -> None:
        # Spark passes options case-insensitively (lower-cased keys in a plain dict copy).
        self.options = {str(k).lower(): v for k, v in dict(options).items()}
        self.conf = client_conf(self.options)
        topics = self.options.get("subscribe") or self.options.get("topic")
        if not topics:
            raise ValueError("option subscribe (comma-separated topics) is required")
        self.topics = [t.strip() for t in topics.split(",") if t.strip()]
        self.starting_raw = self.options.get("startingoffsets", "earliest")
        self.starting = self.options.get("startingoffsets", "earliest").lower()
        if self.starting not in ("earliest", "latest") and not self.starting.startswith("{"):
            raise ValueError("startingOffsets must be earliest, latest or a JSON offsets object")
        limit = self.options.get("maxrecordsperbatch") or self.options.get("maxoffsetspertrigger")
        self.max_records = int(limit) if limit else None
        if self.max_records is not None and self.max_records < 1:
            raise ValueError("maxRecordsPerBatch must be >= 1")
        self.timeout = float(self.options.get("timeoutseconds", 30))
        self._admin = None
        self._latest: dict[str, dict[str, int]] | None = None
        self._target: dict[str, dict[str, int]] | None = None

    # ------------------------------------------------------------------ broker queries
    def _admin_client(self):
        if self._admin is None:
            from confluent_kafka.admin import AdminClient

            self._admin = AdminClient(dict(self.conf))
        return self._admin

    def _partitions(self) -> list[tuple[str, int]]:
        md = self._admin_client().list_topics(timeout=self.timeout)
        out = []
        for t in self.topics:
            if t in md.topics and md.topics[t].error is None:
                out.extend((t, p) for p in sorted(md.topics[t].partitions))
        return out

    def _offsets(self, spec: str) -> dict[str, dict[str, int]]:
        from confluent_kafka import IsolationLevel, TopicPartition
        from confluent_kafka.admin import OffsetSpec

        tps = self._partitions()
        if not tps:
            return {t: {} for t in self.topics}
        req = {TopicPartition(t, p): (OffsetSpec.earliest() if spec == "earliest" else OffsetSpec.latest())
               for t, p in tps}
        res = self._admin_client().list_offsets(req, isolation_level=IsolationLevel.READ_COMMITTED,
                                               request_timeout=self.timeout)
        out: dict[str, dict[str, int]] = {t: {} for t in self.topics}
        for tp, fut in res.items():
            out[tp.topic][str(tp.partition)] = int(fut.result().offset)
        return out

    # ------------------------------------------------------------------ offsets
    def initialOffset(self) -> dict:
        if self.starting.startswith("{"):
            given = json.loads(self.starting_raw)
            earliest = self._offsets("earliest")
            return {t: {p: int(given.get(t, {}).get(p, o)) for p, o in parts.items()}
                    for t, parts in earliest.items()}
        return self._offsets(self.starting)

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = self._offsets("latest")

    def getDefaultReadLimit(self):
        return ReadMaxRows(self.max_records) if self.max_records else ReadAllAvailable()

    def latestOffset(self, start: dict | None = None, limit: Any = None) -> dict:
        start = start or {}
        lso = self._target if self._target is not None else self._offsets("latest")
        self._latest = lso
        avail: dict[tuple[str, str], int] = {}
        begin: dict[tuple[str, str], int] = {}
        for t in self.topics:
            for p, end in lso.get(t, {}).items():
                s = int(start.get(t, {}).get(p, 0))      # a new partition starts at 0
                begin[(t, p)] = s
                avail[(t, p)] = max(0, end - s)          # never backwards
        if isinstance(limit, ReadMaxRows):
            take = fair_share(avail, limit.max_rows)
        else:
            take = avail
        out: dict[str, dict[str, int]] = {t: dict(start.get(t, {})) for t in self.topics}
        for (t, p), s in begin.items():
            out[t][p] = s + take[(t, p)]
        return out

    def reportLatestOffset(self) -> dict | None:
        return self._latest

    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        parts = []
        conf = tuple(sorted(self.conf.items()))
        for t, ends in end.items():
            for p, e in ends.items():
                s = int(start.get(t, {}).get(p, 0)) if start else 0
                if int(e) > s:
                    parts.append(KafkaRange(t, int(p), s, int(e), conf))
        return parts

    def read(self, partition: KafkaRange) -> Iterator:
        yield from read_range(partition)

    def commit(self, end: dict) -> None:
        pass

    def stop(self) -> None:
        self._admin = None


_CONSUMERS: dict[tuple, Any] = {}


def _overrides(conf: tuple) -> dict:
    """Explicit kafka.fetch.* options win over the defaults above."""
    return {k: v for k, v in conf if k.startswith("fetch.")}


def _consumer(conf: tuple) -> Any:
    c = _CONSUMERS.get(conf)
    if c is None:
        from confluent_kafka import Consumer

        c = _CONSUMERS[conf] = Consumer({
            "group.id": "txnwatch-kafka-source", **dict(conf), "enable.auto.commit": False,
            "isolation.level": "read_committed", "enable.partition.eof": True,
            "auto.offset.reset": "earliest", "fetch.max.bytes": 52428800,
            # A range ending in a transaction marker ends at EOF: do not let the broker hold
            # that last fetch for the default 500 ms.
            "fetch.wait.max.ms": 10, **_overrides(conf)})
    return c


def read_range(r: KafkaRange, timeout: float = 120.0) -> Iterator:
    """Records of [r.start, r.end) of one partition, read_committed, as arrow batches."""
    import pyarrow as pa
    from confluent_kafka import TopicPartition

    c = _consumer(r.conf)
    c.assign([TopicPartition(r.topic, r.partition, r.start)])
    schema = pa.schema([("key", pa.binary()), ("value", pa.binary()), ("topic", pa.string()),
                        ("partition", pa.int32()), ("offset", pa.int64()),
                        ("timestamp", pa.timestamp("us", tz="UTC")), ("timestampType", pa.int32())])
    cols: tuple[list, ...] = ([], [], [], [])   # key, value, offset, timestamp(ms)

    def batch():
        n = len(cols[0])
        out = pa.RecordBatch.from_arrays([
            pa.array(cols[0], pa.binary()), pa.array(cols[1], pa.binary()),
            pa.array([r.topic] * n, pa.string()), pa.array([r.partition] * n, pa.int32()),
            pa.array(cols[2], pa.int64()), pa.array([t * 1000 for t in cols[3]], pa.timestamp("us", tz="UTC")),
            pa.array([0] * n, pa.int32())], schema=schema)
        for col in cols:
            col.clear()
        return out

    deadline = time.monotonic() + timeout
    done = False
    try:
        while not done:
            msgs = c.consume(10000, 0.5)
            if not msgs:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"{r.topic}[{r.partition}]: offsets [{r.start}, {r.end}) not "
                                       f"readable within {timeout}s (LSO stuck behind an open transaction?)")
                continue
            deadline = time.monotonic() + timeout
            for m in msgs:
                err = m.error()
                if err is not None:
                    if err.code() == _EOF:
                        if m.offset() >= r.end:
                            done = True
                            break
                        continue
                    raise RuntimeError(f"{r.topic}[{r.partition}]: {err}")
                off = m.offset()
                if off >= r.end:
                    done = True
                    break
                cols[0].append(m.key())
                cols[1].append(m.value())
                cols[2].append(off)
                cols[3].append(m.timestamp()[1])
                if off >= r.end - 1:
                    done = True
                    break
            if len(cols[0]) >= _ROWS_PER_ARROW_BATCH:
                yield batch()
        if cols[0]:
            yield batch()
    finally:
        c.unassign()


class KafkaDataSource(DataSource):
    """`format("txnwatch_kafka")`: Kafka through confluent-kafka, read_committed."""

    @classmethod
    def name(cls) -> str:
        return FORMAT

    def schema(self) -> str:
        return SCHEMA

    def streamReader(self, schema: Any) -> DataSourceStreamReader:
        return KafkaStreamReader(self.options)
