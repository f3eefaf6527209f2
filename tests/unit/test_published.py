"""What a worker publishes and how the serving side reads it (files in a temp dir, no Kafka)."""

from __future__ import annotations

import os
from types import MappingProxyType

from txnwatch.exporter.health import SourceHealth
from txnwatch.exporter.model import ClusterSnapshot, HangingTransaction, OpenTransaction, PartitionState
from txnwatch.exporter.runtime.published import PublishedFile, WorkerStatus, digest_of, write_atomic
from txnwatch.exporter.runtime.supervisor import WorkerRuntime


def snapshot(n: int = 50) -> ClusterSnapshot:
    parts = {}
    for i in range(n):
        topic = "orders" if i % 2 else "payments"
        stalled = 10.0 * i if i % 5 == 0 else 0.0
        parts[(topic, i)] = PartitionState(topic, i, 100 + i, 100 if stalled else 100 + i,
                                           stalled_since=1.0 if stalled else None, stalled_seconds=stalled)
    txns = tuple(OpenTransaction(f"tx-{i}", "app", i, 0, "Ongoing", 0, 60000,
                                 (("orders" if i % 2 else "payments", i),), float(i), 60.0 - i) for i in range(30))
    return ClusterSnapshot("c", 1000.0, 0.5, partitions=MappingProxyType(parts), open_transactions=txns,
                           hanging=(HangingTransaction("orders", 45, 7, 0, 100, 450.0, None, "producer_state"),))


def test_digest_is_bounded_and_keeps_only_spark_topics():
    d = digest_of(snapshot(), "c", None, spark_topics=frozenset({"orders"}))
    assert len(d.open_transactions) == 20 and d.open_transactions[0].transactional_id == "tx-29"   # oldest first
    assert [p.stalled_seconds for p in d.stalled][:2] == [450.0, 400.0]
    assert {tp[0] for tp in d.spark_view.partitions} == {"orders"} and len(d.spark_view.partitions) == 25
    assert all(any(tp[0] == "orders" for tp in t.partitions) for t in d.spark_view.open_transactions)
    assert [h.partition for h in d.spark_view.hanging] == [45]
    assert digest_of(snapshot(), "c", None, spark_topics=frozenset()).spark_view is None
    assert digest_of(None, "c", "boom").kip664_error == "boom"


def test_published_files_round_trip_frozen_mappings_and_reload_only_when_replaced(tmp_path):
    path = tmp_path / "digest"
    f = PublishedFile(path)
    assert not f.load() and f.value is None
    d = digest_of(snapshot(), "c", None, spark_topics=frozenset({"orders"}))
    write_atomic(path, d)
    assert f.load()
    assert isinstance(f.value.spark_view.partitions, MappingProxyType)
    assert f.value == d
    assert not f.load()                       # same file: not read again
    write_atomic(path, digest_of(None, "c", None))
    assert f.load() and f.value.taken_at is None
    assert [p for p in os.listdir(tmp_path) if p.startswith(".")] == []   # no temp files left


def runtime(tmp_path) -> WorkerRuntime:
    from txnwatch.config import ClusterConfig

    cfg = ClusterConfig(name="c", bootstrap_servers="127.0.0.1:9", transaction_log_tap=True)
    return WorkerRuntime(cfg, lambda: tmp_path, lambda: None, frozenset)


def status(pid: int, poller_errors: dict, up: bool = True) -> WorkerStatus:
    return WorkerStatus("c", pid, 1, 1000.0, (SourceHealth("poller", up, errors=poller_errors),
                                              SourceHealth("tap", up)), (up, up), {"poller": 990.0})


def test_sources_before_the_first_status_say_starting_and_are_down(tmp_path):
    rt = runtime(tmp_path)
    views = rt.sources()
    assert [(h.source, h.up, h.last_error) for h in views] == [("poller", False, "worker starting"),
                                                                ("tap", False, "worker starting")]
    assert rt.readiness() == (False,)


def test_counts_of_an_earlier_worker_and_the_exits_are_kept(tmp_path):
    rt = runtime(tmp_path)
    rt.start = None   # never spawned here: statuses are written by hand
    rt.dir = tmp_path
    from txnwatch.exporter.runtime.published import PublishedFile as PF

    rt._status_file, rt._digest_file, rt._chunk_files = PF(tmp_path / "status"), PF(tmp_path / "digest"), {}

    class Proc:
        pid = 11

    rt.proc = Proc()
    write_atomic(tmp_path / "status", status(11, {"timeout": 3}))
    rt._read()
    assert rt.readiness() == (True, True)
    assert dict(rt.sources()[0].errors) == {"timeout": 3}
    rt._count("worker_exit")
    rt._set_problem("worker_exit", "worker process exited with code -9")
    assert [h.up for h in rt.sources()] == [False, False] and rt.readiness() == (False,)
    Proc.pid = 12
    write_atomic(tmp_path / "status", status(12, {"timeout": 1}))
    rt._read()
    poller = rt.sources()[0]
    assert poller.up and dict(poller.errors) == {"timeout": 4, "worker_exit": 1}   # never backwards


