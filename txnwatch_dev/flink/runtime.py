"""PyFlink for the development harness: the connector's jars, the venv, a job process.

    jars = connector_jars()          # flink-connector-kafka + kafka-clients, PyFlink's lib removed
    job = FlinkJob(workdir).start(bootstrap, "in", "out", "prefix", checkpoint_ms=2000)
    job.latest_checkpoint()          # the newest retained chk-N directory (for --restore)
    job.rest("/jobs/overview")       # the mini-cluster's REST API (checkpoints in flight, ...)
    job.kill(); job.start(..., restore=...); job.stop()

PyFlink pins clash with PySpark's, so PyFlink lives in its own venv, `.venv-flink`
(scripts/bootstrap-flink.sh makes it; TXNWATCH_FLINK_VENV names another). The Kafka
connector is not in PyFlink's wheel: Maven (`txnwatch.maven`, checksums checked) resolves
the one built for this Flink line, and the jars that PyFlink's own lib already ships
(slf4j-api, commons-lang3, lz4-java, snappy-java: flink-dist has their classes) are left out, so one copy of each class is
loaded. The list is kept in ~/.cache/txnwatch/flink/<flink version>/ so later runs start
without Maven, as the Kafka releases are (txnwatch_dev/kafka/release.py).

Versions: apache-flink 2.2.1 is the newest PyFlink that Maven Central has a Kafka
connector for (5.0.0-2.2; none for 2.3).
"""

from __future__ import annotations

import functools
import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
import zipfile
from pathlib import Path

from txnwatch import maven

from .. import jvm
from ..procs import kill_group, stop_group

FLINK_VERSION = "2.2.1"
CONNECTOR = ("org.apache.flink", "flink-connector-kafka", "5.0.0-2.2")
ROOT = Path(__file__).resolve().parents[2]
CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "txnwatch" / "flink"
JOB = Path(__file__).resolve().with_name("job.py")
READY_LINE = "running"


class FlinkUnavailable(RuntimeError):
    """PyFlink or its connector cannot run here; the message says what to do."""


# ------------------------------------------------------------------ the venv
def venv() -> Path:
    """The venv with apache-flink (TXNWATCH_FLINK_VENV, else <repo>/.venv-flink)."""
    return ROOT / os.environ.get("TXNWATCH_FLINK_VENV", ".venv-flink")   # an absolute path stays as it is


def python() -> Path:
    """The venv's interpreter; FlinkUnavailable (saying how to make it) when missing."""
    exe = venv() / "bin" / "python"
    if not os.access(exe, os.X_OK):
        raise FlinkUnavailable(f"{venv()} has no python: run `make bootstrap` (scripts/bootstrap-flink.sh "
                               f"makes it with apache-flink=={FLINK_VERSION})")
    return exe


def pyflink_home() -> Path:
    """The installed pyflink package (its lib/ and opt/ hold Flink's own jars)."""
    found = sorted(venv().glob("lib/python3*/site-packages/pyflink/lib"))
    if not found:
        raise FlinkUnavailable(f"apache-flink is not installed in {venv()}: run `make bootstrap`")
    return found[-1].parent


def installed_version() -> str:
    """apache-flink's version in the venv (from the wheel's dist-info, no interpreter)."""
    for meta in venv().glob("lib/python3*/site-packages/apache_flink-*.dist-info"):
        return meta.name.removesuffix(".dist-info").split("-")[1]
    raise FlinkUnavailable(f"apache-flink is not installed in {venv()}: run `make bootstrap`")


# ------------------------------------------------------------------ the connector
def _classes(jar: Path) -> set[str]:
    with zipfile.ZipFile(jar) as z:
        return {n for n in z.namelist() if n.endswith(".class") and not n.startswith(("META-INF/", "module-info"))}


@functools.lru_cache(maxsize=4)
def _shipped_classes(home: Path) -> frozenset[str]:
    """Every class of PyFlink's lib/*.jar and opt/flink-python*.jar (the gateway's classpath)."""
    names: set[str] = set()
    for jar in [*home.glob("lib/*.jar"), *home.glob("opt/flink-python*.jar")]:
        names |= _classes(jar)
    return frozenset(names)


