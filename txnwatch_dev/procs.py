"""Stopping the child processes of tests, the demo and benchmarks. Each runs in its own
session (start_new_session=True), so a signal to its process group also reaches what it
started (kafka-server-start.sh execs the JVM; make runs python)."""

from __future__ import annotations

import os
import signal
import subprocess
import urllib.request
from pathlib import Path

from .net import wait_for


def kill_group(proc: subprocess.Popen | None, wait: float = 30.0) -> None:
    """SIGKILL the process group (an abrupt death) and reap it."""
    if proc is None:
        return
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    proc.wait(wait)


def stop_group(proc: subprocess.Popen | None, timeout: float, sig: int | None = signal.SIGTERM) -> None:
    """Send `sig` to the process group (None: it was signalled already), wait `timeout`,
    then SIGKILL it; always reaped."""
    if proc is None or proc.poll() is not None:
        return
    try:
        if sig is not None:
            os.killpg(proc.pid, sig)
        proc.wait(timeout)
    except ProcessLookupError:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        kill_group(proc)


def terminal_signals() -> None:
    """preexec_fn for a child that stands for a program run at a terminal, where Ctrl-C
    interrupts it: SIGINT and SIGQUIT back to their defaults. A shell without job control
    starts background commands with both ignored (POSIX), and an ignored SIGINT is inherited
    through exec: a test run from such a shell (`make test &` in a script) would otherwise
    start the demo deaf to the Ctrl-C it sends."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGQUIT, signal.SIG_DFL)


def start_until_ready(argv: list[str], log_path, ready_url: str, what: str, timeout: float,
                      cwd: str | os.PathLike | None = None) -> subprocess.Popen:
    """Start a server in a session of its own (in `cwd`), its output appended to `log_path`, and
    wait until `ready_url` answers 200 (Prometheus' and Alertmanager's /-/ready); raise with the
    log's tail if it exits first."""
    def ready() -> bool:
        try:
            with urllib.request.urlopen(ready_url, timeout=2) as r:
                return r.status == 200
        except OSError:
            return False

    with open(log_path, "ab") as log:    # the child holds its own descriptor
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True, cwd=cwd)
    wait_for(lambda: proc.poll() is not None or ready(), timeout, what=f"{what} {ready_url}")
    if proc.poll() is not None:
        raise RuntimeError(f"{what} exited {proc.returncode}: {Path(log_path).read_text()[-2000:]}")
    return proc
