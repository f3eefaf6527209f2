"""The test environment of OAUTHBEARER and PKCS#12 logins: the local OIDC issuer
(txnwatch_dev/identity/oidc.py) grants and refuses as told; librdkafka (oauth_cb) and
kafka-python (a token provider) list topics through Kafka's own OIDC validator on a secured
node (txnwatch_dev/kafka/secure.py), as the token's sub, and go on doing so after their
first token expired; the broker refuses expired, garbage, foreign and mis-addressed tokens
and learns a new signing key on first sight; the client's PKCS#12 keystores pass mutual TLS.

The token functions here are the tests' own, one issuer request per call: they stand for
what the product's provider will be measured against.
"""

from __future__ import annotations

import base64
import contextlib
import json
import logging
import os
import ssl
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest

from txnwatch_dev.identity.oidc import OidcIssuer, SigningKey, TokenError, decode_claims, request_token
from txnwatch_dev.net import port_open, wait_for
from txnwatch_dev.transactions.workload import create_topics

pytestmark = pytest.mark.integration

LIFETIME = 15          # seconds: the first tokens expire within the module's run
SECRET = "oidc-Secret-5b2e71"
TOPIC = "oauth-orders"


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    """An issuer with two clients and a secured node validating its tokens; User:txnwatch
    and the mTLS client may see the oauth- topics, User:stranger nothing."""
    from txnwatch_dev.kafka.secure import Grant, SecureKafka

    work = tmp_path_factory.mktemp("oauth")
    idp = OidcIssuer(work / "idp", lifetime=LIFETIME).start()
    kafka = None
    try:
        for client in ("txnwatch", "stranger"):
            idp.register(client, SECRET)
        kafka = SecureKafka(work / "kafka", oidc=idp)
        kafka.start()
        create_topics(kafka.bootstrap, [TOPIC])
        for principal in ("User:txnwatch", kafka.tls.client_principal):
            kafka.grant(principal, [Grant("TOPIC", "oauth-", "DESCRIBE", "PREFIXED")])
        yield SimpleNamespace(idp=idp, kafka=kafka)
    finally:
        if kafka is not None:
            kafka.cleanup()
        idp.stop()


# ------------------------------------------------------------------ the tests' token sources
def issuer_cb(idp: OidcIssuer, client_id: str, calls: list[float] | None = None):
    """confluent-kafka's oauth_cb: a fresh token from the issuer, and its expiry."""
    def fetch(_config):
        asked = time.time()
        answer = request_token(idp.token_url, client_id, SECRET, ca_file=idp.ca_cert)
        if calls is not None:
            calls.append(asked)
        return answer["access_token"], asked + answer["expires_in"]
    return fetch


def fixed_cb(token: str):
    """An oauth_cb handing out one token, claimed valid for a minute (the broker judges it)."""
    return lambda _config: (token, time.time() + 60)


def issuer_provider(idp: OidcIssuer, client_id: str):
    """kafka-python's token provider: a fresh token from the issuer at each authentication."""
    from kafka.net.sasl.oauth import AbstractTokenProvider

    class IssuerTokens(AbstractTokenProvider):
        def __init__(self) -> None:
            super().__init__()
            self.calls: list[float] = []

        def token(self) -> str:
            self.calls.append(time.time())
            return request_token(idp.token_url, client_id, SECRET, ca_file=idp.ca_cert)["access_token"]

    return IssuerTokens()


def rd_admin(kafka, listener: str, cb, errors: list | None = None):
    from confluent_kafka.admin import AdminClient

    conf = {"bootstrap.servers": kafka.bootstrap_of(listener), **kafka.client_settings(listener, oauth_cb=cb),
            "log_level": 0}   # refusals are what some tests are about: no log lines
    if errors is not None:
        conf["error_cb"] = errors.append
    return AdminClient(conf)


def topics_of(admin) -> set[str]:
    return set(admin.list_topics(timeout=10).topics)


