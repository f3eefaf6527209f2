"""`make demo`: the whole txnwatch story on one machine.

    python -m txnwatch_dev.demo [--bootstrap-servers LIST] [--kafka-version 4.x]
        [--no-spark] [--no-streams] [--no-flink] [--no-prometheus] [--fault-interval 10] [--duration S]
        [--abort-hanging-after 30]
        [--broker-port N] [--exporter-port N] [--prometheus-port N] [--state-dir DIR]

By default it starts a real Apache Kafka (the newest 4.x release from Maven Central, or
KAFKA_VERSION / --kafka-version: one KRaft node, transaction.max.timeout.ms 20 s so hanging
transactions are found within the first minute), and on it:
- a load generator: orders for the Spark pipeline and payments for the Streams app, one
  transaction per 0.5 s;
- a Kafka Streams `exactly_once_v2` app (`balance-app`, compiled from
  streams/BalanceApp.java): per-account balances in a persistent RocksDB store that, in the same
  transaction, writes high-balance alerts to the `alert-outbox` topic (a transactional
  outbox), and the outbox sink: a read_committed consumer group (`alert-outbox-sink`)
  applying each alert once to SQLite;
- the reference exactly-once Spark pipeline with the txnwatch listener;
- a PyFlink job (`flink-enrich`, in .venv-flink: `make bootstrap` makes it) with Flink's
  exactly-once KafkaSink: the orders read_committed, upper-cased into `demo.flink-out`, one
  Kafka transaction per subtask committed at each checkpoint (every 2 s), transactional ids
  `flink-enrich-<subtask>-<checkpoint>`, which txnwatch groups under the app `flink-enrich`;
- the exporter (admin poller + transaction-log tap) and a real Prometheus with the
  generated alert rules (demo-short timings);
- a fault injector: a hanging transaction on an alert-outbox partition (the outbox sink
  stops behind it), a Streams instance killed mid-transaction and restarted on its state
  directory (the same transactional id: its restart fences the old transaction), a producer
  killed mid-transaction (a
  coordinator timeout), a second instance fencing the first, a burst of aborts, a
  transaction that eats into its timeout headroom and a Flink job failure: the job SIGKILLed
  with a sink transaction open and restarted from its latest retained checkpoint (the same
  prefix and group: its start-up aborts the killed run's transaction, counted as
  `startup_abort`, and its commits resume; the output holds each record once);
- the fix (remediation_step.py, its pure parts in remediation.py): once the hanging transaction's pages (KafkaTransactionHanging and
  KafkaReadCommittedConsumerBlocked for the outbox group) have fired for --abort-hanging-after
  seconds, `txnwatch abort --hanging` finds it in a dry run, the same with --yes aborts it
  (audit trail in the state directory), and the outbox group moves again.

`--bootstrap-servers` points everything at a user's cluster (faults only with
--faults-on-real-cluster). `--no-spark`, `--no-streams`, `--no-flink` leave those out (without
.venv-flink the demo says so and runs without Flink). Ctrl-C stops every process it started.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from functools import partial
from pathlib import Path

from ..kafka.release import BrokerUnavailable, KafkaRelease, kafka_release
from ..net import free_port, wait_for
from ..observability.exporter_proc import ExporterProcess
from ..procs import stop_group
from ..transactions.workload import create_topics
from .fault_plan import Fault
from .faults import (
    FaultInjector,
    HangingMade,
    LoadGenerator,
    RecordSink,
    abort_burst,
    coordinator_timeout,
    fence,
    flink_failure,
    hanging_transaction,
    restart_streams,
    slow_transaction,
)
from .remediation_step import Remediation
from .status import status_line

ROOT = Path(__file__).resolve().parents[2]   # demo/run.py -> the checkout
INPUT, OUTPUT = "demo.orders", "demo.order-totals"                 # the Spark pipeline
PAYMENTS, BALANCES, OUTBOX = "demo.payments", "demo.balances", "alert-outbox"   # the Streams app
SETTLEMENTS = "demo.settlements"                                   # where the producer faults write
# The Flink job: the orders (read_committed) -> upper-case -> FLINK_OUTPUT through the KafkaSink.
FLINK_OUTPUT, FLINK_APP = "demo.flink-out", "flink-enrich"   # FLINK_APP: the sink's transactional-id prefix
FLINK_GROUP = FLINK_APP + "-source"                          # the KafkaSource's consumer group
FLINK_CHECKPOINT_MS = 2000     # one sink transaction per subtask, committed at each checkpoint
FLINK_TIMEOUT_MS = 15_000      # transaction.timeout.ms: at most the broker's 20 s (or InitProducerId fails)
FLINK_PARALLELISM = 1          # one subtask: the demo shares 2 cores with Kafka, Spark and the Streams JVM
# The connector's default TransactionNamingStrategy: a new transactional id per checkpoint
# (POOLING re-initialises a small pool instead; tests/integration/test_flink_job.py runs both)
FLINK_NAMING = "incrementing"
APPLICATION_ID = "balance-app"
OUTBOX_GROUP = "alert-outbox-sink"
TOPIC_FILTER = [r"demo\..*", OUTBOX]
# Short, so a hanging transaction is found (its last write older than this) within the
# first minute; every demo producer's transaction.timeout.ms stays at or below it.
DEMO_BROKER_PROPERTIES = {"transaction.max.timeout.ms": 20_000}


# ------------------------------------------------------------------ the demo
class Demo:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.state = Path(args.state_dir)
        self.state.mkdir(parents=True, exist_ok=True)
        self.stopping = threading.Event()
        self.broker = None
        self.kind = "external" if args.bootstrap_servers else "kafka"
        self.exporter: ExporterProcess | None = None
        self.prometheus = None
        self.pipeline: subprocess.Popen | None = None
        self.streams = None
        self.outbox = None
        self.loadgen: LoadGenerator | None = None
        self.faults: FaultInjector | None = None
        self.remediation: Remediation | None = None
        self.sink: RecordSink | None = None
        self.hanging_made = HangingMade()
        self.pids: dict[str, list[int]] = {}
        self._pid_lock = threading.Lock()
        self._fault_children: list = []
        self.streams_enabled = not args.no_streams
        self.flink = None                  # runtime.FlinkJob
        self.flink_runtime = None
        self._flink_lock = threading.Lock()   # a fault's restart against stop()
        self._flink_restarting = False

    def release(self) -> KafkaRelease:
        """The Apache Kafka release of the embedded broker and the Streams app."""
        return kafka_release(self.args.kafka_version)

    def say(self, msg: str) -> None:
        print(("\n" if sys.stdout.isatty() else "") + time.strftime("[%H:%M:%S] ") + msg, flush=True)

    def _record_pid(self, name: str, pid: int) -> None:
        """Every process the demo starts, by role (pids.json: what must be gone after Ctrl-C)."""
        with self._pid_lock:
            if pid not in self.pids.setdefault(name, []):
                self.pids[name].append(pid)
            (self.state / "pids.json").write_text(json.dumps(self.pids))

    # ------------------------------------------------------------------ start
    def start(self) -> None:
        a = self.args
        (self.state / "pids.json").unlink(missing_ok=True)
        if self.streams_enabled:
            from .streams_app import StreamsApp

            try:
                release = self.release()
            except BrokerUnavailable as exc:
                if self.kind != "external":
                    raise SystemExit(f"demo: {exc}") from None
                self.say(f"no Kafka Streams runtime here ({exc}): running without the Streams app")
                self.streams_enabled = False
            else:
                # built now so javac can run while the broker starts; the bootstrap comes later
                self.streams = StreamsApp(None, self.state / "streams", application_id=APPLICATION_ID,
                                          input_topic=PAYMENTS, balances_topic=BALANCES, alerts_topic=OUTBOX,
                                          release=release)
        if not a.no_flink:
            self.flink_runtime = self._flink_available()
        self.exporter_port = a.exporter_port or 10129
        self._start_broker()
        topics = [INPUT, OUTPUT, SETTLEMENTS] + ([PAYMENTS, BALANCES, OUTBOX] if self.streams_enabled else [])
        topics += [FLINK_OUTPUT] if self.flink_runtime is not None else []
        create_topics(self.bootstrap, topics, partitions=3)
        self.say(f"created topics {', '.join(topics)}")

        tap = self._has_transaction_log()
        cluster = {"name": "demo", "bootstrap_servers": self.bootstrap,
                   "poll_interval_seconds": a.poll_interval, "hanging_threshold_seconds": a.hanging_threshold,
                   "transaction_log_tap": tap, "topics": {"include": TOPIC_FILTER}}
        if a.granularity is not None:
            cluster["granularity"] = a.granularity
        if a.series_linger is not None:
            cluster["series_linger_seconds"] = a.series_linger
        if tap:
            cluster["canary"] = {"interval_seconds": 5, "abort_every": 5}
        self.exporter = ExporterProcess({"clusters": [cluster]}, port=self.exporter_port,
                                        log_path=self.state / "exporter.log").start(timeout=60)
        self._record_pid("exporter", self.exporter.proc.pid)
        ingest = self.exporter.url + "/api/v1/spark/events"
        sources = ("admin poller + transaction-log tap + transactional canary" if tap
                   else "admin poller; no __transaction_state: no tap")
        self.say(f"started txnwatch exporter on {self.exporter.url} ({sources}; "
                 f"log: {self.state}/exporter.log)")

        if self.streams is not None:
            self.streams.bootstrap = self.bootstrap
            self.streams.launch()   # the JVM starts while the rest does
            self._record_pid("streams", self.streams.proc.pid)
        self.sink = RecordSink(ingest)
        self.loadgen = LoadGenerator(self.bootstrap, INPUT, self.sink, rate_per_second=a.rate,
                                     payments_topic=PAYMENTS if self.streams_enabled else None)
        self.loadgen.start()
        self.loadgen.ready.wait(60)
        if self.loadgen.error:
            self.say(f"the load generator could not start: {self.loadgen.error}")
        else:
            self.say(f"started the load generator: ~{a.rate} orders/s into {INPUT}"
                     + (f" and payments into {PAYMENTS}" if self.streams_enabled else "")
                     + ", one transaction per 0.5 s")
        if self.flink_runtime is not None:
            self._start_flink()
        if not a.no_spark and self.pipeline is None:
            self._start_pipeline()
        if not a.no_prometheus:
            self._start_prometheus()
        if self.streams is not None:
            self._wait_streams()
        if a.fault_interval > 0 and not (self.kind == "external" and not a.faults_on_real_cluster):
            self._start_faults()
        self._print_urls()

    def _start_broker(self) -> None:
        a = self.args
        if self.kind == "external":
            self.bootstrap = a.bootstrap_servers
            self.say(f"using the cluster at {self.bootstrap} (no embedded broker)")
            if not a.no_spark:
                self._start_pipeline()
            if self.streams is not None:
                self._compile_streams()
            return
        from ..kafka import make_broker, transaction_version

        workdir = self.state / "kafka"
        shutil.rmtree(workdir, ignore_errors=True)   # the demo's broker starts empty every time
        try:
            self.broker = make_broker(workdir=workdir, port=a.broker_port, properties=DEMO_BROKER_PROPERTIES,
                                      release=self.release())
        except BrokerUnavailable as exc:
            raise SystemExit(f"demo: {exc}") from None
        self.broker.format()
        self.broker.launch()
        self._record_pid("kafka", self.broker.proc.pid)
        self.bootstrap = self.broker.bootstrap
        if not a.no_spark:
            # Spark takes the longest to start (its JVM, then a SparkSession): it starts now,
            # and reaches Kafka only once its query starts, long after the topics exist.
            self._start_pipeline()
        if self.streams is not None:
            self._compile_streams()   # javac runs while the broker starts
        self.broker.wait_ready()
        self.say(f"started {self.broker.describe()} (finalized transaction.version "
                 f"{transaction_version(self.bootstrap)}) with transaction.max.timeout.ms=20000 "
                 f"(log: {self.broker.log_dir}/server.log)")

    def _compile_streams(self) -> None:
        self.streams.prepare()
        self.say(f"{'compiled' if self.streams.compiled else 'reused the compiled'} Kafka Streams app "
                 f"{self.streams.classes} (javac against Kafka Streams {self.streams.release.version} "
                 "from Maven Central)")

    def _has_transaction_log(self) -> bool:
        """Whether the cluster has __transaction_state (the tap's source). Kafka creates it at
        the first transactional producer's registration, so one registers first if needed."""
        if self.kind == "kafka":
            return True
        from confluent_kafka import Producer
        from confluent_kafka.admin import AdminClient

        admin = AdminClient({"bootstrap.servers": self.bootstrap, "log_level": 3})
        if "__transaction_state" in admin.list_topics(timeout=10).topics:
            return True
        p = Producer({"bootstrap.servers": self.bootstrap, "transactional.id": "demo-orders-loadgen-0",
                      "transaction.timeout.ms": 10_000, "log_level": 3})
        try:
            p.init_transactions(30)
        except Exception as exc:  # noqa: BLE001 - no transactions, no tap; the exporter still runs
            self.say(f"the cluster refused a transactional producer ({exc}): running without the tap")
            return False
        try:
            wait_for(lambda: "__transaction_state" in admin.list_topics(timeout=5).topics, 15,
                     what="__transaction_state")
            return True
        except TimeoutError:
            return False

    def _wait_streams(self) -> None:
        s = self.streams
        s.wait_running(120)
        self.say(f"started Kafka Streams app {APPLICATION_ID} (exactly_once_v2, RocksDB store): "
                 f"{PAYMENTS} -> {BALANCES} + alerts in {OUTBOX}, one transaction; transactional id "
                 f"{s.transactional_id} (log: {s.log_path})")
        from .outbox import OutboxSink

        (self.state / "outbox.sqlite").unlink(missing_ok=True)
        self.outbox = OutboxSink(self.bootstrap, OUTBOX, str(self.state / "outbox.sqlite"),
                                 group=OUTBOX_GROUP)
        self.outbox.start()
        self.say(f"started the outbox sink: group {OUTBOX_GROUP} reads {OUTBOX} read_committed and applies "
                 f"each alert once to {self.state}/outbox.sqlite (INSERT OR IGNORE by alert_id)")

    def _start_pipeline(self) -> None:
        ckpt = self.state / "checkpoint"
        if ckpt.exists():  # the embedded broker starts empty: old checkpoint offsets mean nothing
            shutil.rmtree(ckpt)
        cmd = [sys.executable, "-m", "txnwatch_dev.spark.pipeline", "--bootstrap", self.bootstrap,
               "--input-topic", INPUT, "--output-topic", OUTPUT, "--checkpoint", str(ckpt),
               "--name", "orders-totals",
               "--trigger-seconds", f"{self.args.trigger_seconds:g}", "--window", "10 seconds",
               "--watermark", "5 seconds",
               "--transaction-timeout-ms", "15000",
               "--forward-url", f"http://127.0.0.1:{self.exporter_port}",
               # one slow micro-batch that eats into the sink's 15 s transaction timeout
               "--fault", "pause_before_commit=" + json.dumps(
                   {"batch": 6, "task": 0, "seconds": 9, "signal_file": str(self.state / "slow-batch")})]
        env = {**os.environ, "PYSPARK_PYTHON": sys.executable}
        self.pipeline = subprocess.Popen(cmd, stdout=open(self.state / "pipeline.log", "ab"),
                                         stderr=subprocess.STDOUT, env=env, start_new_session=True)
        self._record_pid("pipeline", self.pipeline.pid)
        self.say(f"started the reference Spark pipeline {INPUT} -> {OUTPUT} (Spark's Kafka source read_committed, "
                 f"exactly-once sink, listener "
                 f"forwarding to the exporter; log: {self.state}/pipeline.log)")

    def _flink_available(self):
        """txnwatch_dev.flink.runtime when PyFlink and its Kafka connector can run here,
        else None (said plainly: the demo goes on without Flink)."""
        from ..flink import runtime

        try:
            runtime.python()
            runtime.pyflink_home()
            runtime.connector_jars()   # Maven only the first time; the list is cached
        except Exception as exc:  # noqa: BLE001 - FlinkUnavailable says what to do; anything else too
            self.say(f"no Flink job: {exc}; running without it (`make bootstrap` makes .venv-flink, "
                     "`--no-flink` skips it)")
            return None
        return runtime

    def _flink_args(self) -> dict:
        return dict(checkpoint_ms=FLINK_CHECKPOINT_MS, timeout_ms=FLINK_TIMEOUT_MS, parallelism=FLINK_PARALLELISM,
                    group=FLINK_GROUP, naming=FLINK_NAMING)

    def _start_flink(self) -> None:
        """Spawn the Flink job (its JVM takes ~10-30 s to its first commit: a thread waits for
        it while the rest starts). Its checkpoints go under the state dir, wiped first: the
        embedded broker starts empty, so old offsets and transactions mean nothing."""
        workdir = self.state / "flink"
        shutil.rmtree(workdir, ignore_errors=True)
        self.flink = self.flink_runtime.FlinkJob(workdir)
        try:
            if not self._launch_flink(None):
                return
        except Exception as exc:  # noqa: BLE001 - the demo goes on without Flink
            self.say(f"could not start the Flink job ({type(exc).__name__}: {exc}); running without it")
            self.flink = None
            return
        self.say(f"starting Flink job {FLINK_APP} (PyFlink {self.flink_runtime.FLINK_VERSION}, KafkaSink "
                 f"EXACTLY_ONCE): {INPUT} read_committed -> upper-case -> {FLINK_OUTPUT}, one transaction per "
                 f"subtask ({FLINK_PARALLELISM}) committed at each checkpoint every {FLINK_CHECKPOINT_MS / 1000:g} s, "
                 f"TransactionNamingStrategy {FLINK_NAMING.upper()} (transactional ids "
                 f"{FLINK_APP}-<subtask>-<checkpoint>), transaction.timeout.ms "
                 f"{FLINK_TIMEOUT_MS}; checkpoints in {self.flink.checkpoint_dir} (log: {self.flink.log_path})")
        threading.Thread(target=self._wait_flink, name="demo-flink-start", daemon=True).start()

    def _launch_flink(self, restore) -> bool:
        """Spawn the job (from `restore`, a retained checkpoint); False once the demo stops."""
        with self._flink_lock:
            if self.stopping.is_set():
                return False
            self.flink.launch(self.bootstrap, INPUT, FLINK_OUTPUT, FLINK_APP, restore=restore, **self._flink_args())
            self._record_pid("flink", self.flink.proc.pid)
            return True

    def _wait_flink(self) -> None:
        job = self.flink
        try:
            job.wait_running(180)   # killed if it does not get there
        except Exception as exc:  # noqa: BLE001 - the demo goes on without Flink
            if not self.stopping.is_set():
                self.say(f"the Flink job did not start ({type(exc).__name__}: {str(exc)[:2000]}); running "
                         "without it")
            return
        try:
            wait_for(lambda: self.stopping.is_set() or not job.running() or job.latest_checkpoint() is not None,
                     120, interval=0.5, what="the Flink job's first checkpoint")
        except TimeoutError:
            self.say(f"the Flink job runs but made no checkpoint within 120 s (so no commit); its log: {job.log_path}")
            return
        if self.stopping.is_set():
            return
        if not job.running():
            self.say(f"the Flink job exited ({job.proc.returncode}) before its first checkpoint; running without "
                     f"it; {job.log_path}:\n{job.tail()}")
        else:
            self.say(f"Flink job {FLINK_APP} running ({job.started_in:.0f} s to start), first checkpoint "
                     f"{job.latest_checkpoint().name} after {time.monotonic() - job.launched_at:.0f} s: its "
                     f"commits show in /metrics as kafka_transactions_total{{app=\"{FLINK_APP}\"}}")

    def _flink_failure(self) -> str:
        self._flink_restarting = True
        try:
            return flink_failure(self.flink, self._launch_flink, self.bootstrap, FLINK_OUTPUT, FLINK_APP,
                                 metrics=self.exporter.metrics, timeout_ms=FLINK_TIMEOUT_MS, stopping=self.stopping)
        finally:
            self._flink_restarting = False

    def _flink_state(self) -> tuple[str, str, int | None] | None:
        job = self.flink
        if job is None:
            return None
        if self._flink_restarting:
            state = "restarting (fault)" if not job.running() or job.started_in is None else "running"
        elif job.running():
            state = "running" if job.started_in is not None else "starting"
        else:
            state = f"DOWN (exited {job.proc.returncode if job.proc else '-'}; log {job.log_path})"
        chk = job.latest_checkpoint()
        return FLINK_APP, state, int(chk.name.split("-")[1]) if chk is not None else None

    def _start_prometheus(self) -> None:
        from txnwatch.alerts.config import AlertConfig
        from txnwatch.alerts.rules import generate_alerts

        from ..gotools import GoToolMissing
        from ..observability.prometheus import PrometheusProcess, prometheus_binary

        try:
            prometheus_binary()
        except GoToolMissing as e:
            self.say(f"{e}: skipping Prometheus")
            return
        # Demo timings: alerts fire within a minute instead of the production `for`s.
        cfg = AlertConfig(hanging_for="10s", lso_stalled_hanging_seconds=30, hwm_growth_window="1m",
                          headroom_for="10s", headroom_window="1m", abort_ratio_for="10s",
                          fencing_for="10s", fencing_per_minute=0.05, commit_latency_for="30s",
                          blocked_for="30s", blocked_lso_stalled_seconds=30, blocked_committed_window="1m",
                          spark_stalled_seconds=60, spark_stalled_for="30s", spark_trigger_interval_seconds=self.args.trigger_seconds,
                          spark_behind_for="1m", spark_failed_for="10s", exporter_down_for="30s",
                          source_failing_for="30s")
        rules = generate_alerts(self.state / "prometheus-rules", cfg)[0]
        shutil.rmtree(self.state / "prometheus", ignore_errors=True)
        self.prometheus = PrometheusProcess([f"127.0.0.1:{self.exporter.port}"], [rules],
                                            port=self.args.prometheus_port or free_port(), interval="2s",
                                            log_path=self.state / "prometheus.log",
                                            data_dir=self.state / "prometheus").start()
        self._record_pid("prometheus", self.prometheus.proc.pid)
        self.say(f"started Prometheus on {self.prometheus.url} with the generated rules "
                 f"(log: {self.state}/prometheus.log)")

    def _start_faults(self) -> None:
        b, say = self.bootstrap, self.say
        injector = FaultInjector([], self.args.fault_interval, say)
        where = (OUTBOX, None) if self.streams is not None else (SETTLEMENTS, 0)
        faults = [Fault("hanging", partial(self._hanging, *where), once=True)]
        if self.streams is not None:
            faults.append(Fault("streams-restart", self._restart_streams))
        faults.append(Fault("coordinator-timeout", partial(coordinator_timeout, b, SETTLEMENTS, track=self._track)))
        faults += [Fault("fence", partial(fence, b, SETTLEMENTS, self.sink)),
                   Fault("aborts", partial(abort_burst, b, SETTLEMENTS, self.sink))]
        if self.flink is not None:   # late in the round: the job has made a checkpoint by then
            faults.append(Fault("flink-failure", self._flink_failure))
        faults.append(Fault("slow-transaction", partial(slow_transaction, b, SETTLEMENTS, self.sink,
                                                        stopping=injector.stopping)))
        injector.faults = faults
        self.faults = injector
        injector.start()
        say(f"fault injector: every {self.args.fault_interval:g}s: " + ", ".join(f.name for f in faults))
        if self.args.abort_hanging_after > 0:
            self._start_remediation()

    def _start_remediation(self) -> None:
        after = self.args.abort_hanging_after
        reader = (OUTBOX, OUTBOX_GROUP) if self.outbox is not None else None
        self.remediation = Remediation(
            self.txnwatch(), self.bootstrap, self.hanging_made, reader, after, self.state / "abort-audit.jsonl",
            self.say, self.exporter.metrics, self.prometheus.alerts if self.prometheus else None,
            own_cluster=self.kind != "external", record_pid=partial(self._record_pid, "remediation"))
        self.remediation.start()
        pages = "KafkaTransactionHanging" + (" and KafkaReadCommittedConsumerBlocked" if reader else "")
        self.say(f"remediation: once {pages} for the hanging transaction "
                 + ("have" if reader else "has") + f" fired for {after:g} s"
                 + ("" if self.prometheus else " (without Prometheus: the exporter has shown it that long)")
                 + ", `txnwatch abort --hanging` ends it: a dry run, then --yes")

    @staticmethod
    def txnwatch() -> str:
        """The txnwatch command of this venv (the demo runs on .venv's python)."""
        return str(Path(sys.executable).with_name("txnwatch"))

    def _track(self, proc) -> None:
        """A fault's child producer: recorded, and killed at exit should the fault not have."""
        self._fault_children.append(proc)
        self._record_pid("fault-producers", proc.proc.pid)

    def _hanging(self, topic: str, partition: int | None) -> str:
        if self.outbox is not None and topic == OUTBOX:
            # A hanging transaction in a live outbox, on a partition the sink has read (so the
            # group has an offset there to be blocked at): alerts are keyed by account, so which
            # partition gets one first is up to the payments.
            partition = self._first_outbox_partition()
            if partition is None:
                return "no hanging transaction: the demo is stopping"
        return hanging_transaction(self.bootstrap, topic, partition or 0, record=self.hanging_made)

    def _first_outbox_partition(self) -> int | None:
        started = next_note = time.monotonic()
        while not self.stopping.is_set():
            if self.outbox.partitions_read:
                return min(self.outbox.partitions_read)
            if self.outbox.error:
                self.say(f"the outbox sink failed ({self.outbox.error}): hanging {OUTBOX}-0 anyway")
                return 0
            if time.monotonic() - next_note >= 60:
                next_note = time.monotonic()
                self.say(f"still waiting for the outbox sink to read an alert from {OUTBOX} before making "
                         f"a hanging transaction there ({next_note - started:.0f} s)")
            self.stopping.wait(0.2)
        return None

    def _restart_streams(self) -> str:
        what = restart_streams(self.streams, self.bootstrap, PAYMENTS)
        self._record_pid("streams", self.streams.proc.pid)
        return what

    def _print_urls(self) -> None:
        lines = ["", "Open:",
                 f"  exporter page : {self.exporter.url}/",
                 f"  metrics       : {self.exporter.url}/metrics"]
        if self.prometheus:
            lines += [f"  alerts        : {self.prometheus.page_url('alerts')}",
                      f"  prometheus    : {self.prometheus.page_url('query', **{'g0.expr': 'kafka_partition_lso_lag_offsets > 0'})}"]
        lines += [f"  dashboards    : import {ROOT}/deploy/grafana/dashboards/*.json into Grafana "
                  "(provisioning files in deploy/grafana/provisioning)",
                  f"  one-shot check: {ROOT}/.venv/bin/txnwatch check --bootstrap-servers {self.bootstrap}",
                  "", "Ctrl-C stops everything.", ""]
        self.say("\n".join(lines))

    # ------------------------------------------------------------------ run / stop
    def status_line(self) -> str:
        try:
            m = self.exporter.metrics()
        except Exception as exc:  # noqa: BLE001 - status only
            return f"exporter unreachable: {exc}"
        firing = None
        if self.prometheus:
            try:
                firing = ",".join(sorted({al["labels"]["alertname"] for al in self.prometheus.alerts()
                                          if al["state"] == "firing"})) or "none"
            except Exception:  # noqa: BLE001
                firing = "?"
        line = status_line(m, firing, OUTBOX_GROUP if self.outbox is not None else None, self._flink_state())
        stopped = [f"{name} stopped: {t.error}" for name, t in (("load generator", self.loadgen),
                                                                ("outbox sink", self.outbox))
                   if t is not None and t.error]
        return " | ".join([line, *stopped])

    def run(self) -> None:
        interactive = sys.stdout.isatty()
        deadline = self.args.duration
        waited = 0.0
        while not self.stopping.wait(2.0):
            waited += 2.0
            line = self.status_line()
            if interactive:
                print("\r" + line.ljust(150), end="", flush=True)
            else:
                print(time.strftime("[%H:%M:%S] ") + line, flush=True)
            if deadline and waited >= deadline:
                break

    def stop(self) -> None:
        """Stop everything, in dependency order; a step that fails is reported and the rest
        still runs (a process left behind is the one thing the demo must not do)."""
        self.stopping.set()
        threads = [t for t in (self.faults, self.loadgen, self.outbox, self.remediation) if t is not None]
        for t in threads:
            t.stopping.set()
        problems: list[str] = []

        def step(what: str, fn) -> None:
            try:
                fn()
            except Exception as exc:  # noqa: BLE001 - reported below
                problems.append(f"{what}: {type(exc).__name__}: {exc}")

        pipeline = self.pipeline if self.pipeline is not None and self.pipeline.poll() is None else None
        if pipeline is not None:   # Spark, Flink and the Streams app shut down at the same time
            step("pipeline", lambda: os.killpg(pipeline.pid, signal.SIGTERM))
        flink = None
        if self.flink is not None:
            with self._flink_lock:   # stopping is set: a fault's restart spawns nothing after this
                flink = self.flink.proc if self.flink.running() else None
            if flink is not None:
                step("flink", lambda: os.killpg(flink.pid, signal.SIGTERM))
        if self.streams is not None:
            step("streams", self.streams.close)   # also keeps a fault from starting it again
        if pipeline is not None:
            step("pipeline", lambda: stop_group(pipeline, 20, sig=None))
        if flink is not None:
            step("flink", lambda: stop_group(flink, 20, sig=None))
        if self.remediation is not None:
            step("remediation", self.remediation.stop)
        for t in threads:
            t.join(15)
        step("fault producers", self._kill_fault_children)
        if self.sink:
            step("forwarder", self.sink.close)
        if self.prometheus:
            step("prometheus", self.prometheus.stop)
        if self.exporter:
            step("exporter", lambda: stop_group(self.exporter.proc, 15))
        if self.kind == "external" and self.hanging_made.made:
            step("hanging transactions", self._abort_hanging)
        if self.broker:
            step("broker", self.broker.stop)
        self.say("stopped every process the demo started" if not problems else
                 "stopped, with problems: " + "; ".join(problems))

    def _kill_fault_children(self) -> None:
        for proc in self._fault_children:
            proc.kill()

    def _abort_hanging(self) -> None:
        """On a user's cluster, end the hanging transactions the demo made (as the runbook does):
        `txnwatch abort` by the demo's transactional id, which nothing else uses; what it does not
        see yet (the broker counts a transaction hanging only past its transaction.max.timeout.ms,
        15 min by default) by its exact producer id and epoch through kafka-python."""
        left = [h for h in self.hanging_made.made if not self._abort_with_txnwatch(h)]
        if not left:
            return
        from kafka import KafkaAdminClient
        from kafka.admin._transactions import AbortTransactionSpec
        from kafka.structs import TopicPartition

        admin = KafkaAdminClient(bootstrap_servers=self.bootstrap.split(","), client_id="txnwatch-demo")
        try:
            for h in left:
                try:
                    admin.abort_transaction(AbortTransactionSpec(TopicPartition(h.topic, h.partition),
                                                                 h.producer_id, h.producer_epoch))
                    self.say(f"aborted the demo's hanging transaction on {h.topic}-{h.partition}")
                except Exception as exc:  # noqa: BLE001
                    self.say(f"could not abort the hanging transaction on {h.topic}-{h.partition} ({exc}); "
                             f"run: kafka-transactions.sh --bootstrap-server {self.bootstrap} abort --topic "
                             f"{h.topic} --partition {h.partition} --start-offset {h.offset}")
        finally:
            admin.close()

    def _abort_with_txnwatch(self, h) -> bool:
        """End one hanging transaction the demo made with `txnwatch abort`; False when the
        command did not (nothing reads the outbox any more: it waits 5 s, not 30)."""
        from .remediation import abort_argv, find_made, parse_report, result_on

        argv = abort_argv(self.txnwatch(), self.bootstrap, ["--transactional-id", h.transactional_id],
                          audit_log=str(self.state / "abort-audit.jsonl"), wait_seconds=5)
        try:
            out = subprocess.run(argv, capture_output=True, text=True, timeout=120)
        except subprocess.TimeoutExpired:
            return False
        report = parse_report(out)
        result = result_on(report and find_made(report, h.producer_id, h.topic, h.partition), h.topic, h.partition)
        if result is None or result["outcome"] not in ("aborted", "already_ended"):
            return False
        self.say(f"txnwatch abort ended the demo's hanging transaction on {h.topic}-{h.partition} "
                 f"({result['outcome']}; audit trail: {self.state}/abort-audit.jsonl)")
        return True


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    env = os.environ.get
    p = argparse.ArgumentParser(prog="python -m txnwatch_dev.demo", description=__doc__.split("\n\n")[0])
    p.add_argument("--kafka-version", default=env("KAFKA_VERSION"),
                   help="the embedded broker's Apache Kafka release or line (4.4.0, 4.x, 3.9.x); default: the "
                        "newest 4.x on Maven Central")
    p.add_argument("--broker-port", type=int, default=int(env("DEMO_BROKER_PORT", 0)) or None)
    p.add_argument("--exporter-port", type=int, default=int(env("DEMO_EXPORTER_PORT", 0)) or None)
    p.add_argument("--prometheus-port", type=int, default=int(env("DEMO_PROMETHEUS_PORT", 0)) or None)
    p.add_argument("--bootstrap-servers", default=env("DEMO_BOOTSTRAP_SERVERS"),
                   help="point everything at a real cluster instead of the embedded broker")
    p.add_argument("--faults-on-real-cluster", action="store_true",
                   help="inject faults even with --bootstrap-servers (off by default)")
    p.add_argument("--no-spark", action="store_true", help="skip the Spark pipeline")
    p.add_argument("--no-streams", action="store_true", help="skip the Kafka Streams app and its outbox sink")
    p.add_argument("--no-flink", action="store_true",
                   help=f"skip the PyFlink job with the exactly-once KafkaSink ({FLINK_APP}, in .venv-flink)")
    p.add_argument("--no-prometheus", action="store_true", help="skip Prometheus")
    p.add_argument("--fault-interval", type=float, default=10.0, help="seconds between faults (0: none)")
    p.add_argument("--abort-hanging-after", type=float, default=30.0,
                   help="end the hanging transaction with `txnwatch abort` once its alerts (KafkaTransactionHanging "
                        "and, for the outbox, KafkaReadCommittedConsumerBlocked) have fired this many seconds; "
                        "without Prometheus, once the exporter has shown it that long (0: never)")
    p.add_argument("--poll-interval", type=float, default=5.0)
    p.add_argument("--granularity", choices=("signal", "partition", "topic"), default=None,
                   help="the exporter's series per partition (default: the exporter's, signal)")
    p.add_argument("--series-linger", type=float, default=None,
                   help="granularity signal: seconds a partition keeps its series after its last signal")
    p.add_argument("--hanging-threshold", type=float, default=20.0,
                   help="seconds an LSO may stall before a read_committed group counts as blocked")
    p.add_argument("--rate", type=int, default=200, help="orders per second from the load generator")
    p.add_argument("--trigger-seconds", type=float, default=2.0, help="the Spark pipeline's trigger interval")
    p.add_argument("--state-dir", default=str(ROOT / ".demo"), help="logs, checkpoints, Prometheus data")
    p.add_argument("--duration", type=float, default=None, help="stop by itself after this many seconds")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    demo = Demo(parse_args(argv))
    signal.signal(signal.SIGTERM, lambda *_: demo.stopping.set())
    rc = 0
    try:
        demo.start()
        demo.run()
    except KeyboardInterrupt:
        pass
    except Exception as exc:  # noqa: BLE001 - said plainly, then everything started is stopped
        demo.say(f"demo failed: {type(exc).__name__}: {exc}")
        rc = 1
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)   # a second Ctrl-C must not cut the clean-up short
        demo.stop()
    return rc


if __name__ == "__main__":
    sys.exit(main())
