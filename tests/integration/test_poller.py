"""The admin poller, KIP-664 and `txnwatch check` against the real Apache Kafka broker.

What each test pins is Kafka's own semantics: the LSO is the first offset of the oldest
open transaction, commit and abort markers take an offset each, the coordinator aborts a
transaction at its timeout, and a hanging transaction (KAFKA-9144) holds the LSO until
someone aborts it by hand."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest
from confluent_kafka import Consumer, TopicPartition

from tests import compat
from tests.integration.helpers import cluster_config
from txnwatch_dev.kafka import kafka_tool
from txnwatch_dev.net import wait_for
from txnwatch_dev.transactions.hanging import make_hanging_transaction
from txnwatch_dev.transactions.workload import commit_group_offset, create_topics

pytestmark = [pytest.mark.integration]


def check(bootstrap: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "txnwatch.cli", "check", "--bootstrap-servers", bootstrap, *args],
                          capture_output=True, text=True, timeout=90)


def table(text: str) -> list[dict[str, str]]:
    """Rows of a kafka-transactions.sh table (tab-separated, padded, header first)."""
    lines = [ln for ln in text.splitlines() if ln.strip()]
    if not lines:
        return []
    head = [c.strip() for c in lines[0].split("\t") if c.strip()]
    return [dict(zip(head, [c.strip() for c in ln.split("\t")], strict=False)) for ln in lines[1:]]


def read_committed_position(bootstrap: str, topic: str, partition: int, start: int) -> tuple[int, int]:
    """(records read, position reached) by a read_committed consumer from `start`, once it
    stops advancing: how far such a consumer really gets."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "txnwatch-test-probe", "enable.auto.commit": False,
                  "isolation.level": "read_committed", "enable.partition.eof": True})
    c.assign([TopicPartition(topic, partition, start)])
    read = 0
    try:
        def at_eof() -> bool:
            nonlocal read
            for m in c.consume(100, 0.5):
                if m.error() is None:
                    read += 1
                elif m.error().code() == m.error()._PARTITION_EOF:
                    return True
            return False
        wait_for(at_eof, 30, interval=0, what=f"a read_committed consumer to reach the end of {topic}-{partition}")
        return read, c.position([TopicPartition(topic, partition)])[0].offset
    finally:
        c.close()


def test_committed_and_aborted_transactions_leave_lso_at_hwm(broker, producers, unique, exporter_factory):
    topic = unique("done")
    create_topics(broker.bootstrap, [topic], partitions=1)
    producers(broker.bootstrap, topic, unique("tx-commit"), action="commit", count=3, records=2).wait()
    producers(broker.bootstrap, topic, unique("tx-abort"), action="abort", count=2, records=2).wait()
    exp = exporter_factory(cluster_config(broker.bootstrap, [topic], granularity="partition"))
    m = exp.wait_metric(lambda m: (m.get_value("kafka_partition_high_watermark", topic=topic) or 0) > 0,
                        what="HWM of the topic")
    # 5 transactions of 2 records, each ended by a marker that takes an offset of its own
    assert m.get_value("kafka_partition_high_watermark", topic=topic, partition=0) == 15
    assert m.get_value("kafka_partition_last_stable_offset", topic=topic, partition=0) == 15
    assert m.get_value("kafka_partition_lso_lag_offsets", topic=topic, partition=0) == 0
    assert m.get_value("kafka_partition_lso_stalled_seconds", topic=topic, partition=0) == 0
    assert m.get_value("kafka_transaction_hanging", topic=topic, partition=0) == 0
    # read_committed hides the aborted records: 6 of the 10 are readable, and the position ends at the HWM
    assert read_committed_position(broker.bootstrap, topic, 0, 0) == (6, 15)


