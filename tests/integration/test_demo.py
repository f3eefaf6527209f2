"""`make demo` end to end on the real broker: everything the demo promises shows up in the
exporter's /metrics and page and in Prometheus's alerts, and Ctrl-C leaves no process
(JVMs included) and no port behind. The Flink job needs .venv-flink (`make bootstrap`):
without it the demo runs without Flink and this test fails, it does not skip."""

from __future__ import annotations

import json
import os
import re
import signal
import sqlite3
import subprocess
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest

from txnwatch.apps import AppResolver
from txnwatch.fencing import FENCING_ERRORS
from txnwatch_dev.kafka import kafka_tool
from txnwatch_dev.net import free_port, port_open, wait_for
from txnwatch_dev.observability.exporter_proc import ExporterProcess
from txnwatch_dev.observability.prometheus import PrometheusProcess
from txnwatch_dev.procs import terminal_signals

pytestmark = [pytest.mark.integration, pytest.mark.spark, pytest.mark.run_alone]
ROOT = Path(__file__).resolve().parents[2]
APP, OUTBOX, GROUP = "balance-app", "alert-outbox", "alert-outbox-sink"
SPARK_QUERY, SPARK_INPUT = "orders-totals", "demo.orders"      # the demo's reference pipeline
FLINK_APP, FLINK_OUTPUT = "flink-enrich", "demo.flink-out"     # the demo's Flink job: sink prefix, output
EOS_V2_ID = re.compile(r"^balance-app-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}-\d+$")


def _stat(pid: int) -> list[str] | None:
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return text[text.rindex(")") + 2:].split()   # fields after "pid (comm)": state, ppid, pgrp, session, ...


def _alive(pid: int) -> bool:
    st = _stat(pid)
    return st is not None and st[0] != "Z"


def _in_sessions(sessions: set[int]) -> list[str]:
    """Live processes whose session is one of `sessions` (every demo child leads its own)."""
    out = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            st = _stat(int(d.name))
            if st is not None and st[0] != "Z" and int(st[3]) in sessions:
                cmdline = (d / "cmdline").read_bytes().replace(b"\0", b" ")[:200]
                out.append(f"{d.name}: {cmdline!r}")
    return out


def hanging_made(out: str) -> tuple[int, int] | None:
    """(partition, offset) of the hanging transaction the demo made on the outbox, once it says so:
    it picks the first partition its outbox sink has read."""
    found = re.search(rf"hanging transaction on {OUTBOX}-(\d+) at offset (\d+)", out)
    return (int(found.group(1)), int(found.group(2))) if found else None


