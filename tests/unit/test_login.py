"""Logins, without a broker: what the client properties describe and which of them cannot
work (txnwatch/kafka/login/settings.py), when tokens are refreshed and retried (tokens.py),
what a token endpoint's answers become (oidc.py), how AWS's MSK IAM signer is called
(msk_iam.py: no MSK runs here), PKCS#12 keystores opened for both clients (tls.py) and a
login's configuration for each client (session.py)."""

from __future__ import annotations

import datetime
import io
import json
import ssl
import urllib.error

import pytest

from txnwatch.kafka.login import LoginSettingsError, parse
from txnwatch.kafka.login.oidc import _claims, _lifetime, _refusal
from txnwatch.kafka.login.settings import MSK_IAM, OIDC, STATIC, OidcSettings
from txnwatch.kafka.login.tokens import MAX_RETRY_SECONDS, Token, next_retry, refresh_due, retry_after, valid

OIDC_PROPS = {"bootstrap.servers": "k:9093", "security.protocol": "SASL_SSL", "sasl.mechanism": "OAUTHBEARER",
              "sasl.oauthbearer.method": "oidc", "sasl.oauthbearer.token.endpoint.url": "https://idp/token",
              "sasl.oauthbearer.client.id": "txnwatch", "sasl.oauthbearer.client.secret": "s3cret-9f"}


# ---------------------------------------------------------------- settings
def test_oidc_settings_with_librdkafkas_and_the_java_clients_names():
    s = parse({**OIDC_PROPS, "sasl.oauthbearer.scope": "kafka", "sasl.oauthbearer.extensions": "logicalCluster=lkc-1,a=b"})
    assert s.token_source == OIDC and s.oidc.client_id == "txnwatch" and s.oidc.scope == "kafka"
    assert s.oidc.extensions == (("logicalCluster", "lkc-1"), ("a", "b"))
    java = {k: v for k, v in OIDC_PROPS.items() if "client." not in k}
    java.update({"sasl.oauthbearer.client.credentials.client.id": "svc",
                 "sasl.oauthbearer.client.credentials.client.secret": "x"})
    assert parse(java).oidc.client_id == "svc"
    assert "s3cret-9f" not in repr(s) and "s3cret-9f" not in s.describe()
    assert s.describe() == ("SASL/OAUTHBEARER, OIDC client credentials of txnwatch at https://idp/token "
                            "over SASL_SSL")


@pytest.mark.parametrize("props, key, words", [
    ({**OIDC_PROPS, "sasl.oauthbearer.token.endpoint.url": "http://idp.example.com/token"},
     "sasl.oauthbearer.token.endpoint.url", "is not an https:// URL"),
    ({**OIDC_PROPS, "sasl.oauthbearer.client.secret": ""}, "sasl.oauthbearer.client.secret", "needs it"),
    ({**OIDC_PROPS, "sasl.oauthbearer.grant.type": "password"}, "sasl.oauthbearer.grant.type", "client credentials"),
    ({**OIDC_PROPS, "sasl.oauthbearer.extensions": "nokey"}, "sasl.oauthbearer.extensions", "k1=v1,k2=v2"),
    ({"security.protocol": "SASL_SSL", "sasl.mechanism": "OAUTHBEARER", "sasl.oauthbearer.method": "aws_msk_iam"},
     "sasl.oauthbearer.aws.region", "region"),
    ({"security.protocol": "SASL_SSL", "sasl.mechanism": "OAUTHBEARER", "sasl.oauthbearer.method": "magic"},
     "sasl.oauthbearer.method", "not a method txnwatch knows"),
    ({"security.protocol": "SASL_SSL", "sasl.mechanism": "OAUTHBEARER"}, "sasl.oauthbearer.method",
     "needs a way to get tokens"),
    ({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "GSSAPI", "sasl.kerberos.keytab": "/k.keytab"},
     "sasl.kerberos.principal", "a keytab needs the principal"),
    ({"security.protocol": "SSL", "ssl.engine.location": "/e.so"}, "ssl.engine.location", "OpenSSL engine"),
    ({"security.protocol": "SSL", "ssl.keystore.location": "/k.p12", "ssl.certificate.location": "/c.pem"},
     "ssl.keystore.location", "given twice"),
])
def test_settings_that_cannot_work_name_the_property(props, key, words):
    with pytest.raises(LoginSettingsError) as err:
        parse(props)
    assert err.value.key == key and words in err.value.message and err.value.cause == "login_config"
    assert "s3cret-9f" not in str(err.value)


