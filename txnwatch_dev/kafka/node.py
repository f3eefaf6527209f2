"""One Apache Kafka KRaft node, started from a Maven Central release with `java -cp`.

    broker = KafkaBroker(workdir=tmp).start()    # release: KAFKA_VERSION, else the newest 4.x
    broker.bootstrap, broker.kill(), broker.start(), broker.stop(), broker.describe()

Storage is formatted by the release's own `kafka.tools.StorageTool`, so the cluster gets
that release's default finalized features (on 4.x `transaction.version` 2); `features=
{"transaction.version": 0}` formats with another level, `scram=[...]` adds SCRAM
credentials at format time. Data, the generated `server.properties` and every log go to
the node's own directory; nothing is written anywhere else.
"""

from __future__ import annotations

import base64
import os
import shutil
import subprocess
import tempfile
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from .. import jvm
from ..net import free_port, port_open, wait_for
from ..procs import kill_group, stop_group
from . import cds
from .release import KafkaRelease, kafka_release

READY_LINE = "Transitioning from RECOVERY to RUNNING"

# Broker settings for tests and the demo: one node, replication factor 1, and the
# coordinator's timeout check every second instead of every 10 s (so a killed producer's
# transaction is aborted within seconds of its timeout).
SINGLE_NODE_DEFAULTS: dict[str, object] = {
    "offsets.topic.replication.factor": 1,
    "offsets.topic.num.partitions": 10,
    "transaction.state.log.replication.factor": 1,
    "transaction.state.log.min.isr": 1,
    "transaction.state.log.num.partitions": 10,
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": 1000,
    "transaction.remove.expired.transaction.cleanup.interval.ms": 2000,
    "group.initial.rebalance.delay.ms": 0,
    "num.partitions": 1,
    "auto.create.topics.enable": "false",
    "log.flush.interval.messages": 9223372036854775807,
    # a stopped broker's partitions leave the ISR within seconds, not 30 s
    "replica.lag.time.max.ms": 5000,
    "controlled.shutdown.enable": "true",
    # A node restarted after SIGKILL cannot register until its old registration's session
    # ends (9 s by default): short sessions make kill + start take seconds, and fence a
    # dead broker of a cluster quickly.
    "broker.session.timeout.ms": 2000,
    "broker.heartbeat.interval.ms": 500,
}


@dataclass
class Listener:
    """An extra client listener: name (e.g. SASL_SCRAM), security protocol, port."""

    name: str
    protocol: str
    port: int = 0
    settings: Mapping[str, object] = field(default_factory=dict)   # listener.name.<name>.* keys


def new_cluster_id() -> str:
    """A random cluster id as Kafka makes them (base64url of a UUID, never starting with '-',
    which the tools would read as an option)."""
    while True:
        cid = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not cid.startswith("-"):
            return cid


def format_storage(release: KafkaRelease, config: Path, cluster_id: str, log_dir: Path, *,
                   features: Mapping[str, int] | None = None, scram: Iterable[str] = ()) -> None:
    """`kafka-storage.sh format` of the release: meta.properties and the bootstrap metadata
    (finalized features, SCRAM credentials)."""
    args = ["format", "-t", cluster_id, "-c", str(config), "--ignore-formatted"]
    for name, level in (features or {}).items():
        args += ["--feature", f"{name}={level}"]
    for s in scram:
        args += ["--add-scram", s]
    out = run_java(release, release.main_class("kafka-storage"), args, log_dir=log_dir, timeout=120)
    if out.returncode != 0:
        raise RuntimeError(f"kafka-storage format ({release.describe()}) exited {out.returncode}: "
                           f"{(out.stderr or out.stdout).strip()[-2000:]}")


def run_java(release: KafkaRelease, main_class: str, args: list[str], *, log_dir: str | os.PathLike,
             timeout: float = 60.0, heap: str = "256m", jvm_args: Iterable[str] = ()) -> subprocess.CompletedProcess:
    """Run a main class of the release's server classpath (a tool), WARN logging to stderr."""
    log_args = release.log_config(Path(log_dir) / "tools-log.properties")
    cmd = [release.java, f"-Xmx{heap}", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Xshare:auto",
           *log_args, *jvm_args, "-cp", release.classpath("server"), main_class, *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)