@contextlib.contextmanager
def kp_admin(kafka, listener: str, **kwargs) -> Iterator:
    """A kafka-python KafkaAdminClient on `listener`, closed (its IO thread ended) on exit;
    kafka-python as the exporter runs it (an answer read with the broker's close is kept:
    txnwatch/kafka/kafka_python.py)."""
    from kafka import KafkaAdminClient

    from txnwatch.kafka.kafka_python import deliver_answers_read_with_eof
    from txnwatch_dev.kafka.secure import PROTOCOLS

    deliver_answers_read_with_eof()
    client = KafkaAdminClient(bootstrap_servers=kafka.bootstrap_of(listener), security_protocol=PROTOCOLS[listener],
                              ssl_cafile=str(kafka.tls.ca_pem), **kwargs)
    try:
        yield client
    finally:
        client.close()


# ------------------------------------------------------------------ the issuer
def verify_signature(token: str, jwks: dict) -> str:
    """The kid whose JWKS key verifies `token` (RS256); raises if none does."""
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import padding, rsa

    def uint(b64: str) -> int:
        return int.from_bytes(base64.urlsafe_b64decode(b64 + "=" * (-len(b64) % 4)), "big")

    head, payload, sig = token.split(".")
    kid = json.loads(base64.urlsafe_b64decode(head + "=" * (-len(head) % 4)))["kid"]
    (jwk,) = [k for k in jwks["keys"] if k["kid"] == kid]
    key = rsa.RSAPublicNumbers(uint(jwk["e"]), uint(jwk["n"])).public_key()
    key.verify(base64.urlsafe_b64decode(sig + "=" * (-len(sig) % 4)), f"{head}.{payload}".encode(),
               padding.PKCS1v15(), hashes.SHA256())
    return kid


def get_json(url: str, ca: Path | None) -> dict:
    import urllib.request

    context = ssl.create_default_context(cafile=str(ca)) if ca else None
    with urllib.request.urlopen(url, timeout=5, context=context) as r:
        return json.loads(r.read())


def raw_basic_status(idp: OidcIssuer, client_id: str, secret: str) -> int:
    """The status of a grant whose basic credentials are not form-encoded first, as librdkafka
    and the Java client send them."""
    import urllib.request

    auth = base64.b64encode(f"{client_id}:{secret}".encode()).decode()
    req = urllib.request.Request(idp.token_url, b"grant_type=client_credentials", method="POST",
                                 headers={"Authorization": f"Basic {auth}",
                                          "Content-Type": "application/x-www-form-urlencoded"})
    with urllib.request.urlopen(req, timeout=5, context=ssl.create_default_context(cafile=str(idp.ca_cert))) as r:
        return r.status


def refusal(idp: OidcIssuer, client_id: str, secret: str, **kwargs) -> TokenError:
    with pytest.raises(TokenError) as info:
        request_token(idp.token_url, client_id, secret, **{"ca_file": idp.ca_cert, **kwargs})
    return info.value


