"""Session-wide fixtures: one broker (Apache Kafka where found) for all integration tests."""

from __future__ import annotations

import itertools
import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

_names = itertools.count()


# Settings of the session broker that tests rely on (a test that needs others starts a
# broker of its own). transaction.max.timeout.ms stays at Kafka's default so producers with
# the default 60 s timeout work; tests of hanging transactions use a broker of their own
# with a short one.
SESSION_BROKER_PROPERTIES = {"transactional.id.expiration.ms": 3_600_000}


def broker_line() -> str:
    """Which broker the integration tests run on, for the first line of the run."""
    from txnwatch.devtools.broker import BrokerUnavailable, broker_kind, find_kafka, tansu_binary

    try:
        kind = broker_kind()
    except BrokerUnavailable as exc:
        return f"broker: ERROR {exc}"
    if kind == "kafka":
        install = find_kafka()
        if install is None:
            return "broker: ERROR TXNWATCH_BROKER=kafka but no Kafka distribution with Java was found"
        return f"broker: {install.describe()}, KRaft, java {install.java}"
    why = ("TXNWATCH_BROKER=tansu" if os.environ.get("TXNWATCH_BROKER", "").strip().lower() == "tansu"
           else "no Java or Kafka distribution found")
    return (f"broker: FALLBACK to Tansu ({tansu_binary()}): {why}; "
            "tests of transaction features that only Apache Kafka has are skipped (marker 'kafka')")


def pytest_sessionstart(session):
    # Written even under -q (a report header is not): the test log names its broker first.
    if any("integration" in str(a) for a in session.config.args):
        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None:
            reporter.write_line(broker_line())


def pytest_collection_modifyitems(config, items):
    """Tests marked `kafka` need Apache Kafka's transaction features: they are skipped only
    where the run falls back to Tansu (said in the header), never where Kafka is found."""
    from txnwatch.devtools.broker import broker_kind

    if broker_kind() == "kafka":
        return
    skip = pytest.mark.skip(reason="needs Apache Kafka (KIP-664, __transaction_state, ...); "
                                   "this run falls back to Tansu")
    for item in items:
        if item.get_closest_marker("kafka") is not None:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def broker(tmp_path_factory):
    """The session's broker: Apache Kafka (one KRaft node) where a distribution and Java are
    found, else Tansu. A distribution that is found but fails to start fails the run."""
    from txnwatch.devtools.broker import make_broker

    b = make_broker(workdir=tmp_path_factory.mktemp("broker"), properties=SESSION_BROKER_PROPERTIES)
    b.start()
    yield b
    b.cleanup()


@pytest.fixture
def own_broker(tmp_path):
    """Start brokers of the test's own (restarts, outages, special settings); all are
    killed and removed at teardown. own_broker(properties=..., advertised_port=...)."""
    from txnwatch.devtools.broker import make_broker

    started = []

    def start(start: bool = True, **kwargs):
        b = make_broker(workdir=tmp_path / f"broker-{len(started)}", **kwargs)
        started.append(b)
        return b.start() if start else b

    yield start
    for b in started:
        b.cleanup()


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
