"""A transactional producer in a child process, driven command by command, on either client:

* `java`: the Java client of the release under test (`java/TxnClient.java`, compiled against
  that release's kafka-clients): on a 4.x cluster with transaction.version 2 it speaks TV2,
  so the coordinator bumps its epoch at every commit and abort;
* `librdkafka`: txnwatch's instrumented producer on confluent-kafka (this module run as
  `python -m txnwatch_dev.transactions.txn_client`), a TV0 client on every cluster; with
  `forward_url` its transactions also reach the exporter's ingest endpoint.

    c = TxnClient("java", bootstrap, "orders-0", workdir=tmp, release=release).start()
    c.init(); c.begin(); c.send("orders", 0, "x"); c.commit()
    c.kill()                     # SIGKILL mid-transaction: the coordinator times it out

Both speak one line protocol (stdin: `init`, `begin`, `send <topic> <partition> <value>`,
`commit`, `abort`, `close`; stdout: `ok <command> ...` or `error <command> <error> <message>`),
so a scenario runs unchanged on either.
"""

from __future__ import annotations

import argparse
import os
import queue
import subprocess
import sys
import threading
from pathlib import Path

from ..kafka.release import KafkaRelease, kafka_release
from ..procs import kill_group

JAVA_SOURCE = Path(__file__).resolve().parent / "java" / "TxnClient.java"
CLIENTS = ("java", "librdkafka")


class TxnClientError(RuntimeError):
    """A command failed in the client: `error` is its error name (ProducerFencedException,
    _FENCED, INVALID_PRODUCER_EPOCH, ...)."""

    def __init__(self, command: str, error: str, message: str) -> None:
        super().__init__(f"{command}: {error} {message}")
        self.command, self.error, self.message = command, error, message


