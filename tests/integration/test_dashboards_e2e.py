"""End to end (issue 6): a real Prometheus scrapes the real exporter watching a real broker.

Everything is real and running at once:

- a dedicated Tansu broker with a hanging transaction (a transactional producer
  SIGKILLed mid-transaction on e2e.orders-1) and a read_committed consumer group stuck
  behind it;
- a `__transaction_state` topic on that broker, written continuously with encoded
  coordinator histories (commits and aborts under TV0 and TV2, timeout aborts, fences by
  a new instance, id expirations) and read by the exporter's transaction-log tap
  (Tansu has no coordinator log of its own);
- an instrumented transactional producer (txnwatch.producer) committing and aborting on
  e2e.payments and, every few transactions, fenced by a new instance with the same
  transactional.id; its records go to the exporter as `producer_transactions` events
  through the Spark listener's forwarder;
- Spark queries with the listener attached and forwarding to the exporter: a stateful
  watermarked window count (state, watermark, phases), a query over e2e.payments through
  the confluent-kafka source (source lag), an idle query (QueryIdleEvents) and a query
  that fails (terminations by error class);
- `txnwatch serve` with the tap on, a 3 s hanging threshold and a small per-id series cap,
  plus a second cluster that cannot be reached (poll errors);
- Debian's `prometheus` on its own port scraping the exporter every second with the
  generated rules (short `for` durations).

Then every query of every dashboard panel is sent to Prometheus's /api/v1/query and must
return at least one series with a number (NaN does not count). Queries that cannot have
data on Tansu are listed in NO_DATA_ON_TANSU with the reason and must be empty; the
panels that only have data under a fault are listed in FAULTS with the fault this test
makes happen. KafkaTransactionHanging must be firing in /api/v1/alerts for e2e.orders-1.
"""

from __future__ import annotations

import contextlib
import math
import random
import tempfile
import threading
import time
import uuid
import zlib

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from tests.integration.conftest import cluster_config
from tests.txnlog_encoder import (
    COMPLETE_ABORT,
    COMPLETE_COMMIT,
    EMPTY,
    ONGOING,
    PREPARE_ABORT,
    PREPARE_COMMIT,
    encode_key,
    encode_value,
)
from txnwatch.alerts.rules import AlertConfig, generate_alerts
from txnwatch.dashboards import ids
from txnwatch.dashboards.build import (
    CONDITIONAL_PANELS,
    FAULT_ONLY_PANELS,
    dashboard_queries,
    query_requirements,
)
from txnwatch.dashboards.names import metric_names
from txnwatch.devtools.broker import TansuBroker
from txnwatch.devtools.exporter_proc import ExporterProcess
from txnwatch.devtools.net import free_port, wait_for
from txnwatch.devtools.prometheus import PrometheusProcess
from txnwatch.devtools.workload import ProducerProcess, commit_group_offset, create_topics

pytestmark = [pytest.mark.integration, pytest.mark.spark]

RATE_INTERVAL = "30s"           # $__rate_interval in the dashboards' queries
RATE_SECONDS = 30
CLUSTER = "e2e"
TXN_LOG = "__transaction_state"
ORDERS, PAYMENTS = "e2e.orders", "e2e.payments"
HANG_PARTITION = 1
BLOCKED_GROUP = "e2e-orders-reader"          # committed offset 0 on the hanging partition
PAYMENTS_GROUP = "e2e-payments-reader"       # commits its progress on e2e.payments
CLIENT_APP = "payments"
CLIENT_TID = "payments-writer-0"
TRIGGER = "500 milliseconds"
Q_WINDOWED, Q_KAFKA, Q_IDLE, Q_FAILING = "e2e_windowed", "e2e_kafka", "e2e_idle", "e2e_failing"

OV, TX, PA, SP, EX = (ids.OVERVIEW.title, ids.TRANSACTIONS.title, ids.PARTITIONS.title, ids.SPARK.title,
                      ids.EXPORTER.title)