def test_open_transaction_with_headroom_lso_and_read_committed_lag(broker, producers, unique, exporter_factory):
    """An open transaction seen three ways that must agree: txnwatch's series and `check`,
    kafka-transactions.sh, and what a read_committed consumer can actually read."""
    topic, group, tid = unique("open"), unique("reader"), unique("billing-writer")
    create_topics(broker.bootstrap, [topic], partitions=2)
    # Two committed transactions of 3 records (offsets 0-7 with their markers), then one left open.
    p = producers(broker.bootstrap, topic, tid, action="commit", count=2, records=3, partition=1, then_hang=True,
                  timeout_ms=120_000)
    p.wait_line("open")
    commit_group_offset(broker.bootstrap, group, topic, 1, 0)
    exp = exporter_factory(cluster_config(broker.bootstrap, [topic], granularity="partition"))
    first = exp.wait_metric(lambda m: m.get_value("kafka_transaction_timeout_headroom_seconds",
                                                  transactional_id=tid) is not None
                            and m.get_value("kafka_consumergroup_read_committed_lag_offsets", group=group, topic=topic,
                                            partition=1) is not None,
                            what="the open transaction and the group's lag")
    for api in ("list_transactions", "describe_transactions", "describe_producers"):
        assert first.get_value("txnwatch_capability", api=api) == 1
    # Kafka's LSO is the first offset of the oldest open transaction
    assert first.get_value("kafka_partition_high_watermark", topic=topic, partition=1) == 11
    assert first.get_value("kafka_partition_last_stable_offset", topic=topic, partition=1) == 8
    assert first.get_value("kafka_partition_lso_lag_offsets", topic=topic, partition=1) == 3
    assert first.get_value("kafka_partition_lso_lag_offsets", topic=topic, partition=0) == 0
    # The group's lag against the LSO is what a read_committed consumer can read; against the HWM it is not.
    rc = first.get_value("kafka_consumergroup_read_committed_lag_offsets", group=group, topic=topic, partition=1)
    ru = first.get_value("kafka_consumergroup_read_uncommitted_lag_offsets", group=group, topic=topic, partition=1)
    assert (rc, ru) == (8, 11)
    read, position = read_committed_position(broker.bootstrap, topic, 1, 0)
    assert (read, position) == (6, 8) and position - 0 == rc
    # Headroom shrinks between polls, the LSO's stall clock grows, and nothing is "hanging":
    # the coordinator knows this transaction.
    h0 = first.get_value("kafka_transaction_timeout_headroom_seconds", transactional_id=tid)
    s0 = first.get_value("kafka_partition_lso_stalled_seconds", topic=topic, partition=1)
    assert 0 < h0 <= 120
    later = exp.wait_metric(lambda m: (m.get_value("kafka_transaction_timeout_headroom_seconds",
                                                   transactional_id=tid) or h0) < h0 - 1
                            and m.get_value("kafka_partition_lso_stalled_seconds", topic=topic, partition=1) > s0 + 1,
                            what="headroom to shrink and the stall to grow")
    assert later.get_value("kafka_transaction_hanging", topic=topic, partition=1) == 0
    assert (later.get_value("kafka_transaction_oldest_open_age_seconds", app="billing-writer") or 0) > 1

    # txnwatch check and kafka-transactions.sh describe/list agree on the transaction.
    out = check(broker.bootstrap, "--json")
    report = json.loads(out.stdout)["clusters"][0]
    mine = [t for t in report["open_transactions"] if t["transactional_id"] == tid]
    assert len(mine) == 1 and mine[0]["state"] == "Ongoing" and mine[0]["timeout_ms"] == 120_000
    stalled = {(s["topic"], s["partition"]): s for s in report["stalled_partitions"]}
    assert stalled[(topic, 1)]["lso"] == 8 and stalled[(topic, 1)]["hwm"] == 11
    assert [g["group"] for g in stalled[(topic, 1)]["groups_behind"]] == [group]
    logs = exp.log_path.parent / "tools"
    desc = table(kafka_tool("kafka-transactions", "--bootstrap-server", broker.bootstrap, "describe",
                            "--transactional-id", tid, log_dir=logs).stdout)
    assert len(desc) == 1
    assert desc[0]["TransactionState"] == "Ongoing" and desc[0]["TransactionTimeoutMs"] == "120000"
    assert f"{topic}-1" in desc[0]["TopicPartitions"]
    listed = {r["TransactionalId"]: r for r in table(kafka_tool("kafka-transactions", "--bootstrap-server",
                                                                broker.bootstrap, "list", log_dir=logs).stdout)}
    assert listed[tid]["TransactionState"] == "Ongoing"
    assert listed[tid]["ProducerId"] == desc[0]["ProducerId"]
    text = check(broker.bootstrap)
    assert tid in text.stdout and f"{topic}-1" in text.stdout and group in text.stdout


