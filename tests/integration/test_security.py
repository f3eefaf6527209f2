"""The exporter against a secured Apache Kafka: SASL/SCRAM-SHA-512 over TLS, SASL/PLAIN,
mutual TLS, rejected credentials and certificates, and missing ACLs as findings that
name the ACL and the kafka-acls.sh command (run here as printed, and the finding clears).

One secured KRaft broker of the release under test for the whole module
(txnwatch_dev/kafka/secure.py), with the StandardAuthorizer on. Every exporter principal gets exactly the ACLs docs/configuration.md
lists, minus the one a test is about.
"""

from __future__ import annotations

import html
import json
import re
import shlex
import subprocess
import sys
import time
from types import SimpleNamespace

import pytest
import yaml

from tests import compat
from txnwatch_dev.kafka import kafka_tool
from txnwatch_dev.net import wait_for
from txnwatch_dev.observability.exporter_proc import ExporterProcess
from txnwatch_dev.transactions.workload import commit_group_offset, create_topics

pytestmark = [pytest.mark.integration]

TOPIC = "sec-orders"
GROUP = "sec-readers"
SCRAM_PW = "scram-Secret-4f1c9a"
PLAIN_PW = "plain-Secret-77d2e0"
ADMIN_PW = "admin-Secret-0b5e13"
WRONG_PW = "wrong-Secret-9a9a9a"
USERS = ("txnwatch", "notxn", "notap", "partial")


def exporter_acls(*, transactional_ids: bool = True, transaction_log: bool = True,
                  topic_read: bool = True, cluster_configs: bool = True) -> list:
    """The ACLs docs/configuration.md lists for the exporter, optionally minus some."""
    from txnwatch_dev.kafka.secure import Grant

    grants = [Grant("TOPIC", "sec-", "READ" if topic_read else "DESCRIBE", "PREFIXED"),
              Grant("TOPIC", "sec-", "DESCRIBE_CONFIGS", "PREFIXED"),
              Grant("GROUP", "*", "DESCRIBE")]
    if cluster_configs:
        grants.append(Grant("CLUSTER", "kafka-cluster", "DESCRIBE_CONFIGS"))
    if transactional_ids:
        grants.append(Grant("TRANSACTIONAL_ID", "*", "DESCRIBE"))
    if transaction_log:
        grants.append(Grant("TOPIC", "__transaction_state", "READ"))
    return grants


@pytest.fixture(scope="module")
def secure(tmp_path_factory):
    """The secured broker, its users and ACLs, a committed and a held-open transaction."""
    from confluent_kafka import Producer

    from txnwatch_dev.kafka.secure import SecureKafka

    work = tmp_path_factory.mktemp("secure-kafka")
    # SCRAM both ways KRaft has: the admin at storage format, the rest through AlterUserScramCredentials
    kafka = SecureKafka(work / "kafka", plain_users={"txnwatch-plain": PLAIN_PW}, scram_users={"admin": ADMIN_PW})
    producers = []
    try:
        kafka.start()
        kafka.wait_can_authenticate("admin", ADMIN_PW)
        kafka.add_scram_users({u: SCRAM_PW for u in USERS})
        kafka.grant("User:txnwatch", exporter_acls())
        kafka.grant("User:txnwatch-plain", exporter_acls())
        kafka.grant(kafka.tls.client_principal, exporter_acls())
        kafka.grant("User:notxn", exporter_acls(transactional_ids=False))
        kafka.grant("User:notap", exporter_acls(transaction_log=False))
        kafka.grant("User:partial", exporter_acls(topic_read=False, cluster_configs=False))
        create_topics(kafka.bootstrap, [TOPIC], partitions=2)
        done = Producer({"bootstrap.servers": kafka.bootstrap, "transactional.id": "sec-committer"})
        done.init_transactions()
        done.begin_transaction()
        done.produce(TOPIC, b"committed", partition=0)
        done.commit_transaction()
        commit_group_offset(kafka.bootstrap, GROUP, TOPIC, 0, 1)
        # held open for the whole module: KIP-664 lists it, the tap sees it, its LSO stalls
        held = Producer({"bootstrap.servers": kafka.bootstrap, "transactional.id": "sec-open",
                         "transaction.timeout.ms": 600_000})
        held.init_transactions()
        held.begin_transaction()
        held.produce(TOPIC, b"open", partition=1)
        held.flush(30)
        producers.append(held)
        secrets_dir = work / "secrets"
        secrets_dir.mkdir()
        (secrets_dir / "scram-password").write_text(SCRAM_PW + "\n")
        yield SimpleNamespace(kafka=kafka, work=work, scram_pw_file=secrets_dir / "scram-password",
                              admin_properties=kafka.admin_properties(work / "admin.properties", ADMIN_PW))
    finally:
        for p in producers:
            p.abort_transaction(10)
        kafka.cleanup()


