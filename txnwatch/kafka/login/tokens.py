"""OAUTHBEARER tokens for both Kafka clients from one cache per login: a thread of its own asks
the token source before the token runs out and, when the source fails, again with backoff while
the token in hand still serves. The clients only read the cache (librdkafka's oauth_cb runs on
the thread that delivers its admin results, kafka-python's token() on its only I/O thread: a
slow token endpoint must stall neither).

When to refresh and when to retry are pure functions of the times involved (tested without a
clock)."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from ..errors import AUTH, PollError

log = logging.getLogger(__name__)

REFRESH_SHARE = 0.8          # of a token's lifetime, as librdkafka and the Java client refresh
MAX_RETRY_SECONDS = 30.0
FIRST_TOKEN_WAIT = 8.0       # a client made while the first request is out waits this long for it


@dataclass(frozen=True)
class Token:
    value: str = field(repr=False)
    expires_at: float                      # unix time
    obtained_at: float
    principal: str | None = None
    extensions: tuple[tuple[str, str], ...] = ()


class LoginFailure(PollError):
    """The token source failed; the message is for the operator (what failed, what to check),
    never with a secret. A poll step it fails has cause auth."""

    def __init__(self, message: str) -> None:
        super().__init__(AUTH, message)


class TokenUnavailable(LoginFailure):
    """No valid token in hand: raised to a client asking for one."""


@dataclass(frozen=True)
class TokenStatus:
    principal: str | None = None
    expires_at: float | None = None        # of the token in hand
    refreshes: int = 0                     # tokens obtained
    failure: str | None = None             # the last attempt's, while it has not succeeded since
    failing_since: float | None = None


def refresh_due(token: Token) -> float:
    """When to ask for the next token: most of the way through this one's life."""
    return token.obtained_at + REFRESH_SHARE * max(token.expires_at - token.obtained_at, 0.0)


def retry_after(failures: int) -> float:
    """Seconds before the next attempt after `failures` failed ones in a row: 1, 2, 4, ... 30."""
    return min(2.0 ** max(failures - 1, 0), MAX_RETRY_SECONDS)


def next_retry(last_attempt: float, failures: int, expires_at: float | None) -> float:
    """When to try again after `failures` failed attempts, the last at `last_attempt`: backing
    off, but while a token is in hand halving the time left to its expiry at most, so the
    attempts grow closer, not further apart, as it nears its end."""
    wait = retry_after(failures)
    if expires_at is not None and expires_at > last_attempt:
        wait = min(wait, max((expires_at - last_attempt) / 2, 1.0))
    return last_attempt + wait


def valid(token: Token | None, now: float) -> bool:
    return token is not None and token.expires_at > now


class TokenCache:
    """The token of one login, kept fresh by a thread of its own (start() ... stop())."""

    def __init__(self, fetch: Callable[[float], Token], name: str, clock: Callable[[], float] = time.time) -> None:
        self._fetch, self._name, self._clock = fetch, name, clock
        self._lock = threading.Condition()
        self._token: Token | None = None
        self._refreshes = 0
        self._failure: str | None = None
        self._failing_since: float | None = None
        self._failures = 0
        self._last_attempt = 0.0           # the refresh thread's own
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> TokenCache:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name=f"txnwatch-token {self._name}", daemon=True)
            self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        with self._lock:
            self._lock.notify_all()
        if self._thread is not None:
            self._thread.join(5)

    def current(self, wait: float = FIRST_TOKEN_WAIT) -> Token:
        """The token in hand, while it is valid; before the first one, up to `wait` seconds for
        it. TokenUnavailable says why there is none."""
        deadline = self._clock() + wait
        with self._lock:
            while self._token is None and self._failure is None and self._clock() < deadline \
                    and not self._stop.is_set():
                self._lock.wait(min(deadline - self._clock(), 0.5))
            token = self._token
            if valid(token, self._clock()):
                return token
            raise TokenUnavailable(self._failure or f"no OAUTHBEARER token from {self._name} yet")

    def status(self) -> TokenStatus:
        with self._lock:
            token = self._token
            return TokenStatus(token.principal if token else None, token.expires_at if token else None,
                               self._refreshes, self._failure, self._failing_since)

    def _run(self) -> None:
        while not self._stop.is_set():
            self._stop.wait(max(self._next_attempt() - self._clock(), 0.0))
            if not self._stop.is_set():
                self._attempt()

    def _next_attempt(self) -> float:
        with self._lock:
            if self._failures:
                return next_retry(self._last_attempt, self._failures,
                                  self._token.expires_at if self._token is not None else None)
            return refresh_due(self._token) if self._token is not None else self._clock()

    def _attempt(self) -> None:
        now = self._clock()
        self._last_attempt = now
        try:
            token = self._fetch(now)
        except LoginFailure as exc:
            self._failed(str(exc), now)
        except Exception as exc:  # noqa: BLE001 - a token source's own bug must not end the refreshes
            log.debug("token source %s raised", self._name, exc_info=True)
            self._failed(f"{type(exc).__name__} from the token source", now)
        else:
            with self._lock:
                if self._failure is not None:
                    log.warning("login %s: token obtained again after %.0f s of failures", self._name,
                                now - (self._failing_since or now))
                self._token, self._failure, self._failing_since, self._failures = token, None, None, 0
                self._refreshes += 1
                self._lock.notify_all()

    def _failed(self, message: str, now: float) -> None:
        with self._lock:
            if self._failure != message:
                log.warning("login %s: %s", self._name, message)
            self._failure = message
            self._failing_since = self._failing_since or now
            self._failures += 1
            self._lock.notify_all()
