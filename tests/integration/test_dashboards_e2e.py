"""End to end (issue 6, on the real broker since issue 12): a real Prometheus scrapes the
real exporter watching a real Apache Kafka broker.

Everything is real and running at once:

- a dedicated Kafka broker (transaction.max.timeout.ms 8 s, transactional ids expire after
  10 s of idleness, the coordinator's timeout check every second) with a hanging
  transaction on e2e.orders-1 (KAFKA-9144: a transactional batch the coordinator never
  heard of) and a read_committed consumer group stuck behind it;
- real transactional producers writing through the coordinator, so the exporter's
  transaction-log tap reads the real `__transaction_state`: commits and aborts by fresh
  transactional ids every round (which later expire), producers SIGKILLed mid-transaction
  that the coordinator aborts at their timeout, and a settlement producer that keeps a
  transaction open most of the time (open transactions, headroom);
- an instrumented transactional producer (txnwatch.producer) committing and aborting on
  e2e.payments and, every few transactions, fenced by a new instance with the same
  transactional.id; its records go to the exporter as `producer_transactions` events
  through the Spark listener's forwarder;
- Spark queries with the listener attached and forwarding to the exporter: a stateful
  watermarked window count (state, watermark, phases), a query over e2e.payments through
  Spark's Kafka source (source lag), a query reading e2e.orders read_committed that waits
  at the hanging transaction's LSO (blocked: the exporter's join of its read positions
  with the partitions' LSO), an idle query (QueryIdleEvents) and a query that fails
  (terminations by error class);
- `txnwatch serve` with the tap on and a small per-id series cap, plus a second cluster
  that cannot be reached (poll errors);
- Debian's `prometheus` on its own port scraping the exporter every second with the
  generated rules (short `for` durations).

Then every query of every dashboard panel is sent to Prometheus's /api/v1/query and must
return at least one series with a number (NaN does not count): nothing is excluded. The panels that only have data under a fault are listed in FAULTS with the fault
this test makes happen. KafkaTransactionHanging must be firing in /api/v1/alerts for
e2e.orders-1, and SparkStreamingQueryBlockedByOpenTransaction for the blocked query.
"""

from __future__ import annotations

import contextlib
import math
import subprocess
import tempfile
import threading
import time

import pytest
from confluent_kafka import Consumer, KafkaException, TopicPartition

from tests.integration.helpers import cluster_config
from txnwatch.alerts.alertmanager import alertmanager_config
from txnwatch.alerts.config import AlertConfig
from txnwatch.alerts.rules import generate_alerts
from txnwatch.dashboards import ids
from txnwatch.dashboards.names import metric_names
from txnwatch.dashboards.queries import (
    CONDITIONAL_PANELS,
    FAULT_ONLY_PANELS,
    dashboard_queries,
    query_requirements,
)
from txnwatch.exporter.poll.render import GROUP_FAMILIES, PARTITION_FAMILIES
from txnwatch_dev.kafka import KafkaBroker
from txnwatch_dev.net import free_port, wait_for
from txnwatch_dev.observability import naming
from txnwatch_dev.observability.alertmanager import AlertmanagerProcess, WebhookReceiver
from txnwatch_dev.observability.exporter_proc import ExporterProcess
from txnwatch_dev.observability.prometheus import PrometheusProcess, promtool_binary
from txnwatch_dev.transactions.hanging import make_hanging_transaction
from txnwatch_dev.transactions.rawkafka import RawTransaction
from txnwatch_dev.transactions.workload import ProducerProcess, commit_group_offset, create_topics

pytestmark = [pytest.mark.integration, pytest.mark.spark]

RATE_INTERVAL = "30s"           # $__rate_interval in the dashboards' queries
RATE_SECONDS = 30
CLUSTER = "e2e"
ORDERS, PAYMENTS = "e2e.orders", "e2e.payments"
HANG_PARTITION = 1
BY_TOPIC = "e2e-bytopic"     # the same broker at granularity topic
GRANULARITY_FAMILIES = frozenset(PARTITION_FAMILIES + GROUP_FAMILIES)
BLOCKED_GROUP = "e2e-orders-reader"          # committed offset 0 on the hanging partition
PAYMENTS_GROUP = "e2e-payments-reader"       # commits its progress on e2e.payments
CLIENT_APP = "payments"
CLIENT_TID = "payments-writer-0"
TRIGGER = "500 milliseconds"
Q_WINDOWED, Q_KAFKA, Q_IDLE, Q_FAILING = "e2e_windowed", "e2e_kafka", "e2e_idle", "e2e_failing"
Q_BLOCKED = "e2e_blocked"      # reads e2e.orders read_committed: caught up to the hanging LSO

OV, TX, PA, SP, EX = (ids.OVERVIEW.title, ids.TRANSACTIONS.title, ids.PARTITIONS.title, ids.SPARK.title,
                      ids.EXPORTER.title)

