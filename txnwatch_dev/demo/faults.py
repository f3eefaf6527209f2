"""The demo's load generator and fault injector: real transactional producers (the
instrumented wrapper) whose per-transaction records are forwarded to the exporter's
ingest endpoint as `producer_transactions` events, exactly as the Spark sink's are.

Every fault survives the error it provokes and returns one line saying what happened
(e.g. "second instance of refunds-writer-0 fenced the first: the first met _FENCED in
produce"); the injector prints it. Faults that need Apache Kafka (the coordinator's
timeout, KIP-664, Kafka Streams, the Flink job) confirm their effect on the broker before reporting it.
"""

from __future__ import annotations

import json
import logging
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from txnwatch.apps import AppResolver
from txnwatch.producer import TransactionalProducer, TransactionError, error_name

from ..net import wait_for
from ..transactions.workload import ProducerProcess, TopicEnds
from .fault_plan import Fault, fault_schedule, next_payment

log = logging.getLogger(__name__)
_app = AppResolver()

# Every demo producer's transaction.timeout.ms stays at or below the demo broker's
# transaction.max.timeout.ms (20 s), or InitProducerId fails with INVALID_TRANSACTION_TIMEOUT.
DEMO_TRANSACTION_TIMEOUT_MS = 10_000


class RecordSink:
    """Sends producer records to the exporter (through the listener's Forwarder)."""

    def __init__(self, forward_url: str | None, token: str | None = None) -> None:
        self.forwarder = None
        if forward_url:
            from txnwatch.spark_listener.forwarder import Forwarder

            self.forwarder = Forwarder(forward_url, token)

    def __call__(self, rec: dict) -> None:
        if self.forwarder is not None:
            self.forwarder.submit({"type": "producer_transactions", "app": _app(rec["transactional_id"]),
                                   "timestamp": time.time(), "records": [rec]})

    def close(self) -> None:
        if self.forwarder is not None:
            self.forwarder.close()


def _producer(bootstrap: str, tid: str, sink: RecordSink,
              timeout_ms: int = DEMO_TRANSACTION_TIMEOUT_MS) -> TransactionalProducer:
    p = TransactionalProducer({"bootstrap.servers": bootstrap, "transactional.id": tid,
                               "transaction.timeout.ms": timeout_ms, "linger.ms": 5,
                               "log_level": 3},  # librdkafka errors only, not reconnect chatter
                              on_record=sink)
    p.init_transactions(30)
    return p


# ------------------------------------------------------------------ load
MAX_LOAD_FAILURES = 20    # transactions failing in a row (10 s at the default tick) before the load stops


