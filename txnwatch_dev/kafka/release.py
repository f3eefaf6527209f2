"""Official Apache Kafka releases from Maven Central: the only brokers of the tests, the
demo and the benchmarks.

    release = kafka_release()              # KAFKA_VERSION, else the newest 4.x that resolves
    release.version                        # '4.4.0'
    release.classpath("server")            # kafka_2.13 + kafka-tools + the logging binding
    release.classpath("streams")           # kafka-streams (with rocksdbjni) + kafka-clients
    release.main_class("kafka-transactions")   # 'org.apache.kafka.tools.TransactionsCommand'

`KAFKA_VERSION` is an exact release (`4.4.0`) or a line (`4`, `4.x`, `3.9`, `3.9.x`): a line
means its newest release whose runtime resolves. Maven (`mvn`, with `--strict-checksums`)
resolves the jars into its local repository; the classpath of each release and component
is kept in `~/.cache/txnwatch/kafka/<version>/`, so later runs start without Maven. The
newest release of a line is asked of Maven Central at most every 12 hours (the answer is
kept; without Maven Central the last answer is used).

The logging binding is the one the release's tarball adds: log4j2 (`log4j-slf4j-impl`) from
Kafka 4.0, reload4j before; the log configuration is the project's own (`log_config`).
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import re
import shutil
import time
import zipfile
from dataclasses import dataclass
from pathlib import Path

from txnwatch import maven

CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "txnwatch" / "kafka"
POM = Path(__file__).resolve().with_name("pom.xml")
DEFAULT_LINE = "4"
NEWEST_TTL_SECONDS = 12 * 3600
COMPONENTS = ("server", "streams")

# Each tool's main class, newest location first: some moved from core (kafka.admin) to
# kafka-tools (org.apache.kafka.tools) between 3.x and 4.x.
TOOLS: dict[str, tuple[str, ...]] = {
    "kafka-transactions": ("org.apache.kafka.tools.TransactionsCommand",),
    "kafka-features": ("org.apache.kafka.tools.FeatureCommand",),
    "kafka-storage": ("kafka.tools.StorageTool",),
    "kafka-acls": ("org.apache.kafka.tools.AclCommand", "kafka.admin.AclCommand"),
    "kafka-configs": ("org.apache.kafka.tools.ConfigCommand", "kafka.admin.ConfigCommand"),
    "kafka-topics": ("org.apache.kafka.tools.TopicCommand", "kafka.admin.TopicCommand"),
    "kafka-reassign-partitions": ("org.apache.kafka.tools.reassign.ReassignPartitionsCommand",
                                  "kafka.admin.ReassignPartitionsCommand"),
    "kafka-leader-election": ("org.apache.kafka.tools.LeaderElectionCommand", "kafka.admin.LeaderElectionCommand"),
    "kafka-consumer-groups": ("org.apache.kafka.tools.consumer.group.ConsumerGroupCommand",
                              "kafka.admin.ConsumerGroupCommand"),
    "kafka-share-groups": ("org.apache.kafka.tools.consumer.group.ShareGroupCommand",),
    "kafka-groups": ("org.apache.kafka.tools.GroupsCommand",),
    "kafka-metadata-quorum": ("org.apache.kafka.tools.MetadataQuorumCommand",),
}

_EXACT = re.compile(r"^\d+\.\d+\.\d+$")
_LINE = re.compile(r"^(\d+)(?:\.(\d+))?(?:\.x)?$")


class BrokerUnavailable(RuntimeError):
    """No Kafka release can run here; the message says what is missing and what to install."""


# ------------------------------------------------------------------ programs
def java() -> str:
    """JAVA_HOME's java, else the PATH's (Kafka 4.x brokers need Java 17+)."""
    jh = os.environ.get("JAVA_HOME")
    if jh and os.access(Path(jh) / "bin" / "java", os.X_OK):
        return str(Path(jh) / "bin" / "java")
    found = shutil.which("java")
    if found is None:
        raise BrokerUnavailable("Java not found (JAVA_HOME or PATH): the Kafka brokers of the tests and the demo "
                                "run on it; install a JDK 17+ (apt-get install openjdk-17-jdk-headless)")
    return found


def javac() -> str:
    """The javac beside the java that runs Kafka, else the PATH's."""
    for j in (Path(java()), Path(java()).resolve()):
        cand = j.with_name("javac")
        if os.access(cand, os.X_OK):
            return str(cand)
    found = shutil.which("javac")
    if found is None:
        raise BrokerUnavailable(f"javac not found beside {java()} nor on the PATH: the demo's Java programs are "
                                "compiled at start; install a JDK (apt-get install openjdk-17-jdk-headless)")
    return found


