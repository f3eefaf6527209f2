"""The exporter logging in the ways users do, on every path (the poller's librdkafka calls, the
KIP-664 client, the tap, the canary, `txnwatch check`), against a real Apache Kafka with the
StandardAuthorizer (txnwatch_dev/kafka/secure.py):

- OAUTHBEARER with OIDC client credentials, through Kafka's own validator
  (OAuthBearerValidatorCallbackHandler) reading the keys of a local issuer
  (txnwatch_dev/identity/oidc.py) whose tokens live 30 s, so they run out during the run: the
  exporter refreshes them; a revoked secret makes txnwatch_up 0 with cause auth and the
  issuer's words while the last data stays; an issuer down across a refresh costs nothing;
- a PKCS#12 client keystore, of openssl 3's kind and of the legacy kind, on mutual TLS;
- login settings that cannot work, refused at start with exit 2, naming the property, no secret.
"""

from __future__ import annotations

import html
import json
import re
import subprocess
import sys
import time
from types import SimpleNamespace

import pytest
import yaml

from txnwatch_dev.net import wait_for
from txnwatch_dev.observability.exporter_proc import ExporterProcess
from txnwatch_dev.transactions.workload import commit_group_offset, create_topics

pytestmark = pytest.mark.integration

LIFETIME = 30                      # seconds a token serves: several run out during the module
SECRET = "oidc-Secret-61c0d2"
KEYSTORE_PW_FILE = "keystore-password"
TOPIC, GROUP, OPEN_ID = "login-orders", "login-readers", "login-open"


def exporter_grants() -> list:
    """What docs/configuration.md lists for the exporter, with the canary's, on the login- topics."""
    from txnwatch_dev.kafka.secure import Grant

    return [Grant("TOPIC", "login-", op, "PREFIXED") for op in ("READ", "WRITE", "CREATE", "DESCRIBE",
                                                                "DESCRIBE_CONFIGS")] + [
        Grant("GROUP", "*", "DESCRIBE"), Grant("GROUP", "txnwatch-canary", "READ", "PREFIXED"),
        Grant("CLUSTER", "kafka-cluster", "DESCRIBE_CONFIGS"),
        Grant("TRANSACTIONAL_ID", "*", "DESCRIBE"), Grant("TRANSACTIONAL_ID", "txnwatch-canary-", "WRITE", "PREFIXED"),
        Grant("TOPIC", "__transaction_state", "READ")]


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    """An issuer, a secured node validating its tokens, the exporter's ACLs for the token's
    principal and the mutual-TLS one, a committed offset and a transaction held open."""
    from confluent_kafka import Producer

    from txnwatch_dev.identity.oidc import OidcIssuer
    from txnwatch_dev.kafka.secure import SecureKafka

    work = tmp_path_factory.mktemp("logins")
    idp = OidcIssuer(work / "idp", lifetime=LIFETIME).start()
    kafka, held = None, None
    try:
        idp.register("txnwatch", SECRET)
        kafka = SecureKafka(work / "kafka", oidc=idp).start()
        for principal in ("User:txnwatch", kafka.tls.client_principal):
            kafka.grant(principal, exporter_grants())
        create_topics(kafka.bootstrap, [TOPIC], partitions=2)
        commit_group_offset(kafka.bootstrap, GROUP, TOPIC, 0, 0)
        held = Producer({"bootstrap.servers": kafka.bootstrap, "transactional.id": OPEN_ID,
                         "transaction.timeout.ms": 600_000})
        held.init_transactions()
        held.begin_transaction()
        held.produce(TOPIC, b"open", partition=1)
        held.flush(30)
        secrets = work / "secrets"
        secrets.mkdir()
        (secrets / "oidc-secret").write_text(SECRET + "\n")
        (secrets / KEYSTORE_PW_FILE).write_text(kafka.tls.client_keystore_password + "\n")
        yield SimpleNamespace(idp=idp, kafka=kafka, secrets=secrets, work=work)
    finally:
        if held is not None:
            held.abort_transaction(10)
        if kafka is not None:
            kafka.cleanup()
        idp.stop()


