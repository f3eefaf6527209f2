"""JVM flags for the Java processes the harness starts (Kafka nodes, Spark drivers, Flink's
mini-cluster), by profile, chosen with TXNWATCH_JVM_PROFILE:

- `server` (the default: `make demo`, the benchmarks): the JVM's own JIT (C1, then C2) and
  G1 with few threads.
- `light` (the test suite sets it, tests/conftest.py): C1 only and the serial collector.
  The test suite's JVMs live for seconds to minutes on two shared cores; C2's compilations
  doubled the CPU of a broker's start and of a small Spark query and went on burning a core
  on idle brokers (bench/bench_jvm_profile.py: a broker's start 8.0 -> 4.7 s of CPU, 30 s
  idle 2.2 -> 1.3 s, a small Spark aggregation's driver 32 -> 17 s).
"""

from __future__ import annotations

import os

ENV = "TXNWATCH_JVM_PROFILE"
PROFILES = ("server", "light")

LIGHT = ("-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC")
# G1 with few threads: brokers, Spark and the tests share two cores here.
SERVER_GC = ("-XX:+UseG1GC", "-XX:ParallelGCThreads=1", "-XX:ConcGCThreads=1", "-XX:CICompilerCount=2")


def profile() -> str:
    value = os.environ.get(ENV, "server") or "server"
    if value not in PROFILES:
        raise ValueError(f"{ENV}={value!r}: use one of {', '.join(PROFILES)}")
    return value


def light() -> bool:
    return profile() == "light"


def broker_flags() -> tuple[str, ...]:
    """A Kafka node's JVM flags (heap aside)."""
    flags = LIGHT if light() else ("-server", *SERVER_GC, "-XX:MaxGCPauseMillis=20")
    return (*flags, "-Djava.awt.headless=true")


def flink_jvm_args() -> str:
    """JVM_ARGS of PyFlink's local mini-cluster."""
    return " ".join(("-Xmx768m", *(LIGHT if light() else SERVER_GC)))


def spark_submit_args(current: str | None) -> str:
    """PYSPARK_SUBMIT_ARGS that give every Spark driver PySpark launches (in this process and
    in children) the profile's flags; `current` (the variable as set) is kept when it already
    names driver options."""
    if current and "--driver-java-options" in current:
        return current
    rest = current or "pyspark-shell"
    if not light():
        return rest
    return f'--driver-java-options "{" ".join(LIGHT)}" {rest}'
