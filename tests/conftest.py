"""Session-wide fixtures: one Tansu broker for all integration tests."""

from __future__ import annotations

import itertools
import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

_names = itertools.count()


@pytest.fixture(scope="session")
def broker(tmp_path_factory):
    """A real Tansu broker on a free loopback port for the whole test session."""
    from txnwatch.devtools.broker import TansuBroker

    log = tmp_path_factory.mktemp("tansu") / "tansu.log"
    b = TansuBroker(log_path=log).start()
    yield b
    b.stop()


@pytest.fixture
def unique():
    """A short unique name generator: unique('topic') -> 'topic-<pid>-<n>'."""
    return lambda prefix: f"{prefix}-{os.getpid()}-{next(_names)}"


@pytest.fixture
def producers():
    """Start transactional producer child processes; all are killed at teardown."""
    from txnwatch.devtools.workload import ProducerProcess

    started: list[ProducerProcess] = []

    def start(*args, **kwargs) -> ProducerProcess:
        p = ProducerProcess(*args, **kwargs)
        started.append(p)
        return p

    yield start
    for p in started:
        p.kill()


@pytest.fixture(scope="session")
def spark():
    """The one local SparkSession of the test session (Spark 4, local mode)."""
    from txnwatch.pipeline import spark_session

    session = spark_session("local[2]", "txnwatch-tests", 2,
                            **{"spark.sql.streaming.forceDeleteTempCheckpointLocation": "true"})
    yield session
    session.stop()