def test_an_http_token_endpoint_on_loopback_is_taken():
    for url in ("http://127.0.0.1:8080/token", "http://localhost/t", "http://[::1]:9/t"):
        assert parse({**OIDC_PROPS, "sasl.oauthbearer.token.endpoint.url": url}).oidc.token_endpoint == url


def test_the_other_logins_described():
    assert parse({"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "u",
                  "sasl.password": "pw"}).describe() == "SASL/SCRAM-SHA-512 as u over SASL_SSL"
    k = parse({"security.protocol": "SASL_PLAINTEXT", "sasl.kerberos.keytab": "/etc/t.keytab",
               "sasl.kerberos.principal": "txnwatch@EX.COM"})
    assert k.mechanism == "GSSAPI" and k.kerberos.service_name == "kafka"       # librdkafka's default mechanism
    assert k.describe() == "SASL/GSSAPI (Kerberos) as txnwatch@EX.COM, from keytab /etc/t.keytab over SASL_PLAINTEXT"
    m = parse({"security.protocol": "SASL_SSL", "sasl.mechanism": "OAUTHBEARER", "sasl.oauthbearer.method": "AWS_MSK_IAM",
               "sasl.oauthbearer.aws.region": "eu-west-1", "sasl.oauthbearer.aws.profile": "ops"})
    assert (m.token_source, m.msk_iam.region, m.msk_iam.profile) == (MSK_IAM, "eu-west-1", "ops")
    s = parse({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "OAUTHBEARER",
               "sasl.oauthbearer.token": "tok-123"})
    assert s.token_source == STATIC and "tok-123" not in repr(s)
    assert parse({"security.protocol": "SSL", "ssl.keystore.location": "/k.p12", "ssl.keystore.password": "pw"}) \
        .describe() == "no SASL login; client certificate from PKCS#12 keystore /k.p12 over SSL"


# ---------------------------------------------------------------- token timing
def test_a_token_is_refreshed_most_of_the_way_through_its_life():
    t = Token("x", expires_at=1100.0, obtained_at=1000.0)
    assert refresh_due(t) == 1080.0
    assert valid(t, 1099.9) and not valid(t, 1100.0) and not valid(None, 0)


def test_failed_refreshes_back_off_to_a_ceiling():
    assert [retry_after(n) for n in (1, 2, 3, 4, 5, 6, 7, 50)] == [1, 2, 4, 8, 16, MAX_RETRY_SECONDS,
                                                                   MAX_RETRY_SECONDS, MAX_RETRY_SECONDS]
    assert next_retry(100.0, 6, None) == 100.0 + MAX_RETRY_SECONDS          # no token in hand


def test_retries_close_in_on_the_expiry_of_the_token_in_hand():
    """A token of 30 s refreshed at 24 s, its endpoint down from 24 to 28: the attempts come at
    24, 25, 27 and 28.5, so the one after the outage lands before the token's end at 30."""
    attempts, last = [24.0], 24.0
    for failures in (1, 2, 3):
        last = next_retry(last, failures, expires_at=30.0)
        attempts.append(last)
    assert attempts == [24.0, 25.0, 27.0, 28.5]
    assert next_retry(29.5, 9, expires_at=30.0) == 30.5      # never more often than a second


# ---------------------------------------------------------------- the token endpoint's answers
def _jwt(claims: dict) -> str:
    import base64

    enc = lambda d: base64.urlsafe_b64encode(json.dumps(d).encode()).rstrip(b"=").decode()  # noqa: E731
    return f"{enc({'alg': 'RS256'})}.{enc(claims)}.sig"


def test_a_tokens_principal_and_lifetime():
    assert _claims(_jwt({"sub": "txnwatch", "exp": 2000}))["sub"] == "txnwatch"
    assert _claims("opaque-token") == {}
    assert _lifetime({"expires_in": 300}, {"exp": 1200}, now=1000) == 200      # the sooner of the two
    assert _lifetime({"expires_in": 300}, {}, now=1000) == 300
    assert _lifetime({}, {"exp": 1060}, now=1000) == 60
    assert _lifetime({"expires_in": True}, {}, now=1000) == 300                 # the default


def _http_error(code: int, body: dict) -> urllib.error.HTTPError:
    return urllib.error.HTTPError("https://idp/token", code, "x", {}, io.BytesIO(json.dumps(body).encode()))


def test_what_a_refusing_token_endpoint_says():
    s = OidcSettings("https://idp/token", "txnwatch", "s3cret-9f", scope="kafka")
    rejected = _refusal(_http_error(401, {"error": "invalid_client"}), s)
    assert "answered 401 (invalid_client): client secret rejected for client 'txnwatch'" in rejected
    assert "s3cret-9f" not in rejected
    assert "scope 'kafka' refused" in _refusal(_http_error(400, {"error": "invalid_scope"}), s)
    assert "identity provider is unavailable" in _refusal(_http_error(503, {}), s)


