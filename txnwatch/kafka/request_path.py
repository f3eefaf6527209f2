"""Which path one kind of request takes: txnwatch's own (encoded and read here, sent over
kafka-python's connections) or librdkafka's. KafkaIO keeps one per request kind (Metadata,
ListOffsets, OffsetFetch), so the three agree on when to fall back and when to try again."""

from __future__ import annotations

import logging

log = logging.getLogger(__name__)

RECHECK_CALLS = 40   # calls on the fallback before txnwatch's own path is tried again


class RequestPath:
    """Untried (`on` None), on, off for a while (tried again after `recheck_calls` calls)
    or off for good (settings or a broker txnwatch's path cannot use). A change of path is
    logged once per reason, not once per poll."""

    def __init__(self, what: str, fallback: str, recheck_calls: int = RECHECK_CALLS) -> None:
        self.what = what                  # e.g. "partition offsets": the log lines' subject
        self.fallback = fallback          # how the data is read while the path is off
        self.recheck_calls = recheck_calls
        self.on: bool | None = None       # the capability, as exported; None until tried
        self.version: int | None = None   # the request version spoken while on
        self._calls = 0
        self._retry_at: float = 0
        self._reason: str | None = None

    def due(self) -> bool:
        """Counts a call. True unless the path is off and not yet due for another try."""
        self._calls += 1
        return self.on is not False or self._calls >= self._retry_at

    def turn_on(self, how: str, version: int | None = None) -> None:
        """The path answered; `how` says what it sends (logged when it was not on)."""
        if self.on is not True:
            log.info("%s: %s", self.what, how)
        self.on, self._reason, self.version = True, None, version

    def turn_off(self, reason: str, forever: bool = False) -> None:
        self.on = False
        self._retry_at = float("inf") if forever else self._calls + self.recheck_calls
        if reason != self._reason:
            log.info("%s: %s (%s)", self.what, self.fallback, reason)
        self._reason = reason
