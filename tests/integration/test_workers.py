"""Each cluster's poller and tap in a worker process (`http.worker_processes: true`), on the
session's Kafka broker: the serving process holds no Kafka client, serves the same series,
keeps answering (with the last data and its age) while a worker is SIGKILLed or stopped,
restarts it, and no counter goes backwards: the tap resumes counting where the dead
worker's checkpoint ended, so transactions committed while no worker ran are counted once.
"""

from __future__ import annotations

import os
import re
import signal
from pathlib import Path

import pytest

from tests.integration.helpers import children, cluster_config
from txnwatch_dev.net import wait_for
from txnwatch_dev.observability.scrape import Metrics, parse_metrics, sample_lines_per_family
from txnwatch_dev.transactions.workload import create_topics

pytestmark = [pytest.mark.integration]




def worker_config(bootstrap: str, topics: list[str], **extra) -> dict:
    cfg = cluster_config(bootstrap, topics, transaction_log_tap=True, granularity="partition", **extra)
    cfg["http"] = {"worker_processes": True}
    return cfg


def committed(m, app: str) -> float:
    return sum(v for _, v in m.select("kafka_transactions_total", app=app, outcome="committed"))


def test_worker_process_serves_what_the_in_process_poller_does(broker, unique, producers, exporter_factory):
    topic = unique("wk-same")
    create_topics(broker.bootstrap, [topic], partitions=3)
    producers(broker.bootstrap, topic, unique("wk-same-tx"), action="commit", count=3, records=4).wait()
    inproc = exporter_factory({**cluster_config(broker.bootstrap, [topic], granularity="partition"), "http": {"worker_processes": False}})
    worker = exporter_factory(worker_config(broker.bootstrap, [topic]))
    [pid] = children(worker.proc.pid)
    assert children(inproc.proc.pid) == []

    def series(m) -> dict:
        return {(n, lb): v for (n, lb), v in m.items() if n.startswith("kafka_partition_")
                and dict(lb).get("topic") == topic}

    ready = lambda m: len(series(m)) == 12   # noqa: E731 - 4 gauges x 3 partitions
    a = series(inproc.wait_metric(ready, 60, what="in-process poller data"))
    b = series(worker.wait_metric(ready, 60, what="worker process data"))
    assert a.keys() == b.keys()
    for key in a:
        if key[0] != "kafka_partition_lso_stalled_seconds":
            assert a[key] == b[key], key
    m = worker.wait_metric(lambda m: m.get_value("txnwatch_up", source="poller") == 1
                           and m.get_value("txnwatch_up", source="tap") == 1, 60, what="both sources up")
    assert m.get_value("txnwatch_worker_restarts_total") == 0
    assert 0 <= m.get_value("txnwatch_data_age_seconds", source="poller") < 60
    # the worker's own process_* (it holds the state and the Kafka clients), by cluster
    # (the test configs name theirs "test"), beside the serving process's
    assert m.get_value("process_resident_memory_bytes", kafka_cluster="test") > 0
    assert m.get_value("process_open_fds", kafka_cluster="test") > 0
    assert [v for lb, v in m.select("process_resident_memory_bytes") if "cluster" not in lb]   # the server's
    status, page = worker.get("/")
    assert status == 200 and "Transaction-log tap" in page and topic not in page.split("Findings")[0]
    wait_for(lambda: worker.get("/readyz")[0] == 200, 30, what="ready with a worker")
    # the serving process holds no Kafka client: no librdkafka thread in it
    threads = {(Path(f"/proc/{worker.proc.pid}/task") / t / "comm").read_text().strip()
               for t in os.listdir(f"/proc/{worker.proc.pid}/task")}
    assert not any(t.startswith("rdk:") for t in threads), threads
    assert pid in children(worker.proc.pid)
    # txnwatch_series: what each scrape carries per family, the worker's published part and
    # the serving process's own alike
    for exp in (inproc, worker):
        text = exp.get("/metrics")[1]
        lines = sample_lines_per_family(text)
        reported = {lb["family"]: v for lb, v in Metrics(parse_metrics(text)).select("txnwatch_series")}
        assert reported == lines and reported["kafka_partition_high_watermark"] >= 3, (reported, lines)