# Queries that cannot return data on this broker: (dashboard, panel, metric read) -> why.
# Each must come back EMPTY; if one ever has data, it leaves this list.
_NO_KIP664 = ("Tansu does not implement the KIP-664 admin APIs (ListTransactions/DescribeTransactions), "
              "and epoch bumps are only counted by the KIP-664 poller (the tap does not derive them)")
_NO_CONFIGS = ("Tansu answers DescribeConfigs(BROKER) with no entries at all (checked with confluent-kafka's "
               "AdminClient), so the exporter has no broker config value to report")
NO_DATA_ON_TANSU: dict[tuple[str, str, str], str] = {
    (OV, "Oldest open transaction vs its timeout", "kafka_broker_transaction_max_timeout_seconds"): _NO_CONFIGS,
    (TX, "Producer timeout vs broker cap", "kafka_broker_transaction_max_timeout_seconds"): _NO_CONFIGS,
    (TX, "Producer epoch bumps", "kafka_transaction_epoch_bumps_total"): _NO_KIP664,
    (TX, "Broker transaction configs", "kafka_broker_transaction_max_timeout_seconds"): _NO_CONFIGS,
    (TX, "Broker transaction configs", "kafka_broker_transactional_id_expiration_seconds"): _NO_CONFIGS,
    (TX, "Broker transaction configs", "kafka_broker_producer_id_expiration_seconds"): _NO_CONFIGS,
    (PA, "Brokers vs transaction.state.log.min.isr", "kafka_transaction_state_log_min_isr"): _NO_CONFIGS,
    (PA, "Brokers vs transaction.state.log.min.isr",
     "kafka_transaction_state_log_replication_factor"): _NO_CONFIGS,
}

# Every panel that only has data under a fault, and the fault this test makes happen.
FAULTS: dict[tuple[str, str], str] = {
    (OV, "Groups behind a stalled LSO"): f"{BLOCKED_GROUP} committed offset 0 on {ORDERS}-{HANG_PARTITION}, "
                                         "whose LSO a SIGKILLed producer's open transaction stalls",
    (OV, "Fencing rate"): "tap: fences by a new instance and by timeout; client: the producer is fenced by a "
                          "new instance with the same transactional.id every 5th transaction",
    (TX, "Timeouts and id expirations"): "tap: coordinator timeout aborts and transactional-id tombstones",
    (TX, "Fencing events"): "as Fencing rate",
    (TX, "Producer transaction errors"): "the fenced producer's next transaction fails: Tansu refuses its "
                                         "AddPartitionsToTxn (PRODUCER_FENCED), librdkafka reports _FENCED",
    (PA, "Hanging transactions and stalled LSOs"): f"the SIGKILLed producer's open transaction on {ORDERS}-1",
    (PA, "Groups blocked behind a stalled LSO"): f"as Groups behind a stalled LSO ({BLOCKED_GROUP})",
    (SP, "Terminations by error class"): f"{Q_FAILING} raises in foreachBatch and terminates",
    (EX, "Poll errors by cause"): "a second configured cluster that nothing listens for",
    (EX, "Series folded or dropped"): "max_transactional_id_series=3 with dozens of transactional ids in the tap",
}
# Panels that need a workload rather than a fault (CONDITIONAL_PANELS): how this test provides it.
WORKLOADS: dict[tuple[str, str], str] = {
    (SP, "State store rows"): f"{Q_WINDOWED}: a windowed count (stateful)",
    (SP, "State store memory"): f"{Q_WINDOWED}: a windowed count (stateful)",
    (SP, "Watermark delay"): f"{Q_WINDOWED}: withWatermark on the event time",
    (SP, "Idle events"): f"{Q_IDLE}: a file source over an empty directory",
}

