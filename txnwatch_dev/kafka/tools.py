"""The release's command-line tools (`kafka-transactions.sh` and friends), run by their
main classes, and the cluster's finalized features."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from .node import run_java
from .release import KafkaRelease, kafka_release


def kafka_tool(tool: str, *args: str, log_dir: str | os.PathLike, timeout: float = 60.0,
               check: bool = True, release: KafkaRelease | None = None) -> subprocess.CompletedProcess:
    """Run what `bin/<tool>.sh args...` runs (e.g. kafka-transactions); its logs (WARN and
    above) go to stderr, its configuration to `log_dir`."""
    release = release or kafka_release()
    Path(log_dir).mkdir(parents=True, exist_ok=True)
    out = run_java(release, release.main_class(tool), list(args), log_dir=log_dir, timeout=timeout)
    if check and out.returncode != 0:
        raise RuntimeError(f"{tool} {' '.join(args)} exited {out.returncode}: "
                           f"{(out.stderr or out.stdout).strip()[-2000:]}")
    return out


def share_consumer(bootstrap: str, topic: str, group: str, log_dir: str | os.PathLike,
                   release: KafkaRelease | None = None) -> subprocess.Popen:
    """A share-group member (KIP-932, Kafka 4.x): the release's console share consumer, left
    running (the caller kills it); it joins `group` and consumes `topic`."""
    release = release or kafka_release()
    Path(log_dir).mkdir(parents=True, exist_ok=True)
    log_args = release.log_config(Path(log_dir) / "share-consumer-log.properties")
    cmd = [release.java, "-Xmx128m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", *log_args,
           "-cp", release.classpath("server"), "org.apache.kafka.tools.consumer.ConsoleShareConsumer",
           "--bootstrap-server", bootstrap, "--topic", topic, "--group", group]
    with open(Path(log_dir) / f"share-consumer-{group}.log", "ab") as out:
        return subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)


def finalized_features(bootstrap: str, timeout_ms: int = 10_000) -> dict[str, int]:
    """The cluster's finalized feature levels ({'transaction.version': 2, 'metadata.version':
    ...}), from an ApiVersions answer."""
    from kafka import KafkaAdminClient

    admin = KafkaAdminClient(bootstrap_servers=bootstrap.split(","), client_id="txnwatch-devtools",
                             request_timeout_ms=timeout_ms)
    try:
        features = admin.describe_features()
    finally:
        admin.close()
    return {name: f["finalized"][1] for name, f in features.items() if "finalized" in f}


def transaction_version(bootstrap: str) -> int:
    """The cluster's finalized transaction.version (0 where the feature is not finalized)."""
    return finalized_features(bootstrap).get("transaction.version", 0)
