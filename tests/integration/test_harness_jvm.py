"""The test suite's JVMs run light (txnwatch_dev/jvm.py) and its Kafka nodes map the class
archive made for their release (txnwatch_dev/kafka/cds.py): what keeps the suite's CPU down."""

from __future__ import annotations

from pathlib import Path

import pytest

pytestmark = [pytest.mark.integration]


def test_the_session_broker_runs_light_and_maps_its_class_archive(broker):
    args = broker.proc.args
    assert {"-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC"} <= set(args), args
    [archive] = [a.split("=", 1)[1] for a in args if a.startswith("-XX:SharedArchiveFile=")]
    # mapped, not refused (a refused archive leaves the JVM running without it, silently)
    assert archive in Path(f"/proc/{broker.pid}/maps").read_text()