# Fault/workload queries allowed to show 0 under their fault: (dashboard, panel, metric) -> why.
ZERO_OK: dict[tuple[str, str, str], str] = {
    (PA, "Hanging transactions and stalled LSOs", "kafka_partition_last_stable_offset"):
        "Tansu reports LSO 0 while any transaction is open on the partition (Kafka: the open one's first offset)",
}


def test_fault_and_workload_lists_match_the_dashboards():
    assert set(FAULTS) == set(FAULT_ONLY_PANELS)
    assert set(WORKLOADS) == set(CONDITIONAL_PANELS)
    queries = dashboard_queries(RATE_INTERVAL)
    for key, reason in NO_DATA_ON_TANSU.items():
        hits = [e for d, p, e in queries if (d, p) == key[:2] and key[2] in metric_names(e)]
        assert len(hits) == 1, (key, hits)
        assert query_requirements(hits[0]) & {"kip664", "broker_configs"}, (key, reason)


# ----------------------------------------------------------------------------- workload

class TxnLogWriter:
    """Writes realistic coordinator histories to `__transaction_state` in a thread: one
    round a second, each with fresh transactional ids (so the id cap folds some)."""

    def __init__(self, bootstrap: str, partitions: int) -> None:
        self.producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
        self.partitions = partitions
        self.stop_event = threading.Event()
        self.rounds = 0
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, name="txnlog-writer", daemon=True)
        self._pid = 50_000

    def put(self, tid: str, status: int | None, epoch: int = 0, *, start: int = -1, last: int,
            timeout: int = 60_000, pid: int, tv: int = 0) -> None:
        version = 1 if tv else 0
        if status is None:
            value = None   # tombstone: the coordinator expired the id
        else:
            parts = [(ORDERS, [0, 1])] if status in (ONGOING, PREPARE_COMMIT, PREPARE_ABORT) else None
            value = encode_value(version=version, producer_id=pid, producer_epoch=epoch, timeout_ms=timeout,
                                 status=status, partitions=parts, last_update_ms=last, start_ms=start,
                                 client_transaction_version=tv)
        self.producer.produce(TXN_LOG, key=encode_key(tid), value=value,
                              partition=zlib.crc32(tid.encode()) % self.partitions, timestamp=last)

    def transaction(self, tid: str, pid: int, t: int, epoch: int, outcome: str, tv: int = 0,
                    took: int = 500, complete: int = 20) -> int:
        bump = 1 if tv >= 2 else 0
        prepare, done = (PREPARE_COMMIT, COMPLETE_COMMIT) if outcome == "commit" else (PREPARE_ABORT, COMPLETE_ABORT)
        self.put(tid, ONGOING, epoch, start=t, last=t, pid=pid, tv=tv)
        self.put(tid, prepare, epoch + bump, start=t, last=t + took, pid=pid, tv=tv)
        self.put(tid, done, epoch + bump, start=t, last=t + took + complete, pid=pid, tv=tv)
        return epoch + bump

    def fenced(self, tid: str, pid: int, t: int, epoch: int, after: int, timeout: int = 60_000,
               tv: int = 0) -> int:
        """Ongoing, then aborted by the coordinator with a fencing epoch bump `after` ms later
        (a timeout when `after` > `timeout`, else a new instance)."""
        bump = 2 if tv >= 2 else 1
        self.put(tid, ONGOING, epoch, start=t, last=t, timeout=timeout, pid=pid, tv=tv)
        self.put(tid, PREPARE_ABORT, epoch + bump, start=t, last=t + after, timeout=timeout, pid=pid, tv=tv)
        self.put(tid, COMPLETE_ABORT, epoch + bump, start=t, last=t + after + 10, timeout=timeout, pid=pid, tv=tv)
        return epoch + bump

    def open_transaction(self, tid: str) -> None:
        """A healthy open transaction (15 min timeout) the tap reports as open."""
        now = int(time.time() * 1000)
        self._pid += 1
        self.put(tid, EMPTY, 0, last=now - 1000, pid=self._pid)
        self.put(tid, ONGOING, 0, start=now, last=now, timeout=900_000, pid=self._pid)
        assert self.producer.flush(15) == 0

    def round(self, k: int) -> None:
        rnd = random.Random(k)
        now = int(time.time() * 1000)
        t = now - 3000
        pids = iter(range(self._pid + 1, self._pid + 10))
        self._pid += 10
        # TV0: a commit and an abort by an orders producer
        tid, pid = f"orders-{k}", next(pids)
        self.put(tid, EMPTY, 0, last=t - 500, pid=pid)
        e = self.transaction(tid, pid, t, 0, "commit", took=rnd.randint(100, 1500), complete=rnd.randint(5, 60))
        self.transaction(tid, pid, t + 1600, e, "abort", took=rnd.randint(50, 300), complete=rnd.randint(5, 30))
        # TV2 (Kafka Streams EOS v2): commits bump the epoch
        tid, pid = f"streams-app-{uuid.uuid4()}-{k % 4}", next(pids)
        self.put(tid, EMPTY, 0, last=t - 500, pid=pid, tv=2)
        e = self.transaction(tid, pid, t, 0, "commit", tv=2, took=rnd.randint(100, 900))
        self.transaction(tid, pid, t + 1000, e, "commit", tv=2, took=rnd.randint(100, 900))
        # a timeout abort: 10 s timeout, aborted by the coordinator 14 s after the start
        tid, pid = f"payments-{k}", next(pids)
        self.put(tid, EMPTY, 3, last=t - 20_000, pid=pid)
        self.fenced(tid, pid, t - 14_000, 3, after=14_000, timeout=10_000)
        # a fence by a new instance under TV0, and the new instance's InitProducerId
        tid, pid = f"inventory-{k}", next(pids)
        self.put(tid, EMPTY, 7, last=t - 6000, pid=pid)
        e = self.fenced(tid, pid, t - 5000, 7, after=4000)
        self.put(tid, EMPTY, e + 1, last=t, pid=pid)
        # an id that goes idle, expired (tombstone) one round later
        pid = next(pids)
        self.put(f"legacy-{k}", EMPTY, 0, last=t, pid=pid)
        if k:
            self.put(f"legacy-{k - 1}", None, last=now, pid=pid)
        assert self.producer.flush(15) == 0

    def _run(self) -> None:
        try:
            while not self.stop_event.is_set():
                self.round(self.rounds)
                self.rounds += 1
                self.stop_event.wait(1.0)
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            self.error = exc

    def start(self) -> TxnLogWriter:
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
                                   "transaction.timeout.ms": 10_000, "linger.ms": 5}, on_record=self._record)
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
                    newer = self._producer()   # same transactional.id: fences p
                    p.begin()
                    p.produce(PAYMENTS, value=b"late", partition=0)
                    try:
                        p.commit(10)
                        raise AssertionError("a fenced producer committed")
                    except TransactionError as exc:
                        assert exc.fenced, exc.error
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


