"""The transaction scenario: the same real producers on every broker line and client, and
txnwatch's counts held against the broker's own view.

    python -m txnwatch_dev.transactions.scenario --kafka-version 4 --client java
    python -m txnwatch_dev.transactions.scenario --kafka-version 4 --client librdkafka
    python -m txnwatch_dev.transactions.scenario --kafka-version 3.9 --client librdkafka

It starts a broker of that release (one KRaft node, transactional.id.expiration.ms 15 s),
`txnwatch serve` on it (admin poller, transaction-log tap, canary) and drives one app per
step, each app's ids writing one record per transaction to a partition of its own:

  commits     3 commits, 2 client aborts
  fence-open  a second instance initialises while the first has a transaction open: the
              first's commit fails (fenced), the second commits
  fence-idle  the first commits, a second instance initialises while it is idle: the first's
              next transaction fails, the second commits
  restart     3 commits, 2 client aborts (the last one just before the exit), the process
              exits and a new one starts at once (a re-init: under TV2 the client's own abort
              bumps the epoch as a fence's does); then a second instance initialises while the
              restarted one has a transaction open (the one fence)
  timeout     a producer (transaction.timeout.ms 3 s) SIGKILLed mid-transaction: the
              coordinator aborts it
  operator    (4.1+) kafka-transactions.sh forceTerminateTransaction on an open transaction
  hanging     a late write the coordinator never saw (KAFKA-9144; on 3.6+ with the
              leader's transaction verification off for the write): found by txnwatch's
              KIP-664 poller and by `kafka-transactions.sh find-hanging` alike, then ended by
              `kafka-transactions.sh abort`, after which the partition's LSO moves again
  expiry      every id then idles past transactional.id.expiration.ms and is expired

The broker's own view: committed and aborted transactions from the data log (each
transaction writes one record: read_committed sees the committed ones, read_uncommitted
all), InitProducerIds and timeouts from the coordinator's log lines ("Initialized
transactionalId ...", "... due to timeout"), states from `kafka-transactions.sh list`,
expiry from DescribeTransactions (TRANSACTIONAL_ID_NOT_FOUND). txnwatch's view: the tap's
counters in /metrics, the KIP-664 poller's open transaction on the page, the canary's
rounds, and with the librdkafka client txnwatch's instrumented producer (the Spark sink's)
forwarding its transactions to the exporter.
"""

from __future__ import annotations

import argparse
import html
import json
import re
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from txnwatch.config import CanaryConfig

from ..kafka import KafkaBroker, KafkaRelease, kafka_release, kafka_tool, transaction_version
from ..net import wait_for
from ..observability.exporter_proc import ExporterProcess
from ..observability.scrape import Metrics
from .scenario_steps import EXPECTED, STEPS, Counts, app_of, tid_of
from .txn_client import TxnClient, TxnClientError
from .txnlog_dump import read_records, record_json
from .workload import create_topics

TOPIC = "scn-data"
EXPIRATION_MS = 15_000
TIMEOUT_MS = 3_000
# transaction.max.timeout.ms: a hanging transaction is found once its last write is older.
# Not below 30 s: forceTerminateTransaction's InitProducerId carries the admin client's 30 s
# request timeout, which the broker refuses above its cap (INVALID_TRANSACTION_TIMEOUT).
MAX_TIMEOUT_MS = 30_000
FENCED = ("ProducerFencedException", "InvalidProducerEpochException", "_FENCED", "PRODUCER_FENCED",
          "INVALID_PRODUCER_EPOCH")
BROKER_PROPERTIES = {
    "transaction.max.timeout.ms": MAX_TIMEOUT_MS,
    "transactional.id.expiration.ms": EXPIRATION_MS,
    "transaction.remove.expired.transaction.cleanup.interval.ms": 1000,
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": 1000,
}


def has_force_terminate(release: KafkaRelease) -> bool:
    return (release.major, int(release.version.split(".")[1])) >= (4, 1)