def page_row(page: str, transactional_id: str) -> str:
    """The row of the page's open-transaction table naming `transactional_id` ("" if none)."""
    m = re.search(rf"<tr><td>[^<]*</td><td>[^<]*</td><td>{re.escape(transactional_id)}</td>.*?</tr>", page)
    return m.group(0) if m else ""


def test_a_producer_still_appending_is_alive_and_one_gone_quiet_shows_no_sign_of_life(
        broker, producers, unique, exporter_factory):
    """Two transactions left open: one whose producer keeps appending to the partition already in
    it (no coordinator state changes, so only the partition leader's last append says it lives),
    one whose producer wrote its record and went quiet. Once both have gone longer than
    ALIVE_WITHIN_SECONDS without a coordinator change, the page and `txnwatch check` call the
    first alive, slow and the second without a sign of life: from the poller alone, and with
    the tap beside it (the tap's coordinator clock, the poller's appends)."""
    from confluent_kafka import Producer

    from txnwatch.metrics import ALIVE_WITHIN_SECONDS

    topic, streaming_id, quiet_id = unique("sign-of-life"), unique("streaming-writer"), unique("quiet-writer")
    create_topics(broker.bootstrap, [topic], partitions=2)
    quiet = producers(broker.bootstrap, topic, quiet_id, action="hang", partition=1, timeout_ms=600_000)
    quiet.wait_line("open")
    streaming = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": streaming_id,
                          "transaction.timeout.ms": 600_000, "linger.ms": 0})
    streaming.init_transactions(30)
    streaming.begin_transaction()

    def append() -> None:
        streaming.produce(topic, value=b"still writing", partition=0)
        assert streaming.flush(10) == 0

    append()
    poller_only = exporter_factory(cluster_config(broker.bootstrap, [topic], granularity="partition"))
    with_tap = exporter_factory(cluster_config(broker.bootstrap, [topic], granularity="partition", transaction_log_tap=True))
    shown: dict = {}

    def both_worded() -> bool:
        append()      # the producer keeps streaming into the same open transaction
        for name, exp in (("poller", poller_only), ("tap", with_tap)):
            m, (_, page) = exp.metrics(), exp.get("/")
            shown[name] = (m, page_row(page, streaming_id), page_row(page, quiet_id))
        return all("alive, slow (last sign of life" in alive and "no sign of life for" in quiet_row
                   and (m.get_value("kafka_transaction_state_unchanged_seconds", transactional_id=streaming_id)
                        or 0) > ALIVE_WITHIN_SECONDS
                   for m, alive, quiet_row in shown.values())

    try:
        wait_for(both_worded, ALIVE_WITHIN_SECONDS + 120, interval=0.5,
                 what="the page to call the streaming producer alive and the quiet one without a sign of life")
    except TimeoutError as exc:
        raise TimeoutError(f"{exc}; rows shown: {[(n, a, q) for n, (_, a, q) in shown.items()]}") from None
    for name, (m, _, _) in shown.items():
        def gauge(metric: str, tid: str, m=m) -> float | None:
            return m.get_value(metric, transactional_id=tid)
        # the coordinator's clock alone would call both dead; the appends tell them apart
        assert gauge("kafka_transaction_state_unchanged_seconds", quiet_id) > ALIVE_WITHIN_SECONDS, name
        assert gauge("kafka_transaction_last_append_age_seconds", streaming_id) <= ALIVE_WITHIN_SECONDS, name
        assert gauge("kafka_transaction_last_append_age_seconds", quiet_id) > ALIVE_WITHIN_SECONDS, name
    out = check(broker.bootstrap, "--json")
    words = {t["transactional_id"]: t["producer"] for t in json.loads(out.stdout)["clusters"][0]["open_transactions"]}
    assert words[streaming_id].startswith("alive, slow (last sign of life"), words
    assert words[quiet_id].startswith("no sign of life for"), words
    streaming.abort_transaction(30)


