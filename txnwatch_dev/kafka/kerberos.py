"""An Apache Kafka KRaft node whose client listeners authenticate with Kerberos (SASL/GSSAPI),
against a KDC of the test's own (txnwatch_dev.identity.kdc).

    with Kdc(tmp / "kdc") as kdc, KerberosKafka(kdc, tmp / "kafka") as kafka:
        kdc.add_principal("txnwatch"); kdc.keytab(["txnwatch"], keytab)
        kafka.bootstrap_of(KERBEROS)                       # SASL_PLAINTEXT, GSSAPI
        kafka.librdkafka_settings(KERBEROS, "txnwatch", keytab)
        kafka.kafka_python_settings(KERBEROS)              # credentials: MIT's client keytab (see below)
        run_probe(librdkafka_gssapi_python(), LIBRDKAFKA_PROBE,
                  {"client": ..., "seconds": 30, "interval": 2}, kdc.env({"KRB5CCNAME": ...}), timeout=90)

Listeners (all on loopback):
  PLAINTEXT     the test's admin door (no authentication), as on every harness node;
  KERBEROS      SASL_PLAINTEXT with GSSAPI;
  KERBEROS_SSL  SASL_SSL with GSSAPI (a server certificate from secure.py's CA), with `ssl=True`.

The broker is `kafka/127.0.0.1@REALM` (its keytab in the node's directory): clients connect to
127.0.0.1 and, with the KDC's krb5.conf (no reverse DNS, no canonicalization), ask for a ticket
to `kafka/127.0.0.1`. Its JVM reads the same krb5.conf (-Djava.security.krb5.conf). A client
principal `txnwatch@REALM` is `User:txnwatch` (the default principal.to.local rule).
`reauth_ms` sets connections.max.reauth.ms: clients then authenticate again on a connection
that old (KIP-368), which is where an expired ticket shows.

Client credentials, as the exporter's two clients get them:
  librdkafka    `sasl.kerberos.keytab` / `.principal`: it runs `kinit` itself (at start and every
                sasl.kerberos.min.time.before.relogin) into the process's default ccache, so the
                process needs KRB5CCNAME of its own; Cyrus SASL reads that ccache.
  kafka-python  no credential option: python-gssapi's default credentials, so the process's
                KRB5CCNAME and KRB5_CLIENT_KTNAME (MIT's client keytab: tickets got and renewed
                from the keytab by the library itself, no kinit).
  librdkafka's Cyrus SASL takes that client keytab too when its kinit is off
  (sasl.kerberos.min.time.before.relogin=0): then a MEMORY ccache serves both clients.

PyPI's confluent-kafka has no GSSAPI: librdkafka's clients run in GSSAPI_VENV
(librdkafka_gssapi_python() checks it and says how it is made).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Mapping
from pathlib import Path

from ..identity.kdc import Kdc
from ..procs import kill_group
from .node import KafkaBroker, Listener
from .release import KafkaRelease, kafka_release
from .secure import TlsMaterial, make_tls_material

KERBEROS, KERBEROS_SSL = "KERBEROS", "KERBEROS_SSL"
# PyPI's confluent-kafka wheels are built without GSSAPI: librdkafka's GSSAPI clients run in a
# venv of their own whose confluent-kafka is built against a librdkafka with Cyrus SASL.
GSSAPI_VENV = Path(__file__).resolve().parents[2] / ".venv-kerberos"
GSSAPI_VENV_RECIPE = ("confluent-kafka 2.15.1 from its sdist, built against librdkafka 2.15.1 as npm's "
                      "@confluentinc/kafka-javascript@1.10.1 ships it (deps/librdkafka, ./configure finds "
                      "libsasl2-dev), installed under .venv-kerberos/librdkafka")
SERVICE = "kafka"
KRB5_LOGIN = "com.sun.security.auth.module.Krb5LoginModule"


def jaas_config(keytab: str | os.PathLike, principal: str) -> str:
    """The broker side of a GSSAPI listener: log in from the keytab, keep the key to accept."""
    return (f'{KRB5_LOGIN} required useKeyTab=true storeKey=true keyTab="{keytab}" '
            f'principal="{principal}";')


def listener_settings(keytab: Path, principal: str, tls: TlsMaterial | None) -> dict[str, object]:
    """listener.name.<name>.* of one GSSAPI listener (SASL_SSL with `tls`)."""
    out: dict[str, object] = {"sasl.enabled.mechanisms": "GSSAPI",
                              "gssapi.sasl.jaas.config": jaas_config(keytab, principal),
                              "sasl.kerberos.service.name": SERVICE}
    if tls is not None:
        out.update({"ssl.keystore.type": "PKCS12", "ssl.keystore.location": tls.keystore,
                    "ssl.keystore.password": tls.store_password, "ssl.key.password": tls.store_password})
    return out


class KerberosKafka:
    """A KRaft node with GSSAPI listeners; its service principal and keytab are made in `kdc`.
    `cleanup()` kills the JVM and removes the directory."""

    def __init__(self, kdc: Kdc, workdir: str | os.PathLike | None = None, *, ssl: bool = True,
                 reauth_ms: int | None = None, properties: Mapping[str, object] | None = None,
                 release: KafkaRelease | None = None, debug: bool = False) -> None:
        self.kdc = kdc
        self.release = release or kafka_release()
        self.workdir = Path(workdir or tempfile.mkdtemp(prefix="txnwatch-kerberos-kafka-"))
        self.workdir.mkdir(parents=True, exist_ok=True)
        host = "127.0.0.1"
        self.principal = kdc.add_principal(f"{SERVICE}/{host}")
        self.keytab = kdc.keytab([self.principal], self.workdir / "kafka.keytab")
        self.tls = make_tls_material(self.workdir / "tls", self.release.java) if ssl else None
        listeners = [Listener(KERBEROS, "SASL_PLAINTEXT",
                              settings=listener_settings(self.keytab, self.principal, None))]
        if self.tls is not None:
            listeners.append(Listener(KERBEROS_SSL, "SASL_SSL",
                                      settings=listener_settings(self.keytab, self.principal, self.tls)))
        props = {"sasl.kerberos.service.name": SERVICE, **(properties or {})}
        if reauth_ms is not None:
            props["connections.max.reauth.ms"] = reauth_ms
        self.broker = KafkaBroker(host=host, workdir=self.workdir / "broker", properties=props,
                                  extra_listeners=listeners, release=self.release,
                                  jvm_args=self._jvm_args(debug))

    def _jvm_args(self, debug: bool) -> list[str]:
        """The realm's krb5.conf (the JDK's default replay cache is in memory: nothing is
        written outside the node's directory); `debug`: the JDK's Kerberos trace in stdout.log."""
        args = [f"-Djava.security.krb5.conf={self.kdc.krb5_conf}"]
        return [*args, "-Dsun.security.krb5.debug=true"] if debug else args

    # -- facts
    @property
    def bootstrap(self) -> str:
        """The admin door (PLAINTEXT, no authentication): for the test's own setup only."""
        return self.broker.bootstrap

    def bootstrap_of(self, listener: str) -> str:
        return f"{self.broker.host}:{self.broker.listener(listener).port}"

    def describe(self) -> str:
        return f"{self.release.describe()}, KRaft node with GSSAPI listeners, realm {self.kdc.realm}"

    def librdkafka_settings(self, listener: str, principal: str, keytab: str | os.PathLike) -> dict[str, str]:
        """librdkafka properties (with bootstrap.servers) that log in as `principal` from
        `keytab` through one of the GSSAPI listeners."""
        out = {"bootstrap.servers": self.bootstrap_of(listener), "security.protocol": self._protocol(listener),
               "sasl.mechanism": "GSSAPI", "sasl.kerberos.service.name": SERVICE,
               "sasl.kerberos.principal": self.kdc.principal(principal), "sasl.kerberos.keytab": str(keytab)}
        if listener == KERBEROS_SSL:
            out["ssl.ca.location"] = str(self.tls.ca_pem)
        return out

    def kafka_python_settings(self, listener: str) -> dict[str, object]:
        """kafka-python client arguments for one of the GSSAPI listeners (credentials come
        from the process's environment: Kdc.client_env)."""
        out: dict[str, object] = {"bootstrap_servers": self.bootstrap_of(listener),
                                  "security_protocol": self._protocol(listener), "sasl_mechanism": "GSSAPI",
                                  "sasl_kerberos_service_name": SERVICE}
        if listener == KERBEROS_SSL:
            out["ssl_cafile"] = str(self.tls.ca_pem)
        return out

    @staticmethod
    def _protocol(listener: str) -> str:
        return {KERBEROS: "SASL_PLAINTEXT", KERBEROS_SSL: "SASL_SSL"}[listener]

    # -- lifecycle
    def start(self) -> KerberosKafka:
        self.broker.start()
        return self

    def cleanup(self) -> None:
        self.broker.kill()
        shutil.rmtree(self.workdir, ignore_errors=True)

    def __enter__(self) -> KerberosKafka:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.cleanup()


