"""confluent-kafka's clients, made here for all of txnwatch: the admin clients, consumers and
producers of the poller, the tap, the canary, the Spark sink and the producer wrapper, each
from the client properties its caller gives. One place, so that what every client needs from
its settings is added once, for all of them.

confluent_kafka is imported at the call, not with this module: a process that imports a
module able to make a client without making one never loads the library."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from confluent_kafka import Consumer, Producer
    from confluent_kafka.admin import AdminClient


def admin_client(config: Mapping[str, Any]) -> AdminClient:
    from confluent_kafka.admin import AdminClient

    return AdminClient(dict(config))


def consumer(config: Mapping[str, Any]) -> Consumer:
    from confluent_kafka import Consumer

    return Consumer(dict(config))


def producer(config: Mapping[str, Any]) -> Producer:
    from confluent_kafka import Producer

    return Producer(dict(config))