def test_a_starting_worker_is_not_called_stalled_before_the_startup_grace(tmp_path, monkeypatch):
    import txnwatch.exporter.runtime.supervisor as workers

    rt = runtime(tmp_path)
    rt.dir = tmp_path
    rt._status_file, rt._digest_file, rt._chunk_files = PublishedFile(tmp_path / "status"), \
        PublishedFile(tmp_path / "digest"), {}

    class Proc:
        pid = 21
        killed = False

        def poll(self):
            return None

        def kill(self):
            Proc.killed = True

    rt.proc = Proc()
    now = [1000.0]
    monkeypatch.setattr(workers.time, "monotonic", lambda: now[0])
    rt._status_seen = 1000.0
    rt._write_spark_topics = lambda: None
    now[0] += 10                     # 10 s without a first status: still starting
    rt._step()
    assert rt.sources()[0].last_error == "worker starting" and not Proc.killed
    write_atomic(tmp_path / "status", status(21, {}))
    rt._step()                       # its first status: up
    assert rt.sources()[0].up
    now[0] += 6                      # then 6 s of silence from a started worker: stalled
    rt._step()
    assert "stalled" in rt.sources()[0].last_error and not Proc.killed
    now[0] += 60
    rt._step()
    assert Proc.killed


def test_canary_summary_and_page_row_say_failing_until_a_round_succeeds_again():
    from txnwatch.canary.rounds import Violation, Visible
    from txnwatch.canary.stats import CanaryStats
    from txnwatch.exporter.runtime.published import canary_summary
    from txnwatch.exporter.serve.page import canary_section

    s = CanaryStats()
    assert not canary_summary(s.view()).failing
    assert "no round yet" in canary_section([("prod", canary_summary(s.view()))], 100.0)
    s.committed(0.010)
    s.seen(Visible(0, 0.020))
    s.seen(Visible(1, 0.040))
    s.round_ended("committed", 100.0)
    s.round_ended("aborted", 110.0)
    c = canary_summary(s.view())
    assert (c.committed, c.aborted, c.failures, c.violations, c.partitions_visible) == (1, 1, 0, 0, 2)
    assert c.commit_mean_seconds == 0.010 and abs(c.visibility_mean_seconds - 0.030) < 1e-12
    assert not c.failing
    s.failed("init", "COORDINATOR_NOT_AVAILABLE", "<b>not available</b>", now=120.0)
    c = canary_summary(s.view())
    assert c.failing and c.failures == 1
    page = canary_section([("prod", c)], 125.0)
    assert "class=bad>failing" in page and "init: COORDINATOR_NOT_AVAILABLE" in page
    assert "&lt;b&gt;not available&lt;/b&gt;" in page          # the client's message is escaped
    s.round_ended("committed", 130.0)
    assert not canary_summary(s.view()).failing
    s.seen(Violation(0, 7))
    page = canary_section([("prod", canary_summary(s.view()))], 131.0)
    assert "<td class='num bad'>1</td>" in page
    assert canary_section([], 0.0) == ""


def test_the_publish_lag_the_serving_process_measures_reaches_the_poll_schedule(tmp_path, monkeypatch):
    """The supervisor times each poll's data from the worker's status to its publish and
    writes the slowest of the last ones (in 10 ms steps) into the scrapes file; the worker
    plans its polls with it (never under MIN_PUBLISH_DELAY)."""
    import json

    import txnwatch.exporter.runtime.supervisor as workers
    from txnwatch.exporter.poll.scrape_clock import Cadence, ScrapeView
    from txnwatch.exporter.runtime.worker import MIN_PUBLISH_DELAY, Worker

    published = []

    class Collector:
        def publish_chunks(self, name, chunks):
            published.append(name)

    view = ScrapeView((Cadence(5.0, 990.0),))
    rt = WorkerRuntime(runtime(tmp_path).cfg, lambda: tmp_path, lambda: Collector(), frozenset, scrapes=lambda: view)
    rt.dir = tmp_path
    rt._status_file, rt._digest_file = PublishedFile(tmp_path / "status"), PublishedFile(tmp_path / "digest")
    rt._chunk_files = {"poller": PublishedFile(tmp_path / "poller.chunks")}
    write_atomic(tmp_path / "poller.chunks", (990.0, {}))
    write_atomic(tmp_path / "status", status(11, {}))               # published at 1000.0
    monkeypatch.setattr(workers.time, "time", lambda: 1000.123)
    rt._read()
    rt._write_scrapes()
    assert published == ["poller:c"]
    written = json.loads((tmp_path / "scrapes").read_text())
    assert written == {"cadences": [[5.0, 990.0]], "settling": 0, "publish_lag": 0.13}

    class Poller:
        publish_delay = 0.1

        class wake:
            @staticmethod
            def set():
                pass

    w = object.__new__(Worker)
    w.dir, w._scrapes_key, w.rt = tmp_path, None, type("RT", (), {"poller": Poller()})()
    w._read_scrapes()
    assert w._scrape_view == view and w.rt.poller.publish_delay == 0.13
    written["publish_lag"] = 0.0
    (tmp_path / "scrapes").write_text(json.dumps(written) + " ")     # a new file: read again
    w._read_scrapes()
    assert w.rt.poller.publish_delay == MIN_PUBLISH_DELAY