def cluster(kafka, name: str, listener: str, client: dict, tap: bool = True) -> dict:
    return {"name": name, "bootstrap_servers": kafka.bootstrap_of(listener), "poll_interval_seconds": 1,
            "poll_timeout_seconds": 5, "topics": {"include": [r"sec-.*"]}, "transaction_log_tap": tap,
            "granularity": "partition",
            "client": client}


def scram(secure, user: str = "txnwatch", listener: str = "SASL", password: str | None = None) -> dict:
    c = secure.kafka.client_settings(listener, "SCRAM-SHA-512", user, "x")
    c["sasl.password"] = password if password is not None else f"${{file:{secure.scram_pw_file}}}"
    return c


def page(exp: ExporterProcess) -> str:
    status, body = exp.get("/")
    assert status == 200, body[-500:]
    return html.unescape(body)


def findings_on_page(text: str, cluster_name: str) -> list[str]:
    """The messages of the Findings table's rows for one cluster."""
    section = text.split("<h2>Findings</h2>", 1)[1].split("</section>", 1)[0]
    return re.findall(rf"<tr><td>{re.escape(cluster_name)}</td><td class=\w*>\w+</td><td>(.*?)</td></tr>",
                      section)


def open_txn_row(cluster_name: str, tid: str) -> str:
    return f"<tr><td>{cluster_name}</td><td>{tid}</td><td>{tid}</td><td>Ongoing</td>"


def run_check(tmp_path, clusters: list[dict]) -> tuple[int, dict, str]:
    path = tmp_path / f"check-{time.monotonic_ns()}.yaml"
    path.write_text(yaml.safe_dump({"clusters": clusters}))
    out = subprocess.run([sys.executable, "-m", "txnwatch.cli", "check", "--config", str(path), "--json",
                          "--sample-seconds", "0"], capture_output=True, text=True, timeout=120)
    return out.returncode, json.loads(out.stdout), out.stdout + out.stderr


def grant_as_printed(secure, finding: str, log_dir) -> str:
    """Run the kafka-acls.sh command of a finding exactly as printed, with admin.properties
    standing for a real admin client config."""
    m = re.search(r"kafka-acls\.sh (.*?--operation \w+(?: --[\w-]+(?: (?:'[^']*'|[^\s(-]\S*))?)+)", finding)
    assert m, finding
    args = [secure.admin_properties.as_posix() if a == "admin.properties" else a for a in shlex.split(m.group(1))]
    kafka_tool("kafka-acls", *args, log_dir=log_dir)
    return m.group(0)


# ------------------------------------------------------------------ one exporter, five clusters
@pytest.fixture(scope="module")
def exporter(secure, tmp_path_factory):
    """`txnwatch serve` at DEBUG with five clusters on the secured broker: SCRAM over TLS,
    PLAIN, mutual TLS, a wrong password and a TLS client without the CA."""
    k = secure.kafka
    clusters = [
        cluster(k, "scram-tls", "SASL_SSL", scram(secure, listener="SASL_SSL")),
        cluster(k, "plain", "SASL", {**k.client_settings("SASL", "PLAIN", "txnwatch-plain", "x"),
                                     "sasl.password": "${env:TXNWATCH_TEST_PLAIN_PW}",
                                     "socket.keepalive.enable": "true"}),   # logged (by name) at DEBUG
        cluster(k, "mtls", "MTLS", k.client_settings("MTLS")),   # ssl.key.password given inline
        cluster(k, "bad-password", "SASL", scram(secure, password=WRONG_PW)),
        cluster(k, "bad-ca", "SASL_SSL", {key: v for key, v in scram(secure, listener="SASL_SSL").items()
                                          if key != "ssl.ca.location"}),
    ]
    log_dir = tmp_path_factory.mktemp("exporter")
    exp = ExporterProcess({"clusters": clusters, "log_level": "DEBUG"}, log_path=log_dir / "exporter.log",
                          env={"TXNWATCH_TEST_PLAIN_PW": PLAIN_PW}).start()
    yield exp
    # SIGKILL: shutdown is not under test here, and with two clusters that cannot connect it
    # waits for their sources' blocking metadata calls one after the other
    exp.kill()


