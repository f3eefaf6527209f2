"""One login per set of client properties in a process, shared by every client made with them:
librdkafka's admin clients, consumers and producers and kafka-python's, so a token is fetched
once for all of them and a keystore opened once. `login_for(props)` finds or makes it.

A login's state is what the page and `check` say of it (LoginStatus): the mechanism and
principal, when its token runs out, and, while its credentials cannot be had, why: the
cause="auth" of the sources that failed for it."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from ..errors import AUTH, BROKER_UNAVAILABLE, TIMEOUT
from . import kerberos, msk_iam, oidc
from .settings import CONSUMED, MSK_IAM, OIDC, STATIC, LoginSettings, LoginSettingsError, parse
from .tls import ClientIdentity, file_identity, inline_identity, open_keystore, ssl_context
from .tokens import Token, TokenCache, TokenUnavailable

# what a client says when it holds no credentials it can use
# (causes as txnwatch names them, and librdkafka's and kafka-python's error names, in lower case)
CREDENTIAL_SYMPTOMS = frozenset({AUTH, BROKER_UNAVAILABLE, TIMEOUT, "kip664_connect", "unexpected",
                                 "all_brokers_down", "transport", "timed_out", "authentication",
                                 "sasl_authentication_failed", "kafkaexception", "kafkatimeouterror"})

# librdkafka asks again for a token at 80 % of the expiry it was given: an expiry capped this
# close makes it read the cache every few seconds less than a minute, so a new token (or one
# after the broker refused the last) reaches its connections without waiting for the old one's end.
LIBRDKAFKA_EXPIRY_CAP = 60.0
# ... and while the login's refresh fails, this close: librdkafka then asks every second (its
# token timer's tick), so the token fetched once the issuer is back reaches it within about two,
# before its connections re-authenticate at the old token's end (a broker ends an OAUTHBEARER
# session with its token, KIP-368). A token that comes closer to that end than this comes too
# late for them: each is refused once and reconnects.
LIBRDKAFKA_RETRY_CAP = 1.0


@dataclass(frozen=True)
class LoginStatus:
    describe: str                          # mechanism, principal, source: never a secret
    principal: str | None = None
    expires_at: float | None = None        # of the token in hand
    failure: str | None = None             # why the credentials cannot be had, while so
    failing_since: float | None = None


class Login:
    """The credentials of one set of client properties, in the form each client takes."""

    def __init__(self, settings: LoginSettings, props: Mapping[str, Any]) -> None:
        self.settings = settings
        self._tokens = _token_cache(settings)
        self._identity: ClientIdentity | None = None
        if settings.keystore is not None:
            self._identity = open_keystore(settings.keystore)
        if settings.kerberos is not None:
            kerberos.prepare_process(settings.kerberos)
            if not kerberos.librdkafka_has_gssapi():
                raise LoginSettingsError("sasl.mechanism", "GSSAPI: this confluent-kafka's librdkafka was built "
                                         "without Cyrus SASL (PyPI's wheels are): install one built against a "
                                         "librdkafka with GSSAPI (docs/configuration.md, Kerberos)")
        self._tls_context = None      # kafka-python's, made once
        self._props = dict(props)

    def librdkafka(self, config: Mapping[str, Any]) -> dict[str, Any]:
        """The client configuration for confluent-kafka, with this login's credentials."""
        out = {k: v for k, v in config.items() if k not in CONSUMED}
        if self._tokens is not None or self.settings.token_source == STATIC:
            out["oauth_cb"] = self._oauth_cb
        if self._identity is not None:
            out["ssl.certificate.pem"] = self._identity.certificate_pem
            out["ssl.key.pem"] = self._identity.key_pem
        if self.settings.kerberos is not None and self.settings.kerberos.keytab:
            out["sasl.kerberos.min.time.before.relogin"] = 0     # MIT renews from the keytab: no kinit
        return out

    def kafka_python(self, props: Mapping[str, Any], config: dict[str, Any]) -> dict[str, Any]:
        """kafka-python's keywords (`config`, mapped from the properties) with this login's
        credentials: a token provider, an SSL context for a keystore or inline PEM."""
        if self._tokens is not None or self.settings.token_source == STATIC:
            config["sasl_oauth_token_provider"] = _TokenProvider(self)
        if self.settings.tls:
            config["ssl_context"] = self._kafka_python_tls()
        if self.settings.mechanism == "GSSAPI":
            kerberos.check_kafka_python()
        return config

    def _kafka_python_tls(self):
        """librdkafka's TLS settings as one SSLContext: kafka-python then means by them what
        librdkafka does (hostname checks, a CA given inline, a keystore, no verification)."""
        if self._tls_context is None:
            identity = self._identity or inline_identity(self._props) or file_identity(self._props)
            self._tls_context = ssl_context(self._props, identity)
        return self._tls_context

    def token(self) -> Token:
        """The token in hand (TokenUnavailable says why there is none)."""
        if self.settings.token_source == STATIC:
            now = time.time()
            return Token(self.settings.static_token, now + LIBRDKAFKA_EXPIRY_CAP, now, "static")
        if self._tokens is None:
            raise TokenUnavailable(f"{self.settings.describe()} has no tokens")
        return self._tokens.current()

    def status(self) -> LoginStatus:
        principal = self.settings.username or (self.settings.kerberos.principal if self.settings.kerberos else None)
        if self._tokens is None:
            subject = self._identity.subject if self._identity is not None else None
            return LoginStatus(self.settings.describe(), principal or subject)
        tokens = self._tokens.status()
        failure = tokens.failure
        if failure is not None and tokens.expires_at is not None and tokens.expires_at > time.time():
            failure = None        # failing to refresh while the token in hand still serves: not yet down
        return LoginStatus(self.settings.describe(), tokens.principal, tokens.expires_at, failure,
                           tokens.failing_since if failure else None)

    def stop(self) -> None:
        if self._tokens is not None:
            self._tokens.stop()

    def _oauth_cb(self, _config: str | None) -> tuple[str, float, str, dict[str, str]]:
        token = self.token()
        failing = self._tokens is not None and self._tokens.status().failure is not None
        return token.value, librdkafka_expiry(token, time.time(), failing), token.principal or "txnwatch", \
            dict(token.extensions)


