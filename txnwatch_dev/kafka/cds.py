"""Class-data sharing for the light profile's Kafka nodes (txnwatch_dev/jvm.py): a dynamic
CDS archive of the classes a broker loads while it starts and runs a transaction, made once
per release, JDK and flags, and mapped by every later node of that release. A node's start
then takes 2.6 s of CPU instead of 4.7 (bench/bench_jvm_profile.py, Kafka 4.4).

The archive is made on first use, under a lock (pytest-xdist workers start their session
brokers together), by a broker of its own that dumps the archive when it stops. A JVM that
cannot map the archive (another JDK) runs without it; one that cannot make it is noted
once and nodes start without it."""

from __future__ import annotations

import fcntl
import functools
import hashlib
import logging
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from .release import CACHE, KafkaRelease

log = logging.getLogger(__name__)

_failed: set[Path] = set()     # archives this process could not make: not tried again


@functools.cache
def _java_build(java: str) -> str:
    """`java -version` of this JDK (an update of it in place: another archive)."""
    try:
        return subprocess.run([java, "-version"], capture_output=True, text=True, timeout=30).stderr
    except (OSError, subprocess.SubprocessError):
        return ""


def archive_path(release: KafkaRelease, flags: tuple[str, ...]) -> Path:
    """Where the archive of this release, JDK and flags lives (any change: another file)."""
    java = os.path.realpath(shutil.which(release.java) or release.java)
    key = "\n".join([java, _java_build(java), release.classpath("server"), *flags])
    return CACHE / release.version / f"cds-{hashlib.sha256(key.encode()).hexdigest()[:16]}.jsa"


def archive_flags(release: KafkaRelease, flags: tuple[str, ...]) -> tuple[str, ...]:
    """-XX:SharedArchiveFile=... for a node of `release` with `flags`, made first if missing;
    () when it cannot be made."""
    path = archive_path(release, flags)
    if not path.exists() and path not in _failed:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path.with_suffix(".lock"), "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if not path.exists():
                try:
                    _make(release, path)
                except Exception as exc:  # noqa: BLE001 - nodes run without it, a little slower
                    _failed.add(path)
                    log.warning("no class-data sharing archive for Kafka %s (%s): nodes start without it",
                                release.version, exc)
    return (f"-XX:SharedArchiveFile={path}",) if path.exists() else ()


def _make(release: KafkaRelease, path: Path) -> None:
    from ..transactions.rawkafka import init_producer_id_until
    from .node import KafkaBroker

    workdir = Path(tempfile.mkdtemp(prefix="txnwatch-cds-"))
    dump = path.with_name(f"{path.stem}.{os.getpid()}.tmp")    # beside it: os.replace is atomic
    try:
        broker = KafkaBroker(workdir=workdir, release=release, share_classes=False,
                             jvm_args=(f"-XX:ArchiveClassesAtExit={dump}",))
        try:
            broker.start()
            init_producer_id_until(broker.bootstrap, "txnwatch-cds", 2)   # the coordinator's classes too
        finally:
            broker.stop(60)      # a clean exit dumps the archive
        if not dump.exists():
            raise RuntimeError(f"the JVM wrote no archive:\n{broker.stdout_path.read_text(errors='replace')[-2000:]}")
        os.replace(dump, path)
    finally:
        dump.unlink(missing_ok=True)
        shutil.rmtree(workdir, ignore_errors=True)