@dataclass
class ScenarioResult:
    release: str
    client: str
    transaction_version: int
    steps: tuple[str, ...]
    txnwatch: dict[str, Counts] = field(default_factory=dict)
    broker: dict[str, Counts] = field(default_factory=dict)
    client_view: dict[str, dict] = field(default_factory=dict)   # librdkafka: the instrumented producer's
    checks: dict[str, object] = field(default_factory=dict)     # other observations, by name

    def expected(self) -> dict[str, Counts]:
        return {s: EXPECTED[s] for s in self.steps}

    def problems(self) -> list[str]:
        out = []
        for step, want in self.expected().items():
            for view, got in (("txnwatch", self.txnwatch.get(step)), ("broker", self.broker.get(step))):
                if got != want:
                    out.append(f"{step}: {view} {got} != expected {want}")
        for name, ok in self.checks.items():
            if ok is not True:
                out.append(f"{name}: {ok}")
        return out

    def table(self) -> str:
        rows = [f"Apache Kafka {self.release}, transaction.version {self.transaction_version}, client {self.client}",
                f"{'step':<11} {'view':<9} committed aborted new_instance reinit timeout operator expired"]
        for step in self.steps:
            for view, c in (("expected", EXPECTED[step]), ("txnwatch", self.txnwatch.get(step)),
                            ("broker", self.broker.get(step))):
                cells = "-" if c is None else (f"{c.committed:>9} {c.aborted:>7} {c.new_instance:>12} "
                                               f"{c.reinit:>6} {c.timeout:>7} {c.operator:>8} {c.expired:>7}")
                rows.append(f"{step:<11} {view:<9} {cells}")
        rows += [f"check {k}: {v}" for k, v in self.checks.items()]
        return "\n".join(rows)

    def to_json(self) -> str:
        return json.dumps({**asdict(self), "problems": self.problems()}, sort_keys=True)


# ------------------------------------------------------------------ views
def txnwatch_counts(m: Metrics, step: str) -> Counts:
    app = app_of(step)

    def v(name: str, **lbl) -> int:
        return int(m.get_value(name, app=app, **lbl) or 0)

    return Counts(v("kafka_transactions_total", outcome="committed"), v("kafka_transactions_total", outcome="aborted"),
                  v("kafka_transaction_fencing_events_total", reason="new_instance"),
                  v("kafka_transactional_id_reinitializations_total"),
                  v("kafka_transaction_timeouts_total"),
                  v("kafka_transaction_fencing_events_total", reason="operator"),
                  v("kafka_transactional_id_expirations_total"))


def log_counts(server_log: str, tid: str) -> tuple[int, int]:
    """(InitProducerIds after the registration, coordinator timeouts) of `tid` in the broker's
    log (pure)."""
    inits = len(re.findall(rf"Initialized transactionalId {re.escape(tid)} with producerId", server_log))
    timeouts = len(re.findall(rf"rollback of ongoing transaction for transactionalId {re.escape(tid)} due to "
                              "timeout", server_log))
    return max(0, inits - 1), timeouts


def data_counts(bootstrap: str, partition: int) -> tuple[int, int]:
    """(committed, aborted) transactions of one partition of TOPIC from its log: one record
    per transaction, read_committed returns the committed ones, read_uncommitted all."""
    from confluent_kafka import Consumer, TopicPartition

    seen = {}
    for iso in ("read_committed", "read_uncommitted"):
        c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"scn-count-{iso}", "isolation.level": iso,
                      "enable.auto.commit": False, "log_level": 3})
        try:
            low, high = c.get_watermark_offsets(TopicPartition(TOPIC, partition), timeout=15)
            c.assign([TopicPartition(TOPIC, partition, low)])
            n, deadline = 0, time.monotonic() + 30
            while time.monotonic() < deadline:
                msg = c.poll(0.5)
                if msg is None:
                    # no transaction is open any more: both readers reach the high watermark
                    if c.position([TopicPartition(TOPIC, partition)])[0].offset >= high:
                        break
                    continue
                if not msg.error():
                    n += 1
            seen[iso] = n
        finally:
            c.close()
    return seen["read_committed"], seen["read_uncommitted"] - seen["read_committed"]


