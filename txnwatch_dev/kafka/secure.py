"""A secured Apache Kafka KRaft node for tests: SASL (SCRAM-SHA-512 and PLAIN), TLS and
mutual-TLS listeners and the StandardAuthorizer (ACLs in the KRaft metadata log).

    with SecureKafka(workdir) as kafka:               # one node, TLS material made here
        kafka.add_scram_users({"txnwatch": "s3cret"})  # AlterUserScramCredentials
        kafka.grant("User:txnwatch", [Grant("TOPIC", "orders", "DESCRIBE"), ...])
        kafka.client_settings(SASL_SSL, "SCRAM-SHA-512", "txnwatch", "s3cret")  # librdkafka props

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
             distinguished name, e.g. User:CN=txnwatch-mtls.
PLAIN users are fixed at start (the broker's JAAS config).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from ..net import wait_for
from .node import KafkaBroker, Listener
from .release import BrokerUnavailable, KafkaRelease, kafka_release

SASL, SASL_SSL, MTLS = "SASL", "SASL_SSL", "MTLS"
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
    encrypted with `client_key_password` (librdkafka's ssl.key.password)."""

    directory: Path
    ca_pem: Path
    keystore: Path            # PKCS12: the broker's key and certificate chain
    truststore: Path          # PKCS12: the CA, for verifying client certificates
    store_password: str
    client_cert: Path
    client_key: Path
    client_key_password: str
    client_principal: str     # what the broker's default principal builder makes of it


def make_tls_material(directory: str | os.PathLike, java: str, client_cn: str = "txnwatch-mtls",
                      store_password: str = "broker-store-pw",
                      client_key_password: str = "client-key-pw") -> TlsMaterial:
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
    # A Java truststore needs "trusted certificate" entries, which only keytool writes
    # (openssl 3.0's pkcs12 cannot mark a certificate trusted for Java).
    keytool = Path(java).resolve().parent / "keytool"
    _run([str(keytool if keytool.exists() else "keytool"), "-importcert", "-noprompt", "-alias", "ca",
          "-file", "ca.pem", "-keystore", "truststore.p12", "-storetype", "PKCS12",
          "-storepass", store_password], d)
    return TlsMaterial(d, d / "ca.pem", d / "broker.p12", d / "truststore.p12", store_password,
                       d / "client.pem", d / "client.key", client_key_password, f"User:CN={client_cn}")


def _listener_settings(name: str, tls: TlsMaterial, plain_users: Mapping[str, str]) -> dict[str, object]:
    out: dict[str, object] = {}
    if name in (SASL, SASL_SSL):
        users = " ".join(f'user_{u}="{p}"' for u, p in sorted(plain_users.items()))
        out.update({
            "sasl.enabled.mechanisms": "SCRAM-SHA-512,PLAIN",
            "scram-sha-512.sasl.jaas.config": "org.apache.kafka.common.security.scram.ScramLoginModule required;",
            "plain.sasl.jaas.config": f"org.apache.kafka.common.security.plain.PlainLoginModule required {users};",
        })
    if name in (SASL_SSL, MTLS):
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
    JVM and removes the directory."""

    def __init__(self, workdir: str | os.PathLike | None = None,
                 plain_users: Mapping[str, str] | None = None, scram_users: Mapping[str, str] | None = None,
                 properties: Mapping[str, object] | None = None, release: KafkaRelease | None = None) -> None:
        self.release = release or kafka_release()
        self.workdir = Path(workdir or tempfile.mkdtemp(prefix="txnwatch-secure-kafka-"))
        self.tls = make_tls_material(self.workdir / "tls", self.release.java)
        self.plain_users = dict(plain_users or {})
        listeners = [Listener(name, protocol, settings=_listener_settings(name, self.tls, self.plain_users))
                     for name, protocol in ((SASL, "SASL_PLAINTEXT"), (SASL_SSL, "SASL_SSL"), (MTLS, "SSL"))]
        props = {"authorizer.class.name": AUTHORIZER, "super.users": ";".join(SUPER_USERS),
                 "sasl.enabled.mechanisms": "SCRAM-SHA-512,PLAIN", **(properties or {})}
        self.broker = KafkaBroker(workdir=self.workdir / "broker", properties=props, extra_listeners=listeners,
                                  release=self.release,
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
                        password: str | None = None, client_cert: bool = True) -> dict[str, str]:
        """librdkafka properties (without bootstrap.servers) for one of the secured listeners."""
        protocol = {SASL: "SASL_PLAINTEXT", SASL_SSL: "SASL_SSL", MTLS: "SSL"}[listener]
        out = {"security.protocol": protocol}
        if listener in (SASL, SASL_SSL):
            out.update({"sasl.mechanism": mechanism or "SCRAM-SHA-512", "sasl.username": username or "",
                        "sasl.password": password or ""})
        if listener in (SASL_SSL, MTLS):
            out["ssl.ca.location"] = str(self.tls.ca_pem)
        if listener == MTLS and client_cert:
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
