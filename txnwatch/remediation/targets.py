"""What `txnwatch abort` is asked to end: the hanging transactions the exporter would page on,
one transactional id, the open transactions on one partition, or every open transaction of
one app (a Flink sink's prefix, a Streams application.id, a Spark sink's name)."""

from __future__ import annotations

from dataclasses import dataclass

HANGING, TRANSACTIONAL_ID, PARTITION, APP = "hanging", "transactional_id", "partition", "app"


class TargetError(ValueError):
    """A target that names nothing on the cluster, or is written wrongly (exit 2)."""


@dataclass(frozen=True)
class Target:
    kind: str                     # hanging | transactional_id | partition | app
    value: str = ""
    topic: str = ""
    partition: int = -1

    def describe(self) -> str:
        if self.kind == HANGING:
            return "the hanging transactions"
        if self.kind == PARTITION:
            return f"the open transactions on {self.topic}-{self.partition}"
        if self.kind == APP:
            return f"the open transactions of app {self.value}"
        return f"the open transaction of transactional id {self.value}"

    def as_flag(self) -> str:
        """The flag that selects this target again (the dry run's next command)."""
        if self.kind == HANGING:
            return "--hanging"
        if self.kind == PARTITION:
            return f"--partition {self.topic}:{self.partition}"
        return f"--{self.kind.replace('_', '-')} {_quoted(self.value)}"


def _quoted(value: str) -> str:
    import shlex

    return shlex.quote(value)


def parse_partition(text: str) -> tuple[str, int]:
    """`topic:partition` (the topic may itself hold colons: the last one splits)."""
    topic, sep, number = text.rpartition(":")
    if not sep or not topic:
        raise TargetError(f"--partition {text!r}: expected TOPIC:PARTITION, e.g. orders:3")
    try:
        partition = int(number)
    except ValueError:
        raise TargetError(f"--partition {text!r}: the partition after the last ':' must be a number, "
                          f"got {number!r}") from None
    if partition < 0:
        raise TargetError(f"--partition {text!r}: a partition number is 0 or more")
    return topic, partition


def target_of(hanging: bool, transactional_id: str | None, partition: str | None, app: str | None) -> Target:
    """The one target the flags name (argparse keeps them mutually exclusive)."""
    if transactional_id is not None:
        if not transactional_id.strip():
            raise TargetError("--transactional-id: empty; name the id as the producer sets it")
        return Target(TRANSACTIONAL_ID, transactional_id)
    if partition is not None:
        topic, number = parse_partition(partition)
        return Target(PARTITION, f"{topic}:{number}", topic, number)
    if app is not None:
        if not app.strip():
            raise TargetError("--app: empty; name the app as the exporter's `app` label shows it")
        return Target(APP, app)
    if hanging:
        return Target(HANGING)
    raise TargetError("name what to abort: --hanging, --transactional-id ID, --partition TOPIC:N or --app NAME")