# ------------------------------------------------------------------ client interpreters
class KerberosClientUnavailable(RuntimeError):
    """A Kafka client here cannot log in with GSSAPI; the message says what to install."""


def kafka_python_gssapi() -> None:
    """kafka-python's GSSAPI needs python-gssapi (PyPI has no Linux wheel: it builds)."""
    import importlib.util

    if importlib.util.find_spec("gssapi") is None:
        raise KerberosClientUnavailable("python-gssapi is not installed: kafka-python's SASL/GSSAPI needs it "
                                        "(pip install gssapi; it builds from its sdist with gcc and libkrb5-dev)")


def librdkafka_gssapi_python() -> Path:
    """The interpreter of GSSAPI_VENV, checked: its librdkafka has a GSSAPI provider."""
    python = GSSAPI_VENV / "bin" / "python"
    if not python.exists():
        raise KerberosClientUnavailable(f"{python} not found: librdkafka's GSSAPI clients need {GSSAPI_VENV.name}, "
                                        f"{GSSAPI_VENV_RECIPE}; bootstrap should make it")
    check = ("from confluent_kafka import Producer; Producer({'security.protocol': 'SASL_PLAINTEXT', "
             "'sasl.mechanism': 'GSSAPI', 'sasl.kerberos.min.time.before.relogin': 0})")
    out = subprocess.run([str(python), "-c", check], capture_output=True, text=True, timeout=60)
    if out.returncode != 0:
        raise KerberosClientUnavailable(f"{python}'s confluent-kafka cannot do GSSAPI ({out.stderr.strip()[-300:]}): "
                                        f"rebuild {GSSAPI_VENV.name}: {GSSAPI_VENV_RECIPE}")
    return python


