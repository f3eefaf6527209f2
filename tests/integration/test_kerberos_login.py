"""The exporter logging in with Kerberos from a keytab (SASL/GSSAPI) on every path, against an MIT
KDC from Debian's packages and a Kafka GSSAPI listener (txnwatch_dev/identity/kdc.py,
txnwatch_dev/kafka/kerberos.py): the poller's librdkafka calls, the KIP-664 client
(kafka-python), the tap, the canary and `txnwatch check`. Its tickets live 20 s and the broker
makes connections authenticate again every 5 s, so tickets run out during the run: the
exporter gets new ones from the keytab itself (MIT's client keytab, a ticket cache in memory,
no kinit) without a failed poll.

The exporter runs from .venv-kerberos: PyPI's confluent-kafka has no GSSAPI, so bootstrap builds
one against a librdkafka with Cyrus SASL (scripts/bootstrap-kerberos.sh)."""

from __future__ import annotations

import html
import json
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from txnwatch_dev.kafka.kerberos import GSSAPI_VENV, KERBEROS, KerberosKafka
from txnwatch_dev.net import wait_for
from txnwatch_dev.observability.exporter_proc import ExporterProcess
from txnwatch_dev.transactions.workload import create_topics

pytestmark = pytest.mark.integration

USER = "txnwatch"
TICKET_LIFE = 20          # seconds
REAUTH_MS = 5000
TOPIC, OPEN_ID = "kerberos-orders", "kerberos-open"


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    from confluent_kafka import Producer

    from txnwatch_dev.identity.kdc import Kdc

    work = tmp_path_factory.mktemp("kerberos-login")
    held = None
    with Kdc(work / "kdc", clockskew=5) as kdc:
        kdc.add_principal(USER, max_life=TICKET_LIFE, max_renewable_life=TICKET_LIFE * 1.5)
        keytab = kdc.keytab([USER], work / "txnwatch.keytab")
        with KerberosKafka(kdc, work / "kafka", ssl=False, reauth_ms=REAUTH_MS) as kafka:
            create_topics(kafka.bootstrap, [TOPIC], partitions=2)
            held = Producer({"bootstrap.servers": kafka.bootstrap, "transactional.id": OPEN_ID,
                             "transaction.timeout.ms": 600_000})
            held.init_transactions()
            held.begin_transaction()
            held.produce(TOPIC, b"open", partition=0)
            held.flush(30)
            try:
                yield kdc, kafka, keytab
            finally:
                held.abort_transaction(10)


def cluster(kafka: KerberosKafka, keytab: Path, name: str, **more) -> dict:
    client = {k: v for k, v in kafka.librdkafka_settings(KERBEROS, USER, keytab).items() if k != "bootstrap.servers"}
    return {"name": name, "bootstrap_servers": kafka.bootstrap_of(KERBEROS), "poll_interval_seconds": 1,
            "poll_timeout_seconds": 5, "topics": {"include": ["kerberos-.*"]}, "client": client, **more}


def python() -> str:
    return str(GSSAPI_VENV / "bin" / "python")


def test_a_keytab_logs_in_every_path_and_renews_its_tickets(env):
    kdc, kafka, keytab = env
    exp = ExporterProcess({"clusters": [cluster(kafka, keytab, "krb", transaction_log_tap=True,
                                                canary={"enabled": True, "topic": "kerberos-canary",
                                                        "interval_seconds": 5})]},
                          python=python(), env={"KRB5_CONFIG": str(kdc.krb5_conf)}).start()
    try:
        def up(m) -> bool:
            return all(m.get_value("txnwatch_up", kafka_cluster="krb", source=s) == 1 for s in ("poller", "tap")) \
                and m.get_value("txnwatch_capability", kafka_cluster="krb", api="list_transactions") == 1 \
                and OPEN_ID in exp.get("/")[1]

        exp.wait_metric(up, 90, what="poller, tap and KIP-664 logged in from the keytab",
                        describe=lambda: exp.log()[-3000:])
        first_up = time.time()
        # past several tickets' ends (each 20 s, every connection authenticating again every 5 s)
        m = exp.wait_metric(lambda m: m.get_value("txnwatch_last_success_timestamp_seconds", kafka_cluster="krb",
                                                  source="poller") > first_up + 2.5 * TICKET_LIFE,
                            4 * TICKET_LIFE, what="polls past the first tickets' end")
        assert up(m)
        assert not m.select("txnwatch_poll_errors_total", kafka_cluster="krb", cause="auth"), \
            m.select("txnwatch_poll_errors_total", kafka_cluster="krb")
        assert m.get_value("txnwatch_canary_rounds_total", kafka_cluster="krb", outcome="committed") >= 1
        text = html.unescape(exp.get("/")[1])
        assert f"krb: SASL/GSSAPI (Kerberos) as {USER}@{kdc.realm}, from keytab {keytab} over SASL_PLAINTEXT" in text
        assert "kinit" not in exp.log()            # tickets from the keytab in process, no kinit run
    finally:
        exp.stop()


