"""The small Java programs of the harness (the demo's Kafka Streams app, the scenario's
Java client), compiled with javac against a Kafka release's client runtime from Maven
Central and started with `java -cp`.

    classes = compile_program(SOURCE, workdir / "classes", release)   # once per source change
    cmd = java_command(release, classes, "TxnClient", workdir, heap="96m") + args
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from ..kafka.release import KafkaRelease, javac, source_digest


def compile_program(source: Path, classes: Path, release: KafkaRelease) -> bool:
    """Compile `source` into `classes` unless the classes there are from the same inputs.
    Returns True when it compiled, False when it reused the classes."""
    compiler = javac()
    digest = source_digest(source.read_text(), release, compiler)
    stamp = classes / ".source-sha256"
    if stamp.exists() and stamp.read_text() == digest and (classes / f"{source.stem}.class").exists():
        return False
    shutil.rmtree(classes, ignore_errors=True)
    classes.mkdir(parents=True)
    out = subprocess.run([compiler, "-nowarn", "-cp", release.classpath("streams"), "-d", str(classes), str(source)],
                         capture_output=True, text=True, timeout=180)
    if out.returncode != 0:
        raise RuntimeError(f"javac {source.name} failed ({out.returncode}): {(out.stderr or out.stdout)[-3000:]}")
    stamp.write_text(digest)
    return True


def java_command(release: KafkaRelease, classes: Path, main_class: str, workdir: Path, heap: str = "128m") -> list[str]:
    """`java ... main_class` with the release's client runtime (WARN logs to stderr): a small
    heap, one GC thread and C1 only, as the demo shares two cores with a broker and Spark."""
    log_args = release.log_config(workdir / "log-config.properties")
    cp = os.pathsep.join([str(classes), release.classpath("streams")])
    return [release.java, f"-Xmx{heap}", "-Xms32m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
            "-Djava.awt.headless=true", *log_args, "-cp", cp, main_class]