def describe_state(bootstrap: str, tid: str) -> str:
    """The coordinator's state of `tid` (DescribeTransactions), or the error it answered."""
    from kafka import KafkaAdminClient

    admin = KafkaAdminClient(bootstrap_servers=bootstrap.split(","), client_id="txnwatch-scenario")
    try:
        d = admin.describe_transactions([tid]).get(tid)
        return getattr(d.state, "value", str(d.state)) if d is not None else "unknown"
    except Exception as exc:  # noqa: BLE001 - TRANSACTIONAL_ID_NOT_FOUND is an answer here
        return type(exc).__name__
    finally:
        admin.close()


# ------------------------------------------------------------------ the scenario
class Scenario:
    def __init__(self, broker: KafkaBroker, exporter: ExporterProcess, client: str, workdir: Path,
                 release: KafkaRelease, capture: Path | None = None) -> None:
        self.broker, self.exporter, self.client, self.workdir, self.release = broker, exporter, client, workdir, release
        self.capture = capture   # where the coordinator's records of the scenario's ids are written
        self.steps = tuple(s for s in STEPS if s != "operator" or has_force_terminate(release))
        self.result = ScenarioResult(release.version, client, transaction_version(broker.bootstrap), self.steps)
        self.started: list[TxnClient] = []
        self.hanging_made = None    # the late write of make_hanging
        self.states_before_init: dict[str, list[str]] = {}   # step -> the id's state before a take-over

    def partition(self, step: str) -> int:
        return STEPS.index(step)

    def new_client(self, step: str, timeout_ms: int = 20_000) -> TxnClient:
        c = TxnClient(self.client, self.broker.bootstrap, tid_of(step), workdir=self.workdir, release=self.release,
                      transaction_timeout_ms=timeout_ms,
                      forward_url=self.exporter.url if self.client == "librdkafka" else None).start()
        self.started.append(c)
        return c

    def txn(self, c: TxnClient, step: str, outcome: str = "commit") -> None:
        c.begin()
        c.send(TOPIC, self.partition(step), f"{step}-{outcome}")
        (c.commit if outcome == "commit" else c.abort)()

    def expect_fenced(self, name: str, fn) -> None:
        try:
            fn()
            self.result.checks[name] = "not fenced: the call succeeded"
        except TxnClientError as exc:
            self.result.checks[name] = True if exc.error in FENCED else f"failed with {exc.error}, not a fence"

    # -- steps
    def commits(self) -> None:
        c = self.new_client("commits")
        c.init()
        for outcome in ("commit", "commit", "abort", "commit", "abort"):
            self.txn(c, "commits", outcome)

    def fence_open(self) -> None:
        first, second = self.new_client("fence-open"), self.new_client("fence-open")
        first.init()
        first.begin()
        first.send(TOPIC, self.partition("fence-open"), "zombie")
        # the KIP-664 poller lists it (the exporter's page) while it is open
        tid = tid_of("fence-open")
        self.result.checks["the KIP-664 poller lists the open transaction"] = self._wait_page(
            f"<td>{app_of('fence-open')}</td><td>{tid}</td><td>Ongoing</td>", 30)
        self.take_over(second, "fence-open")    # fences the first: its transaction is aborted
        self.expect_fenced("fence-open: the first instance's commit fails", first.commit)
        self.txn(second, "fence-open")

    def fence_idle(self) -> None:
        first, second = self.new_client("fence-idle"), self.new_client("fence-idle")
        first.init()
        self.txn(first, "fence-idle")
        self.take_over(second, "fence-idle")    # takes the idle id over
        self.expect_fenced("fence-idle: the first instance's next transaction fails",
                           lambda: self.txn(first, "fence-idle"))
        self.txn(second, "fence-idle")

    def restart(self) -> None:
        first = self.new_client("restart")
        first.init()
        for outcome in ("commit", "commit", "abort", "commit", "abort"):
            self.txn(first, "restart", outcome)
        first.close()
        restarted = self.new_client("restart")    # a new process, started once the first exited
        self.take_over(restarted, "restart")
        restarted.begin()
        restarted.send(TOPIC, self.partition("restart"), "zombie")
        second = self.new_client("restart")
        self.take_over(second, "restart")         # fences the restarted one: its transaction is aborted
        self.expect_fenced("restart: the restarted instance's commit fails", restarted.commit)
        self.txn(second, "restart")

    def take_over(self, client: TxnClient, step: str) -> None:
        """Another instance's init_transactions, with the coordinator's state of the id right
        before it (DescribeTransactions): the broker's own view of whether the InitProducerId
        cut an open transaction off (Ongoing) or took an idle id over."""
        self.states_before_init.setdefault(step, []).append(describe_state(self.broker.bootstrap, tid_of(step)))
        client.init()

    def timeout(self) -> None:
        c = self.new_client("timeout", TIMEOUT_MS)
        c.init()
        c.begin()
        c.send(TOPIC, self.partition("timeout"), "killed")
        c.kill()
        tid = tid_of("timeout")
        wait_for(lambda: log_counts(self.broker.server_log(), tid)[1] == 1, TIMEOUT_MS / 1000 + 30,
                 what=f"the coordinator's timeout of {tid}")

    def operator(self) -> None:
        c = self.new_client("operator")
        c.init()
        c.begin()
        c.send(TOPIC, self.partition("operator"), "terminated")
        kafka_tool("kafka-transactions", "--bootstrap-server", self.broker.bootstrap, "forceTerminateTransaction",
                   "--transactionalId", tid_of("operator"), log_dir=self.workdir / "tools", release=self.release)
        self.expect_fenced("operator: the producer's commit fails", c.commit)

    def make_hanging(self) -> None:
        """First of all, so that it ages past transaction.max.timeout.ms while the rest runs."""
        from .hanging import make_hanging_transaction

        self.hanging_made = make_hanging_transaction(self.broker.bootstrap, TOPIC, self.partition("hanging"),
                                                     transactional_id=tid_of("hanging"))

    def hanging(self) -> None:
        topic, partition, b, made = TOPIC, self.partition("hanging"), self.broker.bootstrap, self.hanging_made
        tool = dict(log_dir=self.workdir / "tools", release=self.release)

        def txnwatch_hanging() -> float:
            return self.exporter.metrics().get_value("kafka_transaction_hanging", topic=topic,
                                                      partition=partition) or 0

        self.result.checks["hanging: txnwatch finds it"] = self._wait(
            lambda: txnwatch_hanging() == 1, MAX_TIMEOUT_MS / 1000 + 60, "txnwatch's poller to find it")
        listed = kafka_tool("kafka-transactions", "--bootstrap-server", b, "find-hanging", "--broker-id",
                            str(self.broker.node_id), "--max-transaction-timeout", "0", **tool).stdout
        # With --max-transaction-timeout 0 the tool also lists any transaction in flight at
        # that moment: the canary's (it runs beside the scenario) is left out.
        rows = [r for r in (ln.split() for ln in listed.splitlines()[1:] if ln.strip())
                if r[0] != CanaryConfig.topic]
        self.result.checks["hanging: kafka-transactions.sh find-hanging lists the same"] = (
            True if [(r[0], int(r[1]), int(r[5])) for r in rows] == [(topic, partition, made.offset)]
            else f"find-hanging listed {rows}")
        kafka_tool("kafka-transactions", "--bootstrap-server", b, "abort", "--topic", topic, "--partition",
                   str(partition), "--start-offset", str(made.offset), **tool)
        self.result.checks["hanging: abort ends it for txnwatch too"] = self._wait(
            lambda: txnwatch_hanging() == 0 and self._lso_caught_up(partition), 60, "the abort to show")

    def _lso_caught_up(self, partition: int) -> bool:
        m = self.exporter.metrics()
        lso = m.get_value("kafka_partition_last_stable_offset", topic=TOPIC, partition=partition)
        hwm = m.get_value("kafka_partition_high_watermark", topic=TOPIC, partition=partition)
        return lso is not None and lso == hwm

    def _wait(self, cond, timeout: float, what: str) -> bool | str:
        try:
            wait_for(cond, timeout, interval=0.3, what=what)
            return True
        except TimeoutError as exc:
            return str(exc)

    def _wait_page(self, row: str, timeout: float) -> bool | str:
        return self._wait(lambda: row in html.unescape(self.exporter.get("/")[1]), timeout,
                          f"the exporter's page to show {row}")

    # -- run
    def run(self) -> ScenarioResult:
        create_topics(self.broker.bootstrap, [TOPIC], partitions=len(STEPS))
        # The tap counts what happens once it follows the log: a log it finds already written
        # (the canary's first InitProducerId creates it) is rebuilt as history, not counted.
        self.exporter.wait_metric(lambda m: m.get_value("txnwatch_tap_rebuilt") == 1
                                  and m.get_value("txnwatch_up", source="tap") == 1, 60,
                                  what="the transaction-log tap following the log")
        # Each id is listed right after its step: ids expire 15 s after their last
        # transaction, so one listing at the end could miss the first ones on a slow run.
        listed: dict[str, str] = {}

        def list_after(step: str) -> None:
            out = kafka_tool("kafka-transactions", "--bootstrap-server", self.broker.bootstrap, "list",
                             log_dir=self.workdir / "tools", release=self.release).stdout
            listed[step] = out
        self.make_hanging()
        list_after("hanging")
        try:
            for step in self.steps:
                if step != "hanging":
                    getattr(self, step.replace("-", "_"))()
                    list_after(step)
        finally:
            for c in self.started:
                try:
                    c.close()
                except Exception:  # noqa: BLE001 - a fenced or killed client may not answer
                    c.kill()
        missing = {s: listed.get(s, "") for s in self.steps if tid_of(s) not in listed.get(s, "")}
        self.result.checks["kafka-transactions list shows every scenario id after its step"] = (
            True if not missing else f"missing after their steps: {missing}")
        self.hanging()      # last: it waits until the late write is older than transaction.max.timeout.ms
        self.observe()
        return self.result

    def observe(self) -> None:
        r, b = self.result, self.broker.bootstrap
        # every id idles past the expiration; the broker forgets them, the tap counts them
        deadline = EXPIRATION_MS / 1000 + 60
        wait_for(lambda: all(describe_state(b, tid_of(s)) == "TransactionalIdNotFoundError" for s in self.steps),
                 deadline, interval=1.0, what="every scenario id to expire")
        m = self.exporter.wait_metric(
            lambda m: all(txnwatch_counts(m, s).expired >= 1 for s in self.steps), 60,
            what="the tap to count every expiry")
        if self.capture is not None:
            self.capture.parent.mkdir(parents=True, exist_ok=True)
            with open(self.capture, "w") as f:
                for rec in read_records(b):
                    j = record_json(*rec, raw=True)
                    if j.get("transactional_id", "").startswith("scn-"):
                        f.write(json.dumps(j, sort_keys=True) + "\n")
        log = self.broker.server_log()
        for step in self.steps:
            r.txnwatch[step] = txnwatch_counts(m, step)
            committed, aborted = data_counts(b, self.partition(step))
            if step == "hanging":
                # the late write, ended by kafka-transactions.sh abort: an abort marker in the data
                # log of a transaction the coordinator never had (so nothing for its log's counts)
                r.checks["hanging: the late write ends aborted in the data log"] = (
                    True if (committed, aborted) == (0, 1) else f"committed {committed}, aborted {aborted}")
                committed = aborted = 0
            inits, timeouts = log_counts(log, tid_of(step))
            operator = EXPECTED[step].operator if step == "operator" else 0   # the log cannot name it
            cut_open = self.states_before_init.get(step, []).count("Ongoing")
            r.broker[step] = Counts(committed, aborted, cut_open, inits - operator - cut_open, timeouts, operator,
                                    1 if describe_state(b, tid_of(step)) == "TransactionalIdNotFoundError" else 0)
            if self.client == "librdkafka":
                r.client_view[step] = {
                    "committed": int(m.get_value("kafka_producer_transactions_total", app=app_of(step),
                                                 outcome="committed") or 0),
                    "fenced": int(sum(v for lbl, v in m.select("kafka_producer_transaction_errors_total",
                                                                app=app_of(step)) if lbl.get("error") in FENCED))}
        if self.client == "librdkafka":
            r.checks["the instrumented producer's commits equal the coordinator's"] = (
                True if all(r.client_view[s]["committed"] == r.txnwatch[s].committed for s in self.steps)
                else f"client {r.client_view} vs tap {r.txnwatch}")
            r.checks["the fenced instances report their fencing error"] = (
                True if all(r.client_view[s]["fenced"] >= 1 for s in ("fence-open", "fence-idle"))
                else f"client {r.client_view}")
        rounds = {o: int(m.get_value("txnwatch_canary_rounds_total", outcome=o) or 0) for o in ("committed", "aborted")}
        r.checks["canary commits and aborts, nothing aborted visible"] = (
            True if rounds["committed"] >= 2 and rounds["aborted"] >= 1
            and not m.get_value("txnwatch_canary_visibility_violations_total")
            else f"rounds {rounds}, violations {m.get_value('txnwatch_canary_visibility_violations_total')}")
        tap_canary = int(m.get_value("kafka_transactions_total", app="txnwatch-canary", outcome="committed") or 0)
        r.checks["the tap counts the canary's commits"] = (
            True if tap_canary >= rounds["committed"] - 1 else f"tap {tap_canary} vs canary {rounds['committed']}")


