"""Test-only fault hooks of the sink (`faults=` of ExactlyOnceKafkaSink): a task that fails
after producing, or pauses before its commit or before its marker to be killed. Used by
the fault tests and the demo; inert unless a fault is configured."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

from .progress import committed_offset, read_markers
from .settings import SinkConfig


class InjectedFailure(RuntimeError):
    """Raised by the test-only fault hooks."""


def _targets(f: dict | None, task: int, batch_id: int) -> bool:
    return bool(f) and f.get("batch", batch_id) == batch_id and f.get("task", task) == task


def after_produce(cfg: SinkConfig, task: int, batch_id: int, consumer: Any) -> None:
    """After every record of the attempt reached the broker, before its commit:
    `fail_after_produce` (once, by its flag file; optionally after the other tasks committed
    this batch) and `pause_before_commit`."""
    if not cfg.faults:
        return
    f = cfg.fault("fail_after_produce")
    if _targets(f, task, batch_id):
        flag = f["once_file"]
        if not os.path.exists(flag):
            with open(flag, "w") as fh:
                fh.write(f"{task} {batch_id}\n")
            if f.get("wait_others"):
                _wait_for_others(cfg, consumer, task, batch_id, float(f.get("wait_seconds", 30)))
            raise InjectedFailure(f"injected failure in task {task} of batch {batch_id} after producing")
    f = cfg.fault("pause_before_commit")
    if _targets(f, task, batch_id):
        _pause(f, task, batch_id)


def pause_before_marker(cfg: SinkConfig, task: int, batch_id: int, write_rows: Callable[[], None]) -> None:
    """`pause_before_marker`: the transaction's rows reach the broker (`write_rows` produces
    and flushes them) but its marker never does (as when the progress partition's leader is
    slow and the process dies); then pause, to be killed."""
    f = cfg.fault("pause_before_marker") if cfg.faults else None
    if _targets(f, task, batch_id):
        write_rows()
        _pause(f, task, batch_id)
        raise InjectedFailure(f"task {task} of batch {batch_id} paused before its marker and was not killed")


def _wait_for_others(cfg: SinkConfig, consumer: Any, task: int, batch_id: int, timeout: float) -> None:
    """Wait until the other tasks committed this batch (or `timeout` passed)."""
    others = [t for t in range(cfg.num_tasks) if t != task]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        done = 0
        for t in others:
            off = committed_offset(consumer, cfg.progress_topic, t, 10)
            if off > 0:
                recs = read_markers(consumer, cfg.progress_topic, t, off - 1, off)
                if recs and int(recs[0][1].get("batch", -1)) >= batch_id:
                    done += 1
        if done == len(others):
            return
        time.sleep(0.2)


def _pause(f: dict, task: int, batch_id: int) -> None:
    with open(f["signal_file"], "w") as fh:
        fh.write(f"{os.getpid()} {task} {batch_id}\n")
    time.sleep(float(f.get("seconds", 300)))
