"""Fault tests (issue 9). Each test names the fault, the expected behaviour, and checks it."""

from __future__ import annotations

import itertools
import os
import signal
import subprocess
import threading
import time
import urllib.error
import urllib.request

import pytest
import yaml

from tests.integration.helpers import children, cluster_config, tap_caught_up
from txnwatch_dev.net import free_port, wait_for
from txnwatch_dev.observability.exporter_proc import ExporterProcess
from txnwatch_dev.observability.scrape import Metrics, parse_metrics
from txnwatch_dev.proxy import KafkaProxy
from txnwatch_dev.transactions.workload import create_topics

pytestmark = [pytest.mark.integration, pytest.mark.faults]


@pytest.fixture
def proxied_broker(own_broker):
    """A broker reachable only through a proxy the test can stall (it advertises the proxy's
    port to clients; replication and transaction markers use the broker's own listener)."""
    proxy_port = free_port()
    b = own_broker(advertised_port=proxy_port)
    proxy = KafkaProxy("127.0.0.1", b.port, port=proxy_port).start()
    yield b, proxy
    proxy.stop()


def test_stalled_broker_polls_time_out_scrapes_stay_fast_page_says_stale(proxied_broker, exporter_factory, unique):
    """Fault: the broker stops answering (connections stay open, no bytes flow).
    Expected: polls give up at poll_timeout_seconds and count a timeout, /metrics and / keep
    answering from the last snapshot, and the page says what is stale and since when."""
    b, proxy = proxied_broker
    topic = unique("slow")
    create_topics(f"127.0.0.1:{proxy.port}", [topic])
    exp = exporter_factory(cluster_config(f"127.0.0.1:{proxy.port}", [topic], poll_timeout_seconds=1.5,
                                          poll_interval_seconds=0.5))
    exp.wait_metric(lambda m: m.get_value("txnwatch_up", source="poller") == 1, what="first poll")
    proxy.stall()
    m = exp.wait_metric(lambda m: (m.get_value("txnwatch_poll_errors_total", source="poller", cause="timeout")
                                   or 0) >= 1, timeout=30, what="a poll to time out")
    assert m.get_value("txnwatch_up", source="poller") == 0
    # Scrapes are served from memory while the broker is stalled: they answer at once
    # (the client timeout is far below a stalled request's).
    for _ in range(20):
        status, body = exp.get("/metrics", timeout=2)
        assert status == 200 and f'topic="{topic}"' in body  # the last snapshot is still served
    status, page = exp.get("/", timeout=2)
    assert status == 200
    assert "data stale since" in page and "Timed out" in page, page[page.find("Clusters"):][:1500]
    proxy.resume()
    exp.wait_metric(lambda m: m.get_value("txnwatch_up", source="poller") == 1, timeout=30, what="recovery")


def test_one_stalled_cluster_delays_no_other(proxied_broker, broker, exporter_factory, unique):
    """Fault: one of two clusters stalls. Expected: the other cluster's polls go on at their pace."""
    b, proxy = proxied_broker
    cfg = {"clusters": [
        {"name": "stalled", "bootstrap_servers": f"127.0.0.1:{proxy.port}", "poll_interval_seconds": 0.5,
         "poll_timeout_seconds": 20},
        {"name": "healthy", "bootstrap_servers": broker.bootstrap, "poll_interval_seconds": 0.5,
         "poll_timeout_seconds": 5}]}
    exp = exporter_factory(cfg)
    exp.wait_metric(lambda m: m.get_value("txnwatch_up", kafka_cluster="stalled") == 1
                    and m.get_value("txnwatch_up", kafka_cluster="healthy") == 1, what="both clusters polled")
    proxy.stall()
    # Once the proxy holds a request, the stalled cluster's poll is stuck inside its 20 s timeout.
    wait_for(lambda: proxy.held > 0, 15, what="a poll of the stalled cluster to be held")
    stuck_at = exp.metrics().get_value("txnwatch_last_success_timestamp_seconds", kafka_cluster="stalled")
    first = exp.metrics().get_value("txnwatch_last_success_timestamp_seconds", kafka_cluster="healthy")
    # The healthy cluster completes several more polls while the other is stuck.
    m = exp.wait_metric(lambda m: m.get_value("txnwatch_last_success_timestamp_seconds", kafka_cluster="healthy")
                        >= first + 3, timeout=15, what="healthy cluster to keep polling")
    assert m.get_value("txnwatch_last_success_timestamp_seconds", kafka_cluster="stalled") == stuck_at
    proxy.resume()