# Queries that cannot return data on this broker: (dashboard, panel, metric read) -> why.
# Each must come back EMPTY; if one ever has data, it leaves this list.
# (Empty on every release the suite runs, 3.9 and 4.x: producer.id.expiration.ms, which
# Kafka 3.1 lacked, arrived with KIP-854 in 3.5.)
NO_DATA_ON_BROKER: dict[tuple[str, str, str], str] = {}

# Every panel that only has data under a fault, and the fault this test makes happen.
FAULTS: dict[tuple[str, str], str] = {
    (OV, "Groups behind a stalled LSO"): f"{BLOCKED_GROUP} committed offset 0 on {ORDERS}-{HANG_PARTITION}, "
                                         "whose LSO a hanging transaction stalls",
    (OV, "Fencing rate"): "tap: fences by a new instance and by timeout; client: the producer is fenced by a "
                          "new instance with the same transactional.id every 5th transaction",
    (OV, "Canary failures and violations"): "the canary of the second configured cluster, which nothing listens "
                                            "for, fails at stage topic",
    (TX, "Timeouts and id expirations"): "tap: the coordinator aborts SIGKILLed producers' transactions at their "
                                         "timeout, and expires idle transactional ids (tombstones)",
    (TX, "Fencing events"): "as Fencing rate",
    (TX, "Producer transaction errors"): "the fenced producer's next transaction fails: librdkafka reports "
                                         "_FENCED from produce/flush (or PRODUCER_FENCED at commit)",
    (PA, "Hanging transactions and stalled LSOs"): f"the hanging transaction on {ORDERS}-{HANG_PARTITION}",
    (PA, "Groups blocked behind a stalled LSO"): f"as Groups behind a stalled LSO ({BLOCKED_GROUP})",
    (SP, "Terminations by error class"): f"{Q_FAILING} raises in foreachBatch and terminates",
    (SP, "Blocked by an open transaction"): f"{Q_BLOCKED} reads {ORDERS} read_committed up to the LSO of "
                                            f"{ORDERS}-{HANG_PARTITION}, held by the hanging transaction",
    (EX, "Poll errors by cause"): "a second configured cluster that nothing listens for",
    (EX, "Series folded or dropped"): "max_transactional_id_series=3 with dozens of transactional ids in the tap",
}
# Panels that need a workload rather than a fault (CONDITIONAL_PANELS): how this test provides it.
WORKLOADS: dict[tuple[str, str], str] = {
    (SP, "State store rows"): f"{Q_WINDOWED}: a windowed count (stateful)",
    (SP, "State store memory"): f"{Q_WINDOWED}: a windowed count (stateful)",
    (SP, "Watermark delay"): f"{Q_WINDOWED}: withWatermark on the event time",
    (SP, "Idle events"): f"{Q_IDLE}: a file source over an empty directory",
    (TX, "Two-phase-commit transactions (KIP-939)"): "a two-phase-commit transaction of app e2e-ledger held open "
                                                     "(InitProducerId v6 with Enable2Pc; the broker allows it)",
}

# Fault/workload queries allowed to show 0 under their fault: (dashboard, panel, metric) -> why.
ZERO_OK: dict[tuple[str, str, str], str] = {
    (OV, "Canary failures and violations", "txnwatch_canary_visibility_violations_total"):
        "read_committed never returns the canary's aborted records: 0 is the healthy value",
}


def test_fault_and_workload_lists_match_the_dashboards():
    assert set(FAULTS) == set(FAULT_ONLY_PANELS)
    assert set(WORKLOADS) == set(CONDITIONAL_PANELS)
    queries = dashboard_queries(RATE_INTERVAL)
    for key, reason in NO_DATA_ON_BROKER.items():
        hits = [e for d, p, e in queries if (d, p) == key[:2] and key[2] in metric_names(e)]
        assert len(hits) == 1, (key, hits)
        assert query_requirements(hits[0]) & {"kip664", "broker_configs"}, (key, reason)


# ----------------------------------------------------------------------------- workload

class TxnWorkload:
    """Real transactions through the coordinator, one round a second, each with fresh
    transactional ids (so the id cap folds some, and idle ids expire 10 s later):
    a commit and an abort per round, and every 5th round a producer that opens a
    transaction with a 2 s timeout and is then abandoned, as a crashed one would be (the
    coordinator aborts it: a timeout, a fence by timeout)."""

    def __init__(self, bootstrap: str) -> None:
        self.bootstrap = bootstrap
        self.stop_event = threading.Event()
        self.rounds = 0
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, name="txn-workload", daemon=True)
        self.abandoned: list = []

    def _producer(self, tid: str, timeout_ms: int = 5000):
        from txnwatch.producer import TransactionalProducer

        p = TransactionalProducer({"bootstrap.servers": self.bootstrap, "transactional.id": tid,
                                   "transaction.timeout.ms": timeout_ms, "linger.ms": 0, "log_level": 0})
        p.init_transactions(30)
        return p

    def round(self, k: int) -> None:
        p = self._producer(f"orders-{k}")
        try:
            for outcome in ("commit", "abort"):
                p.begin()
                p.produce(ORDERS, value=f"order-{k}".encode(), partition=0)
                p.flush(10)   # the partition is in the transaction: the abort reaches the coordinator
                p.commit(10) if outcome == "commit" else p.abort(10)
        finally:
            p.close(2)
        if k % 5 == 0:
            doomed = self._producer(f"payments-{k}", timeout_ms=2000)
            doomed.begin()
            doomed.produce(ORDERS, value=b"never ends", partition=0)
            doomed.flush(10)
            self.abandoned.append(doomed)   # never touched again: the coordinator times it out

    def _run(self) -> None:
        try:
            while not self.stop_event.is_set():
                self.round(self.rounds)
                self.rounds += 1
                self.stop_event.wait(1.0)
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            self.error = exc

    def start(self) -> TxnWorkload:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.stop_event.set()
        self.thread.join(60)
        for p in self.abandoned:
            p.close(0.1)