def test_killed_worker_is_restarted_and_counts_continue(broker, unique, producers, exporter_factory):
    topic, tid = unique("wk-kill"), unique("wk-kill-tx")
    app = "wk-kill-app"
    create_topics(broker.bootstrap, [topic])
    exp = exporter_factory(worker_config(broker.bootstrap, [topic], app_rules=[
        {"match": f"^{re.escape(tid)}-", "app": app}]))
    exp.wait_metric(lambda m: m.get_value("txnwatch_tap_rebuilt") == 1, 60, what="the tap rebuilt in the worker")
    producers(broker.bootstrap, topic, tid + "-a", action="commit", count=4, records=1).wait()
    exp.wait_metric(lambda m: committed(m, app) == 4, 60, what="4 commits counted")
    [pid] = children(exp.proc.pid)
    polls_before = exp.metrics().get_value("txnwatch_polls_total", source="poller")
    assert polls_before >= 1

    os.kill(pid, signal.SIGKILL)
    # Served while no worker runs: the last data, up 0 with the reason, the exit counted.
    m = exp.wait_metric(lambda m: m.get_value("txnwatch_up", source="tap") == 0, 30, what="up 0 for the dead worker")
    assert committed(m, app) == 4
    assert m.get_value("kafka_partition_high_watermark", topic=topic, partition=0) is not None
    assert (m.get_value("txnwatch_poll_errors_total", source="poller", cause="worker_exit") or 0) >= 1
    assert "worker process exited" in exp.get("/")[1]
    # Transactions while the worker is down: the restarted tap counts them, once.
    producers(broker.bootstrap, topic, tid + "-b", action="commit", count=3, records=1).wait()

    def restarted(m) -> bool:
        return (m.get_value("txnwatch_worker_restarts_total") == 1 and m.get_value("txnwatch_up", source="tap") == 1
                and m.get_value("txnwatch_tap_rebuilt") == 1)

    exp.wait_metric(restarted, 60, what="the worker restarted")
    m = exp.wait_metric(lambda m: committed(m, app) >= 7, 60, what="the commits made while it was down")
    assert committed(m, app) == 7
    assert children(exp.proc.pid) != [pid]
    wait_for(lambda: exp.get("/readyz")[0] == 200, 30, what="ready again")
    # never backwards: the worker_exit count survives the new worker's own counts, and the polls
    # the dead worker made stay counted under the new one's
    assert (m.get_value("txnwatch_poll_errors_total", source="poller", cause="worker_exit") or 0) >= 1
    assert m.get_value("txnwatch_polls_total", source="poller") > polls_before


def test_serving_answers_while_a_worker_is_stalled(broker, unique, exporter_factory):
    topic = unique("wk-stop")
    create_topics(broker.bootstrap, [topic])
    exp = exporter_factory(worker_config(broker.bootstrap, [topic]))
    exp.wait_metric(lambda m: m.get_value("txnwatch_up", source="poller") == 1, 60, what="the worker up")
    [pid] = children(exp.proc.pid)
    os.kill(pid, signal.SIGSTOP)
    try:
        m = exp.wait_metric(lambda m: m.get_value("txnwatch_up", source="poller") == 0, 30,
                            what="up 0 for the stalled worker")
        age = m.get_value("txnwatch_data_age_seconds", source="poller")
        assert m.get_value("kafka_partition_high_watermark", topic=topic, partition=0) is not None
        status, page = exp.get("/")
        assert status == 200 and "worker process stalled" in page
        assert exp.get("/readyz")[0] == 503
        exp.wait_metric(lambda m: m.get_value("txnwatch_data_age_seconds", source="poller") > age, 10,
                        what="the served data ageing")
    finally:
        os.kill(pid, signal.SIGCONT)
    exp.wait_metric(lambda m: m.get_value("txnwatch_up", source="poller") == 1, 30, what="the worker back")
    assert children(exp.proc.pid) == [pid]     # resumed, not restarted
    wait_for(lambda: exp.get("/readyz")[0] == 200, 30, what="ready again")
