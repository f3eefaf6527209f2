"""Who may read /metrics and the page: the web config's bcrypt-hashed basic-auth users, or
the bearer token of the exporter's own config. Nothing configured: open."""

from __future__ import annotations

import base64
import hashlib
import hmac
import threading
from collections import OrderedDict
from collections.abc import Mapping

CACHE_SIZE = 256


class Authorizer:
    """Checks an Authorization header. A bcrypt check is slow by design (cost 10: 0.1 s on
    this project's 2-core machine), and Prometheus sends the same credentials every scrape:
    the outcome of each (user, password, hash) is kept in a small LRU cache keyed by a
    SHA-256 of the three, as exporter-toolkit does, so a scrape pays it once. The cache
    holds digests, never a password."""

    def __init__(self, users: Mapping[str, str] | None = None, bearer_token: str | None = None) -> None:
        self.users = dict(users or {})
        self.bearer_token = bearer_token
        self._cache: OrderedDict[bytes, bool] = OrderedDict()
        self._lock = threading.Lock()

    @property
    def enabled(self) -> bool:
        return bool(self.users or self.bearer_token)

    @property
    def challenge(self) -> str:
        return 'Basic realm="txnwatch"' if self.users else 'Bearer realm="txnwatch"'

    def __call__(self, header: str) -> bool:
        if not self.enabled:
            return True
        scheme, _, value = header.partition(" ")
        value = value.strip()
        if self.bearer_token and scheme.lower() == "bearer":
            return hmac.compare_digest(value.encode(), self.bearer_token.encode())
        if self.users and scheme.lower() == "basic":
            try:
                user, sep, password = base64.b64decode(value, validate=True).decode().partition(":")
            except (ValueError, UnicodeDecodeError):
                return False
            return bool(sep) and self._basic(user, password)
        return False

    def _basic(self, user: str, password: str) -> bool:
        hashed = self.users.get(user)
        if hashed is None:
            # the same cost for an unknown user as for a known one with a wrong password
            hashed, user_known = DUMMY_HASH, False
        else:
            user_known = True
        key = hashlib.sha256(b"\0".join((user.encode(), password.encode(), hashed.encode()))).digest()
        with self._lock:
            if key in self._cache:
                self._cache.move_to_end(key)
                return self._cache[key]
        ok = _bcrypt_ok(password, hashed) and user_known
        with self._lock:
            self._cache[key] = ok
            while len(self._cache) > CACHE_SIZE:
                self._cache.popitem(last=False)
        return ok


def _bcrypt_ok(password: str, hashed: str) -> bool:
    import bcrypt

    try:
        # $2y$ (htpasswd's) and $2a$ are the same algorithm as $2b$
        return bcrypt.checkpw(password.encode(), ("$2b$" + hashed[4:]).encode())
    except ValueError:
        return False


# bcrypt of a random string at cost 10: unknown users are checked against it
DUMMY_HASH = "$2b$10$GZq2LTlifedXlfNFp5tEGeKSg89kQ0ug9NdLUm00CeZ4jf8mkkOX."
