"""The transactional canary on the session's Kafka broker (one node: one canary partition)."""

from __future__ import annotations

import os
import signal

import pytest

from tests.integration.helpers import children, cluster_config
from txnwatch.canary.probe import CanaryProbe
from txnwatch.config import CanaryConfig
from txnwatch_dev.net import wait_for

pytestmark = [pytest.mark.integration]


def test_canary_commits_aborts_and_every_committed_record_becomes_visible(broker, unique):
    # 3 s: each step's deadline is the interval, and a first InitProducerId on a loaded machine can take 1 s.
    # The visibility deadline is long: this test is about which records become visible, not how fast
    # (with the interval's 3 s, a loaded CI run once counted a committed record as not visible in time).
    cfg = CanaryConfig(enabled=True, interval_seconds=3.0, abort_every=3, topic=unique("canary"),
                       visibility_timeout_seconds=30.0)
    probe = CanaryProbe("test", {"bootstrap.servers": broker.bootstrap}, cfg, instance=unique("i"))
    probe.start()
    try:
        v = wait_for(lambda: (lambda v: v if v.rounds.get("committed", 0) >= 2 and v.rounds.get("aborted", 0) >= 1
                              and sum(h.count for h in v.visibility.values()) >= 2 else None)(probe.view()),
                     60, what="2 committed and 1 aborted canary rounds, the committed ones visible")
    finally:
        probe.stop()
    assert v.violations == 0                                 # aborted records never returned
    assert dict(v.failures) == {}, v.last_failure
    assert v.init_seconds is not None and v.commit.count >= 2
    assert set(v.visibility) == {0}                          # one partition per broker
    assert v.last_success is not None


def test_check_canary_reports_one_visible_round_and_fails_when_it_cannot_write(broker, unique):
    import json

    from txnwatch.check import run_check
    from txnwatch.config import parse_config

    def check(canary: dict) -> tuple[dict, int]:
        # the check looks at the canary's own topic and id only: the session broker also holds
        # what other tests on this worker left (open transactions, stalled partitions, groups)
        name = unique("check")
        cfg = parse_config({"clusters": [{"name": name, "bootstrap_servers": broker.bootstrap,
                                          "canary": canary, "topics": {"include": [canary["topic"]]},
                                          "groups": {"include": [unique("no-group")]},
                                          "transactional_ids": {"include": [f"txnwatch-canary-{name}-.*"]}}]})
        text, code = run_check(cfg, as_json=True, sample_seconds=0.1, canary=True)
        return json.loads(text)["clusters"][0], code

    ok, code = check({"topic": unique("canary"), "interval_seconds": 5})
    c = ok["canary"]
    assert code == 0 and c["ok"], ok
    assert c["init_seconds"] > 0 and c["commit_seconds"] > 0 and list(c["visibility_seconds"]) == ["0"]

    missing = unique("canary-missing")
    bad, code = check({"topic": missing, "create_topic": False, "interval_seconds": 2})
    assert code == 2 and not bad["canary"]["ok"]
    (f,) = [f for f in bad["findings"] if f["kind"] == "canary"]
    assert "stage topic" in f["message"] and missing in f["message"] and "create_topic is false" in f["message"]


def test_canary_is_fenced_by_another_producer_of_its_id_and_initialises_again(broker, unique):
    from confluent_kafka import Producer

    cfg = CanaryConfig(enabled=True, interval_seconds=2.0, abort_every=0, topic=unique("canary"))
    probe = CanaryProbe("test", {"bootstrap.servers": broker.bootstrap}, cfg, instance=unique("i"))
    probe.start()
    try:
        wait_for(lambda: probe.view().rounds.get("committed", 0) >= 2, 60, what="2 committed canary rounds")
        zombie = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": probe.tid})
        zombie.init_transactions(30)          # a newer epoch of the canary's own id: the canary is fenced
        v = wait_for(lambda: (lambda v: v if v.failures else None)(probe.view()), 60,
                     what="the canary's fenced round counted as a failure")
        after = v.rounds.get("committed", 0)
        v = wait_for(lambda: (lambda v: v if v.rounds.get("committed", 0) >= after + 2 else None)(probe.view()),
                     60, what="the canary committing again with a new producer")
    finally:
        probe.stop()
    assert any("FENCED" in error or "EPOCH" in error for _stage, error in v.failures), dict(v.failures)
    assert v.violations == 0


@pytest.mark.parametrize("workers", [True, False], ids=["worker-process", "in-process"])
def test_exporter_serves_the_canary_series(broker, unique, exporter_factory, workers):
    cfg = cluster_config(broker.bootstrap, [unique("none")])
    # a long visibility deadline: the series, not the latency, are under test (as above)
    cfg["clusters"][0]["canary"] = {"interval_seconds": 2, "abort_every": 2, "topic": unique("canary"),
                                    "visibility_timeout_seconds": 30}
    cfg["http"] = {**cfg.get("http", {}), "worker_processes": workers}
    exp = exporter_factory(cfg)

    def rounds(m, outcome):
        return m.get_value("txnwatch_canary_rounds_total", kafka_cluster="test", outcome=outcome) or 0

    m = exp.wait_metric(lambda m: rounds(m, "committed") >= 2 and rounds(m, "aborted") >= 2
                        and (m.get_value("txnwatch_canary_visibility_seconds_count", kafka_cluster="test",
                                         partition="0") or 0) >= 2, 60,
                        what="canary rounds and visibility on /metrics")
    assert m.get_value("txnwatch_canary_visibility_violations_total", kafka_cluster="test") == 0
    assert m.get_value("txnwatch_canary_init_seconds", kafka_cluster="test") > 0
    assert m.get_value("txnwatch_canary_last_success_timestamp_seconds", kafka_cluster="test") > 0
    assert not m.select("txnwatch_canary_failures_total")
    # the page's canary row, from the same data (published by the worker, or in-process)
    status, page = exp.get("/")
    assert status == 200
    section = page.split("<h2>Transactional canary</h2>", 1)[1].split("</section>", 1)[0]
    row = section.split("<td>test</td>", 1)[1].split("</tr>", 1)[0]
    assert "<span class=ok>ok</span>" in row, row
    cells = [c.split("</td>")[0] for c in row.split("<td class=num>")[1:]]
    assert int(cells[0]) >= 2 and int(cells[1]) >= 2, row   # committed, aborted
    assert cells[2].endswith(" ms") and cells[3].endswith(" ms"), row   # commit and visibility means


def test_canary_counts_survive_a_killed_worker(broker, unique, exporter_factory):
    cfg = cluster_config(broker.bootstrap, [unique("none")])
    cfg["clusters"][0]["canary"] = {"interval_seconds": 1, "abort_every": 0, "topic": unique("canary")}
    exp = exporter_factory(cfg)

    def committed(m):
        return m.get_value("txnwatch_canary_rounds_total", kafka_cluster="test", outcome="committed") or 0

    before = committed(exp.wait_metric(lambda m: committed(m) >= 3, 60, what="3 canary rounds"))
    [pid] = children(exp.proc.pid)
    os.kill(pid, signal.SIGKILL)
    exp.wait_metric(lambda m: m.get_value("txnwatch_worker_restarts_total") == 1, 60, what="the worker restarted")
    seen = []
    m = exp.wait_metric(lambda m: seen.append(committed(m)) or committed(m) >= before + 3, 60,
                        what="rounds of the new worker on top of the old ones")
    assert min(seen) >= before                                   # never backwards
    assert m.get_value("txnwatch_canary_visibility_violations_total", kafka_cluster="test") == 0