# ------------------------------------------------------------------ versions
def source_digest(source: str, release: KafkaRelease, compiler: str) -> str:
    """What compiled classes depend on: the source, the release and the compiler."""
    h = hashlib.sha256(source.encode())
    h.update(f"\0{release.version}\0{Path(compiler).resolve()}".encode())
    return h.hexdigest()


def parse_spec(spec: str) -> tuple[str, str, str]:
    """('exact', '4.4.0', '4.4.0') or ('line', low, high) for a KAFKA_VERSION value, e.g.
    '4.x' -> ('line', '4.0.0', '4.9999.9999') (pure)."""
    s = spec.strip().lower()
    if _EXACT.match(s):
        return "exact", s, s
    m = _LINE.match(s)
    if not m:
        raise BrokerUnavailable(f"KAFKA_VERSION={spec!r}: expected a release (4.4.0) or a line (4, 4.x, 3.9, 3.9.x)")
    major, minor = int(m.group(1)), m.group(2)
    if minor is None:
        return "line", f"{major}.0.0", f"{major}.9999.9999"
    return "line", f"{major}.{minor}.0", f"{major}.{minor}.9999"


def _newest_that_resolves(low: str, high: str) -> str:
    """The newest release in [low, high] whose runtime (every component) resolves."""
    def resolve(v: str) -> None:
        for component in COMPONENTS:
            try:
                resolve_classpath(v, component)
            except BrokerUnavailable as exc:
                raise maven.MavenUnavailable(str(exc)) from None

    try:
        return maven.newest_resolving("org.apache.kafka", "kafka_2.13", low, high, resolve)[0]
    except maven.MavenUnavailable as exc:
        raise BrokerUnavailable(str(exc)) from None


def resolve_version(spec: str | None = None) -> str:
    """The exact release for a KAFKA_VERSION value (default: the newest 4.x that resolves)."""
    spec = (spec or os.environ.get("KAFKA_VERSION") or DEFAULT_LINE).strip()
    kind, low, high = parse_spec(spec)
    if kind == "exact":
        return low
    memo = CACHE / "newest" / f"{low}-{high}.json"
    known = None
    if memo.exists():
        try:
            known = json.loads(memo.read_text())
        except ValueError:
            known = None
    if known and time.time() - known.get("checked", 0) < NEWEST_TTL_SECONDS:
        return known["version"]
    try:
        v = _newest_that_resolves(low, high)
    except BrokerUnavailable:
        if known:    # Maven Central out of reach: the last answer stands
            return known["version"]
        raise
    maven.store(memo, json.dumps({"version": v, "checked": time.time(), "spec": spec}))
    return v


# ------------------------------------------------------------------ classpaths
def _profiles(version: str, component: str) -> str:
    binding = "log4j2" if int(version.split(".")[0]) >= 4 else "reload4j"
    return f"{component},{binding}"


def resolve_classpath(version: str, component: str = "server") -> list[Path]:
    """The jars of `component` of release `version`, resolved by Maven once and kept."""
    if component not in COMPONENTS:
        raise ValueError(f"unknown component {component!r}: expected one of {COMPONENTS}")
    stored = CACHE / version / f"{component}.classpath"
    if stored.exists():
        jars = [Path(p) for p in stored.read_text().strip().split(os.pathsep) if p]
        if jars and all(j.exists() for j in jars):
            return jars
    try:
        jars = maven.classpath(POM.read_text(), [f"-Dkafka.version={version}", "-P", _profiles(version, component)],
                               what=f"Apache Kafka {version} ({component})")
    except maven.MavenUnavailable as exc:
        raise BrokerUnavailable(str(exc)) from None
    if not any(j.name.startswith(("kafka_2.13-", "kafka-streams-")) for j in jars):
        raise BrokerUnavailable(f"Maven resolved Apache Kafka {version} ({component}) without its main jar")
    maven.store(stored, os.pathsep.join(str(j) for j in jars))
    return jars