def _exited(pid: int) -> bool:
    """No such process, or one that exited and waits to be reaped (a zombie); read in one go,
    as the process may go between a look and a read."""
    try:
        with open(f"/proc/{pid}/status") as status:
            return "zombie" in status.read().lower()
    except FileNotFoundError:
        return True


def test_sigterm_while_a_poll_waits_on_the_broker_stops_within_a_runtimes_grace(proxied_broker, exporter_factory,
                                                                                 unique):
    """Fault: SIGTERM to the serving process (as `podman stop` and `docker stop` send it to
    PID 1) while the worker's poll waits on a broker that holds its answers, as a first poll
    can on a busy machine. Expected: the exporter exits 0 before the runtime's SIGKILL, 10 s
    after SIGTERM: the worker hears of it with the HTTP servers and gives up the stuck call
    within its grace; no process is left."""
    b, proxy = proxied_broker
    topic = unique("term")
    bootstrap = f"127.0.0.1:{proxy.port}"
    create_topics(bootstrap, [topic])
    cfg = cluster_config(bootstrap, [topic], poll_timeout_seconds=60, poll_interval_seconds=0.5)
    exp = exporter_factory({**cfg, "http": {"worker_processes": True}})
    wait_for(lambda: exp.get("/readyz")[0] == 200, 30, what="the first poll")
    [worker] = children(exp.proc.pid)
    proxy.stall()
    wait_for(lambda: proxy.held > 0, 15, what="a poll held by the broker")
    os.kill(exp.proc.pid, signal.SIGTERM)
    t = time.monotonic()
    try:
        code = exp.proc.wait(10)
    except subprocess.TimeoutExpired:
        pytest.fail(f"still running 10 s after SIGTERM (a runtime would SIGKILL it):\n{exp.log()[-3000:]}")
    finally:
        proxy.resume()
    assert code == 0, exp.log()[-3000:]
    assert _exited(worker)
    print(f"stopped {time.monotonic() - t:.1f} s after SIGTERM")


@pytest.mark.parametrize("workers", [True, False], ids=["worker-process", "in-process"])
def test_a_scrape_waits_for_the_poll_timed_for_it_when_the_broker_answers_late(proxied_broker, exporter_factory,
                                                                               unique, workers):
    """Fault: the broker holds its answers while the poll timed for a scrape runs (a broker busy
    with other clients' requests). Expected: that scrape waits for the poll's data (within a
    quarter of the timeout its scraper sends) instead of serving the poll before's, a scrape
    period old, and the wait is counted; a request that sends no timeout never waits."""
    b, proxy = proxied_broker
    topic = unique("late")
    bootstrap = f"127.0.0.1:{proxy.port}"
    create_topics(bootstrap, [topic])
    # polls timed to the scrapes, at least 1 s apart (in process the least would be 15 s)
    cfg = cluster_config(bootstrap, [topic], poll_timeout_seconds=20, poll_idle_interval_seconds=600,
                         poll_schedule="scrapes", poll_interval_seconds=1)
    exp = exporter_factory({**cfg, "http": {"worker_processes": workers}})
    wait_for(lambda: exp.get("/readyz")[0] == 200, 30, what="the first poll")
    period = 2.0
    # a scraper whose timeout is 8 s: a scrape may wait 2 s for a late poll
    prometheus = {"User-Agent": "Prometheus/late-poll-test", "X-Prometheus-Scrape-Timeout-Seconds": "8"}
    t0, sent = time.monotonic(), itertools.count()

    def scrape(slot: int | None = None) -> Metrics:
        slot = next(sent) if slot is None else slot
        time.sleep(max(0.0, t0 + slot * period - time.monotonic()))   # the cadence itself
        status, body = exp.get("/metrics", headers=prometheus, timeout=30)
        assert status == 200, body[:300]
        return Metrics(parse_metrics(body))

    ages: list[float] = []

    def fresh() -> bool:   # the cadence learnt: each poll served just before its scrape
        ages.append(scrape().get_value("txnwatch_data_age_seconds", source="poller"))
        return len(ages) >= 2 and all(a < period / 2 for a in ages[-2:])

    try:
        wait_for(fresh, 90, interval=0, what="scrapes with fresh data")
    except TimeoutError:
        pytest.fail(f"no two fresh scrapes in a row: data age at each: {ages}")
    before = scrape()
    waited = before.get_value("txnwatch_scrape_waits_total", outcome="served")
    proxy.stall()        # the poll timed for the next scrape starts and is held
    wait_for(lambda: proxy.held > 0, 10, what="the poll timed for the next scrape to be held")
    # a request that sends no timeout (a person's curl) is served the data it has, at once
    status, body = exp.get("/metrics", headers={"User-Agent": "curl/8"}, timeout=30)
    m = Metrics(parse_metrics(body))
    assert status == 200 and m.get_value("txnwatch_scrape_waits_total", outcome="served") == waited
    got: list[Metrics] = []
    slot = next(sent)
    late = threading.Thread(target=lambda: got.append(scrape(slot)))
    late.start()
    # the fault lasts until 0.3 s after that scrape is sent: the broker answers while it waits
    time.sleep(max(0.0, t0 + slot * period + 0.3 - time.monotonic()))
    proxy.resume()
    late.join(30)
    [m] = got
    assert m.get_value("txnwatch_scrape_waits_total", outcome="served") == waited + 1
    assert m.get_value("txnwatch_scrape_waits_total", outcome="timed_out") == \
        before.get_value("txnwatch_scrape_waits_total", outcome="timed_out")
    # the held poll's data, not the poll before's
    assert m.get_value("txnwatch_polls_total", source="poller") > before.get_value("txnwatch_polls_total",
                                                                                   source="poller")
    assert m.get_value("txnwatch_data_age_seconds", source="poller") < period / 2


