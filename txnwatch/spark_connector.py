"""Where Spark's Kafka connector (`format("kafka")`) comes from.

PySpark's wheel does not ship the JVM connector (spark-sql-kafka-0-10). Users add it with
`--packages org.apache.spark:spark-sql-kafka-0-10_2.13:<spark version>` (or the
`spark.jars.packages` setting), which needs a Maven repository. Machines without one
(this project's CI) use a directory of jars instead: the connector, its token provider,
commons-pool2 >= 2.12 and kafka-clients.

`connector_conf()` returns the Spark settings for whichever is available, in this order:
1. `TXNWATCH_SPARK_KAFKA_JARS`: a directory holding the jars (kafka-clients may live
   there too or in the Kafka distribution's `libs/`);
2. `../shared/spark-kafka` next to this checkout (the development machines);
3. `spark.jars.packages` with the coordinates of the running PySpark's version.
"""

from __future__ import annotations

import os
from pathlib import Path

ENV_DIR = "TXNWATCH_SPARK_KAFKA_JARS"
CONNECTOR_PREFIXES = ("spark-sql-kafka-0-10_", "spark-token-provider-kafka-0-10_", "commons-pool2-")


class ConnectorNotFound(RuntimeError):
    pass


def package_coordinates(spark_version: str, scala: str = "2.13") -> str:
    """The Maven coordinates of the connector matching a Spark version."""
    base = spark_version.split("+")[0]
    return f"org.apache.spark:spark-sql-kafka-0-10_{scala}:{base}"


def _candidates() -> list[Path]:
    out = []
    env = os.environ.get(ENV_DIR)
    if env:
        out.append(Path(env))
    repo = Path(__file__).resolve().parent.parent
    out.append(repo.parent / "shared" / "spark-kafka")
    return out


def _newest(d: Path, prefix: str) -> Path | None:
    jars = sorted(p for p in d.glob(f"{prefix}*.jar") if "sources" not in p.name and "javadoc" not in p.name)
    return jars[-1] if jars else None


def _kafka_clients(d: Path) -> Path | None:
    found = _newest(d, "kafka-clients-")
    if found:
        return found
    try:
        from txnwatch.devtools.broker import find_kafka
    except ImportError:   # pragma: no cover - devtools ship with the package
        return None
    install = find_kafka()
    return _newest(install.home / "libs", "kafka-clients-") if install else None


def find_jars() -> list[Path] | None:
    """The connector's jars from the first directory that has all of them, or None."""
    for d in _candidates():
        if not d.is_dir():
            continue
        jars = [_newest(d, p) for p in CONNECTOR_PREFIXES]
        if any(j is None for j in jars):
            continue
        clients = _kafka_clients(d)
        if clients is None:
            continue
        return [*jars, clients]
    return None


def connector_conf(spark_version: str | None = None) -> dict[str, str]:
    """Spark settings that put the Kafka connector on the class path."""
    jars = find_jars()
    if jars:
        return {"spark.jars": ",".join(str(j) for j in jars)}
    if spark_version is None:
        import pyspark

        spark_version = pyspark.__version__
    return {"spark.jars.packages": package_coordinates(spark_version)}