def open_transaction_then_kill(bootstrap: str, stack: contextlib.ExitStack) -> None:
    """Two commits, then a transaction left open on ORDERS-1 and its producer SIGKILLed.
    Seen once: a fresh Tansu never answered the first commit (the child printed `ready`
    only); a new producer (new transactional id) is tried then, at most three in all."""
    for attempt in range(3):
        hang = ProducerProcess(bootstrap, ORDERS, f"orders-enricher-{attempt}", action="commit", count=2,
                               records=3, partition=HANG_PARTITION, then_hang=True)
        stack.callback(hang.kill)
        try:
            hang.wait_line("open", timeout=20)
            hang.kill()
            return
        except TimeoutError as exc:
            hang.kill()
            print(f"hanging producer attempt {attempt + 1}: {exc}")
    raise AssertionError("no producer could leave a transaction open on the broker (see above)")


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


# Spark starts a Python worker to plan a Python data source's micro-batches and gives it a
# fixed 10 s to connect back (PythonWorkerFactory.createSimpleWorker); on a loaded machine
# that start can take longer and the query terminates with this error before its first
# batch. Only that error is retried (twice); it has nothing to do with txnwatch.
WORKER_TIMEOUT = "Python worker failed to connect back"


def kafka_query(spark, bootstrap: str) -> SupervisedQuery:
    """Q_KAFKA: e2e.payments through txnwatch's confluent-kafka source, 5 records per batch
    (so it stays behind: source lag)."""
    from txnwatch.spark_listener.kafka_source import KafkaDataSource

    spark.dataSource.register(KafkaDataSource)

    def start():
        df = (spark.readStream.format("txnwatch_kafka").option("kafka.bootstrap.servers", bootstrap)
              .option("subscribe", PAYMENTS).option("startingOffsets", "earliest")
              .option("maxRecordsPerBatch", 5).load())
        return df.writeStream.queryName(Q_KAFKA).format("noop").trigger(processingTime=TRIGGER).start()

    return SupervisedQuery(Q_KAFKA, start, lambda failure: WORKER_TIMEOUT in failure, max_runs=3, pause=0)


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
    hits = [k for k in NO_DATA_ON_TANSU if k[:2] == (dash, panel) and k[2] in metric_names(expr)]
    return hits[0] if hits else None