# ------------------------------------------------------------------ client processes
# Each probe is a program of its own (the standard library and one Kafka client): it asks for
# metadata every `interval` seconds for `seconds`, and prints one JSON line per request.
# librdkafka's runs in whichever venv has a GSSAPI-capable build.
KAFKA_PYTHON_PROBE = r'''
import json, os, sys, time
cfg = json.loads(sys.argv[1])
os.environ.update(cfg.get("set_env", {}))      # the process sets its Kerberos variables itself
from kafka import KafkaAdminClient
admin = KafkaAdminClient(client_id="txnwatch-probe", request_timeout_ms=10000, **cfg["client"])
deadline = time.monotonic() + cfg["seconds"]
while True:
    try:
        line = {"ok": True, "topics": sorted(admin.list_topics())}
    except Exception as exc:
        line = {"ok": False, "error": repr(exc)}
    print(json.dumps({"time": time.time(), **line}), flush=True)
    if time.monotonic() >= deadline:
        break
    time.sleep(cfg["interval"])
admin.close()
'''

LIBRDKAFKA_PROBE = r'''
import json, sys, time
import confluent_kafka
from confluent_kafka.admin import AdminClient
cfg = json.loads(sys.argv[1])
def on_error(err):
    print(json.dumps({"time": time.time(), "client_error": str(err)}), flush=True)
print(json.dumps({"librdkafka": confluent_kafka.libversion()[0]}), flush=True)
admin = AdminClient({**cfg["client"], "error_cb": on_error})
deadline = time.monotonic() + cfg["seconds"]
while True:
    try:
        line = {"ok": True, "topics": sorted(admin.list_topics(timeout=10).topics)}
    except Exception as exc:
        line = {"ok": False, "error": repr(exc)}
    admin.poll(0)                                 # serves error_cb
    print(json.dumps({"time": time.time(), **line}), flush=True)
    if time.monotonic() >= deadline:
        break
    time.sleep(cfg["interval"])
'''


def run_probe(python: str | os.PathLike, program: str, config: Mapping[str, object], env: Mapping[str, str],
              timeout: float) -> list[dict]:
    """Run a probe to its end in a session of its own; its JSON lines (stderr in the error
    when it fails)."""
    proc = subprocess.Popen([str(python), "-c", program, json.dumps(config)], env=dict(env),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        kill_group(proc)
        raise
    lines = [json.loads(s) for s in out.splitlines() if s.startswith("{")]
    if proc.returncode != 0:
        raise RuntimeError(f"probe exited {proc.returncode}: {err.strip()[-2000:]}")
    return lines