class LoadGenerator(threading.Thread):
    """Orders for the Spark pipeline (JSON {key, amount, ts}) and, with `payments_topic`,
    payments for the Streams app (JSON {account, amount, ts}, keyed by account): one
    transaction per tick over both topics. `ready` is set once the producer is registered."""

    def __init__(self, bootstrap: str, topic: str, sink: RecordSink, rate_per_second: int = 200,
                 tick: float = 0.5, keys: int = 20, payments_topic: str | None = None,
                 payments_per_second: int = 20, accounts: int = 12,
                 transactional_id: str = "demo-orders-loadgen-0") -> None:
        super().__init__(name="demo-loadgen", daemon=True)
        self.bootstrap, self.topic, self.sink = bootstrap, topic, sink
        self.per_tick = max(1, int(rate_per_second * tick))
        self.payments_topic = payments_topic
        self.payments_per_tick = max(1, int(payments_per_second * tick))
        self.balances: dict[str, float | None] = {f"account-{i}": None for i in range(accounts)}
        self.tick, self.keys = tick, keys
        self.transactional_id = transactional_id
        self.stopping = threading.Event()
        self.ready = threading.Event()
        self.error: str | None = None
        self.sent = 0
        self.retries = 0     # transactions that failed and were tried again (or the producer replaced)
        self._rng = random.Random()

    def _payments(self, p: TransactionalProducer, now: float) -> None:
        for _ in range(self.payments_per_tick):
            account = self._rng.choice(sorted(self.balances))
            amount = next_payment(self.balances[account], self._rng)
            self.balances[account] = round((self.balances[account] or 0.0) + amount, 2)
            p.produce(self.payments_topic, key=account.encode(),
                      value=json.dumps({"account": account, "amount": amount, "ts": now}).encode())

    def run(self) -> None:
        try:
            p = _producer(self.bootstrap, self.transactional_id, self.sink)
        except Exception as exc:  # noqa: BLE001 - reported by the demo
            self.error = f"{type(exc).__name__}: {exc}"
            self.ready.set()
            return
        self.ready.set()
        failures = 0     # in a row: the load stops only when the cluster keeps refusing it
        try:
            while not self.stopping.is_set():
                t0 = time.monotonic()
                try:
                    self._one_transaction(p)
                    failures = 0
                except TransactionError as exc:
                    # The demo's own faults reach this producer too (the hanging-transaction fault
                    # switches the leader's transaction verification off and on under it, which a
                    # commit in flight can meet as INVALID_TXN_STATE): an aborted transaction is
                    # tried again next tick, an unusable producer is replaced, as an application would.
                    failures += 1
                    self.retries += 1
                    log.info("load generator: %s; %s", exc, "a new producer" if exc.fatal else "next tick")
                    if failures >= MAX_LOAD_FAILURES:
                        raise
                    if exc.fatal:
                        p.close()
                        p = _producer(self.bootstrap, self.transactional_id, self.sink)
                self.stopping.wait(max(0.0, self.tick - (time.monotonic() - t0)))
        except Exception as exc:  # noqa: BLE001 - the demo keeps running without load
            self.error = f"{type(exc).__name__}: {exc}"
            log.warning("load generator stopped: %s", exc)
        finally:
            p.close()

    def _one_transaction(self, p: TransactionalProducer) -> None:
        with p.transaction():
            now = time.time()
            for _ in range(self.per_tick):
                k = f"customer-{self._rng.randrange(self.keys)}"
                p.produce(self.topic, key=k.encode(),
                          value=json.dumps({"key": k, "amount": round(self._rng.uniform(1, 200), 2),
                                            "ts": now}).encode())
            if self.payments_topic:
                self._payments(p, now)
        self.sent += self.per_tick


# ------------------------------------------------------------------ broker-side checks
def _admin(bootstrap: str):
    from kafka import KafkaAdminClient

    return KafkaAdminClient(bootstrap_servers=bootstrap.split(","), client_id="txnwatch-demo-faults",
                            request_timeout_ms=10_000)


def _describe(admin, tid: str):
    """The coordinator's view of `tid` (a kafka-python TransactionDescription), or None."""
    try:
        return admin.describe_transactions([tid]).get(tid)
    except Exception:  # noqa: BLE001 - unknown id or coordinator moving: not described yet
        return None


def _state(desc) -> str:
    return getattr(desc.state, "value", str(desc.state)) if desc is not None else "unknown"


def wait_ongoing(bootstrap: str, tid: str, timeout: float) -> int | None:
    """The producer epoch of `tid` once the coordinator holds an Ongoing transaction for it;
    None if it did not within `timeout`."""
    admin = _admin(bootstrap)
    box: list[int] = []

    def ongoing() -> bool:
        d = _describe(admin, tid)
        if _state(d) == "Ongoing":
            box.append(d.producer_epoch)
            return True
        return False

    try:
        wait_for(ongoing, timeout, interval=0.1, what=f"an Ongoing transaction of {tid}")
        return box[0]
    except TimeoutError:
        return None
    finally:
        admin.close()


def wait_aborted_by_coordinator(bootstrap: str, tid: str, epoch: int, timeout: float) -> tuple[bool, str]:
    """Wait until the coordinator has ended the transaction `tid` had open at `epoch` by a
    fence (Ongoing(e) -> PrepareAbort(e+1) -> CompleteAbort(e+1)). Returns (aborted, the
    last state seen)."""
    admin = _admin(bootstrap)
    seen = ["unknown"]

    def aborted() -> bool:
        d = _describe(admin, tid)
        seen.append(_state(d))
        return d is not None and seen[-1] in ("PrepareAbort", "CompleteAbort") and d.producer_epoch > epoch

    try:
        wait_for(aborted, timeout, interval=0.25, what=f"the coordinator to abort {tid}")
        return True, seen[-1]
    except TimeoutError:
        return False, seen[-1]
    finally:
        admin.close()