def librdkafka_expiry(token: Token, now: float, refresh_failing: bool) -> float:
    """The expiry librdkafka is told for the token in hand (it asks again at 80 % of it)."""
    return min(token.expires_at, now + (LIBRDKAFKA_RETRY_CAP if refresh_failing else LIBRDKAFKA_EXPIRY_CAP))


class _TokenProvider:
    """kafka-python's AbstractTokenProvider, reading the login's cache."""

    def __init__(self, login: Login) -> None:
        self._login = login

    def token(self) -> str:
        return self._login.token().value

    def extensions(self) -> dict[str, str]:
        return dict(self._login.token().extensions)

    def __repr__(self) -> str:
        return "_TokenProvider(***)"


def _token_cache(settings: LoginSettings) -> TokenCache | None:
    fetch: Callable[[float], Token]
    if settings.token_source == OIDC:
        name = settings.oidc.token_endpoint
        fetch = lambda now: oidc.fetch_token(settings.oidc, now)  # noqa: E731
    elif settings.token_source == MSK_IAM:
        try:
            signer = msk_iam.signer_module()
        except ImportError as exc:
            raise LoginSettingsError("sasl.oauthbearer.method", str(exc)) from None
        name = f"AWS MSK IAM {settings.msk_iam.region}"
        fetch = msk_iam.token_source(settings.msk_iam, signer)
    else:
        return None
    return TokenCache(fetch, name).start()


# ------------------------------------------------------------------ one login per settings
_LOGIN_KEYS = ("security.protocol", "sasl.", "ssl.", "https.", "enable.sasl.", "enable.ssl.")
_logins: dict[tuple, Login] = {}
_logins_lock = threading.Lock()


def login_key(props: Mapping[str, Any]) -> tuple:
    """What makes two property sets the same login: their security settings."""
    return tuple(sorted((k, str(v)) for k, v in props.items() if k.startswith(_LOGIN_KEYS) and not callable(v)))


def login_for(props: Mapping[str, Any]) -> Login:
    """The process's login for these client properties (made on first use)."""
    key = login_key(props)
    with _logins_lock:
        login = _logins.get(key)
        if login is None:
            login = _logins[key] = Login(parse(props), props)
        return login


def status_of(props: Mapping[str, Any]) -> LoginStatus | None:
    """The status of these properties' login, if this process made it (None: no client yet)."""
    login = _logins.get(login_key(props))
    return login.status() if login is not None else None


def explain(props: Mapping[str, Any], cause: str, message: str) -> tuple[str, str]:
    """A failed step's (cause, message), told by the login when it is why: librdkafka without a
    token it can use says only that no broker answered (the token source's failure is the
    reason), and kafka-python that its bootstrap timed out."""
    status = status_of(props)
    if status is not None and status.failure and cause.lstrip("_").lower() in CREDENTIAL_SYMPTOMS:
        return AUTH, f"login failed: {status.failure}"
    return cause, message


def stop_logins() -> None:
    """Stop every login's token refreshes (at the process's end)."""
    with _logins_lock:
        logins = list(_logins.values())
        _logins.clear()
    for login in logins:
        login.stop()