def test_check_logs_in_from_the_keytab(env, tmp_path):
    kdc, kafka, keytab = env
    path = tmp_path / "check.yaml"
    path.write_text(yaml.safe_dump({"clusters": [cluster(kafka, keytab, "krb-check")]}))
    out = subprocess.run([python(), "-m", "txnwatch.cli", "check", "--config", str(path), "--json",
                          "--sample-seconds", "0"], capture_output=True, text=True, timeout=120,
                         env={"KRB5_CONFIG": str(kdc.krb5_conf), "PATH": "/usr/bin:/bin"})
    (r,) = json.loads(out.stdout)["clusters"]
    assert r["reachable"] and r["kip664"], out.stdout[-2000:] + out.stderr[-2000:]
    assert OPEN_ID in {t["transactional_id"] for t in r["open_transactions"]}
    assert r["login"]["principal"] == f"{USER}@{kdc.realm}"


def test_pypis_confluent_kafka_says_it_has_no_gssapi(env, tmp_path):
    """The PyPI wheel (this venv's) cannot do GSSAPI: the poll step says so, by the setting."""
    kdc, kafka, keytab = env
    exp = ExporterProcess({"clusters": [cluster(kafka, keytab, "wheel")]},
                          env={"KRB5_CONFIG": str(kdc.krb5_conf)}).start()
    try:
        wait_for(lambda: "login_config" in exp.get("/metrics")[1], 60,
                 what="the poll failing with cause login_config")
        text = html.unescape(exp.get("/")[1])
        assert "sasl.mechanism: GSSAPI: this confluent-kafka's librdkafka was built without Cyrus SASL" in text
        assert exp.proc.poll() is None
    finally:
        exp.stop()


def test_a_kdc_out_past_the_tickets_end_is_cause_auth_in_words_and_heals(env):
    """Tickets run out while no KDC answers: the poll fails with cause auth and says so in an
    operator's words; the KDC back, the next tickets come from the keytab and polls resume."""
    kdc, kafka, keytab = env
    exp = ExporterProcess({"clusters": [cluster(kafka, keytab, "krb-out")]}, python=python(),
                          env={"KRB5_CONFIG": str(kdc.krb5_conf)}).start()
    try:
        exp.wait_metric(lambda m: m.get_value("txnwatch_up", kafka_cluster="krb-out", source="poller") == 1, 90,
                        what="the poller up", describe=lambda: exp.log()[-3000:])
        with kdc.outage():
            m = exp.wait_metric(lambda m: m.get_value("txnwatch_up", kafka_cluster="krb-out", source="poller") == 0,
                                4 * TICKET_LIFE, what="the poller down once its tickets ran out")
            assert m.select("txnwatch_poll_errors_total", kafka_cluster="krb-out", source="poller", cause="auth"), \
                m.select("txnwatch_poll_errors_total", kafka_cluster="krb-out")
            text = html.unescape(exp.get("/")[1])
            assert f"Kerberos login of {USER}@{kdc.realm} failed: " in text, text[-3000:]
        exp.wait_metric(lambda m: m.get_value("txnwatch_up", kafka_cluster="krb-out", source="poller") == 1,
                        4 * TICKET_LIFE, what="the poller back once the KDC answers")
        assert exp.proc.poll() is None
    finally:
        exp.stop()
