"""Access findings (txnwatch.exporter.access): kafka-acls.sh commands and the evidence rules;
and principals and the messages for rejected credentials and TLS handshakes
(txnwatch.kafka.errors)."""

import shlex

import pytest

from txnwatch.exporter import access
from txnwatch.exporter.access import Evidence, TapReadWatch
from txnwatch.kafka import errors
from txnwatch.kafka.answers import ActiveProducer

SCRAM = {"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "txnwatch",
         "sasl.password": "hunter2-secret", "ssl.ca.location": "/etc/ca.pem"}
B = "k1:9093,k2:9093"


def kinds(fs):
    return [f.kind for f in fs]


def test_principal_follows_from_sasl_plain_and_scram_only():
    assert errors.principal_of(SCRAM) == "User:txnwatch"
    assert errors.principal_of({**SCRAM, "sasl.mechanism": None, "sasl.mechanisms": "plain"}) == "User:txnwatch"
    assert errors.principal_of({**SCRAM, "security.protocol": "SSL"}) is None       # no SASL on SSL
    assert errors.principal_of({**SCRAM, "sasl.mechanism": "OAUTHBEARER"}) is None
    assert errors.principal_of({}) is None


def test_acl_command_is_a_valid_shell_line_for_the_principal():
    cmd = access.acl_command(SCRAM, B, "Describe", "transactional-id", ["*"])
    assert cmd == ("kafka-acls.sh --bootstrap-server k1:9093,k2:9093 --command-config admin.properties --add "
                   "--allow-principal User:txnwatch --operation Describe --transactional-id '*'")
    assert shlex.split(cmd)[-1] == "*"
    plaintext = access.acl_command({}, "k:9092", "Read", "topic", ["a", "b"])
    assert plaintext == ("kafka-acls.sh --bootstrap-server k:9092 --add --allow-principal "
                         "'User:<the exporter principal>' --operation Read --topic a --topic b")
    mtls = access.acl_command({"security.protocol": "SSL", "ssl.certificate.location": "/c.pem"}, "k:1",
                              "Read", "topic", ["__transaction_state"])
    assert "--allow-principal 'User:<distinguished name of ssl.certificate.location" in mtls
    assert access.acl_command(SCRAM, B, "DescribeConfigs", "cluster", []).endswith(
        "--operation DescribeConfigs --cluster")
    odd = access.acl_command({**SCRAM, "sasl.username": "o'brien svc"}, B, "Read", "topic", ["t"])
    assert shlex.split(odd)[shlex.split(odd).index("--allow-principal") + 1] == "User:o'brien svc"


def test_denied_ids_are_proof_and_name_the_ids():
    (f,) = access.findings(Evidence(listed_ids=0, denied_ids=("app-1", "app-0")), SCRAM, B)
    assert f.kind == "acl_transactional_id_describe" and f.severity == "warning"
    assert "User:txnwatch may not DESCRIBE transactional ids" in f.message
    assert "TRANSACTIONAL_ID_AUTHORIZATION_FAILED for app-0, app-1" in f.message
    assert f.message.endswith("--operation Describe --transactional-id '*'")


def test_unlisted_open_transactions_count_only_when_nothing_is_listed():
    unlisted = (("orders", 1, 7),)
    (f,) = access.findings(Evidence(listed_ids=0, unlisted_open=unlisted), SCRAM, B)
    assert "ListTransactions returned no transactional ids" in f.message and "orders-1 (producer id 7)" in f.message
    assert "hanging" in f.message   # the other explanation is named
    # with some ids listed, an unlisted producer is as likely a hanging transaction: no ACL claim
    assert access.findings(Evidence(listed_ids=3, unlisted_open=unlisted), SCRAM, B) == []
    # proof wins over the weaker evidence: one finding
    assert kinds(access.findings(Evidence(listed_ids=0, denied_ids=("a",), unlisted_open=unlisted), SCRAM, B)) == [
        "acl_transactional_id_describe"]


def test_unlisted_open_producers_and_ids_to_probe():
    ps = [ActiveProducer("t", 0, 7, 0, 0, 1, 42), ActiveProducer("t", 1, 7, 0, 0, 1, 3),
          ActiveProducer("t", 2, 8, 0, 0, 1, -1),        # no open transaction (idempotent producer)
          ActiveProducer("u", 0, 9, 0, 0, 1, 0)]         # listed
    assert access.unlisted_open_producers(ps, [9]) == [("t", 0, 7), ("t", 1, 7)]
    assert access.ids_to_probe(["c", "a", "b", "a", "z"], ["z"], limit=2) == ["a", "b"]
    assert access.ids_to_probe(["a"], ["a"]) == []


def test_topic_read_and_transaction_log_findings():
    fs = access.findings(Evidence(denied_topics=("b", "a"), tap_read_denied=True), SCRAM, B)
    assert kinds(fs) == ["acl_topic_read", "acl_transaction_state_read"]
    assert "may not READ a, b: DescribeProducers answered TOPIC_AUTHORIZATION_FAILED" in fs[0].message
    assert fs[0].message.endswith("--operation Read --topic a --topic b")
    assert fs[1].message.endswith("--allow-principal User:txnwatch --operation Read --topic __transaction_state")
    many = access.findings(Evidence(denied_topics=tuple(f"t{i}" for i in range(8))), SCRAM, B)[0].message
    assert "and 3 more" in many and many.count("--topic") == 5
    assert access.findings(Evidence(), SCRAM, B) == []