def test_coordinator_timeout_and_fence_show_as_epoch_bumps(broker, producers, unique, exporter_factory):
    """A killed producer's transaction is aborted by the coordinator at its timeout (the LSO
    moves on: not hanging), and a second instance fences the first: both bump the epoch."""
    topic = unique("ended")
    timed_out, fenced = unique("timed-out-writer"), unique("fenced-writer")
    create_topics(broker.bootstrap, [topic], partitions=2)
    exp = exporter_factory(cluster_config(broker.bootstrap, [topic], granularity="partition"))
    exp.wait_metric(lambda m: m.get_value("txnwatch_up", source="poller") == 1, what="first poll")
    p = producers(broker.bootstrap, topic, timed_out, action="hang", partition=0, timeout_ms=3000)
    p.wait_line("open")
    p.kill()
    exp.wait_metric(lambda m: m.get_value("kafka_transaction_timeout_headroom_seconds",
                                          transactional_id=timed_out) is not None, what="the open transaction")
    # The coordinator bumps the epoch at PrepareAbort and writes the abort markers after it: a
    # poll can see the bump while the LSO still waits for the marker, so both are waited for.
    m = exp.wait_metric(lambda m: m.get_value("kafka_transaction_epoch_bumps_total", app="timed-out-writer") == 1
                        and m.get_value("kafka_partition_lso_lag_offsets", topic=topic, partition=0) == 0,
                        timeout=60, what="the coordinator's timeout abort (an epoch bump) and the LSO caught up")
    assert m.get_value("kafka_transaction_timeout_headroom_seconds", transactional_id=timed_out) is None
    assert m.get_value("kafka_transaction_hanging", topic=topic, partition=0) == 0

    zombie = producers(broker.bootstrap, topic, fenced, action="hang", partition=1)
    zombie.wait_line("open")
    exp.wait_metric(lambda m: m.get_value("kafka_transaction_timeout_headroom_seconds",
                                          transactional_id=fenced) is not None, what="the zombie's transaction")
    producers(broker.bootstrap, topic, fenced, action="commit", count=1, partition=1).wait()
    m = exp.wait_metric(lambda m: (m.get_value("kafka_transaction_epoch_bumps_total", app="fenced-writer") or 0) >= 1
                        and m.get_value("kafka_partition_lso_lag_offsets", topic=topic, partition=1) == 0,
                        what="the fence (an epoch bump) and the LSO caught up")


