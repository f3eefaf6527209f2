"""A PyFlink job with Flink's exactly-once KafkaSink (flink-connector-kafka 5.0, kafka-clients
4.2) against the session broker (Kafka 4.x, transaction.version 2): every record of IN
reaches OUT exactly once, also across a SIGKILL of the job with a sink transaction open and
a restart from the last retained checkpoint; and the transaction a restore at a lower
parallelism leaves open (an orphan, until its timeout), which `txnwatch abort` ends.

The job runs in .venv-flink (scripts/bootstrap-flink.sh); without it the test fails, it
does not skip.
"""

from __future__ import annotations

import collections
import json
import re
import subprocess
import sys
import threading
import time
import uuid

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition

from tests import compat
from tests.integration.helpers import cluster_config
from txnwatch.kafka.kip664 import TransactionAPI
from txnwatch_dev.kafka import kafka_tool
from txnwatch_dev.net import wait_for
from txnwatch_dev.transactions.workload import TopicEnds, aborted_records, create_topics, watermarks

PARTITIONS = 2


def _flink_runtime():
    from txnwatch_dev.flink import runtime

    try:
        runtime.python()
        runtime.pyflink_home()
        runtime.connector_jars()
    except runtime.FlinkUnavailable as exc:
        pytest.fail(f"PyFlink cannot run: {exc} (make bootstrap runs scripts/bootstrap-flink.sh)")
    return runtime


def wait_job(job, condition, timeout: float, what: str, interval: float = 0.1, describe=None):
    """wait_for, and on a timeout what `describe()` says is unmet, the job's output and
    Flink's own log as they are then."""
    try:
        return wait_for(condition, timeout, interval=interval, what=what)
    except TimeoutError as exc:
        unmet = ""
        if describe is not None:
            try:
                unmet = f" ({describe()})"
            except Exception as why:  # noqa: BLE001 - the timeout is the failure reported
                unmet = f" (what is unmet could not be read: {why!r})"
        raise TimeoutError(f"{exc}{unmet}; job log:\n{job.tail()}\n"
                           f"Flink log (end):\n{job.flink_log()[-6000:]}") from None


@pytest.fixture
def flink_job(tmp_path):
    runtime = _flink_runtime()
    job = runtime.FlinkJob(tmp_path / "flink")
    yield job
    job.kill()


def _consumer(bootstrap: str, isolation: str = "read_committed", group: str | None = None) -> Consumer:
    return Consumer({"bootstrap.servers": bootstrap, "group.id": group or f"flink-test-{uuid.uuid4().hex[:8]}",
                     "isolation.level": isolation, "enable.auto.commit": False, "auto.offset.reset": "earliest"})


