"""The sink's settings: names it writes on the broker (transactional ids, group, progress
topic), the checks that refuse unsafe settings up front, and the SinkConfig shipped to
every task."""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from txnwatch.kafka import clients
from txnwatch.producer import (
    DEFAULT_TRANSACTION_TIMEOUT_MS,
    TransactionalProducer,
)

log = logging.getLogger(__name__)

NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]*(\.[A-Za-z0-9_-]+)*$")
TXN_HEADER = "txnwatch.txn"
MIN_TRANSACTION_TIMEOUT_MS = 10_000       # floor: GC pauses, scheduling, slow commits
TRIGGER_FACTOR = 2                        # timeout >= 2 x trigger interval
DEFAULT_BROKER_MAX_TIMEOUT_MS = 900_000   # Kafka's transaction.max.timeout.ms default
DISCOVER = "discover"
PARTITIONINGS = ("key", "input")
WRITERS = ("auto", "jvm", "python")     # where a batch is written from: driver.py
RESULT_SCHEMA = "task INT, status STRING, rows LONG, records STRING, attempt STRING, seconds DOUBLE"

_REJECTED_PRODUCER_KEYS = {
    "transactional.id": "the sink owns transactional ids (txnwatch.<name>.<task index>)",
    "transaction.timeout.ms": "pass transaction_timeout_ms so it is checked against the trigger",
}


class UnsafeSinkSettings(ValueError):
    """Settings that would break exactly-once or guarantee aborts; raised up front."""


class SinkLayoutError(RuntimeError):
    """A replayed batch was (partly) written with another number of output tasks."""


def input_partitions(df: Any) -> int | None:
    """How many partitions a batch DataFrame has, without running a job (None when the
    session cannot say: Spark Connect has no JVM handle)."""
    jdf = getattr(df, "_jdf", None)
    if jdf is None:
        return None
    try:
        return int(jdf.rdd().getNumPartitions())
    except Exception:  # noqa: BLE001 - "key" partitioning is always possible
        log.warning("could not read the batch's partition count", exc_info=True)
        return None


def transactional_id(name: str, task: int) -> str:
    return f"txnwatch.{name}.{task}"


def progress_group(name: str) -> str:
    return f"txnwatch.{name}"


def default_progress_topic(name: str) -> str:
    return f"txnwatch-progress.{name}"


def check_settings(transaction_timeout_ms: int, trigger_interval_seconds: float | None = None,
                   broker_max_timeout_ms: int | None = None, num_tasks: int = 1,
                   producer_config: dict | None = None) -> list[str]:
    """Reject unsafe settings with UnsafeSinkSettings; return warnings for doubtful ones.

    A transaction lives inside one micro-batch (a task's write), and a batch of a query
    that keeps up lasts up to the trigger interval; one that falls behind lasts longer.
    A transaction.timeout.ms shorter than a batch can take guarantees coordinator
    aborts and fencing of healthy tasks, so the timeout must be at least
    max(10 s, 2 x trigger interval). It must also stay under the broker's
    transaction.max.timeout.ms, or every InitProducerId fails with
    INVALID_TRANSACTION_TIMEOUT.
    """
    warnings: list[str] = []
    if not isinstance(num_tasks, int) or num_tasks < 1:
        raise UnsafeSinkSettings(f"num_tasks must be a positive integer, got {num_tasks!r}")
    t = int(transaction_timeout_ms)
    trigger_ms = int(round((trigger_interval_seconds or 0) * 1000))
    need = max(MIN_TRANSACTION_TIMEOUT_MS, TRIGGER_FACTOR * trigger_ms)
    if t < need:
        why = (f"{TRIGGER_FACTOR} x the trigger interval ({trigger_ms} ms)" if TRIGGER_FACTOR * trigger_ms
               >= MIN_TRANSACTION_TIMEOUT_MS else f"the {MIN_TRANSACTION_TIMEOUT_MS} ms floor")
        raise UnsafeSinkSettings(
            f"transaction.timeout.ms={t} is shorter than {why}: a transaction spans a task's write "
            f"of one micro-batch, and a timeout shorter than a batch can take guarantees coordinator "
            f"aborts and fenced tasks. Use transaction_timeout_ms >= {need}.")
    cap = broker_max_timeout_ms
    if cap is not None:
        if t > cap:
            raise UnsafeSinkSettings(
                f"transaction.timeout.ms={t} exceeds the broker's transaction.max.timeout.ms={cap}: "
                f"every InitProducerId would fail with INVALID_TRANSACTION_TIMEOUT. "
                + (f"Use {need} <= transaction_timeout_ms <= {cap}." if need <= cap else
                   f"The trigger interval is too long for this broker: need {need} ms > cap {cap} ms; "
                   "shorten the trigger or raise the broker cap."))
    elif t > DEFAULT_BROKER_MAX_TIMEOUT_MS:
        warnings.append(f"transaction.timeout.ms={t} exceeds Kafka's default transaction.max.timeout.ms "
                        f"({DEFAULT_BROKER_MAX_TIMEOUT_MS}); the broker's cap is unknown, InitProducerId "
                        "fails if the broker keeps the default")
    for key, why in _REJECTED_PRODUCER_KEYS.items():
        if producer_config and key in producer_config:
            raise UnsafeSinkSettings(f"producer_config[{key!r}] is not allowed: {why}")
    pc = producer_config or {}
    if str(pc.get("enable.idempotence", "true")).lower() == "false":
        raise UnsafeSinkSettings("enable.idempotence=false: transactions need the idempotent producer")
    if str(pc.get("acks", "all")).lower() not in ("all", "-1"):
        raise UnsafeSinkSettings(f"acks={pc.get('acks')}: transactions need acks=all")
    return warnings