def audit_lines(state: Path) -> list[dict]:
    """The demo's `txnwatch abort` audit trail (none yet: [])."""
    path = state / "abort-audit.jsonl"
    return [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []


def audit_time(ts: str) -> float:
    """An audit line's `ts` (UTC, ms) in unix seconds."""
    return datetime.strptime(ts, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC).timestamp()


HANGING_FIRING = "KafkaTransactionHanging firing in Prometheus"
BLOCKED_FIRING = "KafkaReadCommittedConsumerBlocked firing in Prometheus for the outbox group"
REMEDIATED = ("remediation, after both pages: txnwatch abort's dry run found the outbox's hanging transaction, "
              "--yes aborted it (audit trail), the LSO and the outbox group moved")


class DemoWatch:
    """What the test has seen of the running demo so far (each check latches once true)."""

    def __init__(self, exporter: ExporterProcess, prom: PrometheusProcess, out_path: Path, state: Path) -> None:
        self.exporter, self.prom, self.out_path, self.state = exporter, prom, out_path, state
        self.seen: dict[str, float] = {}    # check -> seconds after the demo started when first seen
        self.headroom: list[float] = []
        self.flink_fault_commits: float | None = None   # the Flink app's commits when its fault reported
        self.t0 = time.monotonic()

    def out(self) -> str:
        return self.out_path.read_text(errors="replace")

    def check(self) -> bool:
        m = self.exporter.metrics()
        page = self.exporter.get("/")[1]
        out = self.out()
        s = lambda name, **lbl: sum(v for _, v in m.select(name, **lbl))  # noqa: E731
        hung = hanging_made(out)
        checks = {
            # the slow transaction's headroom shrinks between scrapes, and the page lists it open
            "open transaction with shrinking headroom": lambda: self._headroom(m, page),
            "tap commits and aborts": lambda: (s("kafka_transactions_total", outcome="committed") > 0
                                               and s("kafka_transactions_total", outcome="aborted") > 0),
            "fence with its cause (tap: new_instance; client: fencing error; fault report)": lambda: (
                s("kafka_transaction_fencing_events_total", app="refunds-writer", reason="new_instance") >= 1
                and sum(v for lbl, v in m.select("kafka_producer_transaction_errors_total",
                                                 app="refunds-writer") if lbl["error"] in FENCING_ERRORS) >= 1
                and re.search(r"\[fault\] second instance of refunds-writer-0 fenced the first: the first "
                              r"met (" + "|".join(FENCING_ERRORS) + ") in "
                              r"(produce|flush|commit); the second committed", out)),
            "coordinator timeout of the killed producer": lambda: (
                s("kafka_transaction_timeouts_total", app="invoice-writer") >= 1
                and s("kafka_transaction_fencing_events_total", app="invoice-writer", reason="timeout") >= 1),
            "Streams app under its application.id, its restart on its state directory fencing its own "
            "transaction": lambda: (
                s("kafka_transactions_total", app=APP, outcome="committed") > 0
                and s("kafka_transaction_fencing_events_total", app=APP, reason="new_instance") >= 1
                and re.search(r"\[fault\] killed Kafka Streams balance-app mid-transaction and restarted it on "
                              r"its state directory: process id \S+, the same transactional id \S+; its "
                              r"InitProducerId fenced the killed instance's transaction", out)),
            "hanging transaction on the outbox found through KIP-664": lambda: (
                hung is not None and m.get_value("kafka_transaction_hanging", topic=OUTBOX, partition=hung[0]) == 1),
            "outbox group blocked: lag vs LSO below lag vs HWM, named on the page and status line": lambda: (
                hung is not None and self._outbox_blocked(m, hung[0]) and GROUP in page
                and "hanging transaction at offset" in page
                and re.search(rf"outbox {GROUP}: lag \d+ vs LSO, \d+ vs HWM, blocked by a hanging "
                              rf"transaction on {OUTBOX}-{hung[0]}", out)),
            "status line with the coordinator's fences and timeouts": lambda: re.search(
                r"tap: commits \d+ aborts [1-9]\d* fences new_instance [1-9]\d* timeout [1-9]\d* re-inits \d+ "
                r"coordinator timeouts [1-9]", out),
            "Spark pipeline: Kafka-source query, its page row with batch, rows/s, offsets behind": lambda: (
                self._spark_row(m, page) and re.search(r"spark batch \d+, \d+ offsets behind", out)),
            "canary: commits and aborts, every partition visible, no aborted record seen, its page row": lambda: (
                s("txnwatch_canary_rounds_total", outcome="committed") >= 2
                and s("txnwatch_canary_rounds_total", outcome="aborted") >= 1
                and m.select("txnwatch_canary_visibility_seconds_count")
                and all(v > 0 for _, v in m.select("txnwatch_canary_visibility_seconds_count"))
                and m.get_value("txnwatch_canary_visibility_violations_total") == 0
                and "Transactional canary" in page
                and re.search(r"canary: committed [1-9]\d* aborted [1-9]\d* failures \d+ aborted seen 0", out)),
            HANGING_FIRING: lambda: any(
                a["labels"].get("topic") == OUTBOX for a in self.prom.firing("KafkaTransactionHanging")),
            BLOCKED_FIRING: lambda: any(
                a["labels"].get("group") == GROUP for a in self.prom.firing("KafkaReadCommittedConsumerBlocked")),
            # the step waits for both pages: the test has seen them before
            REMEDIATED: lambda: (HANGING_FIRING in self.seen and BLOCKED_FIRING in self.seen
                                 and hung is not None and self._remediated(m, out, *hung)),
            # the KafkaSink's ids <prefix>-<subtask>-<checkpoint> under the app <prefix>
            "Flink job: its sink's commits under its app in /metrics and the status line": lambda: (
                s("kafka_transactions_total", app=FLINK_APP, outcome="committed") > 0
                and re.search(rf"flink {FLINK_APP}: running, checkpoint \d+, commits [1-9]\d*", out)),
            "Flink job: an open sink transaction under its app on the page": lambda: re.search(
                rf"<td>{FLINK_APP}</td><td>{FLINK_APP}-\d+-\d+</td>", page),
            "Flink job failure: SIGKILLed, restarted from its retained checkpoint, the killed run's open "
            "transaction aborted (startup_abort, no fence), commits after it": lambda: self._flink_failure(m, out),
        }
        for name, fn in checks.items():
            if name not in self.seen and fn():
                self.seen[name] = time.monotonic() - self.t0
        self.missing = [n for n in checks if n not in self.seen]
        return not self.missing

    def _remediated(self, m, out: str, partition: int, offset: int) -> bool:
        """The demo's remediation lines (the dry run's command, what it found, who waits, what it
        discards, then the acting command and its result), its audit trail, and the exporter's
        view after it: nothing hanging on the partition, the outbox group past the offset."""
        said = [
            r"\$ \S+/txnwatch abort --bootstrap-servers \S+ --hanging +\(a dry run: nothing changes\)",
            r"the dry run found \d+ hanging transaction\(s\); the demo's: transactional id outbox-late-writer-0 ",
            rf"it holds {OUTBOX}-{partition} from offset {offset}: LSO {offset}, HWM \d+",
            # at the offset, or a commit marker before it (a read_committed consumer's position stays
            # behind a trailing marker until it reads the next record)
            rf"who waits: read_committed group {GROUP} at offset \d+ \(lag \d+ vs LSO, [1-9]\d* vs HWM\)",
            rf"the abort discards: {OUTBOX}-{partition}: this transaction's records from offset {offset} ",
            r"verdict: will abort",
            rf"\$ \S+/txnwatch abort --bootstrap-servers \S+ --hanging --yes --audit-log {re.escape(str(self.state))}"
            r"/abort-audit.jsonl",
        ]
        if not all(re.search(r"\[remediation\] " + line, out) for line in said):
            return False
        ended = re.search(rf"\[remediation\] txnwatch abort ended the hanging transaction on {OUTBOX}-{partition} "
                          rf"at offset {offset}: LSO now (\d+); outbox group {GROUP} moving again", out)
        if not ended or int(ended.group(1)) <= offset:
            return False
        trail = [(x["phase"], x.get("outcome"), x["target"]["partition"], x["target"]["start_offset"])
                 for x in audit_lines(self.state)]
        if trail[:2] != [("intent", None, partition, offset), ("outcome", "aborted", partition, offset)]:
            return False
        committed = m.get_value("kafka_consumergroup_committed_offset", group=GROUP, topic=OUTBOX, partition=partition)
        return (not m.get_value("kafka_transaction_hanging", topic=OUTBOX, partition=partition)
                and committed is not None and committed > offset)

    def _flink_failure(self, m, out: str) -> bool:
        """The fault's report, then the tap's view: the killed run's open transaction aborted as
        a start-up abort (or, on a machine so loaded that the restart took longer than the
        job's 15 s transaction.timeout.ms, by the coordinator's timeout), never counted as a
        new_instance fence; and a commit after the report: the restored job goes on. The
        counts are read from /metrics, not from the report, which may be written before the
        tap has caught up."""
        line = re.search(rf"\[fault\] SIGKILLed Flink job {FLINK_APP} with (.*?) and restarted it from its retained "
                         r"checkpoint chk-\d+ \(same prefix and group", out)
        if not line:
            return False
        reasons = {lbl["reason"]: v for lbl, v in m.select("kafka_transaction_fencing_events_total", app=FLINK_APP)}
        if reasons.get("new_instance", 0) != 0:   # a restart's abort is no fence
            return False
        if line.group(1).startswith(f"a KafkaSink transaction open on {FLINK_OUTPUT}-") and \
                reasons.get("startup_abort", 0) + reasons.get("timeout", 0) < 1:
            return False
        commits = sum(v for _, v in m.select("kafka_transactions_total", app=FLINK_APP, outcome="committed"))
        if self.flink_fault_commits is None:
            self.flink_fault_commits = commits
        return commits > self.flink_fault_commits

    def _headroom(self, m, page: str) -> bool:
        vals = [v for _, v in m.select("kafka_transaction_timeout_headroom_seconds", app="settlement-batch")]
        if not vals:
            self.headroom = []
            return False
        self.headroom.append(min(vals))
        open_table = page.split("Oldest open transactions", 1)[1].split("</section>")[0]
        return (len(self.headroom) >= 2 and 0 < self.headroom[-1] < self.headroom[-2]
                and "settlement-batch-0" in open_table)

    def _spark_row(self, m, page: str) -> bool:
        if max((v for _, v in m.select("spark_streaming_batch_id", query=SPARK_QUERY)), default=-1) < 1:
            return False
        if m.get_value("spark_streaming_source_partition_offset", query=SPARK_QUERY, topic=SPARK_INPUT,
                       partition=0) is None:
            return False
        row = page.split(f"<td>{SPARK_QUERY}<br>", 1)[-1].split("</tr>", 1)[0]
        cells = re.findall(r"<td class=num>([^<]*)</td>", row)   # batch, last batch, in/s, processed/s, behind
        return (f"<td>{SPARK_QUERY}<br>" in page and len(cells) == 5 and all(cells)
                and ("caught up" in row or "behind</span>" in row))

    def _outbox_blocked(self, m, partition: int) -> bool:
        lag = {iso: m.get_value(f"kafka_consumergroup_{iso}_lag_offsets", group=GROUP, topic=OUTBOX,
                                partition=partition) for iso in ("read_committed", "read_uncommitted")}
        return None not in lag.values() and lag["read_uncommitted"] > lag["read_committed"]


# The alerts `make demo` means to cause, by the workload its faults hit (alertname -> the
# apps, groups or topics they may name). Everything else it runs is healthy and must page
# nobody: the reference pipeline (orders-totals), the canary, the Streams app between its
# restarts, the Flink job (its start-up aborts are deliberate), the outbox sink.
FAULTED_APPS = {"invoice-writer",      # coordinator-timeout: SIGKILLed mid-transaction
                "refunds-writer",      # fence: a second instance cuts its transaction off
                "payments-retrier",    # aborts: a burst of aborted transactions
                "settlement-batch",    # slow-transaction: most of its timeout used
                APP,                   # streams-restart: killed mid-transaction, restarted
                # flink-failure: SIGKILLed with a sink transaction open; on a loaded machine its
                # restart outlasts the 15 s transaction.timeout.ms (the coordinator times it out)
                "flink-enrich"}
DEMO_ALERTS = {
    # the hanging fault, the killed producers' transactions past their timeout, and the
    # killed Flink job's output held at its open transaction's LSO
    "KafkaTransactionHanging": FAULTED_APPS | {"outbox-late-writer", OUTBOX, "demo.flink-out"},
    "KafkaReadCommittedConsumerBlocked": {GROUP},
    "KafkaTransactionFencingPersistent": FAULTED_APPS,
    "KafkaTransactionAbortRatioHigh": FAULTED_APPS,
    "KafkaTransactionTimeoutHeadroomLow": FAULTED_APPS,
    "KafkaTransactionCommitLatencyHigh": FAULTED_APPS,
}


def fired_during(prom: PrometheusProcess, seconds: float) -> set[tuple[str, str]]:
    """(alertname, what it names: app, group or topic) of every alert that fired in the last
    `seconds`, from Prometheus's ALERTS series."""
    rows = prom.query(f'max_over_time(ALERTS{{alertstate="firing"}}[{int(seconds) + 30}s])')
    out = set()
    for r in rows:
        lbl = r["metric"]
        out.add((lbl["alertname"], lbl.get("app") or lbl.get("group") or lbl.get("topic") or lbl.get("query") or ""))
    return out


def printed_links(out: str) -> dict[str, str]:
    """{name: URL} of the "Open:" block the demo prints (pure)."""
    block = out.split("Open:", 1)[1].split("Ctrl-C", 1)[0] if "Open:" in out else ""
    return dict(re.findall(r"^\s+([\w -]+?)\s*: (https?://\S+)", block, re.M))


def opens(url: str) -> int:
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(url, timeout=10) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code


def test_make_demo_on_kafka_shows_everything_and_cleans_up(tmp_path):
    state = tmp_path / "demo"
    ex_port, prom_port, broker_port = free_port(), free_port(), free_port()
    args = (f"--state-dir {state} --fault-interval 3 --hanging-threshold 4 --poll-interval 1 --abort-hanging-after 5 "
            f"--exporter-port {ex_port} --prometheus-port {prom_port} --broker-port {broker_port} --rate 50")
    out_path = tmp_path / "demo.out"
    out = open(out_path, "wb")
    proc = subprocess.Popen(["make", "--no-print-directory", "demo", f"DEMO_ARGS={args}"], cwd=ROOT,
                            stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
                            preexec_fn=terminal_signals)   # Ctrl-C reaches it as at a terminal
    exporter = ExporterProcess({"clusters": []}, port=ex_port)  # a client for the demo's exporter
    prom = PrometheusProcess([], port=prom_port)
    watch = DemoWatch(exporter, prom, out_path, state)
    try:
        wait_for(lambda: exporter.get("/healthz")[0] == 200 or proc.poll() is not None, 240,
                 what="the demo's exporter")
        assert proc.poll() is None, watch.out()[-3000:]
        try:
            # the remediation comes last: both of the outbox's pages fired 30 s, about 2 min after
            # the hanging write
            wait_for(watch.check, 420, interval=1, what="everything the demo shows")
        except TimeoutError:
            pytest.fail(f"not seen: {watch.missing}\n--- demo output ---\n{watch.out()[-6000:]}")
        for name, t in sorted(watch.seen.items(), key=lambda i: i[1]):
            print(f"seen after {t:5.0f}s: {name}")
        # every link the demo prints opens a working page (Debian's Prometheus has no /alerts)
        links = printed_links(watch.out())
        assert {"exporter page", "metrics", "alerts", "prometheus"} <= set(links), links
        assert {name: opens(url) for name, url in links.items()} == dict.fromkeys(links, 200), links
        print("".join(line[:160] + "\n" for line in watch.out().splitlines() if "[fault]" in line))
        print("".join(line + "\n" for line in watch.out().splitlines() if "[remediation]" in line))

        # Only the alerts its faults are meant to cause fired, on the workloads they hit, and the
        # abort pages nobody: what it would cause (the demo's rules wait at most 30 s) has had the
        # time to fire first.
        time.sleep(max(0.0, watch.seen[REMEDIATED] + 35 - (time.monotonic() - watch.t0)))
        fired = fired_during(prom, time.monotonic() - watch.t0)
        print("alerts fired during the demo:", sorted(fired))
        unexpected = {(name, what) for name, what in fired if what not in DEMO_ALERTS.get(name, set())}
        assert not unexpected, f"alerts the demo's faults do not explain: {sorted(unexpected)}"

        # The Streams app's transactional id, as the broker lists it, is an EOS-v2 id that
        # txnwatch groups under the application.id; restarted on its state directory, it kept it.
        listed = kafka_tool("kafka-transactions", "--bootstrap-server", f"127.0.0.1:{broker_port}", "list",
                            log_dir=tmp_path / "tools").stdout.split()
        ids = [t for t in listed if t.startswith(APP + "-")]
        assert len(ids) == 1 and all(EOS_V2_ID.match(t) for t in ids), ids
        assert {AppResolver()(t) for t in ids} == {APP}
    finally:
        os.killpg(proc.pid, signal.SIGINT)  # what Ctrl-C in the terminal does
        try:
            proc.wait(120)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            pytest.fail("make demo did not stop within 120 s of Ctrl-C")
        out.close()

    log = watch.out()
    assert "stopped every process the demo started" in log, log[-3000:]
    # The outbox sink applied alerts once each; never the hanging transaction's own record (the
    # abort discarded it), and the records above it only once the abort let them through (the
    # audit trail's intent is written before the markers).
    hung_partition, hanging_at = hanging_made(log)
    [intent] = [x for x in audit_lines(state) if x["phase"] == "intent"]
    aborted_at = audit_time(intent["ts"])
    with sqlite3.connect(state / "outbox.sqlite") as db:
        rows = db.execute("SELECT alert_id, partition, offset, applied_at FROM alerts").fetchall()
    assert rows and len({r[0] for r in rows}) == len(rows)
    assert not [r for r in rows if (r[1], r[2]) == (hung_partition, hanging_at) or r[0] == "late-write"], rows
    above = [r for r in rows if r[1] == hung_partition and r[2] > hanging_at]
    assert above and all(applied >= aborted_at for _, _, _, applied in above), (aborted_at, above)

    pids = json.loads((state / "pids.json").read_text())
    assert set(pids) >= {"kafka", "exporter", "pipeline", "prometheus", "streams", "fault-producers", "flink"}, pids
    assert len(pids["streams"]) >= 2 and len(pids["flink"]) >= 2, pids   # restarted by the faults
    every = [p for group in pids.values() for p in group]
    wait_for(lambda: not any(_alive(p) for p in every), 30, what=f"demo processes {pids} to exit")
    assert not _in_sessions(set(every) | {proc.pid}), _in_sessions(set(every) | {proc.pid})
    listeners = next(line for line in (state / "kafka" / "server.properties").read_text().splitlines()
                     if line.startswith("listeners="))
    kafka_ports = {int(p) for p in re.findall(r":(\d+)", listeners)}
    for port in {ex_port, prom_port, broker_port} | kafka_ports:
        assert not port_open("127.0.0.1", port), f"port {port} still open"
    leftovers = subprocess.run(["pgrep", "-f", str(state)], capture_output=True, text=True).stdout.split()
    assert not leftovers, f"processes still running with {state} in their command line: {leftovers}"


class _BrokerReached(Exception):
    pass


def _start_until_the_broker(tmp_path, monkeypatch, *args: str):
    """Demo.start() up to the broker (stopped there): what it decided about Flink, and what it said."""
    from txnwatch_dev.demo import run as demo

    said: list[str] = []
    monkeypatch.setattr(demo.Demo, "say", lambda self, msg: said.append(msg))
    monkeypatch.setattr(demo.Demo, "_start_broker", lambda self: (_ for _ in ()).throw(_BrokerReached()))
    d = demo.Demo(demo.parse_args(["--state-dir", str(tmp_path / "demo"), "--no-streams", *args]))
    with pytest.raises(_BrokerReached):
        d.start()
    return d, said


def test_no_flink_leaves_the_flink_job_out(tmp_path, monkeypatch):
    from txnwatch_dev.flink import runtime

    monkeypatch.setattr(runtime, "python", lambda: pytest.fail("--no-flink still looked for PyFlink"))
    d, said = _start_until_the_broker(tmp_path, monkeypatch, "--no-flink")
    assert d.flink_runtime is None and d.flink is None and d._flink_state() is None   # no topic, job, fault, status
    assert not any("flink" in m.lower() for m in said), said


def test_without_venv_flink_the_demo_says_so_and_goes_on(tmp_path, monkeypatch):
    monkeypatch.setenv("TXNWATCH_FLINK_VENV", str(tmp_path / "no-venv-flink"))
    d, said = _start_until_the_broker(tmp_path, monkeypatch)
    assert d.flink_runtime is None
    assert any("no Flink job" in m and "make bootstrap" in m and "--no-flink" in m for m in said), said
