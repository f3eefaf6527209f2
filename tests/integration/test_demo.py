"""`make demo` end to end: faults show up in the exporter and Prometheus fires the alert;
Ctrl-C leaves no process behind."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path

import pytest

from txnwatch.devtools.exporter_proc import ExporterProcess
from txnwatch.devtools.net import free_port, port_open, wait_for
from txnwatch.devtools.prometheus import PrometheusProcess

pytestmark = [pytest.mark.integration, pytest.mark.spark]
ROOT = Path(__file__).resolve().parents[2]
FENCING = ("PRODUCER_FENCED", "INVALID_PRODUCER_EPOCH", "_FENCED")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie child of a dead parent is not running
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return False


def test_make_demo_shows_faults_fires_alert_and_cleans_up(tmp_path):
    state = tmp_path / "demo"
    ex_port, prom_port, broker_port = free_port(), free_port(), free_port()
    args = (f"--state-dir {state} --fault-interval 4 --hanging-threshold 4 --poll-interval 1 "
            f"--exporter-port {ex_port} --prometheus-port {prom_port} --broker-port {broker_port} --rate 50")
    out = open(tmp_path / "demo.out", "wb")
    proc = subprocess.Popen(["make", "--no-print-directory", "demo", f"DEMO_ARGS={args}"], cwd=ROOT,
                            stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    exporter = ExporterProcess({"clusters": []}, port=ex_port)  # a client for the demo's exporter
    prom = PrometheusProcess([], port=prom_port)
    try:
        wait_for(lambda: exporter.get("/healthz")[0] == 200, 240, what="the demo's exporter")

        def faults_seen():
            m = exporter.metrics()
            hanging = sum(v for _, v in m.select("kafka_transaction_hanging"))
            aborted = sum(v for _, v in m.select("kafka_producer_transactions_total", outcome="aborted"))
            fenced = sum(v for lbl, v in m.select("kafka_producer_transaction_errors_total")
                         if lbl.get("error") in FENCING)
            return hanging >= 1 and aborted >= 1 and fenced >= 1

        wait_for(faults_seen, 180, interval=1, what="a hanging transaction, a fence and aborts in the exporter")
        wait_for(lambda: prom.firing("KafkaTransactionHanging"), 120, interval=1,
                 what="KafkaTransactionHanging firing in the demo's Prometheus")
        wait_for(lambda: (max((v for _, v in exporter.metrics().select("spark_streaming_batch_id")), default=-1)
                          >= 1), 240, interval=2, what="the demo's Spark pipeline to report batches")
    finally:
        os.killpg(proc.pid, signal.SIGINT)  # what Ctrl-C in the terminal does
        try:
            proc.wait(90)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            pytest.fail("make demo did not stop within 90 s of Ctrl-C")
        out.close()
    log = (tmp_path / "demo.out").read_text(errors="replace")
    assert "stopped every process the demo started" in log, log[-3000:]
    pids = json.loads((state / "pids.json").read_text())
    assert set(pids) >= {"tansu", "exporter", "pipeline", "prometheus"}
    wait_for(lambda: not any(_alive(p) for p in pids.values()), 30, what=f"demo processes {pids} to exit")
    for port in (ex_port, prom_port, broker_port):
        assert not port_open("127.0.0.1", port), f"port {port} still open"
    leftovers = subprocess.run(["pgrep", "-f", str(state)], capture_output=True, text=True).stdout.split()
    assert not leftovers, f"processes still running with {state} in their command line: {leftovers}"