def test_hanging_transaction_found_like_find_hanging_and_cleared_by_the_runbook_command(own_broker, unique,
                                                                                       exporter_factory):
    """KAFKA-9144 on a real broker: an open transaction the coordinator never heard of. txnwatch
    and kafka-transactions.sh find-hanging both report it once it is older than the broker's
    transaction.max.timeout.ms; the abort command txnwatch prints ends it."""
    b = own_broker(properties={"transaction.max.timeout.ms": 5000})
    topic, group = unique("hung"), unique("outbox-reader")
    create_topics(b.bootstrap, [topic], partitions=2)
    made = make_hanging_transaction(b.bootstrap, topic, 1)
    commit_group_offset(b.bootstrap, group, topic, 1, made.offset)
    exp = exporter_factory(cluster_config(b.bootstrap, [topic], granularity="partition"))
    m = exp.wait_metric(lambda m: m.get_value("kafka_transaction_hanging", topic=topic, partition=1) == 1,
                        what="txnwatch to find the hanging transaction")
    assert m.get_value("kafka_transaction_hanging", topic=topic, partition=0) == 0
    assert m.get_value("kafka_partition_last_stable_offset", topic=topic, partition=1) == made.offset
    status, page = exp.get("/")
    assert status == 200 and f"{topic}-1" in page

    out = check(b.bootstrap, "--json")
    assert out.returncode == 2, out.stdout
    cluster = json.loads(out.stdout)["clusters"][0]
    [h] = [h for h in cluster["hanging"] if h["topic"] == topic]
    assert (h["partition"], h["start_offset"], h["producer_id"]) == (1, made.offset, made.producer_id)
    assert h["transactional_id"] == made.transactional_id
    found = table(kafka_tool("kafka-transactions", "--bootstrap-server", b.bootstrap, "find-hanging",
                             "--broker-id", "1", "--max-transaction-timeout", "0",
                             log_dir=exp.log_path.parent / "tools").stdout)
    assert [(r["Topic"], r["Partition"], r["ProducerId"], r["StartOffset"]) for r in found] == \
        [(topic, "1", str(made.producer_id), str(made.offset))]

    # The finding carries the command that ends it: a dry run, then the same with --yes.
    finding = [f["message"] for f in cluster["findings"] if f["kind"] == "hanging"][0]
    cmd = re.search(r"txnwatch (abort .*)$", finding).group(1).split()
    dry = subprocess.run([sys.executable, "-m", "txnwatch.cli", *cmd], capture_output=True, text=True, timeout=90)
    assert dry.returncode == 0 and "DRY RUN" in dry.stdout, (dry.stdout, dry.stderr)
    assert exp.metrics().get_value("kafka_transaction_hanging", topic=topic, partition=1) == 1
    done = subprocess.run([sys.executable, "-m", "txnwatch.cli", *cmd, "--yes", "--audit-log",
                           str(exp.log_path.parent / "audit.jsonl")], capture_output=True, text=True, timeout=90)
    assert done.returncode == 0 and "aborted" in done.stdout, (done.stdout, done.stderr)
    m = exp.wait_metric(lambda m: m.get_value("kafka_transaction_hanging", topic=topic, partition=1) == 0
                        and m.get_value("kafka_partition_lso_lag_offsets", topic=topic, partition=1) == 0,
                        what="the abort to clear the hanging transaction")
    assert check(b.bootstrap).returncode == 0
    # seen from the exporter: ended by markers written straight to the partition, and said so
    m = exp.wait_metric(lambda m: m.get_value("kafka_transaction_hanging_ended_total", how="markers") == 1,
                        what="the end counted as an operator's abort")
    assert [lbl["how"] for lbl, _ in m.select("kafka_transaction_hanging_ended_total")] == ["markers"]
    page = exp.get("/")[1]
    assert "Hanging transactions that ended" in page and "an operator&#x27;s abort" in page