def oidc_client(env) -> dict:
    from txnwatch_dev.kafka.secure import OAUTH

    return {**env.kafka.client_settings(OAUTH), "sasl.oauthbearer.method": "oidc",
            "sasl.oauthbearer.token.endpoint.url": env.idp.token_url, "sasl.oauthbearer.client.id": "txnwatch",
            "sasl.oauthbearer.client.secret": f"${{file:{env.secrets / 'oidc-secret'}}}",
            "sasl.oauthbearer.scope": "kafka", "https.ca.location": str(env.idp.ca_cert)}


def cluster(env, name: str, listener: str, client: dict, **more) -> dict:
    return {"name": name, "bootstrap_servers": env.kafka.bootstrap_of(listener), "poll_interval_seconds": 1,
            "poll_timeout_seconds": 5, "topics": {"include": ["login-.*"]},
            "transactional_ids": {"include": ["login-.*", "txnwatch-canary-.*"]}, "client": client, **more}


def value(m, name: str, **labels) -> float | None:
    got = [v for _, v in m.select(name, **labels)]
    return got[0] if got else None


def wait_up_with_kip664(exp: ExporterProcess, name: str, sources: tuple[str, ...] = ("poller",)):
    """Every source up, and KIP-664 (kafka-python) logged in too: its APIs answered, and the held
    transaction is found open on its partition."""
    def ready(m) -> bool:
        return all(value(m, "txnwatch_up", kafka_cluster=name, source=s) == 1 for s in sources) \
            and value(m, "txnwatch_capability", kafka_cluster=name, api="list_transactions") == 1 \
            and "KIP-664 poll failed" not in exp.get("/")[1] \
            and OPEN_ID in exp.get("/")[1]
    return exp.wait_metric(ready, 90, what=f"{name}: {sources} up and {OPEN_ID} listed by KIP-664",
                           describe=lambda: shown(exp))


def shown(exp: ExporterProcess) -> str:
    """The page's clusters, logins and notes: what a failed wait shows."""
    text = page(exp)
    clusters = text.split("<h2>Clusters</h2>", 1)[-1].split("</section>", 1)[0]
    notes = text.split("<h2>Notes</h2>", 1)[1].split("</section>", 1)[0] if "<h2>Notes</h2>" in text else ""
    tap_lines = [line for line in exp.log().splitlines() if "tap[" in line or "login" in line][-25:]
    return re.sub(r"<[^>]+>", " ", clusters + " NOTES " + notes) + "\nLOG:\n" + "\n".join(tap_lines)


def page(exp: ExporterProcess) -> str:
    return html.unescape(exp.get("/")[1])


@pytest.fixture(scope="module")
def oidc_exporter(env):
    exp = ExporterProcess({"clusters": [cluster(env, "oidc", "OAUTH", oidc_client(env), transaction_log_tap=True,
                                                canary={"enabled": True, "topic": "login-canary",
                                                        "interval_seconds": 5})]}).start()
    try:
        yield exp
    finally:
        exp.stop()


def test_oidc_logs_in_every_path(env, oidc_exporter):
    """The poller, KIP-664, the tap and the canary on one token provider; that they go on past
    a token's end is the outage test's."""
    exp = oidc_exporter
    m = wait_up_with_kip664(exp, "oidc", ("poller", "tap"))
    m = exp.wait_metric(lambda m: (value(m, "txnwatch_canary_rounds_total", kafka_cluster="oidc",
                                         outcome="committed") or 0) >= 1, 60, what="a committed canary round")
    assert not m.select("txnwatch_poll_errors_total", kafka_cluster="oidc", cause="auth")
    text = page(exp)
    assert re.search(r"oidc: SASL/OAUTHBEARER, OIDC client credentials of txnwatch at https://\S+ over SASL_SSL; "
                     r"principal txnwatch; token valid \d+s more", text), shown(exp)
    assert SECRET not in text and SECRET not in exp.log()