# ------------------------------------------------------------------ faults
def _no_tracking(_proc: ProducerProcess) -> None:
    pass


@dataclass
class HangingMade:
    """Hanging transactions the injector made (the demo aborts them on a user's cluster at exit)."""

    made: list = field(default_factory=list)


def hanging_transaction(bootstrap: str, topic: str, partition: int, record: HangingMade | None = None,
                        transactional_id: str = "outbox-late-writer-0") -> str:
    """A real hanging transaction (KAFKA-9144: a late write that opened a transaction the
    coordinator never saw) on `topic`-`partition`. Found by KIP-664 once its last write is
    older than the broker's transaction.max.timeout.ms; read_committed readers stop at it."""
    from ..transactions.hanging import make_hanging_transaction

    try:
        made = make_hanging_transaction(bootstrap, topic, partition, transactional_id=transactional_id,
                                        value=json.dumps({"alert_id": "late-write", "kind": "late"}).encode())
    except Exception as exc:  # noqa: BLE001 - e.g. Kafka >= 3.6 verifies transactions and refuses it
        return f"could not make a hanging transaction on {topic}-{partition}: {exc}"
    if record is not None:
        record.made.append(made)
    return (f"hanging transaction on {topic}-{partition} at offset {made.offset} (producer id "
            f"{made.producer_id}, a late write the coordinator never saw): read_committed readers stop "
            "there; "
            f"ends only with an abort from outside: txnwatch abort --bootstrap-servers {bootstrap} --hanging "
            f"(or kafka-transactions.sh --bootstrap-server {bootstrap} abort --topic {topic} "
            f"--partition {partition} --start-offset {made.offset})")


def coordinator_timeout(bootstrap: str, topic: str, timeout_ms: int = 5000, tid: str = "invoice-writer-0",
                        track: Callable[[ProducerProcess], None] = _no_tracking) -> str:
    """SIGKILL a producer mid-transaction; the coordinator aborts it once its
    transaction.timeout.ms has passed (a fence with reason `timeout`)."""
    p = ProducerProcess(bootstrap, topic, tid, action="hang", timeout_ms=timeout_ms)
    track(p)
    try:
        p.wait_line("open", timeout=60)
        epoch = wait_ongoing(bootstrap, tid, 15)
    finally:
        p.kill()
    if epoch is None:
        return f"killed {tid}, but the coordinator never showed its transaction Ongoing"
    t0 = time.monotonic()
    aborted, state = wait_aborted_by_coordinator(bootstrap, tid, epoch, timeout_ms / 1000 + 30)
    waited = time.monotonic() - t0
    if aborted:
        return (f"killed {tid} mid-transaction; the coordinator aborted it {waited:.0f}s after the kill "
                f"(its transaction.timeout.ms is {timeout_ms / 1000:g}s): a coordinator timeout")
    return (f"killed {tid} mid-transaction; the coordinator had not aborted it {waited:.0f}s later "
            f"(state {state}): is this broker's timeout check slow?")


def fence(bootstrap: str, topic: str, sink: RecordSink, tid: str = "refunds-writer-0") -> str:
    """A second instance with the same transactional.id fences the first mid-transaction.
    The first learns it at its next call (produce, flush or commit); the second's
    transaction then runs, and the report names the call and the error the first met."""
    first = _producer(bootstrap, tid, sink)
    met = "no error (not fenced?)"
    try:
        first.begin()
        first.produce(topic, value=b"refund from the zombie")
        first.flush(10)
        second = _producer(bootstrap, tid, sink)   # InitProducerId bumps the epoch: first is fenced
        try:
            stage = "produce"
            try:
                first.produce(topic, value=b"the zombie keeps writing")  # ...and finds out it is fenced
                stage = "flush"
                first.flush(10)
                stage = "commit"
                first.commit(10)
                met = "no error: its commit went through (not fenced?)"
            except TransactionError as exc:
                met = f"{exc.error} in {stage}"
            except Exception as exc:  # noqa: BLE001 - the zombie's KafkaException is the point
                met = f"{error_name(exc)} in {stage}"
            with second.transaction():
                second.produce(topic, value=b"refund from the new instance")
        finally:
            second.close()
    finally:
        first.close()
    return f"second instance of {tid} fenced the first: the first met {met}; the second committed"


