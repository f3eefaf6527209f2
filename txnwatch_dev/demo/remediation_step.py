"""The demo's remediation step as a thread (remediation.py holds its pure parts: when, the
command lines, the words): it waits for the pages, runs `txnwatch abort` as a user does, and
says what happened."""

from __future__ import annotations

import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path

from ..observability.scrape import Metrics
from .remediation import (
    BLOCKED_ALERT,
    COMMAND_TIMEOUT,
    HANGING_ALERT,
    HeldFor,
    abort_argv,
    dry_run_lines,
    ended_line,
    exporter_shows,
    failure,
    find_made,
    group_past,
    others_than,
    pages_firing,
    parse_report,
    result_on,
    shown,
)


class Remediation(threading.Thread):
    """Waits for the demo's hanging transaction (`made`: HangingMade), then for its pages to
    have fired `after` seconds, then ends it with `txnwatch abort` and says so. `own_cluster`:
    the demo's own broker, where everything hanging is the demo's."""

    def __init__(self, txnwatch: str, bootstrap: str, made, reader: tuple[str, str] | None, after: float,
                 audit_log: Path, say: Callable[[str], None], metrics: Callable[[], Metrics],
                 alerts: Callable[[], list[dict]] | None, own_cluster: bool,
                 record_pid: Callable[[int], None]) -> None:
        super().__init__(name="demo-remediation", daemon=True)
        # reader: (topic, group), the read_committed group a hanging transaction on that topic blocks
        self.txnwatch, self.bootstrap, self.made, self.reader = txnwatch, bootstrap, made, reader
        self.after, self.audit_log, self.say, self.metrics, self.alerts = after, audit_log, say, metrics, alerts
        self.own_cluster, self.record_pid = own_cluster, record_pid
        self.stopping = threading.Event()
        self._proc: subprocess.Popen | None = None
        self._lock = threading.Lock()   # a command started against stop()

    def run(self) -> None:
        try:
            while not self.made.made:
                if self.stopping.wait(1.0):
                    return
            h = self.made.made[0]
            if self._wait_for_the_pages(h.topic, h.partition):
                self._remediate(h)
        except Exception as exc:  # noqa: BLE001 - a failed step never stops the demo
            self.say(f"[remediation] failed: {type(exc).__name__}: {exc}")

    def _group_on(self, topic: str) -> str | None:
        return self.reader[1] if self.reader is not None and self.reader[0] == topic else None

    def _wait_for_the_pages(self, topic: str, partition: int) -> bool:
        group = self._group_on(topic)
        held, noted = HeldFor(), time.monotonic()
        what = (f"{HANGING_ALERT} on {topic}-{partition}" + (f" and {BLOCKED_ALERT} for {group}" if group else "")
                + (" firing in Prometheus" if self.alerts else " shown by the exporter"))
        while not self.stopping.wait(2.0):
            try:
                holds = (pages_firing(self.alerts(), topic, partition, group) if self.alerts
                         else exporter_shows(self.metrics(), topic, partition, group))
            except Exception:  # noqa: BLE001 - Prometheus or the exporter busy: not held this round
                holds = False
            if held.update(holds, time.monotonic()) >= self.after:
                return True
            if time.monotonic() - noted >= 120:
                noted = time.monotonic()
                self.say(f"[remediation] still waiting for {what} for {self.after:g} s before ending the hanging "
                         "transaction")
        return False

    def command(self, argv: list[str]) -> subprocess.CompletedProcess | None:
        """Run `txnwatch abort` in a session of its own (stop() ends it); None once stopping."""
        with self._lock:
            if self.stopping.is_set():
                return None
            self._proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                          start_new_session=True)
            self.record_pid(self._proc.pid)
        try:
            stdout, stderr = self._proc.communicate(timeout=COMMAND_TIMEOUT)
        except subprocess.TimeoutExpired:
            from ..procs import kill_group

            kill_group(self._proc)
            stdout, stderr = "", f"no answer within {COMMAND_TIMEOUT} s"
        return subprocess.CompletedProcess(argv, self._proc.returncode, stdout, stderr)

    def stop(self) -> None:
        """No new command; the one running gets SIGTERM (it records the interruption)."""
        from ..procs import stop_group

        self.stopping.set()
        with self._lock:
            proc = self._proc
        stop_group(proc, 15)

    def _remediate(self, h) -> None:
        say = lambda msg: self.say(f"[remediation] {msg}")  # noqa: E731
        dry = abort_argv(self.txnwatch, self.bootstrap, ["--hanging"])
        say(f"$ {shown(dry)}   (a dry run: nothing changes)")
        report = txn = None
        for _ in range(6):    # the command's one poll may not have counted it hanging yet
            out = self.command(dry)
            if out is None:
                return
            report = parse_report(out)
            txn = report and find_made(report, h.producer_id, h.topic, h.partition)
            if txn or self.stopping.wait(5.0):
                break
        if not txn:
            say("the dry run did not find the demo's hanging transaction ("
                + (f"it found {len(report['transactions'])} hanging transaction(s), none the demo's" if report
                   else failure(out))
                + "): left as it is")
            return
        for line in dry_run_lines(report, txn):
            say(line)
        others = others_than(report, txn)
        if others:
            say(f"not the demo's, left alone: {', '.join(others)}")
        target = ["--hanging"] if self.own_cluster and not others else ["--transactional-id", h.transactional_id]
        act = abort_argv(self.txnwatch, self.bootstrap, target, audit_log=str(self.audit_log))
        say(f"$ {shown(act)}")
        out = self.command(act)
        if out is None:
            return
        report = parse_report(out)
        result = result_on(report and find_made(report, h.producer_id, h.topic, h.partition), h.topic, h.partition)
        if result is None or result["outcome"] not in ("aborted", "already_ended"):
            why = failure(out) if report is None else (f"outcome {result['outcome']}: {result.get('error')}" if result
                                                       else "no result for it")
            say(f"txnwatch abort did not end the hanging transaction on {h.topic}-{h.partition} ({why})")
            return
        if h in self.made.made:   # nothing left for the exit's clean-up
            self.made.made.remove(h)
        group = self._group_on(h.topic)
        moving = group is not None and group in result["groups_moving"]
        if group is not None and not moving:
            # the command waits 30 s; a loaded machine's consumer may take longer: the exporter says when
            deadline = time.monotonic() + 60
            while not moving and time.monotonic() < deadline and not self.stopping.wait(2.0):
                try:
                    moving = group_past(self.metrics(), group, h.topic, h.partition, h.offset)
                except Exception:  # noqa: BLE001 - the exporter busy: asked again
                    pass
        say(ended_line(h.topic, h.partition, h.offset, result["lso_after"], group, moving)
            + f" (audit trail: {self.audit_log})")
