"""Tokens from an OIDC provider's token endpoint with the client credentials grant (RFC 6749
4.4), as Strimzi with Keycloak, Confluent Cloud and Okta or Entra issue them to services. A
failure says what the endpoint answered, in words an operator acts on; the secret never
appears in one."""

from __future__ import annotations

import base64
import json
import ssl
import urllib.error
import urllib.parse
import urllib.request

from .settings import OidcSettings
from .tokens import LoginFailure, Token

TIMEOUT_SECONDS = 10.0
DEFAULT_LIFETIME = 300.0        # an answer without expires_in and a token without exp


def fetch_token(settings: OidcSettings, now: float) -> Token:
    """One token from the endpoint (LoginFailure says why not)."""
    answer = _post(settings)
    token = answer.get("access_token")
    if not isinstance(token, str) or not token:
        raise LoginFailure(f"token endpoint {settings.token_endpoint} answered without an access_token")
    claims = _claims(token)
    lifetime = _lifetime(answer, claims, now)
    principal = claims.get(settings.sub_claim) if isinstance(claims.get(settings.sub_claim), str) else None
    return Token(token, now + lifetime, now, principal or settings.client_id, settings.extensions)


def _post(settings: OidcSettings) -> dict:
    body = {"grant_type": "client_credentials"}
    if settings.scope:
        body["scope"] = settings.scope
    basic = base64.b64encode(f"{_form(settings.client_id)}:{_form(settings.client_secret)}".encode()).decode()
    request = urllib.request.Request(settings.token_endpoint, urllib.parse.urlencode(body).encode(), method="POST",
                                     headers={"Authorization": f"Basic {basic}", "Accept": "application/json",
                                              "Content-Type": "application/x-www-form-urlencoded"})
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT_SECONDS, context=_tls(settings)) as response:
            return _json(response.read(), settings)
    except urllib.error.HTTPError as exc:
        raise LoginFailure(_refusal(exc, settings)) from None
    except urllib.error.URLError as exc:
        raise LoginFailure(_unreachable(exc.reason, settings)) from None
    except (TimeoutError, OSError) as exc:
        raise LoginFailure(_unreachable(exc, settings)) from None


def _form(text: str) -> str:
    """RFC 6749 2.3.1: the client id and secret are form-encoded before basic auth."""
    return urllib.parse.quote_plus(text)


def _tls(settings: OidcSettings) -> ssl.SSLContext | None:
    if not settings.token_endpoint.startswith("https:"):
        return None
    return ssl.create_default_context(cafile=settings.ca_location)


def _json(raw: bytes, settings: OidcSettings) -> dict:
    try:
        answer = json.loads(raw)
    except ValueError:
        answer = None
    if not isinstance(answer, dict):
        raise LoginFailure(f"token endpoint {settings.token_endpoint} answered something that is not a JSON "
                           "object: is the URL the token endpoint (the provider's token_endpoint)?")
    return answer


def _refusal(exc: urllib.error.HTTPError, settings: OidcSettings) -> str:
    try:
        detail = json.loads(exc.read() or b"{}")
    except ValueError:
        detail = {}
    error = detail.get("error") if isinstance(detail, dict) else None
    where = f"token endpoint {settings.token_endpoint} answered {exc.code}"
    if error == "invalid_client" or exc.code == 401:
        return (f"{where} ({error or 'unauthorized'}): client secret rejected for client "
                f"{settings.client_id!r}: check sasl.oauthbearer.client.id and .client.secret (a revoked or "
                "rotated secret)")
    if error == "invalid_scope":
        return f"{where} (invalid_scope): scope {settings.scope!r} refused: check sasl.oauthbearer.scope"
    if exc.code >= 500:
        return f"{where}: the identity provider is unavailable; retrying"
    described = detail.get("error_description") if isinstance(detail, dict) else None
    return f"{where} ({error or exc.reason}){': ' + str(described)[:200] if described else ''}"


def _unreachable(reason: object, settings: OidcSettings) -> str:
    if isinstance(reason, ssl.SSLCertVerificationError):
        return (f"token endpoint {settings.token_endpoint}: its TLS certificate is not trusted "
                f"({reason.verify_message}): set https.ca.location to the CA that signed it")
    if isinstance(reason, TimeoutError):
        return f"token endpoint {settings.token_endpoint} did not answer within {TIMEOUT_SECONDS:g} s; retrying"
    text = getattr(reason, "strerror", None) or str(reason)
    return f"token endpoint {settings.token_endpoint} unreachable ({text}); retrying"


def _claims(token: str) -> dict:
    """The JWT's claims, unverified (the broker verifies them): only to read its principal and
    expiry. An opaque token has none."""
    parts = token.split(".")
    if len(parts) != 3:
        return {}
    try:
        claims = json.loads(base64.urlsafe_b64decode(parts[1] + "=" * (-len(parts[1]) % 4)))
    except ValueError:
        return {}
    return claims if isinstance(claims, dict) else {}


def _lifetime(answer: dict, claims: dict, now: float) -> float:
    """Seconds the token serves: the sooner of expires_in and the JWT's exp (a provider's clock
    ahead of ours shortens it), else a short default."""
    candidates = []
    expires_in = answer.get("expires_in")
    if _number(expires_in) and expires_in > 0:
        candidates.append(float(expires_in))
    exp = claims.get("exp")
    if _number(exp) and exp > now:
        candidates.append(float(exp) - now)
    return min(candidates, default=DEFAULT_LIFETIME)


def _number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)
