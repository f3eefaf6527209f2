"""Session-wide fixtures: one Apache Kafka broker (the release KAFKA_VERSION names, from Maven
Central) for all integration tests."""

from __future__ import annotations

import itertools
import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

_names = itertools.count()

# The suite's JVMs run light (txnwatch_dev/jvm.py: C1 only, the serial collector): brokers,
# Spark drivers (here and in child processes, which inherit both) and Flink's mini-cluster.
os.environ.setdefault("TXNWATCH_JVM_PROFILE", "light")
from txnwatch_dev.jvm import spark_submit_args  # noqa: E402 - after the path and the profile

os.environ["PYSPARK_SUBMIT_ARGS"] = spark_submit_args(os.environ.get("PYSPARK_SUBMIT_ARGS"))


# Settings of the session broker that tests rely on (a test that needs others starts a
# broker of its own). transaction.max.timeout.ms stays at Kafka's default so producers with
# the default 60 s timeout work; tests of hanging transactions use a broker of their own
# with a short one.
SESSION_BROKER_PROPERTIES = {"transactional.id.expiration.ms": 3_600_000}


def broker_line() -> str:
    """The Kafka release the integration tests run on (resolved from Maven Central), for the
    first line of the run. A missing Java or Maven fails the run, naming what to install."""
    from txnwatch_dev.kafka import BrokerUnavailable, kafka_release

    try:
        release = kafka_release()
    except BrokerUnavailable as exc:
        raise pytest.UsageError(f"no Kafka broker can run here: {exc}") from None
    line = f"broker: {release.describe()}, KRaft, java {release.java}"
    try:
        import pyspark

        from txnwatch.spark_connector import connector_source

        line += f"\nspark: PySpark {pyspark.__version__}, Kafka connector {connector_source()[1]}"
    except ImportError:
        pass
    return line


_session_broker = None


def _start_session_broker():
    """The session's broker: one KRaft node of the release under test, started once."""
    global _session_broker
    if _session_broker is None:
        import tempfile

        from txnwatch_dev.kafka import make_broker

        _session_broker = make_broker(workdir=tempfile.mkdtemp(prefix="txnwatch-session-broker-"),
                                      properties=SESSION_BROKER_PROPERTIES).start()
    return _session_broker


def _parallel_controller(config) -> bool:
    """The process that hands tests to pytest-xdist's workers (it runs none itself)."""
    return bool(getattr(config.option, "numprocesses", None)) and not hasattr(config, "workerinput")


def _parallel_worker(config) -> bool:
    return hasattr(config, "workerinput")


def pytest_configure(config):
    from tests import compat

    if not _parallel_worker(config) and not os.environ.get(compat.RECORDS_ENV):
        import tempfile

        os.environ[compat.RECORDS_ENV] = tempfile.mkdtemp(prefix="txnwatch-compat-")


def pytest_sessionstart(session):
    # Written even under -q (a report header is not): the test log names the release first.
    if any("integration" in str(a) for a in session.config.args) and not _parallel_worker(session.config):
        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        line = broker_line()
        if _parallel_controller(session.config):
            line += f"\nbroker: one session node per worker ({session.config.option.numprocesses} workers)"
        if reporter is not None:
            reporter.write_line(line)


def pytest_collection_finish(session):
    # The session node starts before the first test when any test uses it (under xdist, in
    # each worker), and the log names its finalized transaction.version.
    if any("broker" in getattr(item, "fixturenames", ()) for item in session.items):
        from txnwatch_dev.kafka import transaction_version

        b = _start_session_broker()
        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None and not _parallel_worker(session.config):
            reporter.write_line(f"broker: session node on {b.bootstrap}: finalized transaction.version "
                                f"{transaction_version(b.bootstrap)}")