GOOD = ("scram-tls", "plain", "mtls")


def test_data_flows_through_scram_over_tls_plain_and_mutual_tls(secure, exporter, tmp_path):
    def flowing(m) -> bool:
        return all(
            m.get_value("txnwatch_up", kafka_cluster=c, source="poller") == 1
            and m.get_value("txnwatch_up", kafka_cluster=c, source="tap") == 1
            and (m.get_value("kafka_partition_high_watermark", kafka_cluster=c, topic=TOPIC, partition=0) or 0) >= 2
            and m.get_value("kafka_partition_lso_lag_offsets", kafka_cluster=c, topic=TOPIC, partition=1) == 1
            and m.get_value("kafka_consumergroup_committed_offset", kafka_cluster=c, group=GROUP, topic=TOPIC,
                            partition=0) == 1
            and m.get_value("kafka_broker_transaction_max_timeout_seconds", kafka_cluster=c) == 900
            and m.get_value("kafka_transaction_open", kafka_cluster=c, app="sec-open") == 1      # the tap's view
            and (m.get_value("txnwatch_tap_records_applied_total", kafka_cluster=c) or 0) > 0
            for c in GOOD)

    exporter.wait_metric(flowing, timeout=90, what="offsets, groups, configs and tap state on every cluster")
    # the open transaction through KIP-664 (kafka-python) on each authenticated connection
    wait_for(lambda: all(open_txn_row(c, "sec-open") in page(exporter) for c in GOOD), 60,
             what="sec-open among the KIP-664 open transactions of every cluster")
    text = page(exporter)
    assert not [f for c in GOOD for f in findings_on_page(text, c) if "kafka-acls.sh" in f], text
    # a transaction committed now is counted by each tap from __transaction_state
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": secure.kafka.bootstrap, "transactional.id": "sec-counted"})
    p.init_transactions()
    p.begin_transaction()
    p.produce(TOPIC, b"counted", partition=0)
    p.commit_transaction()
    exporter.wait_metric(lambda m: all(
        (m.get_value("kafka_transactions_total", kafka_cluster=c, app="sec-counted", outcome="committed") or 0) >= 1
        for c in GOOD), timeout=60, what="the tap of every cluster counting the commit")
    # txnwatch check over SCRAM + TLS and over mTLS: KIP-664 open transactions, no access findings
    k = secure.kafka
    code, result, text = run_check(tmp_path, [
        cluster(k, "scram-tls", "SASL_SSL", scram(secure, listener="SASL_SSL")),
        cluster(k, "mtls", "MTLS", k.client_settings("MTLS"))])
    for r in result["clusters"]:
        assert r["reachable"] and r["kip664"], text
        assert [t["transactional_id"] for t in r["open_transactions"]] == ["sec-open"], text
        assert not [f for f in r["findings"] if f["kind"].startswith("acl_")], text
    assert SCRAM_PW not in text and k.tls.client_key_password not in text