class OpenTransactions:
    """A settlement producer that keeps a transaction open most of the time (4 s of every
    ~4.1 s, within the 5 s timeout): open transactions, their age and headroom."""

    def __init__(self, bootstrap: str) -> None:
        self.bootstrap = bootstrap
        self.stop_event = threading.Event()
        self.committed = 0
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, name="open-transactions", daemon=True)

    def _run(self) -> None:
        from txnwatch.producer import TransactionalProducer

        try:
            p = TransactionalProducer({"bootstrap.servers": self.bootstrap, "transactional.id": "settlement-0",
                                       "transaction.timeout.ms": 5000, "linger.ms": 0, "log_level": 3})
            p.init_transactions(30)
            while not self.stop_event.is_set():
                with p.transaction(10):
                    p.produce(ORDERS, value=b"settlement", partition=0)
                    p.flush(10)
                    self.stop_event.wait(4.0)
                self.committed += 1
            p.close(2)
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            self.error = exc

    def start(self) -> OpenTransactions:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.stop_event.set()
        self.thread.join(30)


class ClientWorkload:
    """The instrumented producer committing and aborting on e2e.payments, fenced by a new
    instance every 5th transaction; each finished transaction goes out as a
    `producer_transactions` event through `emit` (the Spark listener's)."""

    def __init__(self, bootstrap: str, emit) -> None:
        self.bootstrap = bootstrap
        self.emit = emit
        self.stop_event = threading.Event()
        self.outcomes: dict[str, int] = {}
        self.errors: dict[str, int] = {}
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, name="client-workload", daemon=True)
        self.group = Consumer({"bootstrap.servers": bootstrap, "group.id": PAYMENTS_GROUP,
                               "enable.auto.commit": False, "isolation.level": "read_committed"})

    def _record(self, rec: dict) -> None:
        self.outcomes[rec["outcome"]] = self.outcomes.get(rec["outcome"], 0) + 1
        if rec["error"]:
            self.errors[rec["error"]] = self.errors.get(rec["error"], 0) + 1
        self.emit({"type": "producer_transactions", "app": CLIENT_APP, "timestamp": time.time(), "records": [rec]})

    def _producer(self):
        from txnwatch.producer import TransactionalProducer

        p = TransactionalProducer({"bootstrap.servers": self.bootstrap, "transactional.id": CLIENT_TID,
                                   "transaction.timeout.ms": 5000, "linger.ms": 5, "log_level": 3},
                                  on_record=self._record)
        p.init_transactions(30)
        return p

    def _run(self) -> None:
        from txnwatch.producer import TransactionError

        try:
            p = self._producer()
            n = 0
            while not self.stop_event.is_set():
                n += 1
                if n % 5 == 0:
                    p.begin()
                    p.produce(PAYMENTS, value=b"before the fence", partition=0)
                    p.flush(10)
                    newer = self._producer()   # same transactional.id: fences p mid-transaction
                    try:   # the fence surfaces in produce/flush (_FENCED) or at commit (PRODUCER_FENCED)
                        p.produce(PAYMENTS, value=b"late", partition=0)
                        p.flush(10)
                        p.commit(10)
                        raise AssertionError("a fenced producer committed")
                    except TransactionError as exc:
                        assert exc.fenced, exc.error
                    except KafkaException:
                        assert p.broken, "an error other than the fence"
                    p.close(1)
                    p = newer
                elif n % 3 == 0:
                    p.begin()
                    p.produce(PAYMENTS, value=b"undo", partition=0)
                    p.abort(10)
                else:
                    with p.transaction(10):
                        for i in range(3):
                            p.produce(PAYMENTS, value=f"pay-{n}-{i}".encode(), partition=0)
                    self.group.commit(offsets=[TopicPartition(PAYMENTS, 0, n)], asynchronous=False)
                self.stop_event.wait(0.3)
            p.close(2)
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            self.error = exc

    def start(self) -> ClientWorkload:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.stop_event.set()
        self.thread.join(30)
        self.group.close()


