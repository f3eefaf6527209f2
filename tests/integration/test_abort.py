"""`txnwatch abort` against real Apache Kafka (4.x and 3.9): a dry run that changes nothing, an
abort that unblocks a read_committed group, a re-run that never aborts twice, a live
transaction refused, and targets that name nothing."""

from __future__ import annotations

import json
import subprocess
import sys
import threading

import pytest
from confluent_kafka import Consumer, TopicPartition

from tests import compat
from txnwatch_dev.net import wait_for
from txnwatch_dev.transactions.hanging import make_hanging_transaction
from txnwatch_dev.transactions.workload import commit_group_offset, create_topics

pytestmark = pytest.mark.integration


def abort(bootstrap: str, *args: str, audit=None) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "txnwatch.cli", "abort", "--bootstrap-servers", bootstrap, "--poll-timeout", "5",
           *args]
    if audit is not None:
        cmd += ["--audit-log", str(audit)]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120)


def as_json(out: subprocess.CompletedProcess) -> dict:
    assert out.stdout.startswith("{"), (out.returncode, out.stdout, out.stderr)
    return json.loads(out.stdout)


def lso(bootstrap: str, topic: str, partition: int) -> int:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "txnwatch-test-lso", "isolation.level": "read_committed"})
    try:
        return c.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)[1]
    finally:
        c.close()


class CommittingReader:
    """A read_committed consumer of one partition that commits offset + 1 of each record it
    reads, the way an outbox relay does: blocked behind an open transaction, it stands still."""

    def __init__(self, bootstrap: str, group: str, topic: str, partition: int) -> None:
        self.c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False,
                           "isolation.level": "read_committed", "auto.offset.reset": "earliest"})
        self.c.assign([TopicPartition(topic, partition)])
        self.read = 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self) -> None:
        while not self.stop.is_set():
            m = self.c.poll(0.2)
            if m is not None and m.error() is None:
                self.read += 1
                self.c.commit(offsets=[TopicPartition(m.topic(), m.partition(), m.offset() + 1)], asynchronous=False)

    def close(self) -> None:
        self.stop.set()
        self.thread.join(10)
        self.c.close()


@pytest.mark.parametrize("line", ["4.x", "3.9"])
def test_a_hanging_transaction_dry_run_then_abort_then_rerun(line, own_broker, unique, producers, tmp_path, request):
    from txnwatch_dev.kafka import kafka_release

    b = own_broker(release=None if line == "4.x" else kafka_release("3.9"),
                   properties={"transaction.max.timeout.ms": 5000})
    topic, group = unique("outbox"), unique("relay")
    create_topics(b.bootstrap, [topic], partitions=2)
    # (not an id of the form <prefix>-<n>-<n>: that would be a Flink sink's, refused without a flag)
    made = make_hanging_transaction(b.bootstrap, topic, 1, transactional_id=unique("outbox") + ".writer")
    # committed records above the hanging one: the relay cannot read them until it ends
    producers(b.bootstrap, topic, unique("writer"), action="commit", count=3, partition=1, timeout_ms=5000).wait()
    commit_group_offset(b.bootstrap, group, topic, 1, made.offset)
    audit = tmp_path / "audit.jsonl"

    # the dry run: found once its last write is older than transaction.max.timeout.ms; nothing changes
    def found():
        out = abort(b.bootstrap, "--hanging", "--output", "json", audit=audit)
        return out.returncode == 0 and as_json(out)["transactions"] and as_json(out)
    plan = wait_for(found, 60, interval=1, what="the dry run to find the hanging transaction")
    assert plan["dry_run"] is True
    [t] = plan["transactions"]
    assert (t["producer_id"], t["transactional_id"], t["verdict"]) == (made.producer_id, made.transactional_id,
                                                                        "abort")
    assert t["hanging_reason"] in ("partition_not_in_transaction", "coordinator_not_open", "no_coordinator_state")
    [p] = t["partitions"]
    assert (p["topic"], p["partition"], p["start_offset"], p["last_stable_offset"], p["holds_lso"]) == \
        (topic, 1, made.offset, made.offset, True)
    assert p["high_watermark"] > made.offset
    [g] = p["read_committed_groups"]
    assert (g["group"], g["committed"], g["lag_lso"], g["lag_hwm"]) == \
        (group, made.offset, 0, p["high_watermark"] - made.offset)
    assert "holds no open transaction" in t["liveness"] and t["producer_next"].startswith("nothing")
    assert "--hanging" in plan["next"] and plan["next"].endswith("--yes")
    text = abort(b.bootstrap, "--hanging", audit=audit)
    assert text.returncode == 0 and "DRY RUN" in text.stdout and f"{topic}-1" in text.stdout, text.stdout
    assert lso(b.bootstrap, topic, 1) == made.offset
    assert not audit.exists()          # a dry run is not an action

    reader = CommittingReader(b.bootstrap, group, topic, 1)
    try:
        out = abort(b.bootstrap, "--hanging", "--yes", "--output", "json", "--wait-seconds", "60", audit=audit)
        assert out.returncode == 0, (out.stdout, out.stderr)
        [res] = as_json(out)["transactions"][0]["results"]
        assert res["outcome"] == "aborted" and res["lso_after"] > made.offset
        assert res["groups_moving"] == [group] and res["groups_still"] == []
        assert reader.read == 3            # the committed records above it, and not the aborted one
    finally:
        reader.close()
    lines = [json.loads(x) for x in audit.read_text().splitlines()]
    assert [(x["phase"], x.get("outcome")) for x in lines] == [("intent", None), ("outcome", "aborted"), ("after", None)]
    assert {x["run"] for x in lines} == {lines[0]["run"]}
    assert lines[0]["who"]["kafka_principal"] == "ANONYMOUS" and lines[0]["who"]["os_user"]
    assert lines[0]["target"] == {"transactional_id": made.transactional_id, "app": t["app"],
                                  "producer_id": made.producer_id, "producer_epoch": made.producer_epoch,
                                  "topic": topic, "partition": 1, "start_offset": made.offset}
    assert lines[2]["after"]["lso_moved"] is True and lines[2]["after"]["groups_moving"] == [group]
    assert "audit: " in out.stderr     # the trail goes to stderr too

    again = abort(b.bootstrap, "--hanging", "--yes", "--output", "json", audit=audit)
    assert again.returncode == 0 and as_json(again)["transactions"] == []
    assert len(audit.read_text().splitlines()) == 3      # nothing aborted twice
    compat.record(request.config, "features", line, "txnwatch abort of a hanging transaction",
                  "dry run, abort, group moves")