def test_transaction_state_readable_from_authorized_operations():
    assert access.transaction_state_readable(["DESCRIBE", "READ"], None) is True
    assert access.transaction_state_readable(["ALL"], None) is True
    assert access.transaction_state_readable(["DESCRIBE", "DESCRIBE_CONFIGS"], None) is False
    assert access.transaction_state_readable(None, "TOPIC_AUTHORIZATION_FAILED") is False
    assert access.transaction_state_readable(None, "UNKNOWN_TOPIC_OR_PART") is None   # no transactions yet
    assert access.transaction_state_readable(None, None) is None


def test_tap_watch_refused_until_the_tap_progresses():
    w = TapReadWatch()
    w = access.observe_tap(w, denials=0, applied=0, rebuilt=False)
    assert not w.denied
    w = access.observe_tap(w, denials=1, applied=0, rebuilt=False)      # metadata refused
    assert w.denied
    w = access.observe_tap(w, denials=1, applied=0, rebuilt=False)      # silence is no progress
    assert w.denied
    w = access.observe_tap(w, denials=11, applied=0, rebuilt=False)     # DESCRIBE only: fetches refused
    assert w.denied
    w = access.observe_tap(w, denials=11, applied=0, rebuilt=True)      # READ granted: rebuilt
    assert not w.denied
    w = access.observe_tap(w, denials=11, applied=40, rebuilt=True)
    assert not w.denied
    # refused again later (READ revoked): denied until records are applied again
    w = access.observe_tap(w, denials=12, applied=40, rebuilt=True)
    assert w.denied
    w = access.observe_tap(w, denials=12, applied=40, rebuilt=True)
    assert w.denied
    w = access.observe_tap(w, denials=12, applied=41, rebuilt=True)
    assert not w.denied


def test_auth_failure_message_says_what_to_check_never_the_password():
    detail = ("sasl_ssl://k1:9093/bootstrap: SASL authentication error: Authentication failed during "
              "authentication due to invalid credentials with SASL mechanism SCRAM-SHA-512 "
              "(after 312ms in state AUTH_REQ)")
    msg = errors.auth_failure_message(SCRAM, detail)
    assert msg.startswith("authentication failed: the broker rejected the SASL/SCRAM-SHA-512 credentials "
                          "of user 'txnwatch'")
    assert "Check sasl.username and sasl.password" in msg
    assert "kafka-configs.sh --describe --entity-type users --entity-name txnwatch" in msg
    assert "after 312ms" not in msg   # stable text, not one per attempt
    assert "hunter2-secret" not in msg
    plain = errors.auth_failure_message({**SCRAM, "sasl.mechanism": "PLAIN"}, "Invalid username or password")
    assert "JAAS" in plain and "hunter2-secret" not in plain
    token = errors.auth_failure_message({"sasl.mechanism": "OAUTHBEARER"},
                                        'SASL authentication error: {"status":"invalid_token"} (after 303ms in state '
                                        'AUTH_REQ)')
    assert token.startswith('authentication failed: the broker rejected the SASL/OAUTHBEARER token '
                            '(SASL authentication error: {"status":"invalid_token"})')
    assert "sasl.oauthbearer.expected.audience" in token and "sasl.username" not in token


@pytest.mark.parametrize("said, words", [
    ("SASL authentication error: GSSAPI Error: Unspecified GSS failure (Clock skew too great)",
     "clock skew against the KDC is more than it allows"),
    ("GSSAPI Error: Miscellaneous failure (Cannot contact any KDC for realm 'EX.COM')", "no KDC answers"),
    ("kinit: Preauthentication failed while getting initial credentials", "export a new keytab"),
    ("Client 'txnwatch@EX.COM' not found in Kerberos database", "the KDC does not know the principal"),
])
def test_a_failed_kerberos_login_in_an_operators_words(said, words):
    props = {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "GSSAPI",
             "sasl.kerberos.principal": "txnwatch@EX.COM", "sasl.kerberos.keytab": "/etc/t.keytab"}
    msg = errors.auth_failure_message(props, said + " (after 12ms in state AUTH_REQ)")
    assert msg.startswith("Kerberos login of txnwatch@EX.COM failed: ") and words in msg and said in msg
    assert "after 12ms" not in msg


def test_tls_failure_message_names_the_ca_setting():
    msg = errors.tls_failure_message(SCRAM, "SSL handshake failed: certificate verify failed (after 9ms in "
                                            "state SSL_HANDSHAKE)")
    assert msg.startswith("TLS handshake failed (SSL handshake failed: certificate verify failed)")
    assert "ssl.ca.location (/etc/ca.pem)" in msg
    assert "not set: the system CAs are used" in errors.tls_failure_message({}, "x")


def test_cluster_describe_configs_finding():
    (f,) = access.findings(Evidence(cluster_configs_denied=True), SCRAM, B)
    assert f.kind == "acl_cluster_describe_configs"
    assert "User:txnwatch may not DESCRIBE_CONFIGS the cluster" in f.message and "defaults are assumed" in f.message
    assert f.message.endswith("--allow-principal User:txnwatch --operation DescribeConfigs --cluster")


def test_unrestricted_principals_have_nothing_hidden():
    everything = ["ALTER", "ALTER_CONFIGS", "CLUSTER_ACTION", "CREATE", "DESCRIBE", "DESCRIBE_CONFIGS",
                  "IDEMPOTENT_WRITE"]            # what a broker without authorizer answers
    assert access.unrestricted(everything)
    assert not access.unrestricted(["DESCRIBE_CONFIGS"])
    assert not access.unrestricted(None)         # unknown: the evidence stands