def start_queries(spark, idle_dir: str) -> list:
    """The JVM-only queries: the stateful windowed count and the idle one."""
    from pyspark.sql import functions as F

    started = []
    try:
        rate = spark.readStream.format("rate").option("rowsPerSecond", 20).load()
        windowed = rate.withWatermark("timestamp", "1 second").groupBy(F.window("timestamp", "1 second")).count()
        started.append(windowed.writeStream.queryName(Q_WINDOWED).outputMode("append").format("memory")
                       .trigger(processingTime=TRIGGER).start())
        idle = spark.readStream.format("text").load(idle_dir)
        started.append(idle.writeStream.queryName(Q_IDLE).format("noop").trigger(processingTime=TRIGGER).start())

    except BaseException:
        stop_queries(started)
        raise
    return started


def kafka_query(spark, bootstrap: str) -> SupervisedQuery:
    """Q_KAFKA: e2e.payments through Spark's own Kafka source (read_committed), 5 offsets per
    batch (so it stays behind: source lag)."""
    def start():
        df = (spark.readStream.format("kafka").option("kafka.bootstrap.servers", bootstrap)
              .option("subscribe", PAYMENTS).option("startingOffsets", "earliest")
              .option("kafka.isolation.level", "read_committed")
              .option("maxOffsetsPerTrigger", 5).load())
        return df.writeStream.queryName(Q_KAFKA).format("noop").trigger(processingTime=TRIGGER).start()

    return SupervisedQuery(Q_KAFKA, start, lambda failure: False, max_runs=1, pause=0)


def blocked_query(spark, bootstrap: str) -> SupervisedQuery:
    """Q_BLOCKED: e2e.orders read_committed, no limit per batch: it reads the hanging partition
    up to its LSO and waits there (the exporter's blocked series)."""
    def start():
        df = (spark.readStream.format("kafka").option("kafka.bootstrap.servers", bootstrap)
              .option("subscribe", ORDERS).option("startingOffsets", "earliest")
              .option("kafka.isolation.level", "read_committed").load())
        return df.writeStream.queryName(Q_BLOCKED).format("noop").trigger(processingTime=TRIGGER).start()

    return SupervisedQuery(Q_BLOCKED, start, lambda failure: False, max_runs=1, pause=0)


def failing_query(spark, checkpoint: str) -> SupervisedQuery:
    """Q_FAILING raises in foreachBatch from its second batch on. It is started again from
    its checkpoint (so with the same query id) until stopped: each run fails again at once,
    so terminations{error_class} keeps increasing instead of sitting at 1."""
    def start():
        return (spark.readStream.format("rate").option("rowsPerSecond", 5).load().writeStream
                .queryName(Q_FAILING).option("checkpointLocation", checkpoint)
                .foreachBatch(explode).trigger(processingTime=TRIGGER).start())

    return SupervisedQuery(Q_FAILING, start, lambda failure: True, max_runs=None, pause=2.0)


def explode(df, batch_id):
    if batch_id >= 1:
        raise ValueError("e2e: a failing foreachBatch")


class SupervisedQuery:
    """A streaming query run in a thread: started by `start_query()`, and started again
    after it terminates while `restart_if(error text)` says so (at most `max_runs` runs)."""

    def __init__(self, name: str, start_query, restart_if, max_runs: int | None, pause: float) -> None:
        self.name = name
        self.start_query = start_query
        self.restart_if = restart_if
        self.max_runs = max_runs
        self.pause = pause
        self.stop_event = threading.Event()
        self.query = None
        self.runs = 0
        self.failures: list[str] = []
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, name=f"query-{name}", daemon=True)

    def _run(self) -> None:
        try:
            while not self.stop_event.is_set() and (self.max_runs is None or self.runs < self.max_runs):
                self.query = self.start_query()
                self.runs += 1
                with contextlib.suppress(Exception):   # StreamingQueryException: read below
                    self.query.awaitTermination()
                failure = str(self.query.exception() or "")
                self.failures.append(failure[:1500] if failure else "stopped")
                if self.stop_event.is_set() or not self.restart_if(failure):
                    return
                self.stop_event.wait(self.pause)
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            self.error = exc

    def start(self) -> SupervisedQuery:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.stop_event.set()
        for _ in range(2):    # again after the join: a run may have started meanwhile
            if self.query is not None:
                with contextlib.suppress(Exception):
                    self.query.stop()
            self.thread.join(60)


def stop_queries(queries: list) -> None:
    for q in queries:
        with contextlib.suppress(Exception):
            q.stop()


# ----------------------------------------------------------------------------- checks

def numbers(result: list[dict]) -> list[float]:
    """The non-NaN values of an instant query's result."""
    return [v for v in (float(series["value"][1]) for series in result) if not math.isnan(v)]


def describe(result: list[dict]) -> str:
    return "; ".join(f"{s['metric']}={s.get('value', ['', ''])[1]}" for s in result[:3]) or "no series"