def test_rejected_credentials_and_certificates_name_the_cause(exporter):
    m = exporter.wait_metric(lambda m: (
        (m.get_value("txnwatch_poll_errors_total", kafka_cluster="bad-password", source="poller", cause="auth") or 0) >= 1
        and (m.get_value("txnwatch_poll_errors_total", kafka_cluster="bad-ca", source="poller", cause="tls") or 0) >= 1),
        timeout=60, what="auth and tls causes of the failing clusters")
    for c in ("bad-password", "bad-ca"):
        assert m.get_value("txnwatch_up", kafka_cluster=c, source="poller") == 0
        assert m.get_value("txnwatch_up", kafka_cluster=c, source="tap") == 0
        assert m.get_value("kafka_partition_high_watermark", kafka_cluster=c) is None   # never polled
    text = page(exporter)
    row = re.search(r"<tr><td>bad-password</td><td>poller</td>.*?</tr>", text).group(0)
    assert "authentication failed: the broker rejected the SASL/SCRAM-SHA-512 credentials of user " \
           "'txnwatch'" in row, row
    assert "Check sasl.username and sasl.password" in row and "kafka-configs.sh --describe" in row, row
    row = re.search(r"<tr><td>bad-ca</td><td>poller</td>.*?</tr>", text).group(0)
    assert "TLS handshake failed" in row and "certificate verify failed" in row, row
    assert "ssl.ca.location (not set: the system CAs are used)" in row, row
    # The tap names the same causes (librdkafka reports them only through error_cb), and its
    # page row says it cannot read the log instead of "waiting for __transaction_state".
    m = exporter.wait_metric(lambda m: (
        (m.get_value("txnwatch_poll_errors_total", kafka_cluster="bad-password", source="tap", cause="auth") or 0) >= 1
        and (m.get_value("txnwatch_poll_errors_total", kafka_cluster="bad-ca", source="tap", cause="tls") or 0) >= 1),
        timeout=60, what="auth and tls causes of the taps of the failing clusters")
    text = page(exporter)
    tap_section = text.split("<h2>Transaction-log tap</h2>", 1)[1].split("</section>", 1)[0]
    for c, why in (("bad-password", "authentication failed"), ("bad-ca", "TLS handshake failed")):
        row = re.search(rf"<tr><td>{c}</td>.*?</tr>", tap_section).group(0)
        assert "cannot read it" in row and why in row and "waiting for" not in row, row


def test_secrets_never_in_logs_metrics_or_page_even_at_debug(secure, exporter):
    exporter.wait_metric(lambda m: all(m.get_value("txnwatch_up", kafka_cluster=c, source="poller") == 1 for c in GOOD)
                         and (m.get_value("txnwatch_poll_errors_total", kafka_cluster="bad-password", source="poller",
                                          cause="auth") or 0) >= 2,
                         timeout=60, what="good clusters connected and the wrong password rejected twice")
    secrets = [SCRAM_PW, PLAIN_PW, WRONG_PW, secure.kafka.tls.client_key_password]
    bodies = {path: exporter.get(path)[1] for path in ("/metrics", "/", "/readyz", "/healthz")}
    log = exporter.log()
    # the level the secrets had to survive: a DEBUG line of the KIP-664 client's set-up
    assert "DEBUG txnwatch.kafka.kafka_python: kafka-python has no equivalent for: socket.keepalive.enable" in log
    for s in secrets:
        for path, body in bodies.items():
            assert s not in body, (path, s)
        assert s not in log, s