def discover_broker_max_timeout_ms(bootstrap_servers: str, timeout: float = 3.0,
                                   admin_config: dict | None = None) -> int | None:
    """transaction.max.timeout.ms from DescribeConfigs, or None when the broker does not
    report it (some brokers return no config values; ACLs may forbid it)."""
    try:
        from confluent_kafka.admin import ConfigResource

        admin = clients.admin_client({"bootstrap.servers": bootstrap_servers, **(admin_config or {})})
        md = admin.list_topics(timeout=timeout)
        broker_id = next(iter(md.brokers))
        res = ConfigResource(ConfigResource.Type.BROKER, str(broker_id))
        fut = admin.describe_configs([res], request_timeout=timeout)[res]
        entry = fut.result(timeout=timeout + 1).get("transaction.max.timeout.ms")
        if entry is None or entry.value in (None, ""):
            return None
        return int(entry.value)
    except Exception as exc:  # noqa: BLE001 - unknown is a valid answer
        log.info("could not read the broker's transaction.max.timeout.ms: %s", exc)
        return None


def task_producer(cfg: SinkConfig, task: int) -> TransactionalProducer:
    """The transactional producer of output task `task`: SinkConfig's default producer_factory."""
    return TransactionalProducer(cfg.producer_conf(task))


ProducerFactory = Callable[["SinkConfig", int], TransactionalProducer]


@dataclass(frozen=True)
class SinkConfig:
    """Everything a task needs; small and picklable."""

    name: str
    bootstrap_servers: str
    topic: str
    num_tasks: int
    progress_topic: str
    transaction_timeout_ms: int = DEFAULT_TRANSACTION_TIMEOUT_MS
    producer_config: tuple = ()          # (key, value) pairs
    client_config: tuple = ()            # shared by producer and consumers (security, ...)
    commit_timeout_seconds: float = 60.0
    warm_spares: bool = True             # a connected spare producer per id a worker wrote
    # makes each task's producer, and its spares: a picklable callable (a module-level function
    # or class, or an instance of one) for the executors; one that returns a subclass of
    # TransactionalProducer adds behaviour around the sink's calls without changing them
    producer_factory: ProducerFactory = task_producer

    def producer_conf(self, task: int) -> dict:
        conf = {"bootstrap.servers": self.bootstrap_servers, "linger.ms": 5,
                "partitioner": "murmur2_random", **dict(self.client_config), **dict(self.producer_config),
                "transactional.id": transactional_id(self.name, task),
                "transaction.timeout.ms": self.transaction_timeout_ms, "enable.idempotence": True,
                "acks": "all"}
        return conf

    def consumer_conf(self) -> dict:
        return {"bootstrap.servers": self.bootstrap_servers, **dict(self.client_config),
                "group.id": progress_group(self.name), "enable.auto.commit": False,
                "isolation.level": "read_uncommitted", "enable.partition.eof": True,
                "auto.offset.reset": "earliest",
                # Reads end at the partition's end (EOF); a long fetch wait would hold every
                # progress read for fetch.wait.max.ms (500 ms by default) when the last
                # offset is a commit marker.
                "fetch.wait.max.ms": 10}