# ---------------------------------------------------------------- AWS MSK IAM
class Signer:
    """AWS's MSKAuthTokenProvider module, as the token source calls it."""

    def __init__(self, fail: Exception | None = None) -> None:
        self.calls: list[tuple] = []
        self.fail = fail

    def _answer(self, *call):
        self.calls.append(call)
        if self.fail is not None:
            raise self.fail
        return f"signed-{len(self.calls)}", 1_000_900_000          # expiry in milliseconds

    def generate_auth_token(self, region):
        return self._answer("default", region)

    def generate_auth_token_from_profile(self, region, profile):
        return self._answer("profile", region, profile)

    def generate_auth_token_from_role_arn(self, region, role_arn):
        return self._answer("role", region, role_arn)


@pytest.mark.parametrize("extra, call", [
    ({}, ("default", "eu-west-1")),
    ({"sasl.oauthbearer.aws.profile": "ops"}, ("profile", "eu-west-1", "ops")),
    ({"sasl.oauthbearer.aws.role.arn": "arn:aws:iam::1:role/r"}, ("role", "eu-west-1", "arn:aws:iam::1:role/r")),
])
def test_msk_iam_tokens_come_from_awss_signer(extra, call):
    from txnwatch.kafka.login.msk_iam import token_source

    settings = parse({"security.protocol": "SASL_SSL", "sasl.mechanism": "OAUTHBEARER",
                      "sasl.oauthbearer.method": "aws_msk_iam", "sasl.oauthbearer.aws.region": "eu-west-1",
                      **extra}).msk_iam
    signer = Signer()
    token = token_source(settings, signer)(1_000_000.0)
    assert signer.calls == [call]
    assert (token.value, token.expires_at, token.obtained_at) == ("signed-1", 1_000_900.0, 1_000_000.0)
    assert refresh_due(token) == 1_000_720.0           # 80 % of its 15 minutes


def test_a_failing_signer_is_a_login_failure():
    from txnwatch.kafka.login.msk_iam import token_source
    from txnwatch.kafka.login.settings import MskIamSettings
    from txnwatch.kafka.login.tokens import LoginFailure

    with pytest.raises(LoginFailure) as err:
        token_source(MskIamSettings("eu-west-1"), Signer(fail=RuntimeError("Unable to locate credentials")))(0.0)
    assert err.value.cause == "auth" and "AWS MSK IAM signer (eu-west-1) failed: RuntimeError" in str(err.value)


# ---------------------------------------------------------------- PKCS#12 keystores
def _keystore(path, password: bytes, legacy: bool = False, with_key: bool = True):
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.hazmat.primitives.serialization import BestAvailableEncryption, PrivateFormat, pkcs12
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "txnwatch-client")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(1).not_valid_before(now).not_valid_after(now + datetime.timedelta(days=1))
            .sign(key, hashes.SHA256()))
    if legacy:
        encryption = (PrivateFormat.PKCS12.encryption_builder()
                      .key_cert_algorithm(pkcs12.PBES.PBESv1SHA1And3KeyTripleDESCBC)
                      .hmac_hash(hashes.SHA1()).build(password))
    else:
        encryption = BestAvailableEncryption(password)
    path.write_bytes(pkcs12.serialize_key_and_certificates(b"client", key if with_key else None, cert, None,
                                                           encryption))
    return path


@pytest.mark.parametrize("legacy", [False, True])
def test_a_keystore_opens_for_both_clients(tmp_path, legacy):
    from txnwatch.kafka.login.settings import Keystore
    from txnwatch.kafka.login.tls import open_keystore, ssl_context

    path = _keystore(tmp_path / "client.p12", b"ks-pass", legacy)
    identity = open_keystore(Keystore(str(path), "ks-pass"))
    assert identity.certificate_pem.startswith("-----BEGIN CERTIFICATE-----")
    assert "PRIVATE KEY" in identity.key_pem and "ENCRYPTED" not in identity.key_pem
    assert identity.subject == "CN=txnwatch-client" and "PRIVATE" not in repr(identity)
    ctx = ssl_context({"ssl.endpoint.identification.algorithm": "https"}, identity)   # loads through a memfd
    assert isinstance(ctx, ssl.SSLContext) and ctx.check_hostname


