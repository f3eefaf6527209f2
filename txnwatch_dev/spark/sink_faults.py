"""Faults injected into the exactly-once sink's tasks, for the tests and the demo: a task that
fails after producing, or pauses before its commit or before its progress marker, to be
killed there.

The sink makes each task's producer with its settings' `producer_factory`; `SinkFaults` is
one that makes a `FaultyProducer`: a TransactionalProducer that does what the sink asks, then
the fault where the plan says. It learns which batch a transaction writes from the begin
marker the sink produces first in it (docs/spark-sink.md). The plan travels with the sink's
settings to the executors, whose Python finds this module as the test run's does.

Faults, by name (each optionally limited to one `batch` and `task`):
- fail_after_produce {once_file, wait_others?, wait_seconds?}: once (the flag file says it
  happened), after every record of the attempt reached the broker and before the commit,
  the task raises InjectedFailure; with wait_others, only once the other tasks committed
  the batch;
- pause_before_commit {signal_file, seconds?}: at the same point, writes the signal file and
  sleeps (300 s by default), to be killed with its transaction open;
- pause_before_marker {signal_file, seconds?}: the transaction's rows reach the broker but
  its marker never does (as when the progress partition's leader is slow and the process
  dies); then the same pause, and InjectedFailure if it was not killed.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from confluent_kafka import Consumer

from txnwatch.producer import TransactionalProducer
from txnwatch.spark_listener.sink import SinkConfig
from txnwatch.spark_listener.sink.progress import committed_offset, read_markers

FAULTS = ("fail_after_produce", "pause_before_commit", "pause_before_marker")


class InjectedFailure(RuntimeError):
    """Raised by an injected fault."""


@dataclass(frozen=True)
class SinkFaults:
    """A fault plan: the sink's producer_factory (hashable and picklable, as SinkConfig is)."""

    faults: tuple[tuple[str, str], ...] = ()     # (name, its settings as JSON), sorted

    @classmethod
    def of(cls, faults: Mapping[str, Mapping[str, Any]]) -> SinkFaults:
        unknown = sorted(set(faults) - set(FAULTS))
        if unknown:
            raise ValueError(f"unknown sink faults {unknown}: {', '.join(FAULTS)}")
        return cls(tuple(sorted((name, json.dumps(dict(f))) for name, f in faults.items())))

    def fault(self, name: str) -> dict | None:
        return next((json.loads(v) for k, v in self.faults if k == name), None)

    def __call__(self, cfg: SinkConfig, task: int) -> FaultyProducer:
        return FaultyProducer(cfg, task, self)


class FaultyProducer(TransactionalProducer):
    """Task `task`'s producer, with the plan's faults at the points they name."""

    def __init__(self, cfg: SinkConfig, task: int, plan: SinkFaults, **options: Any) -> None:
        super().__init__(cfg.producer_conf(task), **options)   # options: TransactionalProducer's
        self._cfg, self._task, self._plan = cfg, task, plan
        self._batch: int | None = None    # of the open transaction, from its begin marker
        self._held_marker = False         # pause_before_marker: its marker was not sent

    def begin(self) -> None:
        super().begin()
        self._batch, self._held_marker = None, False

    def produce(self, topic: str, value: Any = None, key: Any = None, partition: int | None = None,
                headers: Any = None, on_delivery: Any = None) -> None:
        batch = _begin_batch(value) if topic == self._cfg.progress_topic else None
        if batch is not None:
            self._batch = batch
            if self._here("pause_before_marker") is not None:
                self._held_marker = True      # never sent: the rows go to the broker without it
                return
        super().produce(topic, value, key, partition, headers, on_delivery)

    def flush(self, timeout: float = 60.0) -> int:
        left = super().flush(timeout)
        if self._held_marker:                 # the rows reached the broker, the marker never will
            self._held_marker = False
            _pause(self._here("pause_before_marker"), self._task, self._batch)
            raise InjectedFailure(f"task {self._task} of batch {self._batch} paused before its marker "
                                  "and was not killed")
        return left

    def send_offsets_to_transaction(self, offsets: Any, group_metadata: Any, timeout: float = 60.0) -> None:
        super().send_offsets_to_transaction(offsets, group_metadata, timeout)
        # Every record of the attempt reached the broker (the sink flushed before this call);
        # the commit is next. Before the flush, a kill could beat librdkafka's send.
        self._fail_after_produce()
        pause = self._here("pause_before_commit")
        if pause is not None:
            _pause(pause, self._task, self._batch)

    def _fail_after_produce(self) -> None:
        f = self._here("fail_after_produce")
        if f is None or os.path.exists(f["once_file"]):
            return
        with open(f["once_file"], "w") as fh:
            fh.write(f"{self._task} {self._batch}\n")
        if f.get("wait_others"):
            _wait_for_others(self._cfg, self._task, self._batch, float(f.get("wait_seconds", 30)))
        raise InjectedFailure(f"injected failure in task {self._task} of batch {self._batch} after producing")

    def _here(self, name: str) -> dict | None:
        """Fault `name` when it is planned for this task and the open transaction's batch."""
        f = self._plan.fault(name)
        if f and f.get("batch", self._batch) == self._batch and f.get("task", self._task) == self._task:
            return f
        return None


def _begin_batch(value: Any) -> int | None:
    """The batch of a begin marker (None for any other record of the progress topic)."""
    try:
        marker = json.loads(value)
    except (TypeError, ValueError):
        return None
    return int(marker["batch"]) if isinstance(marker, dict) and marker.get("kind") == "begin" else None


def _wait_for_others(cfg: SinkConfig, task: int, batch_id: int, timeout: float) -> None:
    """Wait until the other tasks committed this batch (or `timeout` passed)."""
    others = [t for t in range(cfg.num_tasks) if t != task]
    deadline = time.monotonic() + timeout
    consumer = Consumer(cfg.consumer_conf())
    try:
        while time.monotonic() < deadline and _committed(cfg, consumer, others, batch_id) < len(others):
            time.sleep(0.2)
    finally:
        consumer.close()


def _committed(cfg: SinkConfig, consumer: Any, tasks: list[int], batch_id: int) -> int:
    """How many of `tasks` committed batch `batch_id` (or a later one)."""
    done = 0
    for t in tasks:
        off = committed_offset(consumer, cfg.progress_topic, t, 10)
        if off > 0:
            recs = read_markers(consumer, cfg.progress_topic, t, off - 1, off)
            done += bool(recs and int(recs[0][1].get("batch", -1)) >= batch_id)
    return done


def _pause(f: dict, task: int, batch_id: int | None) -> None:
    with open(f["signal_file"], "w") as fh:
        fh.write(f"{os.getpid()} {task} {batch_id}\n")
    time.sleep(float(f.get("seconds", 300)))
