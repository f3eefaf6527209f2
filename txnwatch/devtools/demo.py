"""`make demo`: the whole txnwatch story on one machine.

    python -m txnwatch.devtools.demo [--no-spark] [--no-prometheus] [--fault-interval 30]
        [--broker-port N] [--exporter-port N] [--prometheus-port N] [--bootstrap-servers LIST]

Starts the embedded Tansu broker (or uses --bootstrap-servers), creates the topics, a
load generator, the reference exactly-once Spark pipeline with the txnwatch listener
(events forwarded to the exporter), the exporter, and a real Prometheus with the
generated alert rules (when `prometheus` is installed). A fault injector then kills a
producer mid-transaction (hanging transaction, stalled LSO), lets a second instance
fence the first, bursts aborts and runs a transaction that eats into its timeout
headroom; the pipeline has one slow micro-batch. Ctrl-C stops every process it started.
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
from pathlib import Path

from .broker import TansuBroker
from .exporter_proc import ExporterProcess
from .faults import FaultInjector, LoadGenerator, RecordSink
from .net import free_port
from .workload import create_topics

ROOT = Path(__file__).resolve().parents[2]
INPUT, OUTPUT, PAYMENTS = "demo.orders", "demo.order-totals", "demo.payments"


class Demo:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.state = Path(args.state_dir)
        self.state.mkdir(parents=True, exist_ok=True)
        self.stopping = threading.Event()
        self.broker: TansuBroker | None = None
        self.exporter: ExporterProcess | None = None
        self.prometheus = None
        self.pipeline: subprocess.Popen | None = None
        self.loadgen: LoadGenerator | None = None
        self.faults: FaultInjector | None = None
        self.sink: RecordSink | None = None
        self.pids: dict[str, int] = {}

    def say(self, msg: str) -> None:
        print(("\n" if sys.stdout.isatty() else "") + msg, flush=True)

    def _record_pid(self, name: str, pid: int) -> None:
        self.pids[name] = pid
        (self.state / "pids.json").write_text(json.dumps(self.pids))

    # ------------------------------------------------------------------ start
    def start(self) -> None:
        a = self.args
        if a.bootstrap_servers:
            self.bootstrap = a.bootstrap_servers
            self.say(f"using the cluster at {self.bootstrap} (no embedded broker)")
        else:
            self.broker = TansuBroker(port=a.broker_port or free_port(), log_path=self.state / "tansu.log").start()
            self.bootstrap = self.broker.bootstrap
            self._record_pid("tansu", self.broker.proc.pid)
            self.say(f"started Tansu broker on {self.bootstrap}            (log: {self.state}/tansu.log)")
        create_topics(self.bootstrap, [INPUT, OUTPUT, PAYMENTS], partitions=3)
        self.say(f"created topics {INPUT}, {OUTPUT}, {PAYMENTS}")

        cluster = {"name": "demo", "bootstrap_servers": self.bootstrap, "poll_interval_seconds": a.poll_interval,
                   "hanging_threshold_seconds": a.hanging_threshold,
                   "topics": {"include": [r"demo\..*"]}}
        self.exporter = ExporterProcess({"clusters": [cluster]}, port=a.exporter_port or 10129,
                                        log_path=self.state / "exporter.log").start()
        self._record_pid("exporter", self.exporter.proc.pid)
        ingest = self.exporter.url + "/api/v1/spark/events"
        self.say(f"started txnwatch exporter on {self.exporter.url}   (log: {self.state}/exporter.log)")

        self.sink = RecordSink(ingest)
        self.loadgen = LoadGenerator(self.bootstrap, INPUT, self.sink, rate_per_second=a.rate)
        self.loadgen.start()
        self.say(f"started the load generator: ~{a.rate} orders/s into {INPUT}, one transaction per 0.5 s")

        if not a.no_spark:
            self._start_pipeline(ingest)
        if not a.no_prometheus:
            self._start_prometheus()
        if a.fault_interval > 0 and not (a.bootstrap_servers and not a.faults_on_real_cluster):
            self.faults = FaultInjector(self.bootstrap, PAYMENTS, self.sink, a.fault_interval, self.say)
            self.faults.start()
            self.say(f"fault injector: every {a.fault_interval:g}s on {PAYMENTS}: hanging transaction, "
                     "fencing, abort burst, slow transaction")
        self._print_urls()

    def _start_pipeline(self, ingest: str) -> None:
        ckpt = self.state / "checkpoint"
        if ckpt.exists():  # the embedded broker starts empty: old checkpoint offsets mean nothing
            shutil.rmtree(ckpt)
        cmd = [sys.executable, "-m", "txnwatch.pipeline", "--bootstrap", self.bootstrap, "--input-topic", INPUT,
               "--output-topic", OUTPUT, "--checkpoint", str(ckpt), "--name", "orders-totals",
               "--trigger-seconds", "2", "--window", "10 seconds", "--watermark", "5 seconds",
               "--transaction-timeout-ms", "15000", "--forward-url", self.exporter.url,
               # one slow micro-batch that eats into the sink's 15 s transaction timeout
               "--fault", "pause_before_commit=" + json.dumps({"batch": 6, "task": 0, "seconds": 9,
                                                                "signal_file": str(self.state / "slow-batch")})]
        env = {**os.environ, "PYSPARK_SUBMIT_ARGS": "--driver-java-options -Xss64m pyspark-shell",
               "PYSPARK_PYTHON": sys.executable}
        self.pipeline = subprocess.Popen(cmd, stdout=open(self.state / "pipeline.log", "ab"),
                                         stderr=subprocess.STDOUT, env=env, start_new_session=True)
        self._record_pid("pipeline", self.pipeline.pid)
        self.say(f"started the reference Spark pipeline {INPUT} -> {OUTPUT} (exactly-once sink, listener "
                 f"forwarding to the exporter; log: {self.state}/pipeline.log)")

    def _start_prometheus(self) -> None:
        from ..alerts.rules import AlertConfig, generate_alerts
        from .prometheus import PrometheusProcess

        if not shutil.which("prometheus"):
            self.say("prometheus is not installed (apt-get install prometheus): skipping it")
            return
        # Demo timings: alerts fire within a minute instead of the production `for`s.
        cfg = AlertConfig(hanging_for="10s", lso_stalled_hanging_seconds=30, hwm_growth_window="1m",
                          headroom_for="10s", headroom_window="1m", abort_ratio_for="10s",
                          fencing_for="10s", fencing_per_minute=0.05, commit_latency_for="30s",
                          blocked_for="30s", blocked_lso_stalled_seconds=30, blocked_committed_window="1m",
                          spark_stalled_seconds=60, spark_stalled_for="30s", spark_trigger_interval_seconds=2,
                          spark_behind_for="1m", spark_failed_for="10s", exporter_down_for="30s",
                          source_failing_for="30s")
        rules = generate_alerts(self.state / "prometheus-rules", cfg)[0]
        self.prometheus = PrometheusProcess([f"127.0.0.1:{self.exporter.port}"], [rules],
                                            port=self.args.prometheus_port or free_port(), interval="2s",
                                            log_path=self.state / "prometheus.log",
                                            data_dir=self.state / "prometheus").start()
        self._record_pid("prometheus", self.prometheus.proc.pid)
        self.say(f"started Prometheus on {self.prometheus.url} with the generated rules "
                 f"(log: {self.state}/prometheus.log)")

    def _print_urls(self) -> None:
        lines = ["", "Open:",
                 f"  exporter page : {self.exporter.url}/",
                 f"  metrics       : {self.exporter.url}/metrics"]
        if self.prometheus:
            lines += [f"  prometheus    : {self.prometheus.url}/alerts  (and /graph)"]
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
        up = m.get_value("txnwatch_up", source="poller")
        hanging = sum(v for _, v in m.select("kafka_transaction_hanging"))
        stalled = max((v for _, v in m.select("kafka_partition_lso_stalled_seconds")), default=0)
        aborted = sum(v for _, v in m.select("kafka_producer_transactions_total", outcome="aborted"))
        fenced = sum(v for lbl, v in m.select("kafka_producer_transaction_errors_total")
                     if lbl.get("error") in ("PRODUCER_FENCED", "INVALID_PRODUCER_EPOCH", "_FENCED"))
        batch = max((v for _, v in m.select("spark_streaming_batch_id")), default=None)
        firing = ""
        if self.prometheus:
            try:
                firing = ",".join(sorted({a["labels"]["alertname"] for a in self.prometheus.alerts()
                                          if a["state"] == "firing"})) or "none"
            except Exception:  # noqa: BLE001
                firing = "?"
        return (f"poller {'up' if up == 1 else 'DOWN'} | hanging {hanging:.0f} | max LSO stall {stalled:.0f}s | "
                f"aborts {aborted:.0f} | fences {fenced:.0f} | spark batch "
                f"{'-' if batch is None else int(batch)} | alerts firing: {firing or 'n/a'}")

    def run(self) -> None:
        interactive = sys.stdout.isatty()
        deadline = self.args.duration
        waited = 0.0
        while not self.stopping.wait(2.0):
            waited += 2.0
            line = self.status_line()
            print(("\r" + line.ljust(150)) if interactive else line, end="" if interactive else "\n", flush=True)
            if deadline and waited >= deadline:
                break

    def stop(self) -> None:
        self.stopping.set()
        for t in (self.faults, self.loadgen):
            if t is not None:
                t.stopping.set()
        if self.pipeline and self.pipeline.poll() is None:
            os.killpg(self.pipeline.pid, signal.SIGTERM)
            try:
                self.pipeline.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(self.pipeline.pid, signal.SIGKILL)
                self.pipeline.wait(10)
        for t in (self.faults, self.loadgen):
            if t is not None:
                t.join(15)
        if self.sink:
            self.sink.close()
        if self.prometheus:
            self.prometheus.stop()
        if self.exporter:
            self.exporter.stop()
        if self.broker:
            self.broker.stop()
        self.say("stopped every process the demo started")


def main(argv: list[str] | None = None) -> int:
    env = os.environ.get
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--broker-port", type=int, default=int(env("DEMO_BROKER_PORT", 0)) or None)
    p.add_argument("--exporter-port", type=int, default=int(env("DEMO_EXPORTER_PORT", 0)) or None)
    p.add_argument("--prometheus-port", type=int, default=int(env("DEMO_PROMETHEUS_PORT", 0)) or None)
    p.add_argument("--bootstrap-servers", default=env("DEMO_BOOTSTRAP_SERVERS"),
                   help="point the exporter (and the pipeline) at a real cluster instead of the embedded broker")
    p.add_argument("--faults-on-real-cluster", action="store_true",
                   help="inject faults even with --bootstrap-servers (off by default)")
    p.add_argument("--no-spark", action="store_true", help="skip the Spark pipeline")
    p.add_argument("--no-prometheus", action="store_true", help="skip Prometheus")
    p.add_argument("--fault-interval", type=float, default=30.0, help="seconds between faults (0: none)")
    p.add_argument("--poll-interval", type=float, default=5.0)
    p.add_argument("--hanging-threshold", type=float, default=20.0,
                   help="seconds an LSO may stall before it counts as hanging (Tansu has no KIP-664)")
    p.add_argument("--rate", type=int, default=200, help="orders per second from the load generator")
    p.add_argument("--state-dir", default=str(ROOT / ".demo"), help="logs, checkpoints, Prometheus data")
    p.add_argument("--duration", type=float, default=None, help="stop by itself after this many seconds")
    args = p.parse_args(argv)
    demo = Demo(args)
    signal.signal(signal.SIGTERM, lambda *_: demo.stopping.set())
    try:
        demo.start()
        demo.run()
    except KeyboardInterrupt:
        pass
    finally:
        demo.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