def test_check_logs_in_with_oidc_and_says_how(env, tmp_path):
    path = tmp_path / "check.yaml"
    path.write_text(yaml.safe_dump({"clusters": [cluster(env, "oidc-check", "OAUTH", oidc_client(env))]}))
    out = subprocess.run([sys.executable, "-m", "txnwatch.cli", "check", "--config", str(path), "--json",
                          "--sample-seconds", "0"], capture_output=True, text=True, timeout=120)
    (r,) = json.loads(out.stdout)["clusters"]
    assert r["reachable"] and r["kip664"], out.stdout[-2000:] + out.stderr[-2000:]
    assert OPEN_ID in {t["transactional_id"] for t in r["open_transactions"]}
    assert r["login"]["principal"] == "txnwatch" and 0 < r["login"]["token_expires_in_seconds"] <= LIFETIME
    assert r["login"]["login"].startswith("SASL/OAUTHBEARER, OIDC client credentials of txnwatch")
    assert SECRET not in out.stdout + out.stderr


def test_a_revoked_secret_is_cause_auth_with_the_issuers_words_and_the_data_stays(env, oidc_exporter):
    exp, idp = oidc_exporter, env.idp
    wait_up_with_kip664(exp, "oidc")
    try:
        idp.revoke("txnwatch")
        m = exp.wait_metric(lambda m: value(m, "txnwatch_up", kafka_cluster="oidc", source="poller") == 0, 3 * LIFETIME,
                            what="the poller down once the last token ran out")
        assert any(lbl["cause"] == "auth" for lbl, _ in m.select("txnwatch_poll_errors_total", kafka_cluster="oidc",
                                                               source="poller")), m.select("txnwatch_poll_errors_total")
        assert value(m, "kafka_partition_high_watermark", kafka_cluster="oidc", topic=TOPIC, partition="1") \
            is not None                                          # the last data, kept and marked stale
        text = page(exp)
        assert "login failed: token endpoint" in text and "client secret rejected for client 'txnwatch'" in text, \
            text[-3000:]
        assert "data stale since" in text and exp.proc.poll() is None
    finally:
        idp.register("txnwatch", SECRET)
    wait_up_with_kip664(exp, "oidc", ("poller", "tap"))


def test_an_issuer_down_across_a_refresh_costs_no_poll(env, oidc_exporter):
    """Down from 2/3 of a token's life to 0.82 of it: the refresh due at 4/5 fails, the retry a
    second later lands 5 s before the old token's end; the poller, the tap and the canary go on
    past that end on the new one. (librdkafka takes a token from the login on its 1-s token
    timer, so one that comes within about 2 s of the old one's end comes too late for its
    sessions: each is refused once and reconnects. Kafka's default 30 s of clock skew for
    OAUTHBEARER hides that; the broker here allows none.)"""
    exp, idp = oidc_exporter, env.idp
    wait_up_with_kip664(exp, "oidc")
    before = idp.tokens_issued("txnwatch")
    wait_for(lambda: idp.tokens_issued("txnwatch") > before, 2 * LIFETIME, interval=0.1, what="a fresh token")
    fresh = time.time()
    auth_errors = exp.metrics().select("txnwatch_poll_errors_total", kafka_cluster="oidc", source="poller", cause="auth")
    wait_for(lambda: time.time() >= fresh + LIFETIME * 2 / 3, LIFETIME, interval=0.1, what="2/3 of the token's life")
    with idp.outage():
        wait_for(lambda: time.time() >= fresh + LIFETIME * 0.82, LIFETIME, interval=0.1,
                 what="the outage to reach past the refresh")
    m = exp.wait_metric(lambda m: idp.tokens_issued("txnwatch") > before + 1
                        and value(m, "txnwatch_last_success_timestamp_seconds", kafka_cluster="oidc", source="poller")
                        > fresh + LIFETIME + 2, 2 * LIFETIME, what="polls past the old token's end, on a new one")
    assert value(m, "txnwatch_up", kafka_cluster="oidc", source="poller") == 1
    if value(m, "txnwatch_up", kafka_cluster="oidc", source="tap") != 1:
        print("\n".join(line for line in exp.log().splitlines() if "tap[" in line or "rdkafka" in line))
    assert value(m, "txnwatch_up", kafka_cluster="oidc", source="tap") == 1, \
        m.select("txnwatch_poll_errors_total", kafka_cluster="oidc", source="tap")
    assert m.select("txnwatch_poll_errors_total", kafka_cluster="oidc", source="poller", cause="auth") == auth_errors
    assert "unreachable (Connection refused); retrying" in exp.log()       # the outage met a refresh
    rounds = value(m, "txnwatch_canary_rounds_total", kafka_cluster="oidc", outcome="committed") or 0
    exp.wait_metric(lambda m: (value(m, "txnwatch_canary_rounds_total", kafka_cluster="oidc",
                                     outcome="committed") or 0) > rounds, 30,
                    what="the canary committing on the new token")