def exclusion_of(dash: str, panel: str, expr: str) -> tuple[str, str, str] | None:
    hits = [k for k in NO_DATA_ON_BROKER if k[:2] == (dash, panel) and k[2] in metric_names(expr)]
    return hits[0] if hits else None


def evaluate(prom: PrometheusProcess, cluster: str = ".*",
             families: frozenset[str] | None = None) -> tuple[list[str], list[str], list[str]]:
    """(failures, panels with data, excluded) for every query of every dashboard panel (with
    `families`, those reading one of them), with the dashboards' cluster variable at `cluster`."""
    failures, ok, excluded = [], [], []
    for dash, panel, expr in dashboard_queries(RATE_INTERVAL, {"cluster": cluster}):
        if families is not None and not families & metric_names(expr):
            continue
        key = exclusion_of(dash, panel, expr)
        try:
            result = prom.query(expr)
        except Exception as exc:  # noqa: BLE001 - a bad query is a failure to report, with the others
            failures.append(f"{dash} / {panel}: query failed: {exc}\n    {expr}")
            continue
        if key is not None:
            if result:
                failures.append(f"{dash} / {panel}: listed in NO_DATA_ON_BROKER ({key[2]}) but has data: "
                                f"{describe(result)}\n    {expr}")
            else:
                excluded.append(f"{dash} / {panel} [{key[2]}]: {NO_DATA_ON_BROKER[key]}")
            continue
        values = numbers(result)
        # A fault or workload panel must show it: some series above 0, not only zeros.
        shows = (dash, panel) in FAULTS or (dash, panel) in WORKLOADS
        zero_ok = [k for k in ZERO_OK if k[:2] == (dash, panel) and k[2] in metric_names(expr)]
        if not values:
            why = f"only NaN: {describe(result)}" if result else "empty"
            failures.append(f"{dash} / {panel}: {why}\n    {expr}")
        elif shows and not zero_ok and max(values) <= 0:
            failures.append(f"{dash} / {panel}: only zeros, the fault/workload does not show: "
                            f"{describe(result)}\n    {expr}")
        else:
            how = FAULTS.get((dash, panel)) or WORKLOADS.get((dash, panel))
            ok.append(f"{dash} / {panel}: {len(result)} series, max {max(values):g}"
                      + (f" (fault: {how})" if (dash, panel) in FAULTS else f" ({how})" if how else ""))
    return failures, ok, excluded


# ----------------------------------------------------------------------------- the test

# Series that appear last; a rate window of their samples means every window is full.
WINDOW_SERIES = (
    f'spark_streaming_source_partition_behind_latest_offsets{{query="{Q_KAFKA}"}}',
    f'spark_streaming_state_rows{{query="{Q_WINDOWED}"}}',
    f'spark_streaming_query_terminations_total{{query="{Q_FAILING}"}}',
    f'kafka_producer_transaction_errors_total{{app="{CLIENT_APP}"}}',
    f'kafka_transaction_fencing_events_total{{kafka_cluster="{CLUSTER}"}}',
)


K8S_CLUSTER = "k8s-east"    # the scrape's own `cluster` target label