def test_issuer_grants_and_refuses_as_told(tmp_path):
    with OidcIssuer(tmp_path / "idp", lifetime=20) as idp:
        idp.register("app", "pw 1/é:x")    # RFC 6749 form-encodes basic credentials
        before = time.time()
        answer = request_token(idp.token_url, "app", "pw 1/é:x", ca_file=idp.ca_cert)
        assert (answer["token_type"], answer["expires_in"], answer["scope"]) == ("Bearer", 20, "kafka")
        claims = decode_claims(answer["access_token"])
        assert (claims["sub"], claims["iss"], claims["aud"], claims["scope"]) == ("app", idp.issuer, "kafka", "kafka")
        assert claims["exp"] - claims["iat"] == 20 and claims["iat"] >= int(before)
        assert verify_signature(answer["access_token"], get_json(idp.jwks_url, idp.ca_cert)) == idp.kid
        assert request_token(idp.token_url, "app", "pw 1/é:x", ca_file=idp.ca_cert, basic=False)["access_token"]
        assert raw_basic_status(idp, "app", "pw 1/é:x") == 200
        discovery = get_json(idp.discovery_url, idp.ca_cert)
        assert (discovery["token_endpoint"], discovery["jwks_uri"]) == (idp.token_url, idp.jwks_url)

        assert (refusal(idp, "app", "wrong").status, refusal(idp, "app", "wrong").error) == (401, "invalid_client")
        assert refusal(idp, "app", "pw 1/é:x", scope="admin").error == "invalid_scope"
        assert refusal(idp, "app", "pw 1/é:x", ca_file=None).status == 0    # TLS: the issuer's own CA
        # a secret rotation: both valid, then the old one revoked
        idp.register("app", "second")
        request_token(idp.token_url, "app", "second", ca_file=idp.ca_cert)
        idp.revoke("app", "pw 1/é:x")
        assert refusal(idp, "app", "pw 1/é:x").status == 401
        assert request_token(idp.token_url, "app", "second", ca_file=idp.ca_cert)
        assert (idp.token_requests("app"), idp.tokens_issued("app")) == (9, 5)

        idp.failing = 503
        assert (refusal(idp, "app", "second").status, refusal(idp, "app", "second").error) == \
            (503, "temporarily_unavailable")
        idp.failing = None
        with idp.outage():
            assert not port_open(idp.host, idp.port)
            assert refusal(idp, "app", "second").error == "unreachable"
        assert request_token(idp.token_url, "app", "second", ca_file=idp.ca_cert)   # the same port again

        old = idp.kid
        new = idp.rotate_key()
        token = request_token(idp.token_url, "app", "second", ca_file=idp.ca_cert)["access_token"]
        jwks = get_json(idp.jwks_url, idp.ca_cert)
        assert new != old and {k["kid"] for k in jwks["keys"]} == {old, new}
        assert verify_signature(token, jwks) == new
        assert decode_claims(idp.mint("app", lifetime=-60))["exp"] < time.time() - 59

    with OidcIssuer(tmp_path / "plain", tls=False) as plain:   # for a client that must refuse http
        plain.register("app", "pw")
        assert plain.token_url.startswith("http://") and plain.ca_cert is None
        assert request_token(plain.token_url, "app", "pw")["token_type"] == "Bearer"
    assert not [t for t in threading.enumerate() if t.name.startswith("oidc-issuer")]


# ------------------------------------------------------------------ OAUTHBEARER through Kafka's validator
def test_both_clients_list_topics_as_the_token_subject(env):
    """(That both keep doing so past their first token's end, on the exporter's own token
    provider, is tests/integration/test_logins.py's.)"""
    from txnwatch_dev.kafka.secure import OAUTH, OAUTH_PLAIN

    kafka, idp = env.kafka, env.idp
    assert TOPIC in topics_of(rd_admin(kafka, OAUTH, issuer_cb(idp, "txnwatch")))
    assert TOPIC in topics_of(rd_admin(kafka, OAUTH_PLAIN, issuer_cb(idp, "txnwatch")))
    stranger = rd_admin(kafka, OAUTH, issuer_cb(idp, "stranger"))
    assert TOPIC not in topics_of(stranger)      # authenticated, as User:stranger, without ACLs
    with kp_admin(kafka, OAUTH, sasl_mechanism="OAUTHBEARER",
                  sasl_oauth_token_provider=issuer_provider(idp, "txnwatch")) as kp:
        assert TOPIC in kp.list_topics()


def test_broker_refuses_expired_garbage_foreign_and_misaddressed_tokens(env, caplog):
    from confluent_kafka import KafkaError

    from txnwatch_dev.kafka.secure import OAUTH

    kafka, idp = env.kafka, env.idp
    valid = decode_claims(idp.mint("txnwatch"))
    tokens = {"expired a minute ago": idp.mint("txnwatch", lifetime=-60),
              "not a JWT": "not-a-jwt",
              "for another audience": idp.mint("txnwatch", audience="elsewhere"),
              "from another issuer": idp.mint("txnwatch", issuer="https://idp.elsewhere.example"),
              "signed by an unknown key": SigningKey.generate().sign(valid)}
    errors = {name: [] for name in tokens}
    clients = {name: rd_admin(kafka, OAUTH, fixed_cb(t), errors[name]) for name, t in tokens.items()}

    def refused(name: str) -> bool:
        clients[name].poll(0.2)      # error_cb is served from poll()
        return any(e.code() == KafkaError._AUTHENTICATION and '{"status":"invalid_token"}' in e.str()
                   for e in errors[name])

    for name in tokens:
        wait_for(lambda n=name: refused(n), 30, what=f"the broker to refuse the token {name}")
    # kafka-python: the constructor gives up bootstrapping; only its log says why
    from kafka.errors import KafkaTimeoutError
    from kafka.net.sasl.oauth import AbstractTokenProvider

    class Garbage(AbstractTokenProvider):
        def token(self) -> str:
            return "not-a-jwt"

    with caplog.at_level(logging.WARNING, logger="kafka"), pytest.raises(KafkaTimeoutError):
        with kp_admin(kafka, OAUTH, sasl_mechanism="OAUTHBEARER", sasl_oauth_token_provider=Garbage(),
                      bootstrap_timeout_ms=3000):
            pass
    assert 'SaslAuthenticationFailedError: {"status":"invalid_token"}' in caplog.text