@pytest.mark.parametrize("line", ["4.x", "3.9"])
def test_a_live_transaction_is_refused_unless_forced(line, own_broker, unique, producers, tmp_path, request):
    from txnwatch_dev.kafka import kafka_release

    b = own_broker(release=None if line == "4.x" else kafka_release("3.9"))
    topic, tid = unique("live"), unique("live") + ".writer"
    create_topics(b.bootstrap, [topic])
    p = producers(b.bootstrap, topic, tid, action="hang", timeout_ms=120_000)
    p.wait_line("open")
    start = lso(b.bootstrap, topic, 0)
    audit = tmp_path / "audit.jsonl"

    out = abort(b.bootstrap, "--transactional-id", tid, "--yes", "--output", "json", audit=audit)
    assert out.returncode == 1, (out.stdout, out.stderr)
    [t] = as_json(out)["transactions"]
    assert t["verdict"] == "refused" and [r["kind"] for r in t["refused"]] == ["live"]
    assert t["refused"][0]["accepted_by"] == "--force-live"
    assert t["coordinator"]["state"] == "Ongoing" and "left of its 120s timeout" in t["liveness"]
    assert [r["outcome"] for r in t["results"]] == ["refused"]
    assert lso(b.bootstrap, topic, 0) == start
    [entry] = [json.loads(x) for x in audit.read_text().splitlines()]
    assert (entry["phase"], entry["outcome"]) == ("outcome", "refused")

    text = abort(b.bootstrap, "--transactional-id", tid)
    assert "REFUSED" in text.stdout and "accept with --force-live" in text.stdout, text.stdout

    forced = abort(b.bootstrap, "--transactional-id", tid, "--force-live", "--yes", "--output", "json", audit=audit)
    assert forced.returncode == 0, (forced.stdout, forced.stderr)
    [res] = as_json(forced)["transactions"][0]["results"]
    assert res["outcome"] == "aborted" and res["lso_after"] > start
    compat.record(request.config, "features", line, "txnwatch abort of a live transaction",
                  "refused, aborted with --force-live")


def test_targets_that_name_nothing_exit_2_and_say_so(broker, unique, producers):
    topic = unique("nothing")
    create_topics(broker.bootstrap, [topic], partitions=2)
    producers(broker.bootstrap, topic, unique("nothing") + ".writer").wait()   # __transaction_state exists
    out = abort(broker.bootstrap, "--transactional-id", unique("never-used"))
    assert out.returncode == 2 and "is unknown to its coordinator" in out.stderr, out.stderr
    out = abort(broker.bootstrap, "--partition", f"{topic}:5")
    assert out.returncode == 2 and f"{topic} has partitions 0 to 1" in out.stderr, out.stderr
    out = abort(broker.bootstrap, "--partition", f"{unique('absent')}:0")
    assert out.returncode == 2 and "no topic" in out.stderr, out.stderr
    out = abort(broker.bootstrap, "--app", unique("no-such-app"))
    assert out.returncode == 2 and "no transactional id of app" in out.stderr, out.stderr
    out = abort(broker.bootstrap, "--partition", "orders")
    assert out.returncode == 2 and "expected TOPIC:PARTITION" in out.stderr, out.stderr
    out = abort(broker.bootstrap)
    assert out.returncode == 2 and "one of the arguments --hanging" in out.stderr, out.stderr