def connector_pom(connector: tuple[str, str, str] = CONNECTOR) -> str:
    """A POM whose runtime classpath is the connector and what it needs (kafka-clients, ...)."""
    return maven.dependency_pom([connector])


def resolve(flink_version: str = FLINK_VERSION, connector: tuple[str, str, str] = CONNECTOR) -> dict:
    """{'connector', 'jars', 'left_out', 'kafka_clients'}: the connector's jars that PyFlink
    lacks, resolved by Maven once and kept in CACHE/<flink version>/."""
    stored = CACHE / flink_version / f"{connector[1]}-{connector[2]}.json"
    if stored.exists():
        try:
            known = json.loads(stored.read_text())
            if known["jars"] and all(Path(j).exists() for j in known["jars"]):
                return known
        except (ValueError, KeyError):
            pass
    try:
        jars = maven.classpath(connector_pom(connector), what=":".join(connector))
    except maven.MavenUnavailable as exc:
        raise FlinkUnavailable(str(exc)) from None
    shipped = _shipped_classes(pyflink_home())
    keep, left_out = [], []
    for jar in jars:
        (left_out if _classes(jar) & shipped else keep).append(str(jar))
    clients = [Path(j).name for j in keep if Path(j).name.startswith("kafka-clients-")]
    if not any(Path(j).name.startswith(f"{connector[1]}-") for j in keep) or not clients:
        raise FlinkUnavailable(f"Maven resolved {':'.join(connector)} without the connector or kafka-clients: {jars}")
    known = {"connector": ":".join(connector), "jars": keep, "left_out": left_out,
             "kafka_clients": re.sub(r"^kafka-clients-|\.jar$", "", clients[0])}
    maven.store(stored, json.dumps(known, indent=1))
    return known


def connector_jars() -> list[Path]:
    return [Path(j) for j in resolve()["jars"]]


