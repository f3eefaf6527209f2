"""The demo's load generator and fault injector: real transactional producers (the
instrumented wrapper) whose per-transaction records are forwarded to the exporter's
ingest endpoint as `producer_transactions` events, exactly as the Spark sink's are."""

from __future__ import annotations

import json
import logging
import random
import threading
import time
from collections.abc import Callable

from ..apps import AppResolver
from ..producer import TransactionalProducer, TransactionError
from .workload import ProducerProcess

log = logging.getLogger(__name__)
_app = AppResolver()


class RecordSink:
    """Sends producer records to the exporter (through the listener's Forwarder)."""

    def __init__(self, forward_url: str | None, token: str | None = None) -> None:
        self.forwarder = None
        if forward_url:
            from ..spark_listener.forwarder import Forwarder

            self.forwarder = Forwarder(forward_url, token)

    def __call__(self, rec: dict) -> None:
        if self.forwarder is not None:
            self.forwarder.submit({"type": "producer_transactions", "app": _app(rec["transactional_id"]),
                                   "timestamp": time.time(), "records": [rec]})

    def close(self) -> None:
        if self.forwarder is not None:
            self.forwarder.close()


def _producer(bootstrap: str, tid: str, sink: RecordSink, timeout_ms: int = 60000) -> TransactionalProducer:
    p = TransactionalProducer({"bootstrap.servers": bootstrap, "transactional.id": tid,
                               "transaction.timeout.ms": timeout_ms, "linger.ms": 5,
                               "log_level": 3},  # librdkafka errors only, not reconnect chatter
                              on_record=sink)
    p.init_transactions(30)
    return p


class LoadGenerator(threading.Thread):
    """Orders for the reference pipeline: JSON {key, amount, ts}, one transaction per tick."""

    def __init__(self, bootstrap: str, topic: str, sink: RecordSink, rate_per_second: int = 200,
                 tick: float = 0.5, keys: int = 20) -> None:
        super().__init__(name="demo-loadgen", daemon=True)
        self.bootstrap, self.topic, self.sink = bootstrap, topic, sink
        self.per_tick = max(1, int(rate_per_second * tick))
        self.tick, self.keys = tick, keys
        self.stopping = threading.Event()
        self.sent = 0

    def run(self) -> None:
        p = _producer(self.bootstrap, "demo-orders-loadgen-0", self.sink)
        try:
            while not self.stopping.is_set():
                t0 = time.monotonic()
                with p.transaction():
                    now = time.time()
                    for _ in range(self.per_tick):
                        k = f"customer-{random.randrange(self.keys)}"
                        p.produce(self.topic, key=k.encode(),
                                  value=json.dumps({"key": k, "amount": round(random.uniform(1, 200), 2),
                                                    "ts": now}).encode())
                self.sent += self.per_tick
                self.stopping.wait(max(0.0, self.tick - (time.monotonic() - t0)))
        except Exception as exc:  # noqa: BLE001 - the demo keeps running without load
            log.warning("load generator stopped: %s", exc)
        finally:
            p.close()


def hang(bootstrap: str, topic: str, partition: int) -> str:
    """Kill a producer mid-transaction: a hanging transaction (on Tansu it never ends)."""
    tid = f"payments-writer-{partition}"
    p = ProducerProcess(bootstrap, topic, tid, action="commit", count=2, partition=partition, then_hang=True)
    p.wait_line("open")
    p.kill()
    return f"killed {tid} mid-transaction on {topic}-{partition} (hanging transaction, stalled LSO)"


def fence(bootstrap: str, topic: str, sink: RecordSink) -> str:
    """A second instance with the same transactional.id fences the first mid-transaction."""
    tid = "refunds-writer-0"
    first = _producer(bootstrap, tid, sink)
    try:
        first.begin()
        first.produce(topic, value=b"refund from the zombie")
        first.flush(10)
        second = _producer(bootstrap, tid, sink)   # InitProducerId bumps the epoch: first is fenced
        try:
            first.produce(topic, value=b"the zombie keeps writing")  # ...and finds out it is fenced
            first.flush(10)
            try:
                first.commit(10)
                outcome = "the first instance committed (not fenced?)"
            except TransactionError as exc:
                outcome = f"the first instance's commit failed with {exc.error}"
            with second.transaction():
                second.produce(topic, value=b"refund from the new instance")
        finally:
            second.close()
    finally:
        first.close()
    return f"second instance of {tid} fenced the first: {outcome}"


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


def slow_transaction(bootstrap: str, topic: str, sink: RecordSink, timeout_ms: int = 10_000,
                     hold_seconds: float = 8.0) -> str:
    """A transaction that uses most of its transaction.timeout.ms: low timeout headroom."""
    p = _producer(bootstrap, "settlement-batch-0", sink, timeout_ms=timeout_ms)
    try:
        with p.transaction():
            p.produce(topic, value=b"slow settlement")
            time.sleep(hold_seconds)
    finally:
        p.close()
    return f"slow transaction held {hold_seconds:.0f}s of its {timeout_ms / 1000:.0f}s timeout (settlement-batch-0)"


class FaultInjector(threading.Thread):
    """Runs the faults on a schedule, one every `interval` seconds, in a fixed cycle."""

    def __init__(self, bootstrap: str, topic: str, sink: RecordSink, interval: float,
                 say: Callable[[str], None], partitions: int = 3) -> None:
        super().__init__(name="demo-faults", daemon=True)
        self.bootstrap, self.topic, self.sink = bootstrap, topic, sink
        self.interval, self.say, self.partitions = interval, say, partitions
        self.stopping = threading.Event()
        self.done: list[str] = []

    def run(self) -> None:
        cycle = [lambda: hang(self.bootstrap, self.topic, 0),
                 lambda: fence(self.bootstrap, self.topic, self.sink),
                 lambda: abort_burst(self.bootstrap, self.topic, self.sink),
                 lambda: slow_transaction(self.bootstrap, self.topic, self.sink)]
        i = 0
        while not self.stopping.wait(self.interval if i else 1.0):
            fault = cycle[i % len(cycle)]
            if i >= len(cycle) and i % len(cycle) == 0:
                i += 1  # one hanging transaction is enough: it never ends on Tansu
                continue
            try:
                what = fault()
                self.done.append(what)
                self.say(f"[fault] {what}")
            except Exception as exc:  # noqa: BLE001 - a failed fault never stops the demo
                self.say(f"[fault] failed: {type(exc).__name__}: {exc}")
            i += 1