# ------------------------------------------------------------------ missing ACLs
def test_missing_describe_on_transactional_id(secure, exporter_factory, tmp_path, request):
    k = secure.kafka
    # txnwatch check (no tap): producer state shows an open transaction ListTransactions omits
    code, result, text = run_check(tmp_path, [cluster(k, "notxn", "SASL", scram(secure, "notxn"), tap=False)])
    (r,) = result["clusters"]
    assert r["open_transactions"] == [], text          # what the missing ACL hides
    (f,) = [f for f in r["findings"] if f["kind"] == "acl_transactional_id_describe"]
    assert "ListTransactions returned no transactional ids" in f["message"]
    assert f"{TOPIC}-1 (producer id" in f["message"]
    assert (f"kafka-acls.sh --bootstrap-server {k.bootstrap_of('SASL')} --command-config admin.properties "
            "--add --allow-principal User:notxn --operation Describe --transactional-id '*'") in f["message"]
    assert code == 1, text

    # serve with the tap: the ids it read from the log are refused by DescribeTransactions
    exp = exporter_factory({"clusters": [cluster(k, "notxn", "SASL", scram(secure, "notxn"))]})

    def finding(proof: bool = False):
        rows = [f for f in findings_on_page(page(exp), "notxn") if "may not DESCRIBE transactional ids" in f
                and (not proof or "TRANSACTIONAL_ID_AUTHORIZATION_FAILED for" in f)]
        return rows[0] if rows else None

    # (until the tap has rebuilt its state, the producer-state evidence speaks, as in check)
    msg = wait_for(lambda: finding(proof=True), 60, what="the TransactionalId finding with the refused ids on /")
    assert re.search(r"TRANSACTIONAL_ID_AUTHORIZATION_FAILED for [\w, -]*sec-open", msg), msg
    assert open_txn_row("notxn", "sec-open") not in page(exp)
    # the printed command grants exactly what is missing: the finding goes, the transaction shows
    grant_as_printed(secure, msg, tmp_path / "tools")
    wait_for(lambda: finding() is None and open_txn_row("notxn", "sec-open") in page(exp), 60,
             what="the finding to clear and sec-open to show once DESCRIBE is granted")
    compat.record(request.config, "features", "4.x", "SASL/SCRAM, PLAIN, TLS and ACLs on KRaft",
                  "missing ACLs named")


def test_missing_read_on_transaction_state(secure, exporter_factory, tmp_path):
    from txnwatch_dev.kafka.secure import Grant

    k = secure.kafka
    client = scram(secure, "notap")
    # txnwatch check of a cluster configured with the tap: authorized operations on the log
    code, result, text = run_check(tmp_path, [cluster(k, "notap", "SASL", client)])
    (f,) = [f for f in result["clusters"][0]["findings"] if f["kind"] == "acl_transaction_state_read"]
    assert (f"kafka-acls.sh --bootstrap-server {k.bootstrap_of('SASL')} --command-config admin.properties "
            "--add --allow-principal User:notap --operation Read --topic __transaction_state") in f["message"]
    assert code == 1, text

    exp = exporter_factory({"clusters": [cluster(k, "notap", "SASL", client)]})

    def finding():
        rows = [f for f in findings_on_page(page(exp), "notap") if "may not read __transaction_state" in f]
        return rows[0] if rows else None

    wait_for(finding, 60, what="the tap finding on / (no ACL on __transaction_state at all)")

    def refusals() -> float:
        return exp.metrics().get_value("txnwatch_poll_errors_total", kafka_cluster="notap", source="tap",
                                       cause="topic_authorization_failed") or 0

    # DESCRIBE alone (a common half fix) lets the tap find the topic; its fetches are then
    # refused once per partition (10 at once; metadata refusals came one per 10 s) and
    # after that nothing more is said: the finding must stay
    before = refusals()
    k.grant("User:notap", [Grant("TOPIC", "__transaction_state", "DESCRIBE")])
    wait_for(lambda: refusals() >= before + 5, 60, what="the tap's fetches of __transaction_state refused")
    wait_for(lambda: re.search(r"<tr><td>notap</td><td>yes</td>", page(exp)), 30,
             what="the tap to report the topic found")
    msg = finding()
    assert msg is not None, page(exp)
    assert exp.metrics().get_value("txnwatch_tap_records_applied_total", kafka_cluster="notap") == 0
    # Refused fetches keep the tap down, however quiet the client is about them afterwards:
    # sampled over 5 s, several of the tap's 1 s consume rounds (each would report success).
    end = time.monotonic() + 5
    while time.monotonic() < end:
        assert exp.metrics().get_value("txnwatch_up", kafka_cluster="notap", source="tap") == 0
        time.sleep(0.25)
    grant_as_printed(secure, msg, tmp_path / "tools")
    exp.wait_metric(lambda m: (m.get_value("txnwatch_tap_records_applied_total", kafka_cluster="notap") or 0) > 0
                    and m.get_value("kafka_transaction_open", kafka_cluster="notap", app="sec-open") == 1
                    and m.get_value("txnwatch_up", kafka_cluster="notap", source="tap") == 1,
                    timeout=60, what="the tap reading __transaction_state (and up) once READ is granted")
    wait_for(lambda: finding() is None, 30, what="the finding to clear")


