"""Where Spark's Kafka connector (`format("kafka")`) comes from.

PySpark's wheel does not ship the JVM connector (spark-sql-kafka-0-10). Users add it with
`--packages org.apache.spark:spark-sql-kafka-0-10_<scala>:<spark version>` (the
`spark.jars.packages` setting). `connector_conf()` returns the Spark settings that add it,
one way, and `connector_source()` says which:

1. `TXNWATCH_SPARK_KAFKA_JARS`: a directory holding the jars (an air-gapped machine);
2. where `mvn` is installed, the same coordinates resolved by Maven (its checksums checked)
   into its local repository, and the connector's runtime jars that Spark does not ship
   itself passed as `spark.jars` (machines whose Spark resolver cannot reach Maven Central,
   such as this project's: it tries repo1.maven.org). When Maven Central does not serve the
   running Spark's release whole, the newest release below it (same major version) that
   resolves is used, and `connector_source()` names it: Maven Central serves no 4.3 connector
   (PySpark 4.3.0 runs with 4.2.0's, tested), no 4.0.x but 4.0.0;
3. otherwise `spark.jars.packages` with the coordinates, for Spark to resolve.
"""

from __future__ import annotations

import functools
import os
import re
from pathlib import Path

from txnwatch import maven

ENV_DIR = "TXNWATCH_SPARK_KAFKA_JARS"
CONNECTOR_PREFIXES = ("spark-sql-kafka-0-10_", "spark-token-provider-kafka-0-10_", "commons-pool2-", "kafka-clients-")
CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "txnwatch" / "spark-kafka"
_JAR = re.compile(r"^(?P<name>.+)-\d+(?:\.\d+)+[\w.+-]*\.jar$")


class ConnectorNotFound(RuntimeError):
    pass


def _base(spark_version: str) -> str:
    return spark_version.split("+")[0]


def package_coordinates(spark_version: str, scala: str = "2.13") -> str:
    """The Maven coordinates of the connector matching a Spark version."""
    return f"org.apache.spark:spark-sql-kafka-0-10_{scala}:{_base(spark_version)}"


def _spark_jars_dir() -> Path | None:
    try:
        import pyspark
    except ImportError:
        return None
    d = Path(pyspark.__file__).parent / "jars"
    return d if d.is_dir() else None


def scala_suffix(jars_dir: Path | None = None) -> str:
    """The Scala binary version of the installed Spark (from its scala-library jar)."""
    d = jars_dir or _spark_jars_dir()
    for j in sorted(d.glob("scala-library-*.jar")) if d else ():
        m = re.match(r"scala-library-(\d+\.\d+)\.", j.name)
        if m:
            return m.group(1)
    return "2.13"


def artifact_name(jar: Path) -> str:
    """'kafka-clients' for kafka-clients-3.9.0.jar (pure)."""
    m = _JAR.match(jar.name)
    return m.group("name") if m else jar.stem


def _from_directory(d: Path) -> list[Path] | None:
    jars = []
    for prefix in CONNECTOR_PREFIXES:
        found = sorted(p for p in d.glob(f"{prefix}*.jar") if "sources" not in p.name and "javadoc" not in p.name)
        if not found:
            return None
        jars.append(found[-1])
    return jars


@functools.lru_cache(maxsize=8)
def _from_maven(spark_version: str, scala: str) -> tuple[tuple[Path, ...], str]:
    """The connector's runtime jars that Spark lacks, and the connector version used."""
    base = _base(spark_version)
    major = base.split(".")[0]
    artifact = f"spark-sql-kafka-0-10_{scala}"
    stored = CACHE / f"{base}-{scala}.classpath"
    if stored.exists():
        version, _, listed = stored.read_text().partition("\n")
        jars = [Path(p) for p in listed.split(os.pathsep) if p]
        if jars and all(j.exists() for j in jars):
            return tuple(jars), version
    def resolve(version: str) -> list[Path]:
        return maven.classpath(maven.dependency_pom([("org.apache.spark", artifact, version)]),
                               what=f"org.apache.spark:{artifact}:{version}")

    try:
        version, jars = maven.newest_resolving("org.apache.spark", artifact, f"{major}.0.0", base, resolve)
    except maven.MavenUnavailable as exc:
        raise ConnectorNotFound(f"no {artifact} for Spark {base} resolves from Maven Central: {exc}") from None
    shipped = {artifact_name(j) for j in (_spark_jars_dir() or Path("/nonexistent")).glob("*.jar")}
    extra = [j for j in jars if artifact_name(j) not in shipped]
    maven.store(stored, version + "\n" + os.pathsep.join(str(j) for j in extra))
    return tuple(extra), version


def connector_source(spark_version: str | None = None) -> tuple[dict[str, str], str]:
    """(Spark settings, what they came from) for the running Spark."""
    import shutil

    if spark_version is None:
        import pyspark

        spark_version = pyspark.__version__
    env = os.environ.get(ENV_DIR)
    if env:
        jars = _from_directory(Path(env))
        if jars is None:
            raise ConnectorNotFound(f"{ENV_DIR}={env} lacks one of {', '.join(CONNECTOR_PREFIXES)}*.jar")
        return {"spark.jars": ",".join(str(j) for j in jars)}, f"the jars in {env} ({ENV_DIR})"
    scala = scala_suffix()
    if shutil.which("mvn"):
        jars, version = _from_maven(spark_version, scala)
        older = "" if version == _base(spark_version) else (
            f"; Maven Central serves no {_base(spark_version)} connector: {version}'s is the newest that resolves")
        return ({"spark.jars": ",".join(str(j) for j in jars)},
                f"org.apache.spark:spark-sql-kafka-0-10_{scala}:{version} resolved by mvn{older}")
    coords = package_coordinates(spark_version, scala)
    return {"spark.jars.packages": coords}, f"{coords} (spark.jars.packages)"


def connector_conf(spark_version: str | None = None) -> dict[str, str]:
    """Spark settings that put the Kafka connector on the class path."""
    return connector_source(spark_version)[0]