@pytest.mark.parametrize("keystore", ["client_keystore", "client_keystore_legacy"])
def test_a_pkcs12_keystore_logs_in_both_clients(env, keystore, tmp_path):
    from txnwatch_dev.kafka.secure import MTLS

    client = env.kafka.client_settings(MTLS, keystore=getattr(env.kafka.tls, keystore))
    client["ssl.keystore.password"] = f"${{file:{env.secrets / KEYSTORE_PW_FILE}}}"
    exp = ExporterProcess({"clusters": [cluster(env, "p12", MTLS, client)]}).start()
    try:
        wait_up_with_kip664(exp, "p12")
        assert "client certificate from PKCS#12 keystore" in page(exp)
        assert env.kafka.tls.client_keystore_password not in exp.log()
    finally:
        exp.stop()


@pytest.mark.parametrize("client, key, words", [
    ({"security.protocol": "SSL", "ssl.keystore.location": "{keystore}", "ssl.keystore.password": "Wrong-pw-3e1"},
     "ssl.keystore.password", "the password is wrong"),
    ({"security.protocol": "SASL_SSL", "sasl.mechanism": "OAUTHBEARER", "sasl.oauthbearer.method": "oidc",
      "sasl.oauthbearer.token.endpoint.url": "http://idp.example.com/token", "sasl.oauthbearer.client.id": "t",
      "sasl.oauthbearer.client.secret": "Wrong-pw-3e1"}, "sasl.oauthbearer.token.endpoint.url", "not an https://"),
    ({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "GSSAPI", "sasl.kerberos.keytab": "/etc/t.keytab"},
     "sasl.kerberos.principal", "a keytab needs the principal"),
    ({"security.protocol": "SASL_SSL", "sasl.mechanism": "OAUTHBEARER", "sasl.oauthbearer.method": "aws_msk_iam"},
     "sasl.oauthbearer.aws.region", "region"),
])
def test_login_settings_that_cannot_work_are_refused_at_start(env, tmp_path, client, key, words):
    client = {k: v.format(keystore=env.kafka.tls.client_keystore) if isinstance(v, str) else v
              for k, v in client.items()}
    path = tmp_path / "txnwatch.yaml"
    path.write_text(yaml.safe_dump({"clusters": [{"name": "bad", "bootstrap_servers": "127.0.0.1:1",
                                                  "client": client}]}))
    for command in (["serve", "--check-config"], ["check"]):
        out = subprocess.run([sys.executable, "-m", "txnwatch.cli", *command, "--config", str(path)],
                             capture_output=True, text=True, timeout=60)
        said = out.stdout + out.stderr
        assert out.returncode == 2 and f"clusters[0].client.{key}: " in said and words in said, said
        assert "Traceback" not in said and "Wrong-pw-3e1" not in said