# ------------------------------------------------------------------ a job
class FlinkJob:
    """job.py in .venv-flink as a child process (its own process group: the py4j gateway
    JVM with the mini-cluster and the Python workers die with it); everything it logs goes to
    workdir (job-N.log per start, Flink's own log files), checkpoints to workdir/checkpoints."""

    def __init__(self, workdir: str | os.PathLike) -> None:
        self.workdir = Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.checkpoint_dir = self.workdir / "checkpoints"
        self.proc: subprocess.Popen | None = None
        self.starts = 0
        self.log_path: Path | None = None
        self.started_in: float | None = None   # seconds from spawn to "running"
        self.launched_at: float | None = None  # time.monotonic() of the last spawn
        self._rest_address: str | None = None  # host:port of the last start's REST API

    def command(self, bootstrap: str, input: str, output: str, prefix: str, checkpoint_ms: int = 2000,
                timeout_ms: int = 60000, parallelism: int = 2, *, group: str | None = None,
                naming: str = "incrementing", restore: str | os.PathLike | None = None,
                extra_sinks: tuple[tuple[str, str, str], ...] = (),
                stall_while: str | os.PathLike | None = None) -> list[str]:
        cmd = [str(python()), "-m", "txnwatch_dev.flink.job", "--bootstrap", bootstrap, "--input", input,
               "--output", output, "--prefix", prefix, "--checkpoint-ms", str(checkpoint_ms),
               "--timeout-ms", str(timeout_ms), "--parallelism", str(parallelism), "--naming", naming,
               "--checkpoint-dir", str(self.checkpoint_dir),
               "--jars", os.pathsep.join(str(j) for j in connector_jars())]
        if group:
            cmd += ["--group", group]
        if restore:
            cmd += ["--restore", str(restore)]
        if stall_while:
            cmd += ["--stall-while", str(stall_while)]
        for sink in extra_sinks:            # (output, prefix, naming)
            cmd += ["--extra-sink", ":".join(sink)]
        return cmd

    def start(self, *args, timeout: float = 180.0, **kwargs) -> FlinkJob:
        """Start the job (the arguments of command()) and wait until it prints "running"
        (submitted to the mini-cluster)."""
        self.launch(*args, **kwargs)
        self.wait_running(timeout)
        return self

    def launch(self, *args, **kwargs) -> FlinkJob:
        """Spawn the job (the arguments of command()) without waiting for it (wait_running
        next; start() does both)."""
        if self.running():
            raise RuntimeError("the job is running already")
        cmd = self.command(*args, **kwargs)
        env = {**os.environ, "PYTHONPATH": str(ROOT), "FLINK_LOG_DIR": str(self.workdir / "flink-log"),
               "JVM_ARGS": os.environ.get("TXNWATCH_FLINK_JVM_ARGS", jvm.flink_jvm_args()), "PYTHONUNBUFFERED": "1"}
        self.starts += 1
        self.log_path = self.workdir / f"job-{self.starts}.log"
        self.started_in = None
        self.launched_at = time.monotonic()
        self._rest_address = None
        with open(self.log_path, "ab") as out:
            self.proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                         env=env, cwd=self.workdir, start_new_session=True)
        return self

    def wait_running(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if any(line.strip() == READY_LINE for line in self.log().splitlines()):
                self.started_in = time.monotonic() - self.launched_at
                return
            if self.proc.poll() is not None:
                raise RuntimeError(f"the Flink job exited {self.proc.returncode} before running; "
                                   f"{self.log_path}:\n{self.tail()}")
            time.sleep(0.2)
        self.kill()
        raise TimeoutError(f"the Flink job did not print {READY_LINE!r} within {timeout:.0f}s; "
                           f"{self.log_path}:\n{self.tail()}")

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path and self.log_path.exists() else ""

    def tail(self, n: int = 40) -> str:
        return "\n".join(self.log().splitlines()[-n:])

    def flink_log(self) -> str:
        """Flink's own log (the gateway JVM's log4j file) of every start."""
        return "".join(p.read_text(errors="replace") for p in sorted((self.workdir / "flink-log").glob("*.log")))

    def rest(self, path: str) -> dict:
        """GET `path` of the mini-cluster's REST API (jobs, checkpoints, ...: Flink's docs), at the
        address the running start logged."""
        if self._rest_address is None:
            found = re.findall(r"Rest endpoint listening at (\S+)", self.flink_log())
            if not found or not self.running():
                raise RuntimeError(f"no REST endpoint of a running job in {self.workdir / 'flink-log'}")
            self._rest_address = found[-1]
        with urllib.request.urlopen(f"http://{self._rest_address}{path}", timeout=10) as answer:
            return json.loads(answer.read())

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def checkpoints(self) -> list[Path]:
        """Completed retained checkpoints (chk-N with _metadata), oldest first."""
        done = [m.parent for m in self.checkpoint_dir.glob("*/chk-*/_metadata")]
        return sorted(done, key=lambda p: (p.stat().st_mtime, int(p.name.split("-")[1])))

    def latest_checkpoint(self) -> Path | None:
        found = self.checkpoints()
        return found[-1] if found else None

    def kill(self) -> None:
        """SIGKILL the whole process group: a crash, with the open transactions left open."""
        kill_group(self.proc)

    def stop(self, timeout: float = 20.0) -> None:
        """SIGTERM (the gateway JVM's shutdown hooks run), SIGKILL after `timeout`."""
        stop_group(self.proc, timeout, signal.SIGTERM)


def main(argv: list[str] | None = None) -> int:
    """`python -m txnwatch_dev.flink.runtime`: resolve and print the connector's jars."""
    info = resolve()
    print(f"apache-flink {installed_version()} in {venv()}; {info['connector']} with kafka-clients "
          f"{info['kafka_clients']}; {len(info['jars'])} jars, left out as PyFlink ships them: "
          f"{', '.join(Path(j).name for j in info['left_out']) or 'none'}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
