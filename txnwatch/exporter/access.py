"""Access problems of the exporter's principal, as findings that name the missing ACL and
the exact `kafka-acls.sh` command that grants it (the messages for failed authentication
and TLS handshakes are kafka/errors.py's). Pure: the evidence comes from the poller's Kafka calls
and the transaction-log tap's health (see access_probe.py); nothing here does I/O.

What the exporter needs (checked against Apache Kafka 3.1 with the AclAuthorizer):
  Topic (the monitored ones)  READ (implies DESCRIBE: metadata, ListOffsets, OffsetFetch;
                              READ itself for DescribeProducers and the LSO timestamp probe),
                              DESCRIBE_CONFIGS (retention.ms)
  Group (the monitored ones)  DESCRIBE (ListGroups, OffsetFetch)
  Cluster                     DESCRIBE_CONFIGS (transaction.max.timeout.ms and friends)
  TransactionalId '*'         DESCRIBE (KIP-664: ListTransactions silently omits ids the
                              principal may not describe; DescribeTransactions refuses them)
  Topic __transaction_state   READ (the transaction-log tap only)

Why the detections look the way they do:
* ListTransactions never says "not authorized": it leaves out the ids. So a missing
  DESCRIBE on TransactionalId shows only indirectly: ids the tap read from
  `__transaction_state` that ListTransactions does not list answer DescribeTransactions
  with TRANSACTIONAL_ID_AUTHORIZATION_FAILED (proof); or, without the tap, producer state
  (DescribeProducers) shows open transactions while ListTransactions lists no id at all
  (strong evidence; such transactions could also be hanging, and the finding says so),
  unless the principal may do everything on the cluster (no authorizer, or a super user):
  then nothing is hidden from it and such transactions are hanging, not hidden.
* A tap that may DESCRIBE but not READ `__transaction_state` is refused once per
  partition and then reads nothing without further errors, so "refused, and no progress
  since" is the signal (TapReadWatch), not the tap's up/down state.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from ..kafka.answers import TRANSACTION_STATE_TOPIC
from ..kafka.errors import principal_of
from .model import Finding

MAX_NAMED = 5   # ids/topics named in one finding


# ------------------------------------------------------------------ principals and commands
def _principal_arg(props: Mapping[str, str]) -> str:
    p = principal_of(props)
    if p is not None:
        return _quote(p)
    if (props.get("security.protocol") or "").upper() == "SSL" and props.get("ssl.certificate.location"):
        return "'User:<distinguished name of ssl.certificate.location, e.g. CN=txnwatch>'"
    return "'User:<the exporter principal>'"


def _quote(s: str) -> str:
    return s if re.fullmatch(r"[\w@%+=:,./-]+", s) else "'" + s.replace("'", "'\"'\"'") + "'"


def acl_command(props: Mapping[str, str], bootstrap: str, operation: str, resource: str,
                names: Iterable[str]) -> str:
    """`kafka-acls.sh --add` for the exporter's principal. `resource` is the kafka-acls flag
    (topic, group, transactional-id, cluster). A secured cluster needs an admin's client
    settings for the tool itself: `--command-config admin.properties` stands for them."""
    secured = (props.get("security.protocol") or "PLAINTEXT").upper() != "PLAINTEXT"
    targets = " ".join(f"--{resource} {_quote(n)}" for n in names) if resource != "cluster" else "--cluster"
    return (f"kafka-acls.sh --bootstrap-server {bootstrap}"
            f"{' --command-config admin.properties' if secured else ''} --add --allow-principal "
            f"{_principal_arg(props)} --operation {operation} {targets}")


def _named(items: Iterable[str]) -> str:
    items = sorted(set(items))
    more = f" and {len(items) - MAX_NAMED} more" if len(items) > MAX_NAMED else ""
    return ", ".join(items[:MAX_NAMED]) + more


def _who(props: Mapping[str, str]) -> str:
    return principal_of(props) or "the exporter's principal"


# ------------------------------------------------------------------ evidence
@dataclass(frozen=True)
class Evidence:
    """What one poll learned about the principal's access."""

    listed_ids: int | None = None                       # ids ListTransactions returned (None: not asked)
    denied_ids: tuple[str, ...] = ()                    # DescribeTransactions: not authorized
    unlisted_open: tuple[tuple[str, int, int], ...] = ()   # (topic, partition, producer id), see below
    denied_topics: tuple[str, ...] = ()                 # DescribeProducers: TOPIC_AUTHORIZATION_FAILED
    tap_read_denied: bool = False                       # the tap may not read __transaction_state
    cluster_configs_denied: bool = False                # DescribeConfigs: CLUSTER_AUTHORIZATION_FAILED


def ids_to_probe(known: Iterable[str], listed: Iterable[str], limit: int = 3) -> list[str]:
    """Transactional ids the tap knows that ListTransactions did not list: DescribeTransactions
    on a few of them tells a missing ACL (authorization failed) from an id the coordinator has
    dropped since the tap read it (not found)."""
    listed = set(listed)
    return sorted({t for t in known if t not in listed})[:limit]