def _read(bootstrap: str, topic: str, timeout: float = 30.0,
          isolation: str = "read_committed") -> list[tuple[int, int, str]]:
    """(partition, offset, value) of every record a consumer sees, until it reaches the end
    (read_committed: the LSO; read_uncommitted: the HWM) of every partition."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"flink-test-{uuid.uuid4().hex[:8]}",
                  "isolation.level": isolation, "enable.partition.eof": True, "enable.auto.commit": False})
    c.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    records: list[tuple[int, int, str]] = []
    at_end: set[int] = set()
    deadline = time.monotonic() + timeout
    try:
        while len(at_end) < PARTITIONS:
            if time.monotonic() > deadline:
                raise TimeoutError(f"reading {topic} to its end took over {timeout:.0f}s")
            msg = c.poll(0.5)
            if msg is None:
                continue
            if msg.error():
                if msg.error().code() == KafkaError._PARTITION_EOF:
                    at_end.add(msg.partition())
                continue
            records.append((msg.partition(), msg.offset(), msg.value().decode()))
        return records
    finally:
        c.close()


def read_committed(bootstrap: str, topic: str) -> list[str]:
    return [value for _p, _o, value in _read(bootstrap, topic)]


def next_offsets(bootstrap: str, topic: str) -> dict[int, int]:
    """partition -> the offset after its last committed record: what a consumer that has read
    everything commits (the transaction marker after it is not counted)."""
    out = {p: 0 for p in range(PARTITIONS)}
    for p, offset, _value in _read(bootstrap, topic):
        out[p] = max(out[p], offset + 1)
    return out


def group_offsets(bootstrap: str, group: str, topic: str) -> dict[int, int]:
    c = _consumer(bootstrap, group=group)
    try:
        return {tp.partition: tp.offset for tp in c.committed([TopicPartition(topic, p) for p in range(PARTITIONS)],
                                                              timeout=10)}
    finally:
        c.close()


class Feeder:
    """Committed transactions of 20 records each into IN, over every partition, every 50 ms,
    until stopped."""

    def __init__(self, bootstrap: str, topic: str, first: int) -> None:
        self.bootstrap, self.topic, self.next = bootstrap, topic, first
        self.sent: list[str] = []
        self.error: BaseException | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        try:
            p = Producer({"bootstrap.servers": self.bootstrap, "transactional.id": f"feeder-{uuid.uuid4().hex[:8]}",
                          "linger.ms": 5})
            p.init_transactions(30)
            while not self._stop.is_set():
                batch = [f"rec-{i:06d}" for i in range(self.next, self.next + 20)]
                p.begin_transaction()
                for i, v in enumerate(batch, start=self.next):
                    p.produce(self.topic, v.encode(), partition=i % PARTITIONS)     # as produce_committed
                p.commit_transaction(30)
                self.sent.extend(batch)
                self.next += len(batch)
                time.sleep(0.05)
        except BaseException as exc:  # noqa: BLE001 - reported by stop()
            self.error = exc

    def start(self) -> Feeder:
        self._thread.start()
        return self

    def stop(self) -> list[str]:
        self.halt()
        assert self.error is None, f"the feeder failed: {self.error!r}"
        return self.sent

    def halt(self) -> None:
        """Stop writing (also when the test failed: a feeder left running would keep writing
        __transaction_state, and a reader of it to its end never gets there)."""
        self._stop.set()
        self._thread.join(60)


def produce_committed(bootstrap: str, topic: str, values: list[str]) -> None:
    """`values` in transactions of 100, over every partition in turn: Flink's source commits
    no offset for a partition it has read nothing from (its split's offset stays "earliest"),
    so a partition left empty by the producer's sticky partitioning (keyless records, all sent
    within one sticky spell) never settles."""
    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"flink-test-src-{uuid.uuid4().hex[:8]}"})
    p.init_transactions(30)
    for i in range(0, len(values), 100):
        p.begin_transaction()
        for j, v in enumerate(values[i:i + 100], start=i):
            p.produce(topic, v.encode(), partition=j % PARTITIONS)
        p.commit_transaction(30)


def settled(bootstrap: str, topic_in: str, topic_out: str, group: str, want: int) -> bool:
    """The job has read all of IN through a completed checkpoint (the source commits its
    offsets to the group on checkpoint completion), no sink transaction is open on OUT, and OUT
    holds at least `want` committed records: nothing more is coming."""
    return not unsettled(bootstrap, topic_in, topic_out, group, want)


def unsettled(bootstrap: str, topic_in: str, topic_out: str, group: str, want: int) -> str:
    """What settled() still waits for, with the figures; '' when nothing."""
    committed, ends = group_offsets(bootstrap, group, topic_in), next_offsets(bootstrap, topic_in)
    if committed != ends:
        return f"{group} committed {committed} of {topic_in}, whose committed records end at {ends}"
    marks = watermarks(bootstrap, topic_out, PARTITIONS)
    if any(lso != hwm for lso, hwm in marks.values()):
        return f"a transaction open on {topic_out}: (LSO, HWM) {marks}"
    n = len(read_committed(bootstrap, topic_out))
    return f"{topic_out} holds {n} committed records of {want}" if n < want else ""


def exactly_once(out: list[str], sent: list[str]) -> str:
    """'' when OUT holds each sent value (upper-cased) exactly once, else what differs."""
    counts = collections.Counter(out)
    want = {v.upper() for v in sent}
    dups = {v: n for v, n in counts.items() if n > 1}
    missing, extra = want - set(counts), set(counts) - want
    if not (dups or missing or extra):
        return ""
    return (f"{len(out)} records for {len(sent)} sent: {len(dups)} duplicated (e.g. {sorted(dups)[:3]}), "
            f"{len(missing)} missing (e.g. {sorted(missing)[:3]}), {len(extra)} unexpected")


ID_SERIES_CAP = 3


def reasons(m, app: str) -> dict[str, float]:
    return {lb["reason"]: v for lb, v in m.select("kafka_transaction_fencing_events_total", app=app)}


def per_id_series(m, app: str) -> set[str]:
    return {lb["transactional_id"] for name in ("kafka_transaction_timeout_headroom_seconds",
                                                "kafka_transactional_id_expiration_headroom_seconds")
            for lb, _v in m.select(name, app=app)}


@pytest.fixture
def feeders():
    """Feeders, halted at teardown whatever the test's outcome."""
    started: list[Feeder] = []

    def start(bootstrap: str, topic: str, first: int) -> Feeder:
        started.append(Feeder(bootstrap, topic, first).start())
        return started[-1]

    yield start
    for f in started:
        f.halt()