def exporter_config(bootstrap: str) -> dict:
    return {"clusters": [{
        "name": "scenario", "bootstrap_servers": bootstrap, "poll_interval_seconds": 1, "poll_timeout_seconds": 5,
        "transaction_log_tap": True, "topics": {"include": [r"scn-.*"]},
        "open_transaction_min_age_seconds": 0,
        "canary": {"interval_seconds": 2, "abort_every": 3}}]}


def run_scenario(kafka_version: str | None, client: str, workdir: str | Path,
                 capture: str | Path | None = None) -> ScenarioResult:
    """Broker, exporter and the steps; everything started is stopped again."""
    workdir = Path(workdir)
    release = kafka_release(kafka_version)
    broker = KafkaBroker(workdir=workdir / "kafka", release=release, properties=BROKER_PROPERTIES)
    exporter = None
    try:
        broker.start()
        exporter = ExporterProcess(exporter_config(broker.bootstrap), log_path=workdir / "exporter.log").start(60)
        return Scenario(broker, exporter, client, workdir, release, Path(capture) if capture else None).run()
    finally:
        if exporter is not None:
            exporter.stop()
        broker.cleanup()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--kafka-version", default=None, help="release or line (default: KAFKA_VERSION, else 4)")
    p.add_argument("--client", choices=("java", "librdkafka"), default="java")
    p.add_argument("--workdir", default=None)
    p.add_argument("--json", action="store_true")
    p.add_argument("--capture", default=None, help="write the coordinator's records of the scenario's ids "
                                                    "(JSON lines with raw bytes) to this file")
    a = p.parse_args(argv)
    result = run_scenario(a.kafka_version, a.client, a.workdir or tempfile.mkdtemp(prefix="txnwatch-scenario-"),
                          a.capture)
    print(result.to_json() if a.json else result.table())
    problems = result.problems()
    for line in problems:
        print(f"MISMATCH {line}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