def unlisted_open_producers(producers: Iterable, listed_pids: Iterable[int]) -> list[tuple[str, int, int]]:
    """(topic, partition, producer id) of open transactions in producer state (DescribeProducers)
    whose producer id no ListTransactions entry has."""
    listed = set(listed_pids)
    return sorted({(p.topic, p.partition, p.producer_id) for p in producers
                   if p.txn_start_offset >= 0 and p.producer_id not in listed})


def unrestricted(cluster_operations: Iterable[str] | None) -> bool:
    """The principal may do everything on the cluster, even ALTER and CLUSTER_ACTION: the
    broker has no authorizer (it then answers with every operation) or the principal is a
    super user. Either way ListTransactions hides no id from it."""
    return cluster_operations is not None and {"ALTER", "CLUSTER_ACTION"} <= set(cluster_operations)


def transaction_state_readable(operations: Iterable[str] | None, error: str | None) -> bool | None:
    """From DescribeTopics with authorized operations on __transaction_state: False when the
    principal may not read it, True when it may, None when unknown (e.g. the topic does not
    exist yet: no transactional producer has run)."""
    if error == "TOPIC_AUTHORIZATION_FAILED":
        return False
    if error is not None or operations is None:
        return None
    ops = {o.upper() for o in operations}
    return "READ" in ops or "ALL" in ops


@dataclass(frozen=True)
class TapReadWatch:
    """Whether the tap is refused `__transaction_state`: it was refused (its
    topic_authorization_failed count grew) and has made no progress since (no records
    applied, not rebuilt). A tap refused READ but allowed DESCRIBE is told so once per
    partition and then just reads nothing, so its up/down state cannot tell."""

    denials: int = 0
    applied: int = 0
    rebuilt: bool = False
    denied: bool = False


def observe_tap(prev: TapReadWatch, denials: int, applied: int, rebuilt: bool) -> TapReadWatch:
    """The watch after one look at the tap's topic_authorization_failed count and progress."""
    if denials > prev.denials:   # refused (again): remember where the tap stood
        return TapReadWatch(denials, applied, rebuilt, True)
    if prev.denied and not (applied > prev.applied or (rebuilt and not prev.rebuilt)):
        return dataclasses.replace(prev, denials=denials)   # still nothing read since
    return TapReadWatch(denials, applied, rebuilt, False)


# ------------------------------------------------------------------ findings
def findings(ev: Evidence, props: Mapping[str, str], bootstrap: str) -> list[Finding]:
    """Findings for what the evidence shows the principal may not do."""
    out: list[Finding] = []
    who = _who(props)
    grant_ids = acl_command(props, bootstrap, "Describe", "transactional-id", ["*"])
    if ev.denied_ids:
        out.append(Finding("warning", "acl_transactional_id_describe", (
            f"{who} may not DESCRIBE transactional ids: DescribeTransactions answered "
            f"TRANSACTIONAL_ID_AUTHORIZATION_FAILED for {_named(ev.denied_ids)}, which the transaction-log "
            "tap saw but ListTransactions did not list (it silently omits ids the principal may not "
            "describe), so their open and hanging transactions are missing here. Grant DESCRIBE on "
            f"TransactionalId: {grant_ids}")))
    elif ev.unlisted_open and ev.listed_ids == 0:
        where = _named(f"{t}-{p} (producer id {pid})" for t, p, pid in ev.unlisted_open)
        out.append(Finding("warning", "acl_transactional_id_describe", (
            f"ListTransactions returned no transactional ids, yet producer state shows open transactions "
            f"on {where}: {who} most likely may not DESCRIBE transactional ids (ListTransactions silently "
            f"omits the ids a principal may not describe). Grant DESCRIBE on TransactionalId: {grant_ids} "
            "(if the principal has it, these transactions have no coordinator state: they are hanging, "
            "see kafka-transactions.sh find-hanging)")))
    if ev.denied_topics:
        out.append(Finding("warning", "acl_topic_read", (
            f"{who} may not READ {_named(ev.denied_topics)}: DescribeProducers answered "
            "TOPIC_AUTHORIZATION_FAILED, so hanging transactions on them cannot be found and their LSO "
            "stall clocks start at first observation. Grant READ on the topics: "
            + acl_command(props, bootstrap, "Read", "topic", sorted(set(ev.denied_topics))[:MAX_NAMED]))))
    if ev.cluster_configs_denied:
        out.append(Finding("warning", "acl_cluster_describe_configs", (
            f"{who} may not DESCRIBE_CONFIGS the cluster (CLUSTER_AUTHORIZATION_FAILED): the brokers' "
            "transaction.max.timeout.ms, transactional.id.expiration.ms and transaction.state.log.min.isr "
            "are unknown and defaults are assumed (hanging threshold, expiration headroom, min-ISR risk). "
            "Grant it: " + acl_command(props, bootstrap, "DescribeConfigs", "cluster", []))))
    if ev.tap_read_denied:
        out.append(Finding("warning", "acl_transaction_state_read", (
            f"the transaction-log tap may not read {TRANSACTION_STATE_TOPIC} (TOPIC_AUTHORIZATION_FAILED): "
            "no transaction counts, durations, fencing or expiration headroom from the log. Grant "
            f"{who} READ on it: "
            + acl_command(props, bootstrap, "Read", "topic", [TRANSACTION_STATE_TOPIC]))))
    return out