NAMINGS = ("incrementing", "pooling")


def test_exactly_once_across_sigkill_and_restore(broker, flink_job, unique, tmp_path, exporter_factory, feeders):
    """...and txnwatch (poller and transaction-log tap) watching it, under both of the
    connector's TransactionNamingStrategy values at once (one job, the same stream into two
    KafkaSinks, one per strategy, each with its own prefix and topic): each sink's ids under
    one app named after its prefix, no fence while it runs, the open transactions' headroom,
    the restart's abort of the transaction the killed run left open counted as a start-up
    abort, not as a fence. Per-id series: INCREMENTING makes a new id per checkpoint (capped,
    the rest folded); POOLING re-initialises a small pool of ids at every checkpoint
    (re-initialisations, no fence, and a bounded set of ids)."""
    bootstrap = broker.bootstrap
    topic_in, group = unique("flink-in"), unique("flink-group")
    outs = {n: unique(f"flink-out-{n}") for n in NAMINGS}
    prefixes = {n: unique(f"flink-txn-{n}") for n in NAMINGS}
    create_topics(bootstrap, [topic_in, *outs.values()], partitions=PARTITIONS)
    first_naming, other = NAMINGS
    job_args = dict(checkpoint_ms=1000, timeout_ms=60000, parallelism=2, group=group, naming=first_naming,
                    extra_sinks=((outs[other], prefixes[other], other),))
    job_topics = (bootstrap, topic_in, outs[first_naming], prefixes[first_naming])
    exp = exporter_factory(cluster_config(bootstrap, [topic_in, *outs.values()], transaction_log_tap=True,
                                          transactional_ids={"include": [re.escape(p) + "-.*"
                                                                         for p in prefixes.values()]},
                                          max_transactional_id_series=ID_SERIES_CAP))
    exp.wait_metric(lambda m: m.get_value("txnwatch_tap_rebuilt") == 1 and m.get_value("txnwatch_up", source="tap") == 1
                    and m.get_value("txnwatch_up", source="poller") == 1, 60, what="the exporter following the log")

    def all_settled(want: int) -> bool:
        return all(settled(bootstrap, topic_in, outs[n], group, want) for n in NAMINGS)

    def unsettled_outs(want: int) -> str:
        return "; ".join(filter(None, (unsettled(bootstrap, topic_in, outs[n], group, want) for n in NAMINGS)))

    # 1. a first batch, committed before the job starts
    first = [f"rec-{i:06d}" for i in range(500)]
    produce_committed(bootstrap, topic_in, first)
    flink_job.start(*job_topics, **job_args)
    wait_job(flink_job, lambda: all_settled(len(first)), 120,
             what=f"the job to copy {len(first)} records to {sorted(outs.values())}",
             describe=lambda: unsettled_outs(len(first)))
    for n in NAMINGS:
        problem = exactly_once(read_committed(bootstrap, outs[n]), first)
        assert not problem, f"{n}: {problem}"
    # txnwatch: one app per sink, its prefix; commits; the start-up's probes of fresh ids and
    # the per-checkpoint ids are no fences
    m = exp.wait_metric(lambda m: all((m.get_value("kafka_transactions_total", app=p, outcome="committed") or 0) >= 2
                                      for p in prefixes.values()),
                        60, what="the tap counting both sinks' commits")
    assert {lb["app"] for lb, _v in m.select("kafka_transactional_ids")} == set(prefixes.values())
    for p in prefixes.values():
        assert reasons(m, p) == {"new_instance": 0, "timeout": 0, "operator": 0, "startup_abort": 0}, p

    # 2. records keep coming; SIGKILL while a transaction of each sink is open, and restore from
    # the last retained checkpoint: the new process commits what that checkpoint pre-committed
    # and aborts what came after it (the LSO moves past both). The sink's transactions stay open
    # from the first write after a checkpoint to the next one, so the kill can miss them (a
    # checkpoint committed between the look and the kill) or land where all that is open was
    # pre-committed (the restore commits it and aborts nothing): the broker says which (the
    # records of [LSO, HWM) a read_committed reader skips), and the cycle runs again.
    feeder = feeders(bootstrap, topic_in, len(first))
    # open for a checkpoint interval by design: the poller sees them, with their headroom
    m = exp.wait_metric(lambda m: all(any(0 < v <= 60 for _lb, v in m.select("kafka_transaction_timeout_headroom_seconds",
                                                                              app=p))
                                      for p in prefixes.values()), 60,
                        what="the headroom of an open transaction of each sink")
    ends = {n: TopicEnds(bootstrap, outs[n], PARTITIONS) for n in NAMINGS}
    aborted: dict[str, dict[int, int]] = {}
    try:
        for _attempt in range(3):
            wait_job(flink_job, lambda: len(feeder.sent) >= len(first) + 200
                     and all(e.open_partitions() for e in ends.values()), 60,
                     interval=0.02, what=f"a transaction of each sink open on {sorted(outs.values())}")
            flink_job.kill()
            looks = {n: e() for n, e in ends.items()}          # (lso, hwm) per output
            checkpoint = flink_job.latest_checkpoint()
            assert checkpoint is not None, f"no retained checkpoint in {flink_job.checkpoint_dir}"
            # 3. a new process, same prefixes and group, resumed from the last retained checkpoint
            flink_job.start(*job_topics, restore=checkpoint, **job_args)
            if not all(any(lso[p] < hwm[p] for p in lso) for lso, hwm in looks.values()):
                continue
            for n, (_lso, hwm) in looks.items():
                wait_for(lambda n=n, hwm=hwm: all(watermarks(bootstrap, outs[n], PARTITIONS)[p][0] >= hwm[p]
                                                  for p in hwm),
                         90, what=f"the LSO of {outs[n]} to pass the killed job's open transaction (HWM {hwm})")
            aborted = {n: aborted_records(bootstrap, outs[n], *looks[n]) for n in NAMINGS}
            if all(sum(a.values()) > 0 for a in aborted.values()):
                break
        else:
            pytest.fail(f"3 SIGKILLs of the job, none leaving a transaction of each sink for the restore "
                        f"to abort: (LSO, HWM) {looks}, records aborted per partition {aborted}")
    finally:
        for e in ends.values():
            e.close()
    restored_in = flink_job.log()
    wait_for(lambda: len(feeder.sent) >= len(first) + 1000, 60, what="1000 more records into IN")
    sent = first + feeder.stop()
    wait_job(flink_job, lambda: all_settled(len(sent)), 120, what=f"the restored job to copy all {len(sent)} records",
             describe=lambda: unsettled_outs(len(sent)))
    for n in NAMINGS:
        problem = exactly_once(read_committed(bootstrap, outs[n]), sent)
        assert not problem, f"{n}, after SIGKILL and restore from {checkpoint.name}: {problem}"
    assert "Traceback" not in restored_in, restored_in
    # the restart aborted what the killed run left open: a start-up abort, not a fence by a
    # new instance nor a coordinator timeout (60 s were not reached)
    m = exp.wait_metric(lambda m: all((reasons(m, p).get("startup_abort") or 0) >= 1 for p in prefixes.values()), 60,
                        what="the tap counting the restart's abort of each sink's open transaction",
                        describe=lambda: f"the broker's records aborted per partition {aborted}; the tap's fences "
                                         f"{ {p: reasons(exp.metrics(), p) for p in prefixes.values()} }")
    listed = kafka_tool("kafka-transactions", "--bootstrap-server", bootstrap, "list",
                        log_dir=tmp_path / "tools").stdout
    for naming, prefix in prefixes.items():
        assert reasons(m, prefix)["new_instance"] == 0 and reasons(m, prefix)["timeout"] == 0, reasons(m, prefix)
        assert (m.get_value("kafka_transactions_total", app=prefix, outcome="aborted") or 0) >= 1
        ids = per_id_series(m, prefix)
        live_ids = m.get_value("kafka_transactional_ids", app=prefix) or 0
        reinits = m.get_value("kafka_transactional_id_reinitializations_total", app=prefix) or 0
        # however many ids the checkpoints made, the idle ones are one series per sink, its
        # newest's (an old id expiring fails nobody), and open transactions' ids stay under the cap
        assert len(ids - {"__other__", "__newest__"}) <= ID_SERIES_CAP, ids
        if naming == "incrementing":
            assert live_ids > ID_SERIES_CAP and "__newest__" in ids, (live_ids, ids)
        else:
            # a pool per subtask, re-initialised at every checkpoint: few ids however many
            # checkpoints pass, many re-inits
            assert 0 < live_ids <= 10, (live_ids, ids)
            assert reinits >= 10, reinits
        print(f"{naming}: {live_ids:.0f} ids, {reinits:.0f} re-initialisations, fences {reasons(m, prefix)}, "
              f"restores {flink_job.starts - 1}, records the last restore aborted {aborted[naming]}")
        _assert_sink_ids(listed, prefix, flink_job.starts)