def abort_burst(bootstrap: str, topic: str, sink: RecordSink, n: int = 20) -> str:
    p = _producer(bootstrap, "payments-retrier-0", sink)
    try:
        for i in range(n):
            p.begin()
            p.produce(topic, value=f"doomed {i}".encode())
            p.abort(10, error="_APPLICATION")
    finally:
        p.close()
    return f"burst of {n} aborted transactions (payments-retrier-0)"


def slow_transaction(bootstrap: str, topic: str, sink: RecordSink, timeout_ms: int = 15_000,
                     hold_seconds: float = 12.0, stopping: threading.Event | None = None) -> str:
    """A transaction that uses most of its transaction.timeout.ms: its headroom shrinks on
    the page and in kafka_transaction_timeout_headroom_seconds."""
    p = _producer(bootstrap, "settlement-batch-0", sink, timeout_ms=timeout_ms)
    try:
        with p.transaction():
            p.produce(topic, value=b"slow settlement")
            p.flush(10)
            (stopping or threading.Event()).wait(hold_seconds)
    finally:
        p.close()
    return (f"slow transaction held {hold_seconds:.0f}s of its {timeout_ms / 1000:.0f}s timeout "
            "(settlement-batch-0): low timeout headroom")


def restart_streams(app, bootstrap: str, payments_topic: str, account: str = "account-0",
                    hold_ms: int = 60_000) -> str:
    """Kill the Kafka Streams app mid-transaction and start it again on its state directory.

    A payment asks the running instance to hold its transaction open (a slow call), the
    coordinator is asked until it shows that transaction Ongoing, then the JVM is SIGKILLed.
    The new instance finds its process id in the state directory, so its transactional ids
    are the same: its InitProducerId fences the killed instance's transaction, which the
    coordinator aborts (the tap counts a fence with reason `new_instance` under the app's
    application.id, not a timeout). Its RocksDB store: Kafka Streams wipes a store killed
    mid-run under exactly-once and restores it from the changelog (Kafka 4.4 too, with
    enable.transactional.statestores: its startup initialisation ignores that setting); the
    report says how many records it restored."""
    from confluent_kafka import Producer

    old_tid, run = app.transactional_id, app.run_id
    if old_tid is None or run is None:
        return "the Kafka Streams app is not running: nothing to restart"
    offset = len(app.output())
    pr = Producer({"bootstrap.servers": bootstrap, "log_level": 3})
    pr.produce(payments_topic, key=account.encode(),
               value=json.dumps({"account": account, "amount": 0.0, "ts": time.time(), "hold_ms": hold_ms,
                                 "hold_in": run}).encode())
    pr.flush(10)
    try:
        wait_for(lambda: "holding" in app.output()[offset:], 60, interval=0.1,
                 what=f"{app.application_id} to take the slow payment")
        epoch = wait_ongoing(bootstrap, old_tid, 15)
    finally:
        app.kill()
    killed = time.monotonic()
    new_id = app.restart(keep_state=True)
    running_after = time.monotonic() - killed
    restored = sum(n for _, _, n in app.restores() if n > 0)
    head = (f"killed Kafka Streams {app.application_id} mid-transaction and restarted it on its state "
            f"directory: process id {new_id}, ")
    tail = f"; it restored {restored} records of its RocksDB store's changelog"
    if epoch is None:
        return head + f"transactional id {app.transactional_id} (not seen Ongoing before the kill)" + tail
    if app.transactional_id != old_tid:
        aborted, state = wait_aborted_by_coordinator(bootstrap, old_tid, epoch, 45)
        return (head + f"a new transactional id {app.transactional_id}; the old {old_tid} "
                + ("was aborted by the coordinator's timeout" if aborted else f"was still {state}") + tail)
    # The same id: the new instance's InitProducerId cannot complete while the killed instance's
    # transaction is open, so it aborts it (a fence), unless the coordinator's timeout came first.
    timeout_s = int(app.args["transaction-timeout-ms"]) / 1000
    how = (f"its InitProducerId fenced the killed instance's transaction ({running_after:.0f}s after the kill, "
           f"within its {timeout_s:g}s transaction.timeout.ms)" if running_after < timeout_s else
           f"the killed instance's transaction was ended by the coordinator's timeout ({timeout_s:g}s) before "
           f"the new instance ran ({running_after:.0f}s after the kill)")
    return head + f"the same transactional id {old_tid}; {how}" + tail


