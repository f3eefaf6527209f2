"""A secured Apache Kafka KRaft node for tests: SASL (SCRAM-SHA-512 and PLAIN), TLS and
mutual-TLS listeners and the StandardAuthorizer (ACLs in the KRaft metadata log).

    with SecureKafka(workdir) as kafka:               # one node, TLS material made here
        kafka.add_scram_users({"txnwatch": "s3cret"})  # AlterUserScramCredentials
        kafka.grant("User:txnwatch", [Grant("TOPIC", "orders", "DESCRIBE"), ...])
        kafka.client_settings(SASL_SSL, "SCRAM-SHA-512", "txnwatch", "s3cret")  # librdkafka props

    with OidcIssuer(workdir / "idp") as idp, SecureKafka(workdir / "kafka", oidc=idp) as kafka:
        idp.register("txnwatch", "s3cret")            # identity/oidc.py: the token issuer
        kafka.grant("User:txnwatch", [...])            # the principal is the token's sub
        kafka.client_settings(OAUTH, oauth_cb=fetch)   # librdkafka props, the token from `fetch`

SCRAM credentials come two ways, as on a real KRaft cluster: `scram_users` are written at
storage format (`kafka-storage format --add-scram`), so they work from the first start;
`add_scram_users` adds more at any time through AlterUserScramCredentials (KIP-900).

Listeners (all on loopback):
  PLAINTEXT  the test's admin door: its principal (ANONYMOUS) is a super user. Tests set
             up topics, users, ACLs and producers through it; the exporter under test
             never connects here. The SCRAM user `admin` is a super user too, for the
             Kafka tools through a secured listener (`admin_properties`).
  INTERNAL   inter-broker (the coordinator's marker requests to itself), ANONYMOUS, super;
  CONTROLLER the KRaft controller listener, likewise.
  SASL       SASL_PLAINTEXT with SCRAM-SHA-512 and PLAIN.
  SASL_SSL   SASL_SSL (TLS, server certificate from a CA made here) with SCRAM-SHA-512 and PLAIN.
  MTLS       SSL with client certificates required; the principal is the certificate's
             distinguished name, e.g. User:CN=txnwatch-mtls. The client's certificate comes as
             PEM and as PKCS#12 keystores (modern and legacy encryption, see TlsMaterial).
  OAUTH      SASL_SSL with OAUTHBEARER only, when an OIDC issuer is given (`oidc=`): Kafka's
             own validator checks each token's signature against the issuer's JWKS, its
             audience, issuer and expiry; the principal is the token's sub (User:<client id>).
  OAUTH_PLAIN the same over SASL_PLAINTEXT.
PLAIN users are fixed at start (the broker's JAAS config).

An OAUTHBEARER session lasts as long as its token: the broker tells the client the session's
lifetime (KIP-368) and closes a connection used after that without having re-authenticated
(librdkafka and kafka-python re-authenticate before, with a fresh token); `reauth_ms`
(connections.max.reauth.ms) shortens sessions further. Tokens are checked without clock
skew (Kafka allows 30 s by default). A token signed by a key the broker has not seen is
refused once: that refusal makes the broker fetch the JWKS again, and the next login passes.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from ..net import wait_for
from .node import KafkaBroker, Listener
from .release import BrokerUnavailable, KafkaRelease, kafka_release

SASL, SASL_SSL, MTLS = "SASL", "SASL_SSL", "MTLS"
OAUTH, OAUTH_PLAIN = "OAUTH", "OAUTH_PLAIN"
PROTOCOLS = {SASL: "SASL_PLAINTEXT", SASL_SSL: "SASL_SSL", MTLS: "SSL", OAUTH: "SASL_SSL",
             OAUTH_PLAIN: "SASL_PLAINTEXT"}
# (Kafka 3.x had it in ...oauthbearer.secured; 4.0 moved it here)
OAUTH_VALIDATOR = "org.apache.kafka.common.security.oauthbearer.OAuthBearerValidatorCallbackHandler"
OAUTH_LOGIN_MODULE = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule"
# The JVM property listing the URLs the OAUTHBEARER code may open (Kafka 4.0+: none by default)
ALLOWED_URLS_PROPERTY = "org.apache.kafka.sasl.oauthbearer.allowed.urls"
# ANONYMOUS: the PLAINTEXT admin door, INTERNAL and CONTROLLER; admin: a SCRAM user for
# kafka-acls and friends through the secured listeners (see SecureKafka.admin_properties)
SUPER_USERS = ("User:ANONYMOUS", "User:admin")
ADMIN_USER = "admin"
AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"


def _run(cmd: list[str], cwd: Path) -> None:
    try:
        out = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=120)
    except FileNotFoundError:
        raise BrokerUnavailable(f"{cmd[0]} not found: the secured broker's TLS material needs openssl "
                                "(apt-get install openssl) and the JDK's keytool") from None
    if out.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd[:3])} ... exited {out.returncode}: {out.stderr.strip()[-1500:]}")


# ------------------------------------------------------------------ TLS material
@dataclass(frozen=True)
class TlsMaterial:
    """A CA, a broker certificate for 127.0.0.1/localhost (PKCS12 keystore), a truststore
    holding the CA (for client certificates), and one client certificate whose PEM key is
    encrypted with `client_key_password` (librdkafka's ssl.key.password).

    The same client key and certificate (with the CA) also come as PKCS#12 keystores locked
    with `client_keystore_password`, encrypted both ways users' keystores are:
    `client_keystore` modern (PBES2: PBKDF2 and AES-256-CBC, HMAC-SHA256 MAC: openssl 3 and
    keytool of JDK 17 write this), `client_keystore_legacy` legacy (RC2-40 for the
    certificates, 3DES for the key, SHA-1 MAC: openssl 1.1 and older keytools write this; an
    OpenSSL 3 reads it only with the legacy provider)."""

    directory: Path
    ca_pem: Path
    keystore: Path            # PKCS12: the broker's key and certificate chain
    truststore: Path          # PKCS12: the CA, for verifying client certificates
    store_password: str
    client_cert: Path
    client_key: Path
    client_key_password: str
    client_principal: str     # what the broker's default principal builder makes of it
    client_keystore: Path          # PKCS#12, modern encryption
    client_keystore_legacy: Path   # PKCS#12, legacy encryption (RC2-40 / 3DES)
    client_keystore_password: str


def make_tls_material(directory: str | os.PathLike, java: str, client_cn: str = "txnwatch-mtls",
                      store_password: str = "broker-store-pw", client_key_password: str = "client-key-pw",
                      client_keystore_password: str = "client-store-pw") -> TlsMaterial:
    """Everything TLS needs, made with openssl (and the JDK's keytool for the truststore)."""
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1"]
    _run(["openssl", "req", "-x509", *ec, "-nodes", "-keyout", "ca.key", "-out", "ca.pem", "-days", "7",
          "-subj", "/CN=txnwatch test CA", "-addext", "basicConstraints=critical,CA:TRUE",
          "-addext", "keyUsage=critical,keyCertSign,cRLSign"], d)
    leaf = ("basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyAgreement\n"
            "subjectKeyIdentifier=hash\nauthorityKeyIdentifier=keyid,issuer\n")
    (d / "broker.ext").write_text(leaf + "extendedKeyUsage=serverAuth,clientAuth\n"
                                  "subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    (d / "client.ext").write_text(leaf + "extendedKeyUsage=clientAuth\n")
    _run(["openssl", "req", *ec, "-nodes", "-keyout", "broker.key", "-out", "broker.csr",
          "-subj", "/CN=localhost"], d)
    _run(["openssl", "x509", "-req", "-in", "broker.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
          "-CAcreateserial", "-out", "broker.pem", "-days", "7", "-extfile", "broker.ext"], d)
    _run(["openssl", "pkcs12", "-export", "-in", "broker.pem", "-inkey", "broker.key", "-certfile", "ca.pem",
          "-name", "broker", "-out", "broker.p12", "-passout", f"pass:{store_password}"], d)
    # the client's key is encrypted (PKCS#8 PEM): librdkafka and kafka-python get its password
    _run(["openssl", "req", *ec, "-keyout", "client.key", "-passout", f"pass:{client_key_password}",
          "-out", "client.csr", "-subj", f"/CN={client_cn}"], d)
    _run(["openssl", "x509", "-req", "-in", "client.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
          "-CAcreateserial", "-out", "client.pem", "-days", "7", "-extfile", "client.ext"], d)
    _client_keystores(d, client_key_password, client_keystore_password)
    # A Java truststore needs "trusted certificate" entries, which only keytool writes
    # (openssl 3.0's pkcs12 cannot mark a certificate trusted for Java).
    keytool = Path(java).resolve().parent / "keytool"
    _run([str(keytool if keytool.exists() else "keytool"), "-importcert", "-noprompt", "-alias", "ca",
          "-file", "ca.pem", "-keystore", "truststore.p12", "-storetype", "PKCS12",
          "-storepass", store_password], d)
    return TlsMaterial(d, d / "ca.pem", d / "broker.p12", d / "truststore.p12", store_password,
                       d / "client.pem", d / "client.key", client_key_password, f"User:CN={client_cn}",
                       d / "client.p12", d / "client-legacy.p12", client_keystore_password)


def _client_keystores(d: Path, key_password: str, keystore_password: str) -> None:
    """client.p12 (openssl 3's default encryption) and client-legacy.p12 (`-legacy`: what
    openssl 1.1 and older keytools wrote), each with the CA as a second certificate."""
    common = ["openssl", "pkcs12", "-export", "-in", "client.pem", "-inkey", "client.key", "-certfile", "ca.pem",
              "-name", "client", "-passin", f"pass:{key_password}", "-passout", f"pass:{keystore_password}"]
    _run([*common, "-out", "client.p12"], d)
    _run([*common, "-legacy", "-out", "client-legacy.p12"], d)


class TokenIssuer(Protocol):
    """What the OAUTHBEARER listeners need of an OIDC issuer (identity/oidc.py's OidcIssuer)."""

    @property
    def jwks_url(self) -> str: ...
    @property
    def token_url(self) -> str: ...
    @property
    def issuer(self) -> str: ...
    @property
    def audience(self) -> str: ...
    @property
    def ca_cert(self) -> Path | None: ...   # None: the issuer speaks plain HTTP


def _oauth_settings(oidc: TokenIssuer, reauth_ms: int | None) -> dict[str, object]:
    """Kafka's own OIDC validation on a listener: tokens verified against the issuer's JWKS
    (fetched at start, again for an unknown kid), its audience and issuer required. The JWKS
    is fetched over TLS trusting the issuer's CA, which the JAAS options name (Kafka builds
    that client's SSL settings from them). The broker logs in on the listener too, though it
    never uses the token (no inter-broker traffic there): the unsecured login's sub is all it
    needs, without it the broker does not start ("No principal name in JWT claim: sub")."""
    trust = (f' ssl.truststore.type="PEM" ssl.truststore.location="{oidc.ca_cert}"'
             if oidc.ca_cert else "")
    out: dict[str, object] = {
        "sasl.enabled.mechanisms": "OAUTHBEARER",
        "oauthbearer.sasl.server.callback.handler.class": OAUTH_VALIDATOR,
        "oauthbearer.sasl.jaas.config": f'{OAUTH_LOGIN_MODULE} required unsecuredLoginStringClaim_sub="broker"{trust};',
        "sasl.oauthbearer.jwks.endpoint.url": oidc.jwks_url,
        "sasl.oauthbearer.expected.audience": oidc.audience,
        "sasl.oauthbearer.expected.issuer": oidc.issuer,
        "sasl.oauthbearer.sub.claim.name": "sub",
        # Kafka accepts tokens up to 30 s past their exp by default, and then ends the
        # session at its first request (its lifetime is over): expiry exact here, on one clock
        "sasl.oauthbearer.clock.skew.seconds": 0,
    }
    if reauth_ms:
        out["oauthbearer.connections.max.reauth.ms"] = reauth_ms
    return out


def _listener_settings(name: str, tls: TlsMaterial, plain_users: Mapping[str, str],
                       oidc: TokenIssuer | None = None, reauth_ms: int | None = None) -> dict[str, object]:
    out: dict[str, object] = {}
    if name in (OAUTH, OAUTH_PLAIN):
        out.update(_oauth_settings(oidc, reauth_ms))
    if name in (SASL, SASL_SSL):
        users = " ".join(f'user_{u}="{p}"' for u, p in sorted(plain_users.items()))
        out.update({
            "sasl.enabled.mechanisms": "SCRAM-SHA-512,PLAIN",
            "scram-sha-512.sasl.jaas.config": "org.apache.kafka.common.security.scram.ScramLoginModule required;",
            "plain.sasl.jaas.config": f"org.apache.kafka.common.security.plain.PlainLoginModule required {users};",
        })
    if PROTOCOLS[name] in ("SASL_SSL", "SSL"):
        out.update({"ssl.keystore.type": "PKCS12", "ssl.keystore.location": tls.keystore,
                    "ssl.keystore.password": tls.store_password, "ssl.key.password": tls.store_password,
                    "ssl.truststore.type": "PKCS12", "ssl.truststore.location": tls.truststore,
                    "ssl.truststore.password": tls.store_password})
    if name == MTLS:
        out["ssl.client.auth"] = "required"
    return out


def scram_format_argument(user: str, password: str, mechanism: str = "SCRAM-SHA-512") -> str:
    """One `kafka-storage format --add-scram` value."""
    return f'{mechanism}=[name={user},password={password}]'


# ------------------------------------------------------------------ ACLs
@dataclass(frozen=True)
class Grant:
    """One ALLOW ACL: resource type (TOPIC, GROUP, CLUSTER, TRANSACTIONAL_ID), name
    ('*' for all), operation (READ, DESCRIBE, DESCRIBE_CONFIGS, ...)."""

    resource: str
    name: str
    operation: str
    pattern: str = "LITERAL"


class SecureKafka:
    """A secured KRaft node and its TLS material in one directory; `cleanup()` kills the
    JVM and removes the directory. With `oidc` (an issuer serving before the node starts:
    the validator fetches its JWKS at start) the node has the OAUTHBEARER listeners too."""

    def __init__(self, workdir: str | os.PathLike | None = None,
                 plain_users: Mapping[str, str] | None = None, scram_users: Mapping[str, str] | None = None,
                 properties: Mapping[str, object] | None = None, release: KafkaRelease | None = None,
                 oidc: TokenIssuer | None = None, reauth_ms: int | None = None) -> None:
        self.release = release or kafka_release()
        self.workdir = Path(workdir or tempfile.mkdtemp(prefix="txnwatch-secure-kafka-"))
        self.tls = make_tls_material(self.workdir / "tls", self.release.java)
        self.plain_users = dict(plain_users or {})
        self.oidc = oidc
        names = [SASL, SASL_SSL, MTLS, *((OAUTH, OAUTH_PLAIN) if oidc else ())]
        listeners = [Listener(name, PROTOCOLS[name], settings=_listener_settings(
            name, self.tls, self.plain_users, oidc, reauth_ms)) for name in names]
        props = {"authorizer.class.name": AUTHORIZER, "super.users": ";".join(SUPER_USERS),
                 "sasl.enabled.mechanisms": "SCRAM-SHA-512,PLAIN", **(properties or {})}
        # Kafka 4 opens no OAuth URL the JVM property does not list
        jvm_args = [f"-D{ALLOWED_URLS_PROPERTY}={oidc.jwks_url},{oidc.token_url}"] if oidc else []
        self.broker = KafkaBroker(workdir=self.workdir / "broker", properties=props, extra_listeners=listeners,
                                  release=self.release, jvm_args=jvm_args,
                                  scram=[scram_format_argument(u, p) for u, p in (scram_users or {}).items()])
        self._admin = None

    # -- facts
    @property
    def bootstrap(self) -> str:
        """The admin door (PLAINTEXT, super user): for the test's own setup only."""
        return self.broker.bootstrap

    def bootstrap_of(self, listener: str) -> str:
        return f"{self.broker.host}:{self.broker.listener(listener).port}"

    def describe(self) -> str:
        return f"{self.release.describe()}, secured KRaft node on {self.broker.host} (StandardAuthorizer)"

    def client_settings(self, listener: str, mechanism: str | None = None, username: str | None = None,
                        password: str | None = None, client_cert: bool = True, *,
                        keystore: str | os.PathLike | None = None, oauth_cb=None) -> dict[str, object]:
        """librdkafka properties (without bootstrap.servers) for one of the secured listeners.
        MTLS: the client certificate as PEM, or from a PKCS#12 `keystore` (one of the
        TlsMaterial's). OAUTH, OAUTH_PLAIN: OAUTHBEARER, the token from `oauth_cb` (confluent-
        kafka's: config string -> (token, expiry in epoch seconds)) when given."""
        protocol = PROTOCOLS[listener]
        out: dict[str, object] = {"security.protocol": protocol}
        if listener in (SASL, SASL_SSL):
            out.update({"sasl.mechanism": mechanism or "SCRAM-SHA-512", "sasl.username": username or "",
                        "sasl.password": password or ""})
        if listener in (OAUTH, OAUTH_PLAIN):
            out["sasl.mechanism"] = "OAUTHBEARER"
            if oauth_cb is not None:
                out["oauth_cb"] = oauth_cb
        if protocol in ("SASL_SSL", "SSL"):
            out["ssl.ca.location"] = str(self.tls.ca_pem)
        if listener == MTLS and keystore is not None:
            out.update({"ssl.keystore.location": str(keystore),
                        "ssl.keystore.password": self.tls.client_keystore_password})
        elif listener == MTLS and client_cert:
            out.update({"ssl.certificate.location": str(self.tls.client_cert),
                        "ssl.key.location": str(self.tls.client_key),
                        "ssl.key.password": self.tls.client_key_password})
        return out

    # -- lifecycle
    def start(self) -> SecureKafka:
        self.broker.start()
        return self

    def cleanup(self) -> None:
        self._admin = None
        self.broker.kill()
        shutil.rmtree(self.workdir, ignore_errors=True)

    def __enter__(self) -> SecureKafka:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.cleanup()

    # -- setup through the admin door
    def admin(self):
        from confluent_kafka.admin import AdminClient

        if self._admin is None:
            self._admin = AdminClient({"bootstrap.servers": self.bootstrap})
        return self._admin

    def add_scram_users(self, users: Mapping[str, str], timeout: float = 30.0) -> None:
        """SCRAM-SHA-512 credentials ({user: password}) through AlterUserScramCredentials;
        returns once the broker accepts them all (it learns them from the metadata log)."""
        from confluent_kafka.admin import (
            ScramCredentialInfo,
            ScramMechanism,
            UserScramCredentialUpsertion,
        )

        creds = [UserScramCredentialUpsertion(u, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096),
                                              p.encode()) for u, p in users.items()]
        for f in self.admin().alter_user_scram_credentials(creds, request_timeout=timeout).values():
            f.result()
        for u, p in users.items():
            self.wait_can_authenticate(u, p, timeout)

    def wait_can_authenticate(self, user: str, password: str, timeout: float = 30.0) -> None:
        settings = {"bootstrap.servers": self.bootstrap_of(SASL),
                    **self.client_settings(SASL, "SCRAM-SHA-512", user, password)}
        wait_for(lambda: _can_authenticate(settings), timeout, interval=0.2,
                 what=f"the broker to accept SCRAM credentials of {user}")

    def admin_properties(self, path: str | os.PathLike, password: str) -> Path:
        """A client properties file for the Kafka tools (--command-config) that authenticates
        as the super user `admin` through the SASL listener."""
        p = Path(path)
        p.write_text("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=SCRAM-SHA-512\n"
                     "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required "
                     f'username="{ADMIN_USER}" password="{password}";\n')
        return p

    def grant(self, principal: str, grants: Iterable[Grant], timeout: float = 30.0) -> None:
        from confluent_kafka.admin import (
            AclBinding,
            AclOperation,
            AclPermissionType,
            ResourcePatternType,
        )

        bindings = [AclBinding(*_resource(g), ResourcePatternType[g.pattern], principal, "*",
                               AclOperation[g.operation], AclPermissionType.ALLOW) for g in grants]
        for f in self.admin().create_acls(bindings, request_timeout=timeout).values():
            f.result()


def _resource(g: Grant) -> tuple:
    """(confluent-kafka resource type, name): the cluster is BROKER there, named kafka-cluster."""
    from confluent_kafka.admin import ResourceType

    if g.resource == "CLUSTER":
        return ResourceType.BROKER, "kafka-cluster"
    return ResourceType[g.resource], g.name


def _can_authenticate(settings: Mapping[str, str]) -> bool:
    """Metadata through `settings` answers (authentication passed)."""
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({**settings, "log_level": 0})   # its failures are expected: no log lines
    try:
        admin.list_topics(timeout=2)
        return True
    except Exception:  # noqa: BLE001 - not yet
        return False
