"""confluent-kafka's clients, made here for all of txnwatch: the admin clients, consumers and
producers of the poller, the tap, the canary, the Spark sink and the producer wrapper, each
from the client properties its caller gives, with the credentials of their login (login/:
OAUTHBEARER tokens, a PKCS#12 keystore's PEM, Kerberos from a keytab). One place, so that what
every client needs from its settings is added once, for all of them.

confluent_kafka is imported at the call, not with this module: a process that imports a
module able to make a client without making one never loads the library."""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from .login import login_for

if TYPE_CHECKING:
    from confluent_kafka import Consumer, Producer
    from confluent_kafka.admin import AdminClient


def admin_client(config: Mapping[str, Any]) -> AdminClient:
    from confluent_kafka.admin import AdminClient

    return _made(AdminClient, config)


def consumer(config: Mapping[str, Any]) -> Consumer:
    from confluent_kafka import Consumer

    return _made(Consumer, config)


def producer(config: Mapping[str, Any]) -> Producer:
    from confluent_kafka import Producer

    return _made(Producer, config)


def _made(kind, config: Mapping[str, Any]):
    """A client of `kind` with its login's credentials. A constructor that fails while its
    error_cb ran (a login without a token: "OAuth token not set") can raise the KafkaError
    itself, which is no exception class: `except Exception` misses it, and it ended the tap's
    thread. It is raised again as the KafkaException it means."""
    from confluent_kafka import KafkaError, KafkaException

    settings = login_for(config).librdkafka(config)
    try:
        return kind(settings)
    except BaseException:
        raise
    except:  # noqa: E722 - only a bare except catches what is no BaseException
        err = sys.exc_info()[1]
        if isinstance(err, KafkaError):
            raise KafkaException(err) from None
        raise