def test_a_keystore_that_does_not_open_is_named(tmp_path):
    from txnwatch.kafka.login.settings import Keystore
    from txnwatch.kafka.login.tls import open_keystore

    path = _keystore(tmp_path / "client.p12", b"ks-pass")
    with pytest.raises(LoginSettingsError) as err:
        open_keystore(Keystore(str(path), "wrong-pass-77"))
    assert err.value.key == "ssl.keystore.password" and "the password is wrong" in err.value.message
    assert "wrong-pass-77" not in str(err.value)
    truststore = _keystore(tmp_path / "trust.p12", b"ks-pass", with_key=False)
    with pytest.raises(LoginSettingsError, match="holds no private key"):
        open_keystore(Keystore(str(truststore), "ks-pass"))
    with pytest.raises(LoginSettingsError, match="cannot read"):
        open_keystore(Keystore(str(tmp_path / "missing.p12"), "ks-pass"))


# ---------------------------------------------------------------- a login, for each client
def test_a_keystore_login_gives_librdkafka_pem_and_kafka_python_a_context(tmp_path):
    from txnwatch.kafka.login.session import Login

    path = _keystore(tmp_path / "client.p12", b"ks-pass", legacy=True)
    props = {"bootstrap.servers": "k:9093", "security.protocol": "SSL", "ssl.keystore.location": str(path),
             "ssl.keystore.password": "ks-pass", "ssl.endpoint.identification.algorithm": "none"}
    login = Login(parse(props), props)
    rd = login.librdkafka({**props, "group.id": "g"})
    assert "ssl.keystore.location" not in rd and "ssl.keystore.password" not in rd and rd["group.id"] == "g"
    assert rd["ssl.certificate.pem"].startswith("-----BEGIN CERTIFICATE-----") and "PRIVATE KEY" in rd["ssl.key.pem"]
    kp = login.kafka_python(props, {})
    assert kp["ssl_context"].check_hostname is False
    assert login.status().principal == "CN=txnwatch-client"


def test_a_static_token_reaches_both_clients():
    from txnwatch.kafka.login.session import Login

    props = {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "OAUTHBEARER", "sasl.oauthbearer.token": "tok-5"}
    login = Login(parse(props), props)
    rd = login.librdkafka(props)
    assert "sasl.oauthbearer.token" not in rd
    value, _expiry, principal, extensions = rd["oauth_cb"](None)
    assert (value, principal, extensions) == ("tok-5", "static", {})
    assert login.kafka_python(props, {})["sasl_oauth_token_provider"].token() == "tok-5"


def test_a_clients_failure_is_told_by_its_failing_login():
    from txnwatch.kafka.login.session import _logins, explain, login_key
    from txnwatch.kafka.login.tokens import TokenStatus

    class Failing:
        def status(self):
            from txnwatch.kafka.login.session import LoginStatus

            return LoginStatus("SASL/OAUTHBEARER", failure="token endpoint answered 401: client secret rejected")

    props = {**OIDC_PROPS, "sasl.oauthbearer.client.id": "explain-test"}
    _logins[login_key(props)] = Failing()
    try:
        assert explain(props, "broker_unavailable", "all brokers down") == (
            "auth", "login failed: token endpoint answered 401: client secret rejected")
        assert explain(props, "_TRANSPORT", "x")[0] == "auth"
        assert explain(props, "authorization", "ACL") == ("authorization", "ACL")   # not the login's doing
        assert explain({**props, "sasl.oauthbearer.client.id": "other"}, "timeout", "t") == ("timeout", "t")
    finally:
        _logins.pop(login_key(props))
    assert TokenStatus().failure is None


def test_librdkafka_asks_again_within_seconds_while_the_refresh_fails():
    """librdkafka asks for a token again at 80 % of the expiry it is told: within a minute
    normally, and while the refresh fails within a couple of seconds, so the token fetched once
    the issuer is back reaches its connections before they re-authenticate at the old one's end."""
    from txnwatch.kafka.login.session import LIBRDKAFKA_EXPIRY_CAP, LIBRDKAFKA_RETRY_CAP, librdkafka_expiry

    now = 1_000.0
    token = Token("t", now + 600, now - 3000, "txnwatch")
    assert librdkafka_expiry(token, now, refresh_failing=False) == now + LIBRDKAFKA_EXPIRY_CAP
    assert librdkafka_expiry(token, now, refresh_failing=True) == now + LIBRDKAFKA_RETRY_CAP
    ending = Token("t", now + 0.5, now - 3000, "txnwatch")
    assert librdkafka_expiry(ending, now, refresh_failing=True) == now + 0.5   # never past the token's own end
