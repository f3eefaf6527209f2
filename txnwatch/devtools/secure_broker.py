"""A secured Apache Kafka for tests: ZooKeeper plus one ZooKeeper-mode broker with SASL
(SCRAM-SHA-512 and PLAIN), TLS and mutual-TLS listeners and the ACL authorizer.

    with SecureKafka(workdir) as kafka:               # ZooKeeper + broker, TLS material made here
        kafka.add_scram_users({"txnwatch": "s3cret"})
        kafka.grant("User:txnwatch", [Grant("TOPIC", "orders", "DESCRIBE"), ...])
        kafka.client_settings(SASL_SSL, "SCRAM-SHA-512", "txnwatch", "s3cret")  # librdkafka props

Why ZooKeeper mode: Kafka 3.1 in KRaft mode can neither hold SCRAM credentials (its
AlterUserScramCredentials API is served by ZooKeeper-mode brokers only; KIP-900 brought
it to KRaft in 3.5) nor authorize (KRaft's StandardAuthorizer is KIP-801, 3.2; the
AclAuthorizer keeps ACLs in ZooKeeper). The distribution ships ZooKeeper 3.6.3.

Listeners (all on loopback):
  PLAINTEXT  the test's admin door: its principal (ANONYMOUS) is a super user. Tests set
             up topics, users, ACLs and producers through it; the exporter under test
             never connects here. The SCRAM user `admin` is a super user too, for the
             Kafka tools through a secured listener (`admin_properties`).
  INTERNAL   inter-broker (the controller's and the coordinator's requests to itself), also
             ANONYMOUS, so also super.
  SASL       SASL_PLAINTEXT with SCRAM-SHA-512 and PLAIN.
  SASL_SSL   SASL_SSL (TLS, server certificate from a CA made here) with SCRAM-SHA-512 and PLAIN.
  MTLS       SSL with client certificates required; the principal is the certificate's
             distinguished name, e.g. User:CN=txnwatch-mtls.
PLAIN users are fixed at start (the broker's JAAS config); SCRAM users are added at any
time (`add_scram_users`, through the admin door).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from .broker import BrokerUnavailable, KafkaBroker, KafkaInstall, Listener, require_kafka
from .net import free_port, port_open, wait_for
from .procs import kill_group

SASL, SASL_SSL, MTLS = "SASL", "SASL_SSL", "MTLS"
# ANONYMOUS: the PLAINTEXT admin door and INTERNAL; admin: a SCRAM user for kafka-acls.sh
# and friends through the secured listeners (see SecureKafka.admin_properties)
SUPER_USERS = ("User:ANONYMOUS", "User:admin")
ADMIN_USER = "admin"
ZK_READY_LINE = "started (kafka.server.KafkaServer)"
# KRaft-only settings of SINGLE_NODE_DEFAULTS a ZooKeeper-mode broker would only warn about
_KRAFT_ONLY = ("broker.session.timeout.ms", "broker.heartbeat.interval.ms")


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


def make_tls_material(directory: str | os.PathLike, client_cn: str = "txnwatch-mtls",
                      store_password: str = "broker-store-pw", client_key_password: str = "client-key-pw",
                      install: KafkaInstall | None = None) -> TlsMaterial:
    """Everything TLS needs, made with openssl (and keytool for the Java truststore)."""
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
    install = install or require_kafka()
    keytool = Path(install.java).resolve().parent / "keytool"
    _run([str(keytool if keytool.exists() else "keytool"), "-importcert", "-noprompt", "-alias", "ca",
          "-file", "ca.pem", "-keystore", "truststore.p12", "-storetype", "PKCS12",
          "-storepass", store_password], d)
    return TlsMaterial(d, d / "ca.pem", d / "broker.p12", d / "truststore.p12", store_password,
                       d / "client.pem", d / "client.key", client_key_password, f"User:CN={client_cn}")


# ------------------------------------------------------------------ ZooKeeper
class ZooKeeper:
    """One standalone ZooKeeper (from the Kafka distribution) on a loopback port."""

    def __init__(self, workdir: str | os.PathLike, install: KafkaInstall | None = None,
                 host: str = "127.0.0.1") -> None:
        self.install = install or require_kafka()
        self.host = host
        self.port = free_port(host)
        self.workdir = Path(workdir)
        self.proc: subprocess.Popen | None = None

    @property
    def connect(self) -> str:
        return f"{self.host}:{self.port}"

    def start(self, timeout: float = 60.0) -> ZooKeeper:
        self.workdir.mkdir(parents=True, exist_ok=True)
        config = self.workdir / "zookeeper.properties"
        config.write_text(f"dataDir={self.workdir / 'data'}\nclientPort={self.port}\n"
                          f"clientPortAddress={self.host}\nmaxClientCnxns=0\nadmin.enableServer=false\n"
                          "tickTime=500\n")
        env = {**os.environ, "LOG_DIR": str(self.workdir / "logs"), "KAFKA_HEAP_OPTS": "-Xmx128m -Xms32m",
               "KAFKA_JVM_PERFORMANCE_OPTS": "-server -XX:+UseSerialGC -XX:CICompilerCount=2 "
                                             "-XX:TieredStopAtLevel=1 -Djava.awt.headless=true",
               "KAFKA_GC_LOG_OPTS": " ", "KAFKA_JMX_OPTS": " ",
               "JAVA_HOME": str(Path(self.install.java).resolve().parents[1])}
        with open(self.workdir / "stdout.log", "ab") as out:
            self.proc = subprocess.Popen([str(self.install.home / "bin" / "zookeeper-server-start.sh"),
                                          str(config)], stdout=out, stderr=subprocess.STDOUT, env=env,
                                         start_new_session=True, cwd=self.workdir)
        wait_for(lambda: self.proc.poll() is not None or port_open(self.host, self.port), timeout,
                 what=f"ZooKeeper on {self.connect}")
        if self.proc.poll() is not None:
            raise RuntimeError(f"ZooKeeper exited {self.proc.returncode}; see {self.workdir / 'stdout.log'}")
        return self

    def kill(self) -> None:
        kill_group(self.proc)


# ------------------------------------------------------------------ the broker
class SecureKafkaBroker(KafkaBroker):
    """A ZooKeeper-mode broker with the SASL, SASL_SSL and MTLS listeners and the
    AclAuthorizer (see the module docstring). Needs a running ZooKeeper."""

    def __init__(self, zookeeper: ZooKeeper, tls: TlsMaterial, *, workdir: str | os.PathLike,
                 plain_users: Mapping[str, str] | None = None,
                 properties: Mapping[str, object] | None = None, **kwargs) -> None:
        self.zookeeper = zookeeper
        self.tls = tls
        self.plain_users = dict(plain_users or {})
        listeners = [Listener(SASL, "SASL_PLAINTEXT"), Listener(SASL_SSL, "SASL_SSL"), Listener(MTLS, "SSL")]
        super().__init__(workdir=workdir, properties=properties, extra_listeners=listeners,
                         install=zookeeper.install, **kwargs)

    def describe(self) -> str:
        return f"{self.install.describe()}, ZooKeeper-mode broker {self.node_id} on {self.host}:{self.port}"

    def bootstrap_of(self, listener: str) -> str:
        return f"{self.host}:{self.listener(listener).port}"

    # -- configuration
    def _jaas_plain(self) -> str:
        users = " ".join(f'user_{u}="{p}"' for u, p in sorted(self.plain_users.items()))
        return f"org.apache.kafka.common.security.plain.PlainLoginModule required {users};"

    def _listener_settings(self, name: str) -> dict[str, object]:
        t = self.tls
        out: dict[str, object] = {}
        if name in (SASL, SASL_SSL):
            out.update({
                "sasl.enabled.mechanisms": "SCRAM-SHA-512,PLAIN",
                "scram-sha-512.sasl.jaas.config":
                    "org.apache.kafka.common.security.scram.ScramLoginModule required;",
                "plain.sasl.jaas.config": self._jaas_plain(),
            })
        if name in (SASL_SSL, MTLS):
            out.update({"ssl.keystore.type": "PKCS12", "ssl.keystore.location": t.keystore,
                        "ssl.keystore.password": t.store_password, "ssl.key.password": t.store_password,
                        "ssl.truststore.type": "PKCS12", "ssl.truststore.location": t.truststore,
                        "ssl.truststore.password": t.store_password})
        if name == MTLS:
            out["ssl.client.auth"] = "required"
        return out

    def _server_properties(self) -> dict[str, object]:
        h = self.host
        listeners = [f"PLAINTEXT://{h}:{self.port}", f"INTERNAL://{h}:{self.internal_port}"]
        advertised = [f"PLAINTEXT://{h}:{self.advertised_port}", f"INTERNAL://{h}:{self.internal_port}"]
        protocols = ["PLAINTEXT:PLAINTEXT", "INTERNAL:PLAINTEXT"]
        for lst in self.extra_listeners:
            listeners.append(f"{lst.name}://{h}:{lst.port}")
            advertised.append(f"{lst.name}://{h}:{lst.port}")
            protocols.append(f"{lst.name}:{lst.protocol}")
        props: dict[str, object] = {
            "broker.id": self.node_id,
            "zookeeper.connect": self.zookeeper.connect,
            "zookeeper.connection.timeout.ms": 30000,
            "inter.broker.listener.name": "INTERNAL",
            "listeners": ",".join(listeners),
            "advertised.listeners": ",".join(advertised),
            "listener.security.protocol.map": ",".join(protocols),
            "log.dirs": str(self.data_dir),
            "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
            "super.users": ";".join(SUPER_USERS),
            "sasl.enabled.mechanisms": "SCRAM-SHA-512,PLAIN",
        }
        for lst in self.extra_listeners:
            for k, v in {**self._listener_settings(lst.name), **lst.settings}.items():
                props[f"listener.name.{lst.name.lower()}.{k}"] = v
        props.update({k: v for k, v in self.properties.items() if k not in _KRAFT_ONLY})
        return props

    def _format(self) -> None:
        # ZooKeeper mode: the broker writes meta.properties itself (cluster id from ZooKeeper)
        self.data_dir.mkdir(parents=True, exist_ok=True)

    ready_line = ZK_READY_LINE   # a ZooKeeper-mode broker has no KRaft RECOVERY -> RUNNING line

    @property
    def label(self) -> str:
        return "secured Kafka broker"


# ------------------------------------------------------------------ ACLs and users
@dataclass(frozen=True)
class Grant:
    """One ALLOW ACL: resource type (TOPIC, GROUP, CLUSTER, TRANSACTIONAL_ID), name
    ('*' for all), operation (READ, DESCRIBE, DESCRIBE_CONFIGS, ...)."""

    resource: str
    name: str
    operation: str
    pattern: str = "LITERAL"


class SecureKafka:
    """ZooKeeper + SecureKafkaBroker + TLS material in one directory; `cleanup()` kills
    both JVMs and removes the directory."""

    def __init__(self, workdir: str | os.PathLike | None = None,
                 plain_users: Mapping[str, str] | None = None,
                 properties: Mapping[str, object] | None = None) -> None:
        self.install = require_kafka()
        self.workdir = Path(workdir or tempfile.mkdtemp(prefix="txnwatch-secure-kafka-"))
        self.tls = make_tls_material(self.workdir / "tls", install=self.install)
        self.zookeeper = ZooKeeper(self.workdir / "zookeeper", self.install)
        self.broker = SecureKafkaBroker(self.zookeeper, self.tls, workdir=self.workdir / "broker",
                                        plain_users=plain_users, properties=properties)
        self._admin = None

    # -- facts
    @property
    def bootstrap(self) -> str:
        """The admin door (PLAINTEXT, super user): for the test's own setup only."""
        return self.broker.bootstrap

    def bootstrap_of(self, listener: str) -> str:
        return self.broker.bootstrap_of(listener)

    def describe(self) -> str:
        return self.broker.describe()

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
        self.zookeeper.start()
        self.broker.start()
        return self

    def cleanup(self) -> None:
        self._admin = None
        self.broker.kill()
        self.zookeeper.kill()
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
        """SCRAM-SHA-512 credentials ({user: password}); returns once the broker accepts them
        all (it learns new credentials from a ZooKeeper notification, asynchronously)."""
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
            settings = {"bootstrap.servers": self.bootstrap_of(SASL),
                        **self.client_settings(SASL, "SCRAM-SHA-512", u, p)}
            wait_for(lambda s=settings: _can_authenticate(s), timeout, interval=0.2,
                     what=f"the broker to accept SCRAM credentials of {u}")

    def admin_properties(self, path: str | os.PathLike, password: str) -> Path:
        """A client properties file for the Kafka tools (--command-config) that authenticates
        as the super user `admin` through the SASL listener (add_scram_users({'admin': ...}))."""
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
