"""Small network helpers shared by tests, benchmarks and the demo."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import random
import socket
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

# Ports are handed out below the kernel's ephemeral range (32768-60999 on Linux), so no
# client connection's local port takes one between its hand-out and its server's bind, and
# every process of this machine that asks (the parallel test workers, their children, a demo
# beside them) asks one registry: a port handed out stays taken while the process that took
# it lives.
PORT_RANGE = (20000, 32767)
_REGISTRY = Path(tempfile.gettempdir()) / "txnwatch-ports.json"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _bindable(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that is free on `host` now and that no living process of this machine was
    handed before by this function (a broker's listeners, chosen one after another before it
    binds any, must differ; so must those of two brokers started at once by two processes)."""
    with open(_REGISTRY.with_suffix(".lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            taken: dict[str, int] = {}
            with contextlib.suppress(OSError, ValueError):
                taken = {p: pid for p, pid in json.loads(_REGISTRY.read_text()).items() if _alive(pid)}
            for _ in range(2000):
                port = random.randint(*PORT_RANGE)
                if str(port) not in taken and _bindable(host, port):
                    taken[str(port)] = os.getpid()
                    tmp = _REGISTRY.with_suffix(f".{os.getpid()}.tmp")
                    tmp.write_text(json.dumps(taken))
                    os.replace(tmp, _REGISTRY)
                    return port
            raise RuntimeError(f"no free TCP port in {PORT_RANGE[0]}-{PORT_RANGE[1]} on {host} "
                               f"(the registry {_REGISTRY} holds {len(taken)})")
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def port_open(host: str, port: int, timeout: float = 0.2) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def wait_for(condition: Callable[[], object], timeout: float, interval: float = 0.1,
             what: str = "condition") -> object:
    """Poll `condition` until it returns a truthy value; raise TimeoutError naming `what`."""
    deadline = time.monotonic() + timeout
    last_exc: Exception | None = None
    while True:
        try:
            value = condition()
            if value:
                return value
        except Exception as exc:  # noqa: BLE001 - remembered for the timeout message
            last_exc = exc
        if time.monotonic() > deadline:
            detail = f" (last error: {last_exc!r})" if last_exc else ""
            raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}{detail}")
        time.sleep(interval)
