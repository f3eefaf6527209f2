"""Gathers, once per poll, the evidence of missing ACLs that access.py turns into findings:
from the poller's KIP-664 calls, a few DescribeTransactions on ids the transaction-log tap
knows, the tap's health, and (for `txnwatch check`, which runs no tap) the authorized
operations on `__transaction_state`. The I/O side of access.py."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping

from confluent_kafka import KafkaError, KafkaException

from ...kafka.admin import KafkaIO
from ...kafka.answers import ActiveProducer, TxnListing
from ...kafka.errors import one_line
from ...kafka.kip664 import TransactionAPI
from .. import access
from ..model import Finding

log = logging.getLogger(__name__)

PROBE_IDS = 3   # DescribeTransactions per poll on tap-known ids ListTransactions left out
# ListTransactions asks for open transactions only, so idle ids the tap knows are never
# listed: one found describable is probed again only after this many polls.
ALLOWED_RECHECK_POLLS = 100


class AccessProbe:
    """One per poller. `tap` is the cluster's TransactionLogTap when one runs beside it."""

    def __init__(self, props: Mapping[str, str], bootstrap: str, io: KafkaIO, txn_api: TransactionAPI,
                 tap_configured: bool) -> None:
        self.props = dict(props)
        self.bootstrap = bootstrap
        self.io = io
        self.txn_api = txn_api
        self.tap_configured = tap_configured
        self.tap = None
        self._tap_watch = access.TapReadWatch()
        self._kip664 = access.Evidence()
        self._tap_readable: bool | None = None
        self._cluster_configs_denied = False
        self._observed = 0
        self._allowed: dict[str, int] = {}   # id -> observation at which DescribeTransactions allowed it

    def observe_kip664(self, listings: list[TxnListing], producers: list[ActiveProducer]) -> None:
        """After the poller's ListTransactions and DescribeProducers of this poll."""
        listed = {t.transactional_id for t in listings}
        denied: list[str] = []
        self._observed += 1
        if self.tap is not None:
            view = self.tap.view()
            known = [t.transactional_id for t in view.open_txns] + [k[0] for k in view.idle.kept]
            fresh = self._observed - ALLOWED_RECHECK_POLLS
            self._allowed = {t: n for t, n in self._allowed.items() if n > fresh}
            probe = access.ids_to_probe(known, listed | self._allowed.keys(), PROBE_IDS)
            denied = self.txn_api.denied_ids(probe)
            self._allowed.update((t, self._observed) for t in probe if t not in denied)
        unlisted = access.unlisted_open_producers(producers, (t.producer_id for t in listings))
        if unlisted and not listed:
            # an open transaction may have begun after the listing: ask again for just these
            found = self.txn_api.pids_to_ids(pid for _t, _p, pid in unlisted)
            unlisted = [u for u in unlisted if u[2] not in found]
            if unlisted and access.unrestricted(self.io.cluster_operations()):
                unlisted = []   # nothing is hidden from this principal: hanging, not an ACL
        self._kip664 = access.Evidence(listed_ids=len(listed), denied_ids=tuple(denied),
                                       unlisted_open=tuple(unlisted), denied_topics=self.txn_api.denied_topics)

    def observe_configs(self, exc: BaseException | None) -> None:
        """After a DescribeConfigs refresh: refused for the cluster, or not."""
        err = exc.args[0] if isinstance(exc, KafkaException) and exc.args else None
        self._cluster_configs_denied = isinstance(err, KafkaError) and \
            err.code() == KafkaError.CLUSTER_AUTHORIZATION_FAILED

    def kip664_unavailable(self) -> None:
        self._kip664 = access.Evidence()

    def findings(self, poll_number: int, every: int) -> list[Finding]:
        """This poll's access findings (call once per poll, after observe_kip664)."""
        tap_denied = False
        if self.tap is not None:
            h, view = self.tap.health(), self.tap.view()
            self._tap_watch = access.observe_tap(self._tap_watch, h.errors.get("topic_authorization_failed", 0),
                                                 view.applied, view.rebuilt)
            tap_denied = self._tap_watch.denied
        elif self.tap_configured:
            # no tap here (txnwatch check): ask the broker what the principal may do with the log
            if poll_number % max(every, 1) == 0 or self._tap_readable is None:
                self._tap_readable = self._transaction_state_readable()
            tap_denied = self._tap_readable is False
        ev = dataclasses.replace(self._kip664, tap_read_denied=tap_denied,
                                 cluster_configs_denied=self._cluster_configs_denied)
        return access.findings(ev, self.props, self.bootstrap)

    def _transaction_state_readable(self) -> bool | None:
        try:
            ops, error = self.io.topic_operations(access.TRANSACTION_STATE_TOPIC)
        except Exception as exc:  # noqa: BLE001 - unknown is no finding

            log.debug("authorized operations on %s unknown: %s", access.TRANSACTION_STATE_TOPIC, one_line(exc))
            return None
        return access.transaction_state_readable(ops, error)
