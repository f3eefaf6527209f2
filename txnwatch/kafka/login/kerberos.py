"""Kerberos from a keytab, for both clients of a process: MIT Kerberos's client keytab
(KRB5_CLIENT_KTNAME) gets and renews tickets itself, into a ticket cache in memory
(KRB5CCNAME=MEMORY:...), never the user's and never on disk; librdkafka then runs no kinit
(`sasl.kerberos.min.time.before.relogin` 0) and kafka-python's GSSAPI reads the same
credentials. Both clients read the process's Kerberos environment, so a process holds one
Kerberos identity: with worker processes (the default) each cluster has its own."""

from __future__ import annotations

import os
import threading

from .settings import KerberosSettings, LoginSettingsError

_lock = threading.Lock()
_identity: tuple[str, str] | None = None     # (keytab, principal) this process logs in as


def prepare_process(settings: KerberosSettings) -> None:
    """Point this process's Kerberos library at the keytab (once; a second identity is refused)."""
    global _identity
    if settings.keytab is None:
        return                                  # the process's own ticket cache, as kinit left it
    if not os.access(settings.keytab, os.R_OK):
        raise LoginSettingsError("sasl.kerberos.keytab", f"cannot read {settings.keytab} (missing, or not "
                                 "readable by the exporter's user)")
    wanted = (settings.keytab, settings.principal)
    with _lock:
        if _identity is not None and _identity != wanted:
            raise LoginSettingsError("sasl.kerberos.keytab", f"this process logs in as {_identity[1]} already, "
                                     "and a process holds one Kerberos identity: run each cluster in a worker "
                                     "process of its own (http.worker_processes: true, the default)")
        if _identity is None:
            os.environ["KRB5_CLIENT_KTNAME"] = f"FILE:{settings.keytab}"
            os.environ["KRB5CCNAME"] = f"MEMORY:txnwatch-{os.getpid()}"
            _identity = wanted


def check_kafka_python() -> None:
    """kafka-python's GSSAPI needs python-gssapi (pip install 'txnwatch[kerberos]')."""
    try:
        import gssapi  # noqa: F401
    except ImportError:
        raise LoginSettingsError("sasl.mechanism", "GSSAPI needs the gssapi package for the KIP-664 client "
                                 "(kafka-python): pip install 'txnwatch[kerberos]' (it builds against MIT "
                                 "Kerberos: libkrb5-dev)") from None


def librdkafka_has_gssapi() -> bool:
    """Whether this confluent-kafka's librdkafka was built with Cyrus SASL (PyPI's wheels were
    not): asked of librdkafka's own `builtin.features` check on a client that connects nowhere."""
    from confluent_kafka import KafkaException, Producer

    try:
        Producer({"builtin.features": "sasl_gssapi"})
    except KafkaException:
        return False
    return True