def _tap_counts(metrics: Callable[[], object] | None, app: str) -> dict[str, float] | None:
    """The tap's committed transactions and fences by reason of `app` (None: no exporter)."""
    if metrics is None:
        return None
    try:
        m = metrics()
    except Exception:  # noqa: BLE001 - the exporter is down or restarting: not counted
        return None
    out = {"committed": sum(v for _, v in m.select("kafka_transactions_total", app=app, outcome="committed"))}
    for lbl, v in m.select("kafka_transaction_fencing_events_total", app=app):
        out[lbl["reason"]] = out.get(lbl["reason"], 0.0) + v
    return out


def waited(condition: Callable[[], object], timeout: float, interval: float) -> bool:
    """wait_for that reports a timeout as False: the fault then says what it did not see."""
    try:
        wait_for(condition, timeout, interval=interval)
        return True
    except TimeoutError:
        return False


def flink_failure(job, relaunch: Callable[[object], bool], bootstrap: str, output_topic: str, app: str,
                  metrics: Callable[[], object] | None = None, timeout_ms: int = 15_000,
                  stopping: threading.Event | None = None, attempts: int = 3) -> str:
    """SIGKILL the Flink job (runtime.FlinkJob) while a KafkaSink transaction is open on
    `output_topic`, then start it again from its latest retained checkpoint with the same
    transactional-id prefix and consumer group (`relaunch(checkpoint)` spawns it; False: the
    demo is stopping).

    The new run restores the source's offsets and the sink's state from the checkpoint and, at
    start-up, aborts the transaction the killed run left open (its ids come from the prefix):
    the tap counts it under the app as kafka_transaction_fencing_events_total
    {reason="startup_abort"}, not as a fence by a new instance, unless the coordinator's
    timeout (`timeout_ms`) ended it first. What the killed run wrote after the checkpoint is
    aborted and written again by the new run, so read_committed readers of the output see
    each record once. A kill that lands just after a commit leaves nothing open: the new run
    is killed again, up to `attempts` kills. The report says which abort happened (from the
    broker's LSO and the exporter's counts) and whether commits resumed."""
    stopping = stopping or threading.Event()
    if not job.running():
        return f"the Flink job {app} is not running: nothing to kill"
    # Restored from nothing, the job would read its input from the start again: wait for a checkpoint.
    wait_for(lambda: job.latest_checkpoint() is not None or stopping.is_set() or not job.running(), 120,
             interval=0.5, what=f"a retained checkpoint of the Flink job {app}")
    if stopping.is_set():
        return "no Flink failure: the demo is stopping"
    if not job.running():
        return f"the Flink job {app} exited before its fault: nothing to kill"
    before = _tap_counts(metrics, app)
    ends = TopicEnds(bootstrap, output_topic)
    kills = 0
    try:
        while kills < attempts:
            kills += 1
            # The sink's records reach Kafka in a burst just before each checkpoint, and their
            # transaction commits once the checkpoint completes, a few hundred ms later: the job
            # is killed as soon as the high watermark moves past the LSO (a commit marker alone
            # moves both), with the new records' transaction open.
            last = ends.offsets("read_uncommitted")

            def written() -> bool:
                nonlocal last
                now = ends.offsets("read_uncommitted")
                moved, last = [p for p in now if now[p] > last[p]], now
                if moved:
                    lso = ends.offsets("read_committed", moved)
                    return any(lso[p] < now[p] for p in moved)
                return stopping.is_set()

            waited(written, 30, 0.005)
            if stopping.is_set():
                return "no Flink failure: the demo is stopping"
            job.kill()
            killed = time.monotonic()
            lso, hwm = ends()
            left_open = sorted(p for p in lso if lso[p] < hwm[p])
            checkpoint = job.latest_checkpoint()
            if not relaunch(checkpoint):
                return "killed the Flink job; not restarted: the demo is stopping"
            job.wait_running(180)
            running_after = time.monotonic() - killed
            if left_open:
                break
        ended_after = None
        if left_open:
            def ended() -> bool:
                now = ends()[0]
                return stopping.is_set() or all(now[p] >= hwm[p] for p in left_open)

            if waited(ended, 90, 0.25):
                ended_after = time.monotonic() - killed
    finally:
        ends.close()
    after = before
    if before is not None:
        def resumed() -> bool:
            nonlocal after
            after = _tap_counts(metrics, app) or after
            aborted = not left_open or any(after.get(r, 0) > before.get(r, 0) for r in ("startup_abort", "timeout"))
            return stopping.is_set() or (after["committed"] > before["committed"] and aborted)

        waited(resumed, 120, 0.5)
    if stopping.is_set():
        return "restarted the Flink job; the demo stopped before it committed again"
    where = (f"a KafkaSink transaction open on {', '.join(f'{output_topic}-{p}' for p in left_open)}" if left_open
             else f"no KafkaSink transaction open on {output_topic} (each kill came right after a commit)")
    head = (f"SIGKILLed Flink job {app} with {where} and restarted it from its retained checkpoint "
            f"{checkpoint.name if checkpoint else 'none'} (same prefix and group"
            + (f"; {kills} kills: the first came right after a commit" if kills > 1 else "")
            + f"): running {running_after:.0f}s after the kill; ")
    parts = []
    if left_open:
        if ended_after is None:
            parts.append("the killed run's transaction was still open 90s later")
        else:
            parts.append(f"the killed run's transaction ended {ended_after:.0f}s after the kill")
        if before is not None:
            d = {r: after.get(r, 0) - before.get(r, 0) for r in ("startup_abort", "timeout", "new_instance")}
            if d["startup_abort"] > 0:
                parts.append(f"the restart aborted it at start-up (look for {app}'s startup_abort count: "
                             f"{after.get('startup_abort', 0):.0f}; no new_instance fence)")
            elif d["timeout"] > 0:
                parts.append(f"the coordinator's timeout ({timeout_ms / 1000:g}s) aborted it before the restart "
                             "did (reason timeout)")
            else:
                parts.append("the tap has not counted its abort yet")
    if before is not None:
        parts.append(f"commits resumed ({before['committed']:.0f} -> {after['committed']:.0f})"
                     if after["committed"] > before["committed"] else "no commit counted since the kill yet")
    parts.append(f"it resumed from the checkpoint's offsets, so read_committed readers of {output_topic} see "
                 "each record once")
    return head + "; ".join(parts)


class FaultInjector(threading.Thread):
    """Runs `faults` in a fixed cycle (fault_schedule), one every `interval` seconds (the
    first after 1 s). A fault that raises is reported and the cycle goes on."""

    def __init__(self, faults: list[Fault], interval: float, say: Callable[[str], None]) -> None:
        super().__init__(name="demo-faults", daemon=True)
        self.faults, self.interval, self.say = list(faults), interval, say
        self.stopping = threading.Event()
        self.done: list[str] = []

    def run(self) -> None:
        wait = 1.0
        for fault in fault_schedule(self.faults):
            if self.stopping.wait(wait):
                return
            wait = self.interval
            try:
                what = fault.run()
            except Exception as exc:  # noqa: BLE001 - a failed fault never stops the demo
                what = f"{fault.name} failed: {type(exc).__name__}: {exc}"
            if self.stopping.is_set():
                return
            self.done.append(what)
            self.say(f"[fault] {what}")
