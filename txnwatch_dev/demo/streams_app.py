"""Compile and run the demo's Kafka Streams application (`streams/BalanceApp.java`).

    app = StreamsApp(bootstrap, workdir=state / "streams", application_id="balance-app", ...)
    app.start()                 # javac (once per source change), then the JVM; returns when RUNNING
    app.process_id, app.transactional_id_prefix, app.kill(), app.restart(), app.stop()
    app.restores()              # the changelog restores of the running instance

The source is compiled with `javac` against the release's Kafka Streams runtime (Maven
Central, `KafkaRelease.classpath("streams")`: kafka-streams, rocksdbjni, kafka-clients), into
`<workdir>/classes`; the classes are reused while the source, the release and the JDK are the
same.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import threading
from pathlib import Path

from ..kafka.release import KafkaRelease, kafka_release
from ..net import wait_for
from ..procs import kill_group, stop_group
from ..transactions.java_programs import compile_program, java_command
from .streams_output import process_id_from_output, restores_from_output

SOURCE = Path(__file__).resolve().parent / "streams" / "BalanceApp.java"
MAIN_CLASS = "BalanceApp"
_RUN = re.compile(r"^running thread=\S+ run=(?P<run>\S+)", re.M)
class StreamsApp:
    """One instance (one JVM, one stream thread) of the balance app."""

    def __init__(self, bootstrap: str | None, workdir: str | os.PathLike, *, application_id: str = "balance-app",
                 input_topic: str, balances_topic: str, alerts_topic: str, threshold: float = 600,
                 transaction_timeout_ms: int = 10_000, release: KafkaRelease | None = None,
                 heap: str = "160m") -> None:
        self.release = release or kafka_release()
        self.bootstrap = bootstrap
        self.workdir = Path(workdir)
        self.application_id = application_id
        self.args = {"application-id": application_id, "input": input_topic,
                     "balances": balances_topic, "alerts": alerts_topic, "threshold": str(threshold),
                     "transaction-timeout-ms": str(transaction_timeout_ms),
                     "state-dir": str(self.workdir / "state")}
        self.heap = heap
        self.log_path = self.workdir / "streams.log"
        self.proc: subprocess.Popen | None = None
        self.pids: list[int] = []
        self.process_id: str | None = None
        self.thread_index: int | None = None
        self.compiled: bool | None = None   # True: compiled at this start, False: classes reused
        self._log_offset = 0
        self._lock = threading.Lock()      # launch vs close (a fault may restart while the demo stops)
        self.closed = False

    @property
    def classes(self) -> Path:
        return self.workdir / "classes"

    @property
    def transactional_id_prefix(self) -> str | None:
        """`<application.id>-<process id>-` of the running instance (EOS-v2 ids)."""
        return None if self.process_id is None else f"{self.application_id}-{self.process_id}-"

    @property
    def transactional_id(self) -> str | None:
        """The running instance's (single) stream thread's transactional id."""
        return None if self.process_id is None else f"{self.transactional_id_prefix}{self.thread_index}"

    @property
    def thread_name(self) -> str | None:
        return None if self.process_id is None else \
            f"{self.application_id}-{self.process_id}-StreamThread-{self.thread_index}"

    def prepare(self) -> None:
        """Compile (or reuse) the classes; no JVM started."""
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.compiled = compile_program(SOURCE, self.classes, self.release)

    def output(self) -> str:
        """What the running instance printed since it started."""
        if not self.log_path.exists():
            return ""
        with open(self.log_path, "rb") as f:
            f.seek(self._log_offset)
            return f.read().decode(errors="replace")

    def launch(self, keep_state: bool = False) -> None:
        """Start a JVM; no waiting. Without `keep_state` on an empty state directory (a new
        process id, so new transactional ids); with it on the directory the last instance
        left (its process id, transactional ids and RocksDB store)."""
        if self.compiled is None:
            self.prepare()
        with self._lock:
            if self.closed:
                raise RuntimeError(f"{self.application_id} is closed: not starting it again")
            self._launch(keep_state)

    def _launch(self, keep_state: bool) -> None:
        if not keep_state:
            shutil.rmtree(self.args["state-dir"], ignore_errors=True)
        cmd = java_command(self.release, self.classes, MAIN_CLASS, self.workdir, self.heap)
        if not self.bootstrap:
            raise ValueError("StreamsApp.bootstrap is not set")
        for k, v in {"bootstrap": self.bootstrap, **self.args}.items():
            cmd += [f"--{k}", v]
        self._log_offset = self.log_path.stat().st_size if self.log_path.exists() else 0
        self.process_id = self.thread_index = None
        with open(self.log_path, "ab") as out:
            self.proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
                                         cwd=self.workdir)
        self.pids.append(self.proc.pid)

    def wait_running(self, timeout: float = 120.0) -> str:
        """Until the instance reports RUNNING with its process id; returns the process id."""
        def running():
            if self.proc.poll() is not None:
                return True
            return process_id_from_output(self.output(), self.application_id)

        got = wait_for(running, timeout, interval=0.2,
                       what=f"Kafka Streams app {self.application_id} to run (log: {self.log_path})")
        if self.proc.poll() is not None:
            raise RuntimeError(f"Kafka Streams app {self.application_id} exited {self.proc.returncode}: "
                               f"{self.output()[-3000:]}")
        self.process_id, self.thread_index = got
        return self.process_id

    def start(self, timeout: float = 120.0, keep_state: bool = False) -> StreamsApp:
        self.launch(keep_state)
        self.wait_running(timeout)
        return self

    @property
    def run_id(self) -> str | None:
        """The running JVM's own id (what a payment's hold_in names)."""
        found = _RUN.findall(self.output())
        return found[-1] if found else None

    def restores(self) -> list[tuple[str, int, int]]:
        """(store partition, changelog records to restore, records restored) of this instance's
        restores so far (pure over its output)."""
        return restores_from_output(self.output())

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self) -> None:
        """SIGKILL: no close(), no abort; its open transaction stays until an instance with the
        same transactional id initialises (fencing it) or the coordinator's timeout."""
        kill_group(self.proc)

    def restart(self, timeout: float = 120.0, keep_state: bool = True) -> str:
        """Kill and start again, by default on the same state directory (the same process id,
        transactional ids and local store); returns the process id."""
        self.kill()
        self.start(timeout, keep_state)
        return self.process_id

    def close(self, timeout: float = 20.0) -> None:
        """stop() for good: later launches raise."""
        with self._lock:
            self.closed = True
        self.stop(timeout)

    def stop(self, timeout: float = 20.0) -> None:
        """SIGTERM (the shutdown hook closes Kafka Streams), SIGKILL after `timeout`."""
        stop_group(self.proc, timeout)