def pytest_xdist_node_collection_finished(node, ids):
    """Under `--dist loadgroup` the test ids a worker collected carry their group (`...@group`:
    every test here has one, pytest_collection_modifyitems), which is how the controller keeps a
    group on one worker. A pytest whose ids xdist can no longer rewrite drops every group without
    a word (pytest 9.2 with pytest-xdist 3.8): stop the run instead."""
    lost = [i for i in ids if i.rfind("@") <= i.rfind("]")]      # xdist's own test for a group suffix
    if node.config.getoption("dist", None) == "loadgroup" and lost:
        import xdist

        pytest.exit(f"pytest {pytest.__version__} with pytest-xdist {xdist.__version__} ignores xdist_group "
                    f"({lost[0]} has no @group): install a pair that keeps the groups (constraints-dev.txt pins "
                    "one; `make bootstrap`)", returncode=4)


# Modules whose tests start Spark, Flink or a Kafka Streams app: each takes both cores while
# it computes. Under xdist they run one after another on one worker (one xdist group, handed
# out first), while the other worker runs the rest, which mostly waits on brokers' clocks;
# two of them at once would only slow each other down. (The listener's and the trigger modes'
# small queries on the `spark` session, and the dashboards' end-to-end run, mostly waiting on
# Prometheus and the exporter, go beside them, to even the two workers out: with it in the
# group, the group's worker was the last to finish by minutes.)
COMPUTE_HEAVY = frozenset({
    "test_flink_job", "test_pipeline", "test_sink", "test_spark_faults",
    "test_spark_connect", "test_spark_kafka", "test_streams"})
# (test_spark_connect's local Spark Connect server listens on PySpark's fixed port 15002: in
# this group no two start at once.)
HEAVY_GROUP = "spark-flink-streams"


@pytest.hookimpl(tryfirst=True)      # before xdist reads the groups
def pytest_collection_modifyitems(session, config, items):
    """Tests marked run_last (the compatibility tables, which hold the page to what every
    other test recorded) run after all others, whatever their file names. Parallel workers
    cannot order a test after the other worker's: there they are left out, and run after the
    parallel run in a process of their own with the same TXNWATCH_COMPAT_RECORDS (as
    `make test` does). Under xdist (--dist loadgroup) a module is one group (its module
    fixtures start once), and the compute-heavy modules together are one, handed out first."""
    if _parallel_worker(config):
        last = [i for i in items if i.get_closest_marker("run_last") is not None
                or i.get_closest_marker("run_alone") is not None]
        if last:
            config.hook.pytest_deselected(items=last)
            items[:] = [i for i in items if i not in last]
        for item in items:
            module = item.path.stem
            item.add_marker(pytest.mark.xdist_group(HEAVY_GROUP if module in COMPUTE_HEAVY else module))
        items.sort(key=lambda item: item.path.stem not in COMPUTE_HEAVY)   # stable
        return
    items.sort(key=lambda item: item.get_closest_marker("run_last") is not None)   # stable
# (run_alone: the demo, which starts a broker, Spark, Flink, Streams, an exporter and Prometheus
# and takes the whole machine; beside another test it misses its own deadlines. Under xdist it
# is left out like run_last, and `make integration` runs it after the workers, alone.)


def pytest_sessionfinish(session, exitstatus):
    if _session_broker is not None:
        _session_broker.cleanup()


# Busy seconds per xdist worker (setup, call and teardown of its tests), summed on the
# controller from the reports the workers send: the two totals show how even the split is
# (the run lasts as long as the busier worker).
_worker_busy: dict[str, float] = {}


def pytest_runtest_logreport(report):
    node = getattr(report, "node", None)          # set by xdist on the controller
    gateway = getattr(node, "gateway", None)
    if gateway is not None:
        _worker_busy[gateway.id] = _worker_busy.get(gateway.id, 0.0) + (report.duration or 0.0)


def pytest_terminal_summary(terminalreporter):
    if _worker_busy:
        terminalreporter.write_line("busy per worker: " + ", ".join(
            f"{w} {s:.0f} s" for w, s in sorted(_worker_busy.items())))


@pytest.fixture(scope="session")
def broker():
    """The session's broker (see _start_session_broker)."""
    return _start_session_broker()


@pytest.fixture
def own_broker(tmp_path):
    """Start brokers of the test's own (restarts, outages, special settings); all are
    killed and removed at teardown. own_broker(properties=..., advertised_port=...)."""
    from txnwatch_dev.kafka import make_broker

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
    from txnwatch_dev.transactions.workload import ProducerProcess

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