class KafkaBroker:
    """One Apache Kafka KRaft node on loopback ports.

    By default a combined broker + controller (the only voter). In a KafkaCluster the
    first node is that and the others are broker-only nodes of the same quorum, so
    stopping any of them never loses the controller.

    Listeners: PLAINTEXT (clients; advertised at `advertised_port`, so a proxy can sit in
    front), INTERNAL (replication and the coordinator's marker requests, never proxied),
    CONTROLLER, and any `extra_listeners` (SASL, TLS)."""

    kind = "kafka"
    ready_line = READY_LINE   # what the node logs once it serves clients

    def __init__(self, port: int | None = None, host: str = "127.0.0.1", *,
                 workdir: str | os.PathLike | None = None, advertised_port: int | None = None,
                 properties: Mapping[str, object] | None = None, node_id: int = 1,
                 roles: str = "broker,controller", controller: tuple[int, int] | None = None,
                 cluster_id: str | None = None, extra_listeners: list[Listener] | None = None,
                 jvm_args: Iterable[str] = (), heap: str = "512m", release: KafkaRelease | None = None,
                 features: Mapping[str, int] | None = None, scram: Iterable[str] = (),
                 request_log: bool = False, share_classes: bool = True) -> None:
        self.release = release or kafka_release()
        self.share_classes = share_classes   # the light profile's CDS archive (kafka/cds.py)
        self.request_log = request_log   # every request in logs/kafka-request.log (benchmarks)
        self.host = host
        self.port = port or free_port(host)
        self.advertised_port = advertised_port or self.port
        self.internal_port = free_port(host)
        self.node_id = node_id
        self.roles = roles
        if "controller" in roles:
            self.controller_port = free_port(host)
            self.controller = controller or (node_id, self.controller_port)
        else:
            if controller is None:
                raise ValueError("a broker-only node needs the controller's (node id, port)")
            self.controller_port = None
            self.controller = controller
        self.cluster_id = cluster_id or new_cluster_id()
        self._own_workdir = workdir is None   # made here: removed on exit
        if workdir is None:
            workdir = tempfile.mkdtemp(prefix=f"txnwatch-kafka-{node_id}-")
        self.workdir = Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.data_dir = self.workdir / "data"
        self.log_dir = self.workdir / "logs"
        self.stdout_path = self.workdir / "stdout.log"
        self.extra_listeners = list(extra_listeners or [])
        for lst in self.extra_listeners:
            lst.port = lst.port or free_port(host)
        self.properties = {**SINGLE_NODE_DEFAULTS, **(properties or {})}
        self.jvm_args = list(jvm_args)
        self.heap = heap
        self.features = dict(features or {})
        self.scram = list(scram)
        self.proc: subprocess.Popen | None = None
        self.started_count = 0
        self._ready_offset = 0

    # -- facts
    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.advertised_port}"

    @property
    def version(self) -> str:
        return self.release.version

    def describe(self) -> str:
        return f"{self.release.describe()}, KRaft node {self.node_id} on {self.host}:{self.port}"

    def listener(self, name: str) -> Listener:
        for lst in self.extra_listeners:
            if lst.name == name:
                return lst
        raise KeyError(name)

    def server_log(self) -> str:
        p = self.log_dir / "server.log"
        return p.read_text(errors="replace") if p.exists() else ""

    # -- configuration
    def _listeners(self) -> tuple[list[str], list[str], list[str]]:
        h = self.host
        listeners = [f"PLAINTEXT://{h}:{self.port}", f"INTERNAL://{h}:{self.internal_port}"]
        advertised = [f"PLAINTEXT://{h}:{self.advertised_port}", f"INTERNAL://{h}:{self.internal_port}"]
        protocols = ["PLAINTEXT:PLAINTEXT", "INTERNAL:PLAINTEXT", "CONTROLLER:PLAINTEXT"]
        if self.controller_port:
            listeners.append(f"CONTROLLER://{h}:{self.controller_port}")
        for lst in self.extra_listeners:
            listeners.append(f"{lst.name}://{h}:{lst.port}")
            advertised.append(f"{lst.name}://{h}:{lst.port}")
            protocols.append(f"{lst.name}:{lst.protocol}")
        return listeners, advertised, protocols

    def _server_properties(self) -> dict[str, object]:
        listeners, advertised, protocols = self._listeners()
        cid, cport = self.controller
        props: dict[str, object] = {
            "process.roles": self.roles,
            "node.id": self.node_id,
            "controller.quorum.voters": f"{cid}@{self.host}:{cport}",
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "INTERNAL",
            "listeners": ",".join(listeners),
            "advertised.listeners": ",".join(advertised),
            "listener.security.protocol.map": ",".join(protocols),
            "log.dirs": str(self.data_dir),
        }
        for lst in self.extra_listeners:
            for k, v in lst.settings.items():
                props[f"listener.name.{lst.name.lower()}.{k}"] = v
        props.update(self.properties)
        return props

    def _write_config(self) -> Path:
        path = self.workdir / "server.properties"
        lines = [f"{k}={v}" for k, v in self._server_properties().items()]
        path.write_text("\n".join(lines) + "\n")
        return path

    def format(self) -> None:
        """Format the node's storage with the release's StorageTool (once)."""
        if (self.data_dir / "meta.properties").exists():
            return
        format_storage(self.release, self._write_config(), self.cluster_id, self.log_dir,
                       features=self.features, scram=self.scram)

    # -- lifecycle
    def start(self, timeout: float = 90.0) -> KafkaBroker:
        if not self.running():
            self.launch()
            self.wait_ready(timeout)
        return self

    def launch(self) -> None:
        """Start the JVM without waiting (see wait_ready): nodes of a cluster start together."""
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.format()
        config = self._write_config()
        self._ready_offset = len(self.server_log())
        log_args = self.release.log_config(
            self.workdir / "log-config.properties", to_file=self.log_dir / "server.log",
            request_log=self.log_dir / "kafka-request.log" if self.request_log else None)
        flags = jvm.broker_flags()
        if jvm.light() and self.share_classes:
            flags += cds.archive_flags(self.release, flags)
        cmd = [self.release.java, f"-Xmx{self.heap}", "-Xms64m", *flags, *log_args,
               f"-Dkafka.logs.dir={self.log_dir}", *self.jvm_args,
               "-cp", self.release.classpath("server"), "kafka.Kafka", str(config)]
        with open(self.stdout_path, "ab") as out:
            self.proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
                                         cwd=self.workdir)

    def wait_ready(self, timeout: float = 90.0) -> None:
        """Until the node logs that it runs and its client port answers."""
        def ready() -> bool:
            if self.proc.poll() is not None:
                return True
            return self.ready_line in self.server_log()[self._ready_offset:] and port_open(self.host, self.port)

        try:
            wait_for(ready, timeout, interval=0.1, what=f"{self.label} to start on {self.bootstrap}")
        except TimeoutError:
            self.kill()
            raise TimeoutError(f"{self.label} did not start within {timeout:.0f}s; "
                               f"last log lines:\n{self._tail()}") from None
        if self.proc.poll() is not None:
            raise RuntimeError(f"{self.label} exited with {self.proc.returncode} at start; "
                               f"last log lines:\n{self._tail()}")
        self.started_count += 1

    @property
    def label(self) -> str:
        return f"Kafka {self.version} node {self.node_id}"

    def _tail(self, n: int = 25) -> str:
        text = self.server_log() + (self.stdout_path.read_text(errors="replace")
                                    if self.stdout_path.exists() else "")
        return "\n".join(text.splitlines()[-n:])

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    def kill(self) -> None:
        """SIGKILL (an abrupt outage). Data stays: `start()` recovers the log."""
        kill_group(self.proc)

    def stop(self, timeout: float = 30.0) -> None:
        """Controlled shutdown (SIGTERM); SIGKILL if it takes longer than `timeout`."""
        stop_group(self.proc, timeout)

    def restart(self) -> None:
        self.kill()
        self.start()

    def cleanup(self) -> None:
        """Stop (fast: the data is thrown away) and remove the node's directory."""
        self.kill()
        shutil.rmtree(self.workdir, ignore_errors=True)

    def __enter__(self) -> KafkaBroker:
        return self.start()

    def __exit__(self, *exc) -> None:
        if self._own_workdir:
            self.cleanup()
        else:
            self.stop()


def make_broker(*, workdir: str | os.PathLike | None = None, port: int | None = None,
                advertised_port: int | None = None, properties: Mapping[str, object] | None = None,
                **kwargs) -> KafkaBroker:
    """A not yet started single Kafka node (without a workdir it makes a temp dir and
    removes it on exit)."""
    return KafkaBroker(port, workdir=workdir, advertised_port=advertised_port, properties=properties, **kwargs)


def start_broker(**kwargs) -> KafkaBroker:
    """make_broker(...).start()."""
    return make_broker(**kwargs).start()