def _assert_sink_ids(listed: str, prefix: str, starts: int, parallelism: int = 2) -> None:
    """A sink's transactional ids in `kafka-transactions list`: <prefix>-<subtask>-<n>
    (INCREMENTING: n follows the checkpoint id; POOLING: n is a pool index). Transactions
    come from subtasks 0 and 1 only. The abort of lingering transactions at each restore
    (PROBING) also makes ids of higher subtasks, in case the job ran with more before, which
    stay Empty: it probes until it meets an id never used, and the ids an earlier restore
    probed count as used, so each restore probes one band of `parallelism` subtasks further
    (one kill and restore: subtasks up to 3; a second restore, when the kill loop had to try
    again: up to 5)."""
    rows = [line.split() for line in listed.splitlines()[1:] if line.startswith(prefix + "-")]
    pattern = re.compile(rf"^{re.escape(prefix)}-(\d+)-(\d+)$")
    states = {(int(m.group(1)), int(m.group(2))): row[3] for row in rows if (m := pattern.match(row[0]))}
    assert len(states) == len(rows), f"ids not named <prefix>-<subtask>-<n>: {[r[0] for r in rows]}"
    assert {sub for (sub, _n), state in states.items() if state != "Empty"} <= {0, 1}, states
    assert max(sub for sub, _n in states) < parallelism * starts, (starts, states)


