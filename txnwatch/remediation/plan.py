"""What `txnwatch abort` may do with each transaction it found, and what that will change:
pure functions of the survey (time as an argument), so every refusal is unit-tested.

An abort here writes ABORT markers straight to a partition (WriteTxnMarkers, what
`kafka-transactions.sh abort` sends): the partition's leader closes the producer's open
transaction there and the last stable offset moves on. The coordinator is not told. That is
the only way to end a hanging transaction (its coordinator holds no open transaction for it),
and a risk for any other:
* a live transaction (its coordinator holds it open, within its timeout) loses the aborted
  partitions' records while its other partitions may still commit: `--force-live`;
* a two-phase-commit transaction (KIP-939) is ended by its external transaction manager
  only: `--force-2pc`;
* a Flink KafkaSink transaction may be a pre-commit a completed checkpoint already counted:
  aborting it loses data no replay brings back (FLINK-39218): `--accept-data-loss`;
* a principal without Alter (or ClusterAction) on the cluster cannot write markers: no flag
  overrides that.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from ..exporter.model import OPEN_STATES, is_two_phase
from ..kafka.answers import TxnDescription

FLINK_SCHEME = "flink-kafkasink"
LIVE, TWO_PHASE, FLINK, ACL = "live", "two_phase", "flink", "acl"


@dataclass(frozen=True, slots=True)
class BlockedGroup:
    """A read_committed consumer group's position on a pinned partition."""

    group: str
    committed: int
    lag_lso: int          # LSO - committed: what it can read now
    lag_hwm: int          # HWM - committed: what waits above the LSO too


@dataclass(frozen=True, slots=True)
class BlockedQuery:
    """A Spark query's read position on a pinned partition (from the exporter: see exporter_view)."""

    query: str
    query_id: str
    offset: int           # the next offset it reads
    lag_lso: int          # LSO - offset
    lag_hwm: int          # HWM - offset


@dataclass(frozen=True, slots=True)
class Pin:
    """One partition an open transaction holds: its LSO sits at the transaction's first offset."""

    topic: str
    partition: int
    start_offset: int
    coordinator_epoch: int
    last_write_ms: int              # the leader's last append from this producer (-1: unknown)
    lso: int
    hwm: int
    stalled_since: float | None     # when the LSO stopped (unix s), None when it is not stalled
    groups: tuple[BlockedGroup, ...] = ()
    queries: tuple[BlockedQuery, ...] = ()

    @property
    def name(self) -> str:
        return f"{self.topic}-{self.partition}"

    @property
    def pins_lso(self) -> bool:
        """The transaction is what holds this partition's LSO."""
        return self.lso == self.start_offset


@dataclass(frozen=True, slots=True)
class Transaction:
    """One producer's open transaction, as the partitions and its coordinator show it."""

    producer_id: int
    producer_epoch: int
    transactional_id: str | None      # None: no id maps to the producer id any more
    app: str | None
    scheme: str | None                # the app rule's scheme (flink-kafkasink, ...)
    coordinator: TxnDescription | None
    hanging_reason: str | None        # the exporter's find-hanging verdict; None: not hanging
    pins: tuple[Pin, ...]
    state_unchanged_seconds: float | None = None    # the coordinator's state's age, as the exporter saw it

    @property
    def coordinator_holds(self) -> bool:
        """The coordinator holds this producer's transaction open (it will end it itself)."""
        c = self.coordinator
        return c is not None and c.producer_id == self.producer_id and c.state in OPEN_STATES

    @property
    def two_phase(self) -> bool:
        return self.coordinator_holds and is_two_phase(self.coordinator.timeout_ms)


@dataclass(frozen=True)
class Flags:
    force_live: bool = False
    force_2pc: bool = False
    accept_data_loss: bool = False


@dataclass(frozen=True, slots=True)
class Risk:
    kind: str               # live | two_phase | flink | acl
    flag: str | None        # the flag that accepts it; None: nothing does
    words: str