def test_exporter_sigkill_restart_rebuilds_state_and_readiness(broker, producers, unique, tmp_path):
    """Fault: the exporter is SIGKILLed. Expected: restarted, it is not ready until its first poll,
    then ready; the LSO stall clock survives the restart (it comes from the record at the LSO)."""
    topic = unique("killed-exporter")
    create_topics(broker.bootstrap, [topic])
    p = producers(broker.bootstrap, topic, unique("tx"), action="commit", count=1, then_hang=True)
    p.wait_line("open")
    p.kill()
    port = free_port()
    cfg = cluster_config(broker.bootstrap, [topic], poll_interval_seconds=3)
    exp = ExporterProcess(cfg, port=port, log_path=tmp_path / "e1.log").start()
    try:
        m = exp.wait_metric(lambda m: (m.get_value("kafka_partition_lso_stalled_seconds", topic=topic) or 0) > 0,
                            what="a stalled partition")
        before = m.get_value("kafka_partition_lso_stalled_seconds", topic=topic)
        exp.kill()  # SIGKILL
        exp2 = ExporterProcess(cfg, port=port, log_path=tmp_path / "e2.log")
        exp2.start()
        seen_not_ready = exp2.get("/readyz")[0] == 503
        wait_for(lambda: exp2.get("/readyz")[0] == 200, 30, what="ready after restart")
        after = exp2.wait_metric(lambda m: m.get_value("kafka_partition_lso_stalled_seconds", topic=topic), 30,
                                 what="the stalled partition after the restart").get_value(
            "kafka_partition_lso_stalled_seconds", topic=topic)
        assert after >= before, (before, after)
        assert seen_not_ready or exp2.metrics().get_value("txnwatch_up", source="poller") == 1
    finally:
        exp.kill()
        exp2.stop()


def test_bearer_token_for_metrics(broker, exporter_factory):
    cfg = cluster_config(broker.bootstrap)
    cfg["http"] = {"auth": {"bearer_token": "tok-123456"}}
    exp = exporter_factory(cfg)
    assert exp.get("/metrics")[0] == 401
    assert exp.get("/metrics", {"Authorization": "Bearer nope"})[0] == 401
    assert exp.get("/metrics", {"Authorization": "Bearer tok-123456"})[0] == 200
    assert exp.get("/healthz")[0] == 200