# ------------------------------------------------------------------ the release
@dataclass(frozen=True)
class KafkaRelease:
    version: str
    java: str

    @property
    def major(self) -> int:
        return int(self.version.split(".")[0])

    @property
    def log4j2(self) -> bool:
        return self.major >= 4

    def jars(self, component: str = "server") -> list[Path]:
        return resolve_classpath(self.version, component)

    def classpath(self, component: str = "server") -> str:
        return os.pathsep.join(str(j) for j in self.jars(component))

    def describe(self) -> str:
        return f"Apache Kafka {self.version} (Maven Central)"

    def main_class(self, tool: str) -> str:
        """The main class of a `bin/<tool>.sh` of the tarball, in this release."""
        candidates = TOOLS.get(tool)
        if candidates is None:
            raise ValueError(f"unknown Kafka tool {tool!r}: known are {', '.join(sorted(TOOLS))}")
        classes = _kafka_classes(tuple(str(j) for j in self.jars("server")))
        for c in candidates:
            if c.replace(".", "/") + ".class" in classes:
                return c
        raise BrokerUnavailable(f"{tool} is not in Apache Kafka {self.version} (looked for {', '.join(candidates)})")

    # -- logging
    def log_config(self, path: str | os.PathLike, *, to_file: str | os.PathLike | None = None,
                   level: str = "INFO", request_log: str | os.PathLike | None = None) -> list[str]:
        """Write the project's log configuration for this release's binding to `path` and
        return the JVM arguments that select it. `to_file`: everything at `level` goes to that
        file (the broker's server.log); else WARN and above to stderr (tools, apps).
        `request_log`: every request the broker completes, one line each (kafka.request.logger
        at DEBUG), to that file instead (benchmarks count requests with it)."""
        p = Path(path)
        p.parent.mkdir(parents=True, exist_ok=True)
        pattern = "[%d] %p %m (%c)%n"
        quiet = ("state.change.logger", "kafka.controller", "org.apache.kafka.controller",
                 "kafka.log.LogCleaner", "org.apache.zookeeper") + (() if request_log else ("kafka.request.logger",))
        if self.log4j2:
            if to_file:
                lines = ["appender.main.type = File", "appender.main.name = main", f"appender.main.fileName = {to_file}"]
            else:
                lines = ["appender.main.type = Console", "appender.main.name = main", "appender.main.target = SYSTEM_ERR"]
                level = "WARN"
            lines += ["appender.main.layout.type = PatternLayout", f"appender.main.layout.pattern = {pattern}",
                      f"rootLogger.level = {level}", "rootLogger.appenderRef.main.ref = main"]
            for i, name in enumerate(quiet):
                lines += [f"logger.q{i}.name = {name}", f"logger.q{i}.level = WARN"]
            if request_log:
                lines += ["appender.req.type = File", "appender.req.name = req", f"appender.req.fileName = {request_log}",
                          "appender.req.layout.type = PatternLayout", f"appender.req.layout.pattern = {pattern}",
                          "logger.req.name = kafka.request.logger", "logger.req.level = DEBUG",
                          "logger.req.additivity = false", "logger.req.appenderRef.req.ref = req"]
            p.write_text("\n".join(lines) + "\n")
            return [f"-Dlog4j2.configurationFile={p}"]
        if to_file:
            head = [f"log4j.rootLogger={level}, main", "log4j.appender.main=org.apache.log4j.FileAppender",
                    f"log4j.appender.main.File={to_file}"]
        else:
            head = ["log4j.rootLogger=WARN, main", "log4j.appender.main=org.apache.log4j.ConsoleAppender",
                    "log4j.appender.main.Target=System.err"]
        lines = head + ["log4j.appender.main.layout=org.apache.log4j.PatternLayout",
                        f"log4j.appender.main.layout.ConversionPattern={pattern}"]
        lines += [f"log4j.logger.{name}=WARN" for name in quiet]
        if request_log:
            lines += ["log4j.appender.req=org.apache.log4j.FileAppender", f"log4j.appender.req.File={request_log}",
                      "log4j.appender.req.layout=org.apache.log4j.PatternLayout",
                      f"log4j.appender.req.layout.ConversionPattern={pattern}",
                      "log4j.logger.kafka.request.logger=DEBUG, req", "log4j.additivity.kafka.request.logger=false"]
        p.write_text("\n".join(lines) + "\n")
        return [f"-Dlog4j.configuration=file:{p}"]


@functools.lru_cache(maxsize=64)
def _kafka_classes(jars: tuple[str, ...]) -> frozenset[str]:
    names: set[str] = set()
    for j in jars:
        if Path(j).name.startswith("kafka"):
            with zipfile.ZipFile(j) as z:
                names.update(n for n in z.namelist() if n.endswith(".class") and "$" not in n)
    return frozenset(names)


@functools.lru_cache(maxsize=16)
def _release(version: str) -> KafkaRelease:
    r = KafkaRelease(version, java())
    for component in COMPONENTS:
        r.jars(component)
    return r


def kafka_release(spec: str | None = None) -> KafkaRelease:
    """The release `spec` (or KAFKA_VERSION, or the newest 4.x) with its runtime resolved.
    Raises BrokerUnavailable, naming what to install, where Java or Maven is missing."""
    java()
    return _release(resolve_version(spec))