def test_check_exits_2_when_cluster_unreachable():
    from txnwatch_dev.net import free_port

    out = subprocess.run([sys.executable, "-m", "txnwatch.cli", "check", "--bootstrap-servers",
                          f"127.0.0.1:{free_port()}", "--poll-timeout", "2"], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 2
    assert "cannot reach" in out.stdout


def test_broker_down_at_start_then_dies_mid_run_is_survived(own_broker, unique, exporter_factory):
    b = own_broker(start=False)
    # Down at start: serving, up=0, errors counted, and ready once that first poll has failed
    # (a rollout completes during a Kafka outage; Kafka's health is txnwatch_up's to say).
    exp = exporter_factory(cluster_config(b.bootstrap, poll_timeout_seconds=1))
    m = exp.wait_metric(lambda m: m.get_value("txnwatch_poll_errors_total", source="poller") or 0,
                        what="poll errors while the broker is down")
    assert m.get_value("txnwatch_up", source="poller") == 0
    status, body = exp.get("/readyz")
    assert status == 200, body
    b.start()
    topic = unique("survive")
    create_topics(b.bootstrap, [topic])
    exp.wait_metric(lambda m: m.get_value("txnwatch_up", source="poller") == 1, what="recovery")
    wait_for(lambda: exp.get("/readyz")[0] == 200, 30, what="ready")
    for round_ in range(2):  # dies mid-run, twice
        b.kill()
        before = exp.metrics().get_value("txnwatch_poll_errors_total", source="poller") or 0
        exp.wait_metric(lambda m: m.get_value("txnwatch_up", source="poller") == 0,
                        what=f"up=0 after kill #{round_ + 1}")
        assert exp.get("/readyz")[0] == 200    # still serving what it knows
        assert exp.get("/healthz")[0] == 200
        status, page = exp.get("/")
        assert status == 200 and "down" in page and "stale since" in page
        exp.wait_metric(lambda m, before=before: (m.get_value("txnwatch_poll_errors_total",
                                                              source="poller") or 0) > before,
                        what="errors to be counted")
        b.start()   # Kafka keeps its data: the topic is back with the broker
        exp.wait_metric(lambda m: m.get_value("txnwatch_up", source="poller") == 1
                        and m.get_value("kafka_partition_high_watermark", topic=topic) is not None,
                        timeout=60, what=f"recovery after restart #{round_ + 1}")
        wait_for(lambda: exp.get("/readyz")[0] == 200, 30, what="ready again")
    assert exp.proc.poll() is None
    assert "Traceback" not in exp.log()


# ------------------------------------------------------------------ the transaction log's minimum ISR, per line
@pytest.mark.parametrize("line", ["4.x", "3.9"])
def test_a_single_node_with_min_isr_2(line, own_broker, unique, request):
    """One node, transaction.state.log.min.isr=2 (so __transaction_state has RF 1 and
    min.insync.replicas 2): the leader's append check caps the minimum at the replica count
    (Kafka's Partition.effectiveMinIsr), so each partition needs 1 in sync, producers commit
    on both lines, and txnwatch finds nothing, whatever the broker count says."""
    from txnwatch.config import load_config
    from txnwatch.exporter.poll.poller import ClusterPoller
    from txnwatch.producer import TransactionalProducer
    from txnwatch_dev.kafka import kafka_release

    b = own_broker(release=None if line == "4.x" else kafka_release("3.9"),
                   properties={"transaction.state.log.min.isr": 2})
    p = TransactionalProducer({"bootstrap.servers": b.bootstrap, "transactional.id": unique("min-isr"),
                               "log_level": 3})
    topic = unique("t")
    create_topics(b.bootstrap, [topic])
    p.init_transactions(60)        # creates __transaction_state
    with p.transaction():
        p.produce(topic, value=b"x")
    p.close()
    cfg = load_config({"bootstrap_servers": b.bootstrap, "cluster_name": "test"}, env={}).clusters[0]
    poller = ClusterPoller(cfg)
    try:
        snap = wait_for(lambda: (s := poller.poll_once()).txn_log and s.facts.transaction_state_min_insync_replicas
                        and s, 60, what="__transaction_state and its min.insync.replicas")
    finally:
        poller.stop()
    assert snap.facts.brokers == 1 and snap.facts.transaction_state_min_insync_replicas == 2
    assert all(len(part.replicas) == 1 and len(part.isr) == 1 for part in snap.txn_log)
    assert not [f for f in snap.findings if f.kind == "min_isr"], snap.findings
    compat.record(request.config, "features", line, "Single node, transaction.state.log.min.isr=2",
                  "commits, no finding")