@dataclass(frozen=True)
class Decision:
    txn: Transaction
    risks: tuple[Risk, ...]         # every risk found
    refused: tuple[Risk, ...]       # the risks no flag given accepts
    liveness: str
    age_seconds: float | None
    discards: tuple[str, ...]
    producer_next: str

    @property
    def will_abort(self) -> bool:
        return not self.refused


def age_seconds(txn: Transaction, now_ms: int) -> float | None:
    """Since the transaction started: the coordinator's start, else the oldest stalled LSO."""
    if txn.coordinator_holds and txn.coordinator.start_ms >= 0:
        return (now_ms - txn.coordinator.start_ms) / 1000
    since = [p.stalled_since for p in txn.pins if p.stalled_since is not None]
    return now_ms / 1000 - min(since) if since else None


def last_write_seconds(txn: Transaction, now_ms: int) -> float | None:
    """Since the producer last appended to any of the transaction's partitions."""
    writes = [p.last_write_ms for p in txn.pins if p.last_write_ms >= 0]
    return (now_ms - max(writes)) / 1000 if writes else None


def is_live(txn: Transaction, now_ms: int) -> bool:
    """The coordinator holds it open on these partitions and its timeout has not passed: the
    producer may still commit it."""
    c = txn.coordinator
    if not txn.coordinator_holds or not any((p.topic, p.partition) in c.partitions for p in txn.pins):
        return False
    return c.start_ms < 0 or is_two_phase(c.timeout_ms) or now_ms < c.start_ms + c.timeout_ms


def liveness(txn: Transaction, now_ms: int) -> str:
    c = txn.coordinator
    wrote = last_write_seconds(txn, now_ms)
    write = "no write by it seen" if wrote is None else f"its last write {wrote:.0f}s ago"
    if txn.two_phase:
        return f"two-phase commit, {c.state} at its coordinator (never timed out); {write}"
    if txn.state_unchanged_seconds is not None:
        write = f"its coordinator state unchanged for {txn.state_unchanged_seconds:.0f}s (the exporter's), {write}"
    if txn.coordinator_holds:
        if c.start_ms < 0:
            return f"{c.state} at its coordinator; {write}"
        left = (c.start_ms + c.timeout_ms - now_ms) / 1000
        timing = (f"{left:.0f}s left of its {c.timeout_ms / 1000:.0f}s timeout" if left >= 0 else
                  f"past its {c.timeout_ms / 1000:.0f}s timeout by {-left:.0f}s: the coordinator should "
                  "have aborted it")
        return f"{c.state} at its coordinator, {timing}; {write}"
    return f"its coordinator holds no open transaction for it ({_why_not_held(txn)}); {write}"


def _why_not_held(txn: Transaction) -> str:
    c = txn.coordinator
    if txn.transactional_id is None:
        return "no transactional id maps to producer id " + str(txn.producer_id)
    if c is None:
        return f"{txn.transactional_id} is unknown to its coordinator (expired)"
    if c.producer_id != txn.producer_id:
        return f"{txn.transactional_id} now has producer id {c.producer_id}"
    return f"{txn.transactional_id} is {c.state}"


def risks(txn: Transaction, now_ms: int, may_write_markers: bool | None,
          acl_command: str) -> tuple[Risk, ...]:
    found = []
    if may_write_markers is False:
        found.append(Risk(ACL, None, "the principal may not write transaction markers: WriteTxnMarkers needs "
                                     f"Alter (or ClusterAction) on the cluster. Grant it with: {acl_command}"))
    if txn.two_phase:
        found.append(Risk(TWO_PHASE, "--force-2pc",
                          "a two-phase-commit transaction (KIP-939): only its external transaction manager "
                          "may end it, and it may already have voted to commit"))
    elif is_live(txn, now_ms):
        found.append(Risk(LIVE, "--force-live",
                          "a live transaction: its coordinator holds it open within its timeout, so its producer "
                          "may still commit it (and its coordinator will abort it at the timeout anyway)"))
    if txn.scheme == FLINK_SCHEME:
        found.append(Risk(FLINK, "--accept-data-loss",
                          "a Flink KafkaSink transaction: it may be a pre-commit that a completed checkpoint "
                          "already counted; aborting it loses those records, and no replay brings them back "
                          "(FLINK-39218). Abort it only when no checkpoint the job may restore from counted it: "
                          "the job restored from a checkpoint older than this transaction and never uses its id "
                          "again (an orphan after a rescale), or the job is gone for good"))
    return tuple(found)