# Long enough that nothing but an abort ends the orphan during the test, and within the session
# broker's transaction.max.timeout.ms (Kafka's default, 15 min).
ORPHAN_TIMEOUT_MS = 600_000
ORPHAN_COLUMN = "txnwatch abort of a Flink KafkaSink orphan (POOLING, downscaled)"
ORPHAN_SHOWN = "refused, aborted when accepted, exactly once"


def checkpoint_in_flight(job) -> tuple[int, set[int]] | None:
    """(id, the sink writer's subtasks that have acknowledged it) of the checkpoint the running
    job has triggered and not completed, from the mini-cluster's REST API; None when none is."""
    [jid] = [j["jid"] for j in job.rest("/jobs/overview")["jobs"] if j["state"] == "RUNNING"]
    pending = [c["id"] for c in job.rest(f"/jobs/{jid}/checkpoints")["history"] if c["status"] == "IN_PROGRESS"]
    if not pending:
        return None
    [writer] = [v["id"] for v in job.rest(f"/jobs/{jid}")["vertices"] if "Writer" in v["name"]]
    subtasks = job.rest(f"/jobs/{jid}/checkpoints/details/{pending[0]}/subtasks/{writer}")["subtasks"]
    return pending[0], {s["index"] for s in subtasks if s["status"] == "completed"}


