"""Small network helpers shared by tests, benchmarks and the demo."""

from __future__ import annotations

import socket
import time
from collections.abc import Callable

_handed_out: set[int] = set()


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that was free a moment ago on `host`, and never handed out before by this
    process (the kernel may offer a just-closed port again: a broker's listeners, chosen one
    after another before it binds any, must differ)."""
    while True:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind((host, 0))
            port = s.getsockname()[1]
        if port not in _handed_out:
            _handed_out.add(port)
            return port


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