def test_every_dashboard_query_has_data_and_the_hanging_alert_fires(spark, tmp_path):
    t0 = time.monotonic()
    stack = contextlib.ExitStack()
    with stack:
        broker = KafkaBroker(workdir=tmp_path / "kafka", properties={
            "transaction.max.timeout.ms": 8000, "transactional.id.expiration.ms": 10_000,
            "transaction.remove.expired.transaction.cleanup.interval.ms": 1000,
            # KIP-939 two-phase commit: InitProducerId v6 is still an unstable API in Kafka 4.4
            "unstable.api.versions.enable": "true", "transaction.two.phase.commit.enable": "true"}).start()
        stack.callback(broker.cleanup)
        bootstrap = broker.bootstrap
        create_topics(bootstrap, [ORDERS], partitions=2)
        create_topics(bootstrap, [PAYMENTS], partitions=1)

        # The hanging transaction: two committed transactions, then a transactional batch that
        # the coordinator never added to a transaction (KAFKA-9144: a late write while the
        # leader's transaction verification is off), and a group behind it.
        ProducerProcess(bootstrap, ORDERS, "orders-enricher-0", action="commit", count=2, records=3,
                        partition=HANG_PARTITION, timeout_ms=5000).wait()
        make_hanging_transaction(bootstrap, ORDERS, HANG_PARTITION)
        # a two-phase-commit transaction left undecided, on a topic of its own (its LSO stays put)
        create_topics(bootstrap, ["e2e.ledger"], partitions=1)
        RawTransaction(bootstrap, "e2e-ledger-0", two_phase=True).open("e2e.ledger", 0)
        commit_group_offset(bootstrap, BLOCKED_GROUP, ORDERS, HANG_PARTITION, 0)

        config = cluster_config(bootstrap, [ORDERS, PAYMENTS], name=CLUSTER, transaction_log_tap=True,
                                max_transactional_id_series=3,
                                canary={"interval_seconds": 1, "abort_every": 3, "topic": "e2e.canary"})
        # The same cluster again at granularity topic, from an exporter of its own (the Spark
        # queries' positions go to the first one): every panel reading the per-partition
        # families is evaluated against it too ("e2e" runs at the default, signal).
        by_topic = ExporterProcess({"clusters": [{**config["clusters"][0], "name": BY_TOPIC, "granularity": "topic",
                                                  "transaction_log_tap": False, "canary": {"enabled": False}}]},
                                   log_path=tmp_path / "exporter-by-topic.log").start()
        stack.callback(by_topic.stop)
        config["clusters"].append({"name": "e2e-unreachable", "bootstrap_servers": f"127.0.0.1:{free_port()}",
                                   "poll_interval_seconds": 0.5, "poll_timeout_seconds": 1,
                                   "canary": {"interval_seconds": 1}})
        exporter = ExporterProcess(config, log_path=tmp_path / "exporter.log").start()
        stack.callback(exporter.stop)
        exporter.wait_metric(lambda m: m.get_value("txnwatch_tap_rebuilt", kafka_cluster=CLUSTER) == 1, 60,
                             what="the tap to rebuild from __transaction_state")

        # The symptoms' thresholds lie past the time the cause takes to fire (the hanging batch is
        # found 8 s, transaction.max.timeout.ms, after its write; the stalls count from the
        # exporter's and the query's start, later): Alertmanager inhibits only a symptom that
        # arrives while its cause fires. At 5 s, a loaded run once had the blocked group fire
        # 3 s before the hanging transaction, and its ticket went out.
        alert_cfg = AlertConfig(hanging_for="2s", spark_blocked_seconds=15, spark_blocked_for="2s",
                                blocked_lso_stalled_seconds=20, blocked_committed_window="10s", blocked_for="2s",
                                source_failing_for="2s",
                                dashboard_base_url="https://grafana.example", runbook_base_url="https://wiki.example/rb")
        rules, _ = generate_alerts(tmp_path / "rules", alert_cfg)
        # The alert chain: the shipped Alertmanager configuration (its routes and inhibitions),
        # with its webhook receivers pointed at this test and a short group_wait.
        webhook = WebhookReceiver().start()
        stack.callback(webhook.stop)
        am_config = alertmanager_config(alert_cfg, webhook.url("/pager"), webhook.url("/tickets"))
        am_config["route"].update(group_wait="1s", group_interval="10m")
        am = AlertmanagerProcess(am_config, tmp_path / "alertmanager").start()
        stack.callback(am.stop)
        # The scrape attaches its own `cluster` target label, as multi-cluster stacks do: txnwatch's
        # kafka_cluster label keeps the Kafka cluster apart from it (issue 27).
        prom = PrometheusProcess([f"127.0.0.1:{exporter.port}", f"127.0.0.1:{by_topic.port}"], [rules], interval="1s",
                                 log_path=tmp_path / "prometheus.log", data_dir=tmp_path / "prometheus",
                                 target_labels={"cluster": K8S_CLUSTER}, alertmanagers=[f"127.0.0.1:{am.port}"]).start()
        stack.callback(prom.stop)

        txns = TxnWorkload(bootstrap).start()
        stack.callback(txns.stop)
        settlement = OpenTransactions(bootstrap).start()
        stack.callback(settlement.stop)

        from txnwatch.spark_listener import attach, detach

        idle_key = "spark.sql.streaming.noDataProgressEventInterval"   # QueryIdleEvent every 1 s, not 10 s
        previous_idle = spark.conf.get(idle_key, None)
        spark.conf.set(idle_key, "1s")
        stack.callback(lambda: spark.conf.unset(idle_key) if previous_idle is None
                       else spark.conf.set(idle_key, previous_idle))
        listener = attach(spark, forward_url=exporter.url)
        stack.callback(detach, spark, listener)
        client = ClientWorkload(bootstrap, listener.emit).start()
        stack.callback(client.stop)
        queries = start_queries(spark, tempfile.mkdtemp(dir=tmp_path))
        stack.callback(stop_queries, queries)
        kafka = kafka_query(spark, bootstrap).start()
        stack.callback(kafka.stop)
        blocked = blocked_query(spark, bootstrap).start()
        stack.callback(blocked.stop)
        failing = failing_query(spark, str(tmp_path / "failing-checkpoint")).start()
        stack.callback(failing.stop)

        first_ok: dict[str, int] = {}

        def pending(m) -> list[str]:
            """The sources not flowing yet, by name."""
            def v(name, **lb):
                return m.get_value(name, **lb)

            checks = {
                "state rows": (v("spark_streaming_state_rows", query=Q_WINDOWED) or 0) > 0,
                "watermark": v("spark_streaming_watermark_delay_seconds", query=Q_WINDOWED) is not None,
                "source lag": any(True for _ in m.select("spark_streaming_source_partition_behind_latest_offsets",
                                                         query=Q_KAFKA)),
                "spark blocked": v("spark_streaming_source_blocked_seconds", kafka_cluster=CLUSTER, query=Q_BLOCKED,
                                   topic=ORDERS, partition=HANG_PARTITION) is not None,
                "idle events": (v("spark_streaming_idle_events_total", query=Q_IDLE) or 0) > 0,
                "terminations": sum(n for lb, n in m.select("spark_streaming_query_terminations_total",
                                                            query=Q_FAILING) if lb["error_class"] != "none") >= 2,
                "client fenced": (v("kafka_producer_transaction_errors_total", app=CLIENT_APP) or 0) > 0,
                "tap timeouts": (v("kafka_transaction_fencing_events_total", kafka_cluster=CLUSTER, app="payments",
                                   reason="timeout") or 0) > 0,
                "tap expirations": sum(n for _, n in m.select("kafka_transactional_id_expirations_total",
                                                              kafka_cluster=CLUSTER)) > 0,
                "epoch bumps": sum(n for _, n in m.select("kafka_transaction_epoch_bumps_total", kafka_cluster=CLUSTER)) > 0,
                "broker configs": v("kafka_broker_transaction_max_timeout_seconds", kafka_cluster=CLUSTER) == 8,
                "hanging": v("kafka_transaction_hanging", kafka_cluster=CLUSTER, topic=ORDERS,
                             partition=HANG_PARTITION) == 1,
                "poll errors": (v("txnwatch_poll_errors_total", kafka_cluster="e2e-unreachable") or 0) > 0,
            }
            for name, ok in checks.items():
                if ok:
                    first_ok.setdefault(name, round(time.monotonic() - t0))
            return [name for name, ok in checks.items() if not ok]

        try:
            exporter.wait_metric(lambda m: not pending(m), 120, what="every source to flow into the exporter")
        except TimeoutError:
            m = exporter.metrics()
            spark_series = sorted({(n, dict(lb).get("query")) for n, lb in m if n.startswith("spark_")})
            stopped = {q.name: str(q.exception())[:3000] for q in queries if not q.isActive}
            raise AssertionError(f"sources not flowing: {pending(m)}; txns={txns.error!r} "
                                 f"settlement={settlement.error!r} "
                                 f"client={client.error!r} failing={failing.error!r} kafka={kafka.error!r}; "
                                 f"{Q_KAFKA} runs: {kafka.failures}; queries stopped: {stopped}; "
                                 f"spark series: {spark_series}") from None
        if kafka.runs > 1:
            print(f"{Q_KAFKA} was started {kafka.runs} times: {kafka.failures}")
        print(f"every source flowing after {time.monotonic() - t0:.0f}s: {first_ok}")

        # Rate windows full: Prometheus holds a rate window of 1 s samples of the sources that
        # came last (so every rate()/increase() sees the workload for a whole window).
        def windows_full() -> bool:
            counts = [prom.query(f"min(count_over_time({sel}[{RATE_INTERVAL}]))") for sel in WINDOW_SERIES]
            return all(c and float(c[0]["value"][1]) >= RATE_SECONDS - 2 for c in counts)

        wait_for(windows_full, RATE_SECONDS + 30, interval=1, what=f"{RATE_INTERVAL} of samples in Prometheus")
        box: dict = {}

        def all_have_data() -> bool:
            every, topic_pass = evaluate(prom), evaluate(prom, BY_TOPIC, GRANULARITY_FAMILIES)
            box["result"] = (every[0] + [f"[{BY_TOPIC}] {f}" for f in topic_pass[0]], every[1] + topic_pass[1],
                             every[2] + topic_pass[2])
            box["by_topic"] = topic_pass[1]
            return not box["result"][0]

        with contextlib.suppress(TimeoutError):
            wait_for(all_have_data, 45, interval=2, what="every dashboard query to have data")
        failures, ok, excluded = box["result"]
        summary = (f"after {time.monotonic() - t0:.0f}s: {len(ok)} queries with data, {len(excluded)} excluded, {len(failures)} failing\n"
                   + "\n".join(f"  FAIL {f}" for f in failures))
        print(summary)
        print("\n".join(f"  data {s}" for s in ok))
        print("\n".join(f"  excluded {s}" for s in excluded))
        assert txns.error is None, txns.error
        assert settlement.error is None, settlement.error
        assert client.error is None, client.error
        assert failing.error is None, failing.error
        assert kafka.error is None, kafka.error
        assert blocked.error is None, blocked.error
        assert not failures, summary
        # The scrape that fed them, every source populated (poller, tap, canary, Spark ingest):
        # clean for promtool's linter and for the naming rules it does not check.
        status, body = exporter.get("/metrics")
        assert status == 200
        lint = subprocess.run([promtool_binary(), "check", "metrics"], input=body, capture_output=True, text=True,
                              timeout=60)
        assert (lint.returncode, lint.stdout.strip(), lint.stderr.strip()) == (0, "", ""), lint
        assert naming.scrape_problems(body) == []
        assert len(excluded) == len(NO_DATA_ON_BROKER), excluded
        assert all(f"{d} / {p}" in "\n".join(ok) for d, p in FAULTS), "a fault-only panel without data"
        assert len(box["by_topic"]) >= 10, box["by_topic"]     # the partition families' panels at topic too

        # The hanging-transaction alert, for the partition the killed producer left open.
        def hanging_alert():
            return [a for a in prom.firing("KafkaTransactionHanging")
                    if a["labels"].get("signal") == "hanging" and a["labels"].get("topic") == ORDERS
                    and a["labels"].get("partition") == str(HANG_PARTITION)]

        firing = wait_for(hanging_alert, 30, interval=0.5, what="KafkaTransactionHanging firing")
        print(f"KafkaTransactionHanging firing after {time.monotonic() - t0:.0f}s: {firing[0]['labels']}")
        assert firing[0]["labels"]["kafka_cluster"] == CLUSTER
        assert firing[0]["labels"].get("cluster") in (None, K8S_CLUSTER)   # aggregated away, or kept
        assert firing[0]["labels"]["severity"] == "critical"
        ann = firing[0]["annotations"]
        assert ann["runbook"] == "docs/runbooks/KafkaTransactionHanging.md", ann
        assert ann["runbook_url"] == "https://wiki.example/rb/KafkaTransactionHanging.md", ann
        assert ann["dashboard_url"].startswith("https://grafana.example/d/txnwatch-partitions/"), ann
        assert ann["dashboard_url"].endswith(f"&var-cluster={CLUSTER}"), ann
        assert client.outcomes.get("committed") and client.outcomes.get("aborted"), client.outcomes

        # The Spark query waiting at the hanging transaction's LSO: blocked, not slow.
        def blocked_alert():
            return [a for a in prom.firing("SparkStreamingQueryBlockedByOpenTransaction")
                    if a["labels"].get("query") == Q_BLOCKED]

        firing = wait_for(blocked_alert, 30, interval=0.5, what="SparkStreamingQueryBlockedByOpenTransaction firing")
        assert {k: firing[0]["labels"][k] for k in ("kafka_cluster", "topic", "partition")} == \
            {"kafka_cluster": CLUSTER, "topic": ORDERS, "partition": str(HANG_PARTITION)}
        # Per Kafka cluster under the target's own `cluster` label: both Kafka clusters apart.
        per_cluster = {(r["metric"].get("kafka_cluster"), r["metric"].get("cluster"))
                       for r in prom.query("max by (kafka_cluster, cluster) (txnwatch_up)")}
        assert per_cluster == {(CLUSTER, K8S_CLUSTER), (BY_TOPIC, K8S_CLUSTER), ("e2e-unreachable", K8S_CLUSTER)}, \
            per_cluster
        assert prom.query('count({exported_cluster!=""})') == []   # no label of the target's renamed

        # Through Alertmanager: the hanging transaction pages once; the consumer group and the
        # Spark query blocked on its partition are symptoms it inhibits (held, never delivered);
        # an unrelated cause (the unreachable cluster's poller) is still delivered.
        def at_hang(a: dict) -> bool:
            lb = a["labels"]
            return (lb.get("kafka_cluster"), lb.get("topic"), lb.get("partition")) == \
                (CLUSTER, ORDERS, str(HANG_PARTITION))

        wait_for(lambda: any(at_hang(a) and path == "/pager" for path, a in webhook.delivered("KafkaTransactionHanging")),
                 30, interval=0.5, what="the hanging transaction delivered to the pager")
        wait_for(lambda: prom.firing("KafkaReadCommittedConsumerBlocked"), 60, interval=0.5,
                 what="KafkaReadCommittedConsumerBlocked firing in Prometheus")

        def suppressed(name: str) -> list[dict]:
            return [a for a in am.alerts() if a["labels"]["alertname"] == name and at_hang(a)
                    and a["status"]["state"] == "suppressed" and a["status"]["inhibitedBy"]]

        for symptom in ("KafkaReadCommittedConsumerBlocked", "SparkStreamingQueryBlockedByOpenTransaction"):
            wait_for(lambda symptom=symptom: suppressed(symptom), 30, interval=0.5,
                     what=f"{symptom} held by Alertmanager, inhibited by the hanging transaction")
        wait_for(lambda: any(a["labels"].get("kafka_cluster") == "e2e-unreachable" and path == "/tickets"
                             for path, a in webhook.delivered("TxnwatchSourceFailing")),
                 30, interval=0.5, what="the unreachable cluster's failing source delivered")
        for symptom in ("KafkaReadCommittedConsumerBlocked", "SparkStreamingQueryBlockedByOpenTransaction"):
            assert not [a for _, a in webhook.delivered(symptom) if at_hang(a)], webhook.notifications
        # one notification for the cause (its group waits group_interval before another)
        assert len([a for _, a in webhook.delivered("KafkaTransactionHanging") if at_hang(a)]) == 1, \
            webhook.notifications