def open_transactions_on(api: TransactionAPI, topic: str) -> dict[int, dict[int, int]]:
    """producer id -> {partition: first offset} of the transactions open on the topic's partitions."""
    out: dict[int, dict[int, int]] = {}
    for p in api.describe_producers([(topic, n) for n in range(PARTITIONS)]):
        if p.txn_start_offset >= 0:
            out.setdefault(p.producer_id, {})[p.partition] = p.txn_start_offset
    return out


def txnwatch_abort(bootstrap: str, *args: str, audit) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "txnwatch.cli", "abort", "--bootstrap-servers", bootstrap,
                           "--audit-log", str(audit), *args], capture_output=True, text=True, timeout=120)


def report(out: subprocess.CompletedProcess) -> dict:
    assert out.stdout.startswith("{"), (out.returncode, out.stdout, out.stderr)
    return json.loads(out.stdout)


def test_a_downscaled_pooling_sink_leaves_an_orphan_that_txnwatch_abort_ends(broker, flink_job, unique, tmp_path,
                                                                                feeders, request):
    """POOLING reuses a transactional id once its transaction has committed. Here subtask 0 is
    held (its checkpoint barrier with it) while subtask 1's sink pre-commits for that checkpoint
    and writes on under the id that the last completed checkpoint lists as pre-committed; the
    job is SIGKILLed and restored from that checkpoint with parallelism 1. The restore aborts
    the open transactions it finds except that id (pre-committed: the committer's to end, whose
    re-commit is fenced by the newer epoch), and the one subtask left never takes subtask 1's
    ids again: the transaction stays open until its timeout, holding OUT's LSO while the
    restored job commits behind it. `txnwatch abort` names it and refuses it as a Flink sink's
    live transaction, aborts it when both risks are accepted, and the output is exactly once:
    the orphan held only records written after the restored checkpoint, which the restored job
    wrote again."""
    bootstrap = broker.bootstrap
    topic_in, topic_out = unique("orphan-in"), unique("orphan-out")
    group, prefix = unique("orphan-group"), unique("orphan-txn")
    create_topics(bootstrap, [topic_in, topic_out], partitions=PARTITIONS)
    held = tmp_path / "hold-subtask-0"
    job_args = dict(checkpoint_ms=1000, timeout_ms=ORPHAN_TIMEOUT_MS, group=group, naming="pooling")
    api = TransactionAPI({"bootstrap.servers": bootstrap}, 10)
    audit = tmp_path / "audit.jsonl"
    try:
        feeder = feeders(bootstrap, topic_in, 0)
        flink_job.start(bootstrap, topic_in, topic_out, prefix, parallelism=2, stall_while=held, **job_args)
        # a checkpoint has completed with both subtasks reading (the source commits its offsets then)
        wait_job(flink_job, lambda: all(o > 0 for o in group_offsets(bootstrap, group, topic_in).values()), 120,
                 what="a completed checkpoint of both subtasks")

        # 1. subtask 0 held: the next checkpoint cannot complete, but subtask 1's sink pre-commits
        # for it and writes on under its reused id: two of its ids open, both with records
        held.touch()
        wait_job(flink_job, lambda: held.with_name(held.name + ".waiting").exists(), 60, what="subtask 0 held")

        def subtask_1_past_the_barrier() -> tuple[int, dict[str, tuple[int, int]]] | None:
            flight = checkpoint_in_flight(flink_job)
            if flight is None or flight[1] != {1}:
                return None
            ids = [t.transactional_id for t in api.list_transactions() if t.transactional_id.startswith(f"{prefix}-1-")]
            writing = {d.transactional_id: (d.producer_id, d.producer_epoch)
                       for d in api.describe_transactions(ids).values() if d.state == "Ongoing" and d.partitions}
            return (flight[0], writing) if len(writing) >= 2 else None
        pending, writing = wait_job(flink_job, subtask_1_past_the_barrier, 60,
                                    what="subtask 1's sink past a checkpoint barrier that subtask 0 holds back")
        flink_job.kill()
        sent = feeder.stop()
        restored = flink_job.latest_checkpoint()
        assert restored is not None and int(restored.name.split("-")[1]) < pending, (restored, pending)
        hwm_at_kill = {p: hwm for p, (_lso, hwm) in watermarks(bootstrap, topic_out, PARTITIONS).items()}

        # 2. restored from the last completed checkpoint with parallelism 1: it reads IN to its end
        # and commits, and the only transaction left open on OUT is one of the old subtask 1's
        held.unlink()
        flink_job.start(bootstrap, topic_in, topic_out, prefix, parallelism=1, restore=restored, **job_args)

        def settled_but_for_old_ids() -> tuple[dict[int, dict[int, int]]] | None:
            if group_offsets(bootstrap, group, topic_in) != next_offsets(bootstrap, topic_in):
                return None
            held_open = open_transactions_on(api, topic_out)
            ids = api.pids_to_ids(held_open)
            return None if any(not ids.get(pid, "").startswith(f"{prefix}-1-") for pid in held_open) else (held_open,)
        [held_open] = wait_job(flink_job, settled_but_for_old_ids, 180,
                               what="the restored job to read IN to its end with none of its own transactions open")
        found = re.findall(r"Found \d+ open transactions for subtask 0: .*", flink_job.flink_log())
        assert len(held_open) == 1, (f"open on {topic_out}: {held_open}; subtask 1 wrote under {writing} when "
                                     f"killed; the restore: {found}")
        [(orphan_pid, first_offsets)] = held_open.items()
        orphan = api.pids_to_ids([orphan_pid])[orphan_pid]
        # an id the restored job never touched: its producer id and epoch are the killed job's
        now = api.describe_transactions([orphan])[orphan]
        assert (now.producer_id, now.producer_epoch) == writing.get(orphan), (orphan, now, writing)
        ends = watermarks(bootstrap, topic_out, PARTITIONS)
        assert all(ends[p][0] == first < ends[p][1] for p, first in first_offsets.items()), (first_offsets, ends)
        assert any(ends[p][1] > hwm_at_kill[p] for p in ends), (hwm_at_kill, ends)     # the restored job wrote
        # the restore listed it among the open transactions, and left it: its checkpoint names it pre-committed
        assert found and orphan in found[-1], found
        print(f"orphan {orphan}; the restore: {found[-1]}")

        # what txnwatch check shows meanwhile: the open transaction, the stalled LSO
        check = subprocess.run([sys.executable, "-m", "txnwatch.cli", "check", "--bootstrap-servers", bootstrap,
                                "--json"], capture_output=True, text=True, timeout=120)
        [cluster] = json.loads(check.stdout)["clusters"]
        [seen] = [t for t in cluster["open_transactions"] if t["transactional_id"] == orphan]
        stalled = [p for p in cluster["stalled_partitions"] if p["topic"] == topic_out]
        print(f"txnwatch check: {seen}; stalled: {stalled}")
        assert (seen["app"], seen["state"], seen["timeout_ms"]) == (prefix, "Ongoing", ORPHAN_TIMEOUT_MS)
        assert {(p["partition"], p["lso"]) for p in stalled} == set(first_offsets.items())

        # 3. the dry run names it, refused as a live transaction of a Flink sink
        plan = report(txnwatch_abort(bootstrap, "--app", prefix, "--output", "json", audit=audit))
        [t] = plan["transactions"]
        assert (t["transactional_id"], t["app"], t["producer_id"], t["verdict"]) == (orphan, prefix, orphan_pid,
                                                                                      "refused")
        assert [(r["kind"], r["accepted_by"]) for r in t["refused"]] == [("live", "--force-live"),
                                                                          ("flink", "--accept-data-loss")]
        assert t["coordinator"]["state"] == "Ongoing" and t["hanging_reason"] is None
        assert {(p["partition"], p["start_offset"]) for p in t["partitions"]} == set(first_offsets.items())
        assert all(p["holds_lso"] for p in t["partitions"])
        text = txnwatch_abort(bootstrap, "--app", prefix, audit=audit)
        assert text.returncode == 0 and "REFUSED: a Flink KafkaSink transaction" in text.stdout, text.stdout
        assert "(accept with --accept-data-loss)" in text.stdout and "(accept with --force-live)" in text.stdout
        print(text.stdout)
        assert not audit.exists()

        # 4. --yes alone refuses it: nothing changes
        refused = txnwatch_abort(bootstrap, "--app", prefix, "--yes", "--output", "json", audit=audit)
        assert refused.returncode == 1, (refused.stdout, refused.stderr)
        assert {r["outcome"] for r in report(refused)["transactions"][0]["results"]} == {"refused"}
        assert {p: lso for p, (lso, _hwm) in watermarks(bootstrap, topic_out, PARTITIONS).items()} == \
            {p: lso for p, (lso, _hwm) in ends.items()}

        # 5. both risks accepted: aborted, and the LSO moves
        forced = txnwatch_abort(bootstrap, "--transactional-id", orphan, "--yes", "--accept-data-loss",
                                "--force-live", "--output", "json", audit=audit)
        assert forced.returncode == 0, (forced.stdout, forced.stderr)
        results = report(forced)["transactions"][0]["results"]
        assert {(r["partition"], r["outcome"]) for r in results} == {(p, "aborted") for p in first_offsets}
        assert all(r["lso_after"] > first_offsets[r["partition"]] for r in results), results
        wait_for(lambda: all(lso == hwm for lso, hwm in watermarks(bootstrap, topic_out, PARTITIONS).values()), 30,
                 what=f"no transaction open on {topic_out}")
        # the markers went to the partitions only: its coordinator ends it at its timeout
        assert api.describe_transactions([orphan])[orphan].state == "Ongoing"

        # 6. exactly once. The orphan's records, and all others from its first offset to the kill's
        # HWM (the killed job's), were aborted; each of them was written again by the restored job
        # (after the kill's HWM): the orphan held nothing a completed checkpoint had counted.
        committed = _read(bootstrap, topic_out)
        problem = exactly_once([v for _p, _o, v in committed], sent)
        assert not problem, problem
        kept = {(p, o): v for p, o, v in committed}
        where = {v: (p, o) for (p, o), v in kept.items()}
        from_orphan_to_kill = [(p, o, v) for p, o, v in _read(bootstrap, topic_out, isolation="read_uncommitted")
                               if p in first_offsets and first_offsets[p] <= o < hwm_at_kill[p]]
        assert from_orphan_to_kill and not [r for r in from_orphan_to_kill if r[:2] in kept], "committed there"
        not_again = [v for _p, _o, v in from_orphan_to_kill if where[v][1] < hwm_at_kill[where[v][0]]]
        assert not not_again, f"aborted, and committed before the kill only: {not_again[:5]}"
        print(f"{len(from_orphan_to_kill)} records from the orphan's first offsets {first_offsets} to the kill's HWM "
              f"{hwm_at_kill}: all aborted, all written again by the restored job; {len(sent)} sent, exactly once")
        compat.record(request.config, "features", "4.x", ORPHAN_COLUMN, ORPHAN_SHOWN)
    finally:
        api.close()
