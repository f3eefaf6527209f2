"""The Kerberos test environment: a KDC of the test's own (MIT krb5kdc from apt) and a Kafka
node with GSSAPI listeners, logged in to by both of the exporter's Kafka clients from a
keytab, each into a credential cache of its own. (Tickets that expire and are renewed while
the exporter runs are tests/integration/test_kerberos_login.py's.)"""

from __future__ import annotations

import sys

import pytest

from txnwatch_dev.identity.kdc import Kdc
from txnwatch_dev.kafka.kerberos import (
    KAFKA_PYTHON_PROBE,
    KERBEROS,
    KERBEROS_SSL,
    LIBRDKAFKA_PROBE,
    KerberosKafka,
    kafka_python_gssapi,
    librdkafka_gssapi_python,
    run_probe,
)
from txnwatch_dev.kafka.secure import AUTHORIZER
from txnwatch_dev.net import wait_for

pytestmark = pytest.mark.integration

USER = "txnwatch"
VISIBLE, HIDDEN = "kerberos-visible", "kerberos-hidden"
REAUTH_MS = 5000         # clients authenticate again on connections this old (KIP-368)


@pytest.fixture(scope="module")
def kdc(tmp_path_factory):
    """A KDC whose clients and broker tolerate 5 s of clock difference (not 5 min), so an
    expired ticket is refused within seconds of its end."""
    with Kdc(tmp_path_factory.mktemp("kdc"), clockskew=5) as k:
        k.add_principal(USER)
        yield k


@pytest.fixture(scope="module")
def kafka(kdc, tmp_path_factory):
    """The GSSAPI node with ACLs: the Kerberos users may see VISIBLE only, so a listing of
    exactly that proves the broker took the client for User:<principal's first part>."""
    props = {"authorizer.class.name": AUTHORIZER, "super.users": "User:ANONYMOUS"}
    with KerberosKafka(kdc, tmp_path_factory.mktemp("kafka"), reauth_ms=REAUTH_MS, properties=props) as k:
        _visible_topic_for(k, [USER])
        yield k


def _visible_topic_for(kafka: KerberosKafka, users: list[str]) -> None:
    from confluent_kafka.admin import (
        AclBinding,
        AclBindingFilter,
        AclOperation,
        AclPermissionType,
        AdminClient,
        NewTopic,
        ResourcePatternType,
        ResourceType,
    )

    admin = AdminClient({"bootstrap.servers": kafka.bootstrap})
    for f in admin.create_topics([NewTopic(t, 1, 1) for t in (VISIBLE, HIDDEN)]).values():
        f.result()
    acls = [AclBinding(ResourceType.TOPIC, VISIBLE, ResourcePatternType.LITERAL, f"User:{u}", "*",
                       AclOperation.DESCRIBE, AclPermissionType.ALLOW) for u in users]
    for f in admin.create_acls(acls).values():
        f.result()
    anything = AclBindingFilter(ResourceType.TOPIC, VISIBLE, ResourcePatternType.LITERAL, None, None,
                                AclOperation.ANY, AclPermissionType.ANY)
    wait_for(lambda: len(admin.describe_acls(anything).result()) == len(users), 30,
             what="the broker's authorizer to hold the test's ACLs")


def _keytab(kdc: Kdc, user: str, tmp_path):
    return kdc.keytab([user], tmp_path / f"{user}.keytab")


def _listed(lines: list[dict]) -> list[list[str]]:
    return [ln["topics"] for ln in lines if "topics" in ln]


def test_kdc_issues_tickets(kdc, tmp_path):
    alice = kdc.add_principal("alice", password="alice-pw", max_life=60)
    assert kdc.kinit("alice", password="alice-pw", ccache=f"FILE:{tmp_path}/a").returncode == 0
    [tgt] = kdc.tickets(f"FILE:{tmp_path}/a")
    assert tgt.service == f"krbtgt/{kdc.realm}@{kdc.realm}"
    assert (tgt.expires - tgt.starts).total_seconds() == 60, "max_life caps the ticket"

    wrong = kdc.kinit("alice", password="nope", ccache=f"FILE:{tmp_path}/b")
    assert wrong.returncode != 0 and "Password incorrect" in wrong.stderr
    keytab = kdc.keytab(["alice"], tmp_path / "alice.keytab")
    assert kdc.kinit(alice, keytab=keytab, ccache=f"FILE:{tmp_path}/c").returncode == 0, "keytab and password both valid"

    port = kdc.port
    with kdc.outage():
        down = kdc.kinit("alice", keytab=keytab, ccache=f"FILE:{tmp_path}/d")
        assert down.returncode != 0 and "Cannot contact any KDC" in down.stderr
    assert kdc.port == port and kdc.kinit("alice", keytab=keytab, ccache=f"FILE:{tmp_path}/d").returncode == 0


@pytest.mark.parametrize("listener", [KERBEROS, KERBEROS_SSL])
def test_kafka_python_logs_in_from_a_keytab(kdc, kafka, listener, tmp_path):
    """No kinit: MIT's client keytab (KRB5_CLIENT_KTNAME) gives python-gssapi's default
    credentials, in the process's own ccache."""
    kafka_python_gssapi()
    ccache = f"FILE:{tmp_path}/kafka-python.cc"
    env = kdc.client_env(_keytab(kdc, USER, tmp_path), ccache)
    lines = run_probe(sys.executable, KAFKA_PYTHON_PROBE,
                      {"client": kafka.kafka_python_settings(listener), "seconds": 0, "interval": 1}, env, 120)
    assert _listed(lines) == [[VISIBLE]], lines
    services = {t.service.split("@")[0] for t in kdc.tickets(ccache)}
    assert {f"krbtgt/{kdc.realm}", "kafka/127.0.0.1"} <= services
    assert not kdc.default_ccache.exists(), "the client wrote to the default ccache"


@pytest.mark.parametrize("listener", [KERBEROS, KERBEROS_SSL])
def test_librdkafka_logs_in_from_a_keytab(kdc, kafka, listener, tmp_path):
    """librdkafka's own `kinit` (sasl.kerberos.keytab/principal) writes the process's KRB5CCNAME."""
    python = librdkafka_gssapi_python()
    ccache = f"FILE:{tmp_path}/librdkafka.cc"
    client = kafka.librdkafka_settings(listener, USER, _keytab(kdc, USER, tmp_path))
    lines = run_probe(python, LIBRDKAFKA_PROBE, {"client": client, "seconds": 0, "interval": 1},
                      kdc.env({"KRB5CCNAME": ccache}), 120)
    assert _listed(lines) == [[VISIBLE]], lines
    assert [t.service for t in kdc.tickets(ccache)][0] == f"krbtgt/{kdc.realm}@{kdc.realm}"
    assert not kdc.default_ccache.exists(), "kinit wrote to the default ccache"


def test_librdkafka_logs_in_without_kinit(kdc, kafka, tmp_path):
    """With its kinit off, librdkafka (Cyrus SASL) takes MIT's client keytab too: a MEMORY
    ccache, no child process, no file."""
    python = librdkafka_gssapi_python()
    client = {**kafka.librdkafka_settings(KERBEROS, USER, "/nonexistent"), "sasl.kerberos.min.time.before.relogin": 0}
    env = kdc.client_env(_keytab(kdc, USER, tmp_path), "MEMORY:txnwatch", {"PATH": "/nonexistent"})
    lines = run_probe(python, LIBRDKAFKA_PROBE, {"client": client, "seconds": 0, "interval": 1}, env, 120)
    assert _listed(lines) == [[VISIBLE]], lines