def test_missing_read_on_topics_and_cluster_configs(secure, tmp_path):
    k = secure.kafka
    partial = [cluster(k, "partial", "SASL", scram(secure, "partial"), tap=False)]
    code, result, text = run_check(tmp_path, partial)
    (r,) = result["clusters"]
    # DescribeProducers needs READ: its refusal is a finding, not the loss of the KIP-664 view
    assert [t["transactional_id"] for t in r["open_transactions"]] == ["sec-open"], text
    by_kind = {f["kind"]: f["message"] for f in r["findings"] if f["kind"].startswith("acl_")}
    assert set(by_kind) == {"acl_topic_read", "acl_cluster_describe_configs"}, text
    assert "User:partial may not READ sec-orders: DescribeProducers answered TOPIC_AUTHORIZATION_FAILED" \
        in by_kind["acl_topic_read"], text
    assert "--allow-principal User:partial --operation Read --topic sec-orders" in by_kind["acl_topic_read"]
    assert r["configs"]["transaction_max_timeout_ms"] is None, text     # what the refusal costs
    assert by_kind["acl_cluster_describe_configs"].endswith(
        "--allow-principal User:partial --operation DescribeConfigs --cluster")
    assert code == 1, text
    for message in by_kind.values():
        grant_as_printed(secure, message, tmp_path / "tools")
    code, result, text = run_check(tmp_path, partial)
    (r,) = result["clusters"]
    assert not [f for f in r["findings"] if f["kind"].startswith("acl_")], text
    assert r["configs"]["transaction_max_timeout_ms"] == 900_000, text


# ------------------------------------------------------------------ txnwatch abort's ACL
def test_abort_without_alter_on_the_cluster_is_refused_and_names_the_acl(secure, tmp_path):
    """The exporter's ACLs read everything but write nothing: `txnwatch abort` as that
    principal refuses, whatever flags it is given, and prints the kafka-acls.sh line; run as
    printed, the dry run then says it will abort."""
    from confluent_kafka import Consumer, TopicPartition

    def lso() -> int:
        c = Consumer({"bootstrap.servers": secure.kafka.bootstrap, "group.id": "sec-lso-probe",
                      "isolation.level": "read_committed"})
        try:
            return c.get_watermark_offsets(TopicPartition(TOPIC, 1), timeout=10)[1]
        finally:
            c.close()

    path = tmp_path / "abort.yaml"
    path.write_text(yaml.safe_dump({"clusters": [cluster(secure.kafka, "sec", "SASL", scram(secure))]}))
    before = lso()
    cmd = [sys.executable, "-m", "txnwatch.cli", "abort", "--config", str(path), "--transactional-id", "sec-open",
           "--force-live", "--force-2pc", "--accept-data-loss", "--output", "json",
           "--audit-log", str(tmp_path / "audit.jsonl")]
    out = subprocess.run([*cmd, "--yes"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 1, (out.stdout, out.stderr)
    [t] = json.loads(out.stdout)["transactions"]
    assert [(r["kind"], r["accepted_by"]) for r in t["refused"]] == [("acl", None)]
    line = t["refused"][0]["words"]
    assert (f"kafka-acls.sh --bootstrap-server {secure.kafka.bootstrap_of('SASL')} --command-config "
            "admin.properties --add --allow-principal User:txnwatch --operation Alter --cluster") in line
    assert [r["outcome"] for r in t["results"]] == ["refused"]
    assert lso() == before
    assert SCRAM_PW not in out.stdout + out.stderr + (tmp_path / "audit.jsonl").read_text()

    grant_as_printed(secure, line, tmp_path / "tools")
    dry = wait_for(lambda: (o := subprocess.run(cmd, capture_output=True, text=True, timeout=120)).returncode == 0
                   and json.loads(o.stdout)["transactions"][0]["verdict"] == "abort" and json.loads(o.stdout),
                   60, interval=1, what="the dry run to see the ACL granted")
    assert dry["may_write_markers"] is True and lso() == before