def test_ingest_needs_a_token_beyond_loopback(broker, tmp_path):
    """Access: listening beyond loopback without a token, the ingest endpoint refuses events;
    with a token it demands it."""
    event = b'{"type": "started", "query_id": "q", "query": "n", "timestamp": "2026-11-22T00:00:00Z"}'
    port = free_port()
    for token, expect_no_auth in ((None, 403), ("ingest-tok", 401)):
        cfg = cluster_config(broker.bootstrap)
        exp = ExporterProcess(cfg, port=port, log_path=tmp_path / f"ingest-{token}.log")
        # bind beyond loopback: patch the config file written by ExporterProcess
        data = yaml.safe_load(exp.config_path.read_text())
        data["http"]["host"] = "0.0.0.0"
        if token:
            data["http"]["ingest_token"] = token
        exp.config_path.write_text(yaml.safe_dump(data))
        exp.start()
        try:
            req = urllib.request.Request(exp.url + "/api/v1/spark/events", data=event,
                                         headers={"Content-Type": "application/json"})
            try:
                urllib.request.urlopen(req, timeout=5)
                status = 200
            except urllib.error.HTTPError as e:
                status = e.code
            assert status == expect_no_auth
            if token:
                req.add_header("Authorization", f"Bearer {token}")
                with urllib.request.urlopen(req, timeout=5) as r:
                    assert r.status in (200, 202)
        finally:
            exp.stop()


def test_broker_restarts_during_the_tap_never_double_count(own_broker, tmp_path, unique):
    """Fault: the broker dies (SIGKILL) and comes back three times while the tap follows the
    real __transaction_state. Expected: the exporter keeps serving, reports the outage,
    recovers by itself, and its counters never go backwards nor count again records already
    applied: after each restart exactly the new transactions are counted."""
    from txnwatch.producer import TransactionalProducer

    b = own_broker()
    topic = unique("payments")
    create_topics(b.bootstrap, [topic])

    def run(tid: str, outcome: str) -> None:
        p = TransactionalProducer({"bootstrap.servers": b.bootstrap, "transactional.id": tid,
                                   "transaction.timeout.ms": 10000, "log_level": 3})
        p.init_transactions(60)
        p.begin()
        p.produce(topic, value=tid.encode())
        p.flush(30)   # the partition is in the transaction: an abort reaches the coordinator (else it is local)
        p.commit(30) if outcome == "commit" else p.abort(30)
        p.close()

    for i, kind in enumerate(["commit", "commit", "abort"]):   # written before the exporter starts
        run(f"billing-{i}", kind)
    exp = ExporterProcess(cluster_config(b.bootstrap, [topic], transaction_log_tap=True, poll_interval_seconds=0.5,
                                         poll_timeout_seconds=2), log_path=tmp_path / "exporter.log").start()
    try:
        exp.wait_metric(tap_caught_up, 60, what="the poller and the tap up, the tap rebuilt")

        def counts(m):
            return tuple(sum(v for _labels, v in m.select("kafka_transactions_total", outcome=outcome))
                         for outcome in ("committed", "aborted"))

        assert counts(exp.metrics()) == (0, 0)    # the log as of start is state, not news
        for i, kind in enumerate(["commit", "commit", "abort"]):
            run(f"billing-{i}", kind)
        exp.wait_metric(lambda m: counts(m) == (2, 1), timeout=60, what="2 commits and 1 abort counted")
        expected = (2, 1)
        for round_ in range(3):
            b.kill()
            m = exp.wait_metric(lambda m: m.get_value("txnwatch_up", source="poller") == 0, timeout=60,
                                what=f"the outage to show (round {round_ + 1})")
            assert counts(m) == expected                     # nothing lost while down
            assert exp.get("/metrics")[0] == 200
            b.start()
            exp.wait_metric(lambda m: m.get_value("txnwatch_up", source="poller") == 1
                            and m.get_value("txnwatch_up", source="tap") == 1
                            and m.get_value("txnwatch_tap_lag_records") == 0, timeout=90,
                            what=f"recovery after restart {round_ + 1}")
            assert counts(exp.metrics()) == expected         # the log read again is not counted again
            run(f"billing-new-{round_}", "commit")
            expected = (expected[0] + 1, expected[1])
            m = exp.wait_metric(lambda m, e=expected: counts(m)[0] >= e[0], timeout=60,
                                what="the new commit to be counted")
            assert counts(m) == expected, (counts(m), expected)  # exactly once
        assert "Traceback" not in exp.log()
    finally:
        exp.stop()