def accepted(risk: Risk, flags: Flags) -> bool:
    return {"--force-live": flags.force_live, "--force-2pc": flags.force_2pc,
            "--accept-data-loss": flags.accept_data_loss}.get(risk.flag or "", False)


def discards(txn: Transaction) -> tuple[str, ...]:
    """What the abort throws away, per partition: this transaction's records from its first
    offset (an upper bound: records of other producers above it are not touched, and become
    readable)."""
    return tuple(f"{p.name}: this transaction's records from offset {p.start_offset} "
                 f"(at most {max(p.hwm - p.start_offset, 0)} offsets, up to the HWM {p.hwm})" for p in txn.pins)


def producer_next(txn: Transaction, now_ms: int) -> str:
    """What the producer sees after the markers."""
    if txn.two_phase:
        return ("its transaction manager's commit writes COMMIT markers to the other partitions only: the "
                "aborted partitions' records are lost while the rest commit")
    if is_live(txn, now_ms):
        return ("it does not know: its transaction goes on at the coordinator, and its commit would commit "
                "the partitions not aborted here, losing these partitions' records (atomicity broken)")
    if txn.coordinator_holds:
        return ("its coordinator aborts the rest at its next timeout check and bumps the epoch: the producer's "
                "next call fails with a fenced or invalid-epoch error, and it must start again")
    return "nothing: the producer that opened it is gone, and whoever holds the id now is not touched"


def decide(txn: Transaction, now_ms: int, flags: Flags, may_write_markers: bool | None,
           acl_command: str) -> Decision:
    found = risks(txn, now_ms, may_write_markers, acl_command)
    refused = tuple(r for r in found if not accepted(r, flags))
    return Decision(txn, found, refused, liveness(txn, now_ms), age_seconds(txn, now_ms), discards(txn),
                    producer_next(txn, now_ms))


def acl_command(bootstrap: str, principal: str | None) -> str:
    who = principal if principal and ":" in principal else f"User:{principal or '<principal>'}"
    return (f"kafka-acls.sh --bootstrap-server {bootstrap} --command-config admin.properties --add "
            f"--allow-principal {who} --operation Alter --cluster")


def may_write_markers(cluster_operations: Iterable[str] | None) -> bool | None:
    """Whether DescribeCluster's authorized operations include what WriteTxnMarkers needs
    (Alter, or ClusterAction as brokers have); None when the broker did not say. A principal
    without Describe on the cluster is told no operations at all, whatever it holds: that is
    unknown too, and the broker's answer to the markers decides."""
    ops = {o.upper() for o in cluster_operations or ()}
    if not ops:
        return None
    return "ALTER" in ops or "CLUSTER_ACTION" in ops or "ALL" in ops


def lso_moved(pin: Pin, lso_now: int | None) -> bool:
    """The partition's LSO has passed the transaction's first offset."""
    return lso_now is not None and lso_now > pin.start_offset


def groups_moved(before: Iterable[BlockedGroup], committed_now: Mapping[str, int]) -> tuple[list[str], list[str]]:
    """(groups whose committed offset moved since the survey, groups still where they were)."""
    moved, still = [], []
    for g in before:
        (moved if committed_now.get(g.group, g.committed) != g.committed else still).append(g.group)
    return moved, still