def evaluate(prom: PrometheusProcess) -> tuple[list[str], list[str], list[str]]:
    """(failures, panels with data, excluded) for every query of every dashboard panel."""
    failures, ok, excluded = [], [], []
    for dash, panel, expr in dashboard_queries(RATE_INTERVAL):
        key = exclusion_of(dash, panel, expr)
        try:
            result = prom.query(expr)
        except Exception as exc:  # noqa: BLE001 - a bad query is a failure to report, with the others
            failures.append(f"{dash} / {panel}: query failed: {exc}\n    {expr}")
            continue
        if key is not None:
            if result:
                failures.append(f"{dash} / {panel}: listed in NO_DATA_ON_TANSU ({key[2]}) but has data: "
                                f"{describe(result)}\n    {expr}")
            else:
                excluded.append(f"{dash} / {panel} [{key[2]}]: {NO_DATA_ON_TANSU[key]}")
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
    f'spark_streaming_source_offsets_behind_latest{{query="{Q_KAFKA}"}}',
    f'spark_streaming_state_rows{{query="{Q_WINDOWED}"}}',
    f'spark_streaming_query_terminations_total{{query="{Q_FAILING}"}}',
    f'kafka_producer_transaction_errors_total{{app="{CLIENT_APP}"}}',
    f'kafka_transaction_fencing_events_total{{cluster="{CLUSTER}"}}',
)