def test_a_new_signing_key_is_refused_once_then_fetched_by_the_broker(env):
    from confluent_kafka import KafkaError

    from txnwatch_dev.kafka.secure import OAUTH

    kafka, idp = env.kafka, env.idp
    idp.rotate_key()
    errors: list = []
    admin = rd_admin(kafka, OAUTH, issuer_cb(idp, "txnwatch"), errors)

    def listed() -> bool:
        admin.poll(0)
        return TOPIC in topics_of(admin)

    wait_for(listed, 30, what="a token of the new key to pass once the broker fetched the JWKS again")
    admin.poll(0)
    assert [e for e in errors if e.code() == KafkaError._AUTHENTICATION], "the first login was not refused"


# ------------------------------------------------------------------ PKCS#12 client keystores
def pem_of(keystore: Path, password: str) -> tuple[bytes, bytes]:
    """(certificate, unencrypted PKCS#8 key) of a PKCS#12 keystore of either encryption
    (cryptography's OpenSSL has the legacy provider)."""
    from cryptography.hazmat.primitives.serialization import Encoding, NoEncryption, PrivateFormat, pkcs12

    key, cert, _ca = pkcs12.load_key_and_certificates(keystore.read_bytes(), password.encode())
    return cert.public_bytes(Encoding.PEM), key.private_bytes(Encoding.PEM, PrivateFormat.PKCS8, NoEncryption())


@contextlib.contextmanager
def memfd_path(data: bytes) -> Iterator[str]:
    """`data` in an anonymous memory file, never on disk, by the path /proc/self/fd/N."""
    fd = os.memfd_create("txnwatch-client-pem", os.MFD_CLOEXEC)
    try:
        os.write(fd, data)
        yield f"/proc/self/fd/{fd}"
    finally:
        os.close(fd)


def test_pkcs12_keystores_pass_mutual_tls(env):
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    from txnwatch_dev.kafka.secure import MTLS

    kafka = env.kafka
    tls = kafka.tls
    bootstrap = {"bootstrap.servers": kafka.bootstrap_of(MTLS)}
    # librdkafka reads the modern keystore itself; its OpenSSL has no legacy provider for RC2
    assert TOPIC in topics_of(AdminClient({**bootstrap, **kafka.client_settings(MTLS, keystore=tls.client_keystore)}))
    with pytest.raises(KafkaException, match="RC2-40-CBC"):
        AdminClient({**bootstrap, **kafka.client_settings(MTLS, keystore=tls.client_keystore_legacy)})
    plain = kafka.client_settings(MTLS, client_cert=False)
    for keystore in (tls.client_keystore, tls.client_keystore_legacy):
        cert, key = pem_of(keystore, tls.client_keystore_password)
        # either kind, opened here and given to librdkafka as PEM strings
        admin = AdminClient({**bootstrap, **plain, "ssl.certificate.pem": cert.decode(), "ssl.key.pem": key.decode()})
        assert TOPIC in topics_of(admin), keystore.name
        # kafka-python takes files: the PEM in a memfd, loaded per connection from its path ...
        with memfd_path(key + cert) as path, kp_admin(kafka, MTLS, ssl_certfile=path) as kp:
            assert TOPIC in kp.list_topics(), keystore.name
        # ... or once, into an SSLContext that outlives the memfd
        context = ssl.create_default_context(cafile=str(tls.ca_pem))
        with memfd_path(key + cert) as path:
            context.load_cert_chain(path)
        with kp_admin(kafka, MTLS, ssl_context=context) as kp:
            assert TOPIC in kp.list_topics(), keystore.name