WRITE_TXN_MARKERS = 27     # the API key of the request that writes the abort markers


def test_a_broker_gone_mid_abort_or_an_interrupt_loses_nothing_and_a_rerun_finishes(own_broker, unique, tmp_path):
    """Through a proxy the test cuts: the broker goes away at the second partition's abort
    request (a partial result naming both, exit 1), then comes back (a re-run aborts the rest
    only); a run stopped by SIGTERM while its markers are in flight records that it was."""
    from txnwatch_dev.net import free_port
    from txnwatch_dev.proxy import KafkaProxy

    proxy_port = free_port()
    b = own_broker(advertised_port=proxy_port, properties={"transaction.max.timeout.ms": 5000})
    proxy = KafkaProxy("127.0.0.1", b.port, port=proxy_port).start()
    try:
        bs = f"127.0.0.1:{proxy_port}"
        topic = unique("gone")
        create_topics(bs, [topic], partitions=3)
        made = {p: make_hanging_transaction(bs, topic, p, transactional_id=f"{topic}.writer{p}") for p in (0, 1)}
        audit = tmp_path / "audit.jsonl"
        wait_for(lambda: len(as_json(abort(bs, "--hanging", "--output", "json"))["transactions"]) == 2, 60,
                 interval=1, what="both hanging transactions found")

        sent = proxy.requests_by_key.get(WRITE_TXN_MARKERS, 0)
        proxy.cut_at = (WRITE_TXN_MARKERS, sent + 2)
        out = abort(bs, "--hanging", "--yes", "--output", "json", "--wait-seconds", "3", audit=audit)
        assert out.returncode == 1, (out.stdout, out.stderr)
        report = as_json(out)
        outcome = {r["partition"]: r["outcome"] for t in report["transactions"] for r in t["results"]}
        assert sorted(outcome.values()) == ["aborted", "failed"], outcome
        assert "run the same command again" in report["summary"]
        [done] = [p for p, o in outcome.items() if o == "aborted"]
        [left] = [p for p, o in outcome.items() if o == "failed"]

        proxy.cut_at = None
        proxy.reopen()
        again = abort(bs, "--hanging", "--yes", "--output", "json", audit=audit)
        assert again.returncode == 0, (again.stdout, again.stderr)
        [t] = as_json(again)["transactions"]
        assert [(r["partition"], r["outcome"]) for r in t["results"]] == [(left, "aborted")]
        assert lso(bs, topic, done) > made[done].offset and lso(bs, topic, left) > made[left].offset
        outcomes = [(x["target"]["partition"], x["outcome"]) for x in map(json.loads, audit.read_text().splitlines())
                    if x["phase"] == "outcome"]
        assert sorted(outcomes) == sorted([(done, "aborted"), (left, "failed"), (left, "aborted")])

        # an interrupt while the markers are in flight: the intent and an `interrupted` outcome
        third = make_hanging_transaction(bs, topic, 2, transactional_id=f"{topic}.writer2")
        wait_for(lambda: len(as_json(abort(bs, "--hanging", "--output", "json"))["transactions"]) == 1, 60,
                 interval=1, what="the third hanging transaction found")
        proxy.stall_at = (WRITE_TXN_MARKERS, proxy.requests_by_key.get(WRITE_TXN_MARKERS, 0) + 1)
        interrupted = tmp_path / "interrupted.jsonl"
        proc = subprocess.Popen([sys.executable, "-m", "txnwatch.cli", "abort", "--bootstrap-servers", bs,
                                 "--poll-timeout", "30", "--hanging", "--yes", "--audit-log", str(interrupted)],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        wait_for(lambda: interrupted.exists() and '"phase": "intent"' in interrupted.read_text(), 60,
                 what="the intent line before the markers")
        wait_for(lambda: proxy.held > 0, 30, what="the abort request held by the stalled proxy")
        proc.terminate()
        stdout, stderr = proc.communicate(timeout=60)
        assert proc.returncode == 1, (stdout, stderr)
        assert "interrupted" in stdout
        lines = [json.loads(x) for x in interrupted.read_text().splitlines()]
        assert [(x["phase"], x.get("outcome")) for x in lines] == [("intent", None), ("outcome", "interrupted")]
        proxy.stall_at = None
        proxy.resume()      # the held request reaches the broker now: the re-run finds it ended, or ends it
        rerun = abort(bs, "--hanging", "--yes", "--output", "json", audit=interrupted)
        assert rerun.returncode == 0, (rerun.stdout, rerun.stderr)
        wait_for(lambda: lso(bs, topic, 2) > third.offset, 30, what="the third transaction ended")
        aborted = [x for x in map(json.loads, interrupted.read_text().splitlines()) if x.get("outcome") == "aborted"]
        assert len(aborted) <= 1
    finally:
        proxy.stop()