def test_every_dashboard_query_has_data_and_the_hanging_alert_fires(spark, tmp_path):
    t0 = time.monotonic()
    stack = contextlib.ExitStack()
    with stack:
        broker = stack.enter_context(TansuBroker(log_path=tmp_path / "tansu.log"))
        bootstrap = broker.bootstrap
        create_topics(bootstrap, [TXN_LOG], partitions=3)
        create_topics(bootstrap, [ORDERS], partitions=2)
        create_topics(bootstrap, [PAYMENTS], partitions=1)

        # The hanging transaction: two commits, then a transaction left open and its producer killed.
        open_transaction_then_kill(bootstrap, stack)
        commit_group_offset(bootstrap, BLOCKED_GROUP, ORDERS, HANG_PARTITION, 0)

        config = cluster_config(bootstrap, [ORDERS, PAYMENTS], name=CLUSTER, transaction_log_tap=True,
                                hanging_threshold_seconds=3, max_transactional_id_series=3)
        config["clusters"].append({"name": "e2e-unreachable", "bootstrap_servers": f"127.0.0.1:{free_port()}",
                                   "poll_interval_seconds": 0.5, "poll_timeout_seconds": 1})
        exporter = ExporterProcess(config, log_path=tmp_path / "exporter.log").start()
        stack.callback(exporter.stop)
        exporter.wait_metric(lambda m: m.get_value("txnwatch_tap_rebuilt", cluster=CLUSTER) == 1, 60,
                             what="the tap to rebuild from __transaction_state")

        rules, _ = generate_alerts(tmp_path / "rules", AlertConfig(hanging_for="2s"))
        prom = PrometheusProcess([f"127.0.0.1:{exporter.port}"], [rules], interval="1s",
                                 log_path=tmp_path / "prometheus.log", data_dir=tmp_path / "prometheus").start()
        stack.callback(prom.stop)

        txnlog = TxnLogWriter(bootstrap, partitions=3)
        txnlog.open_transaction("orders-open-1")
        txnlog.start()
        stack.callback(txnlog.stop)

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
                "source lag": v("spark_streaming_source_offsets_behind_latest", query=Q_KAFKA) is not None,
                "idle events": (v("spark_streaming_idle_events_total", query=Q_IDLE) or 0) > 0,
                "terminations": sum(n for lb, n in m.select("spark_streaming_query_terminations_total",
                                                            query=Q_FAILING) if lb["error_class"] != "none") >= 2,
                "client fenced": (v("kafka_producer_transaction_errors_total", app=CLIENT_APP) or 0) > 0,
                "tap timeouts": (v("kafka_transaction_fencing_events_total", cluster=CLUSTER, app="payments",
                                   reason="timeout") or 0) > 0,
                "hanging": v("kafka_transaction_hanging", cluster=CLUSTER, topic=ORDERS,
                             partition=HANG_PARTITION) == 1,
                "poll errors": (v("txnwatch_poll_errors_total", cluster="e2e-unreachable") or 0) > 0,
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
            raise AssertionError(f"sources not flowing: {pending(m)}; writer={txnlog.error!r} "
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
            box["result"] = evaluate(prom)
            return not box["result"][0]

        with contextlib.suppress(TimeoutError):
            wait_for(all_have_data, 45, interval=2, what="every dashboard query to have data")
        failures, ok, excluded = box["result"]
        summary = (f"after {time.monotonic() - t0:.0f}s: {len(ok)} queries with data, {len(excluded)} excluded, {len(failures)} failing\n"
                   + "\n".join(f"  FAIL {f}" for f in failures))
        print(summary)
        print("\n".join(f"  data {s}" for s in ok))
        print("\n".join(f"  excluded {s}" for s in excluded))
        assert txnlog.error is None, txnlog.error
        assert client.error is None, client.error
        assert failing.error is None, failing.error
        assert kafka.error is None, kafka.error
        assert not failures, summary
        assert len(excluded) == len(NO_DATA_ON_TANSU), excluded
        assert all(f"{d} / {p}" in "\n".join(ok) for d, p in FAULTS), "a fault-only panel without data"

        # The hanging-transaction alert, for the partition the killed producer left open.
        def hanging_alert():
            return [a for a in prom.firing("KafkaTransactionHanging")
                    if a["labels"].get("signal") == "hanging" and a["labels"].get("topic") == ORDERS
                    and a["labels"].get("partition") == str(HANG_PARTITION)]

        firing = wait_for(hanging_alert, 30, interval=0.5, what="KafkaTransactionHanging firing")
        print(f"KafkaTransactionHanging firing after {time.monotonic() - t0:.0f}s: {firing[0]['labels']}")
        assert firing[0]["labels"]["cluster"] == CLUSTER
        assert firing[0]["labels"]["severity"] == "critical"
        assert "dashboard_url" in firing[0]["annotations"] and "runbook_url" in firing[0]["annotations"]
        assert client.outcomes.get("committed") and client.outcomes.get("aborted"), client.outcomes