class TxnClient:
    def __init__(self, kind: str, bootstrap: str, transactional_id: str, *, workdir: str | os.PathLike,
                 transaction_timeout_ms: int = 60_000, release: KafkaRelease | None = None,
                 forward_url: str | None = None, properties: dict[str, str] | None = None) -> None:
        if kind not in CLIENTS:
            raise ValueError(f"unknown client {kind!r}: expected one of {CLIENTS}")
        self.kind, self.bootstrap, self.transactional_id = kind, bootstrap, transactional_id
        self.timeout_ms = transaction_timeout_ms
        self.workdir = Path(workdir)
        self.release = release
        self.forward_url = forward_url     # librdkafka: the exporter that gets its transactions
        self.properties = dict(properties or {})   # java: more producer settings
        self.proc: subprocess.Popen | None = None
        self._lines: queue.Queue[str | None] = queue.Queue()
        self.stderr_path = self.workdir / f"client-{kind}-{transactional_id}-{os.getpid()}.err"

    def _command(self) -> list[str]:
        args = ["--bootstrap", self.bootstrap, "--transactional-id", self.transactional_id,
                "--transaction-timeout-ms", str(self.timeout_ms)]
        if self.kind == "librdkafka":
            if self.properties:
                raise ValueError("extra producer properties are for the java client")
            fwd = ["--forward-url", self.forward_url] if self.forward_url else []
            return [sys.executable, "-m", "txnwatch_dev.transactions.txn_client", *args, *fwd]
        from .java_programs import compile_program, java_command

        release = self.release or kafka_release()
        classes = self.workdir / "txn-client-classes"
        compile_program(JAVA_SOURCE, classes, release)
        props = [x for k, v in self.properties.items() for x in ("--property", f"{k}={v}")]
        return [*java_command(release, classes, "TxnClient", self.workdir, heap="96m"), *args, *props]

    def start(self, timeout: float = 60.0) -> TxnClient:
        self.workdir.mkdir(parents=True, exist_ok=True)
        with open(self.stderr_path, "ab") as err:
            self.proc = subprocess.Popen(self._command(), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                         stderr=err, text=True, start_new_session=True)
        threading.Thread(target=self._read, daemon=True, name=f"txn-client-{self.transactional_id}").start()
        self._next(timeout, "ready")
        return self

    def _read(self) -> None:
        for line in self.proc.stdout:
            self._lines.put(line.rstrip("\n"))
        self._lines.put(None)

    def _next(self, timeout: float, what: str) -> str:
        try:
            line = self._lines.get(timeout=timeout)
        except queue.Empty:
            raise TimeoutError(f"{self.kind} client {self.transactional_id}: no answer to {what} "
                               f"within {timeout:.0f}s ({self._stderr_tail()})") from None
        if line is None:
            raise RuntimeError(f"{self.kind} client {self.transactional_id} exited during {what} "
                               f"({self._stderr_tail()})")
        return line

    def _stderr_tail(self) -> str:
        return self.stderr_path.read_text(errors="replace")[-1500:] if self.stderr_path.exists() else ""

    def call(self, command: str, timeout: float = 60.0) -> str:
        """Send one command; the `ok ...` answer, or TxnClientError."""
        self.proc.stdin.write(command + "\n")
        self.proc.stdin.flush()
        line = self._next(timeout, command)
        if line.startswith("error "):
            _, cmd, error, *rest = line.split(" ", 3) + [""]
            raise TxnClientError(cmd, error, rest[0] if rest else "")
        return line

    def init(self) -> None:
        self.call("init")

    def begin(self) -> None:
        self.call("begin")

    def send(self, topic: str, partition: int, value: str) -> None:
        """Write one record and wait until the client has sent it."""
        self.call(f"send {topic} {partition} {value}")

    def commit(self) -> None:
        self.call("commit")

    def abort(self) -> None:
        self.call("abort")

    def close(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            try:
                self.call("close", timeout=20)
            finally:
                kill_group(self.proc)

    def kill(self) -> None:
        """SIGKILL: no abort, no close; an open transaction stays until the coordinator's timeout."""
        kill_group(self.proc)


# ------------------------------------------------------------------ the librdkafka side
def _serve(args: argparse.Namespace) -> int:
    """txnwatch's instrumented producer (the Spark sink's): with --forward-url each finished
    transaction is also sent to the exporter's ingest endpoint (client-side series)."""
    from txnwatch.producer import TransactionalProducer, TransactionError, error_name

    from ..demo.faults import RecordSink

    sink = RecordSink(args.forward_url)
    p = TransactionalProducer({"bootstrap.servers": args.bootstrap, "transactional.id": args.transactional_id,
                               "transaction.timeout.ms": args.transaction_timeout_ms, "linger.ms": 0,
                               "log_level": 3}, on_record=sink)
    print("ready", flush=True)
    try:
        for line in sys.stdin:
            f = line.strip().split(" ", 3)
            cmd = f[0]
            if not cmd:
                continue
            try:
                if cmd == "init":
                    p.init_transactions(30)
                elif cmd == "begin":
                    p.begin()
                elif cmd == "send":
                    # no delivery callback: a fenced librdkafka producer fails the record inside
                    # produce(), where confluent-kafka then raises SystemError from the callback;
                    # the fence surfaces at flush or commit, as in any librdkafka app
                    p.produce(f[1], value=(f[3] if len(f) > 3 else "").encode(), partition=int(f[2]))
                    if p.flush(30):
                        raise RuntimeError("a record was not delivered within 30 s")
                elif cmd == "commit":
                    p.commit(30)
                elif cmd == "abort":
                    p.abort(30)
                elif cmd == "close":
                    # the forwarder delivers what it holds before the answer: the caller kills
                    # the process group once it has "ok close"
                    sink.close()
                    print("ok close", flush=True)
                    return 0
                else:
                    print(f"error {cmd} ValueError unknown command", flush=True)
                    continue
                print(f"ok {cmd}", flush=True)
            except TransactionError as exc:
                print(f"error {cmd} {exc.error} {str(exc).replace(chr(10), ' ')}", flush=True)
            except Exception as exc:  # noqa: BLE001 - reported on the protocol
                print(f"error {cmd} {error_name(exc)} {str(exc).replace(chr(10), ' ')}", flush=True)
    finally:
        sink.close()
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="librdkafka side of the scenario's transactional client")
    p.add_argument("--bootstrap", required=True)
    p.add_argument("--transactional-id", required=True)
    p.add_argument("--transaction-timeout-ms", type=int, default=60_000)
    p.add_argument("--forward-url", default=None, help="the exporter's base URL for producer_transactions events")
    return _serve(p.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
