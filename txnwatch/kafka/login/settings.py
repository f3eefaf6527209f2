"""How a cluster's client properties log in, read once (pure): the SASL mechanism and where its
credentials come from (an OIDC token endpoint, the AWS MSK IAM signer, a static token, a
Kerberos keytab, a password), and the TLS client identity (PEM files or a PKCS#12 keystore).

The properties keep librdkafka's names, which users already write, and add the few txnwatch
needs where librdkafka has none (`sasl.oauthbearer.aws.*`). A setting that cannot work is a
LoginSettingsError naming the property and what to do, before any client is made."""

from __future__ import annotations

import ipaddress
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from ..errors import PollError

OIDC, MSK_IAM, STATIC, UNSECURED = "oidc", "aws_msk_iam", "static", "unsecured"
PASSWORD_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")

# The Java client's names of librdkafka's OIDC settings: taken as the same setting.
ALIASES = {
    "sasl.oauthbearer.client.credentials.client.id": "sasl.oauthbearer.client.id",
    "sasl.oauthbearer.client.credentials.client.secret": "sasl.oauthbearer.client.secret",
}
# What txnwatch reads itself and librdkafka never sees: its OIDC method is txnwatch's token
# provider (one for both clients), the MSK settings are txnwatch's own, the keystore is handed on
# as PEM, the keytab through the process's Kerberos environment.
CONSUMED = frozenset({
    "sasl.oauthbearer.method", "sasl.oauthbearer.token.endpoint.url", "sasl.oauthbearer.client.id",
    "sasl.oauthbearer.client.secret", "sasl.oauthbearer.scope", "sasl.oauthbearer.extensions",
    "sasl.oauthbearer.grant.type", "sasl.oauthbearer.sub.claim.name", "sasl.oauthbearer.token",
    "sasl.oauthbearer.aws.region", "sasl.oauthbearer.aws.profile", "sasl.oauthbearer.aws.role.arn",
    "https.ca.location", "ssl.keystore.location", "ssl.keystore.password", "sasl.kerberos.keytab",
    "sasl.kerberos.kinit.cmd", *ALIASES,
})


LOGIN_CONFIG = "login_config"     # the cause of a poll step a login setting made fail


class LoginSettingsError(PollError):
    """A login setting that cannot work: `key` is the client property to fix. At start a config
    error; found only when a client is made (a library missing), the failed step's cause."""

    def __init__(self, key: str, message: str) -> None:
        super().__init__(LOGIN_CONFIG, f"{key}: {message}")
        self.key = key
        self.message = message


@dataclass(frozen=True)
class OidcSettings:
    """OAuth 2 client credentials (RFC 6749 4.4) at a token endpoint, as librdkafka names them."""

    token_endpoint: str
    client_id: str
    client_secret: str = field(repr=False)
    scope: str = ""
    extensions: tuple[tuple[str, str], ...] = ()
    ca_location: str | None = None         # https.ca.location: the endpoint's CA (else the system's)
    sub_claim: str = "sub"                 # the token's claim that names the principal


@dataclass(frozen=True)
class MskIamSettings:
    """AWS MSK IAM: tokens from the AWS MSK IAM SASL signer, for a region, with the default
    credential chain, a named profile or an assumed role."""

    region: str
    profile: str | None = None
    role_arn: str | None = None


@dataclass(frozen=True)
class KerberosSettings:
    principal: str
    keytab: str | None                     # None: the process's own ticket cache (kinit)
    service_name: str = "kafka"


@dataclass(frozen=True)
class Keystore:
    location: str
    password: str = field(repr=False, default="")


@dataclass(frozen=True)
class LoginSettings:
    """What one set of client properties logs in with."""

    protocol: str = "PLAINTEXT"
    mechanism: str | None = None           # SASL mechanism, None without SASL
    username: str | None = None            # PLAIN / SCRAM
    token_source: str | None = None        # OAUTHBEARER: OIDC, MSK_IAM, STATIC or UNSECURED
    oidc: OidcSettings | None = None
    msk_iam: MskIamSettings | None = None
    static_token: str | None = field(repr=False, default=None)
    kerberos: KerberosSettings | None = None
    keystore: Keystore | None = None

    @property
    def tls(self) -> bool:
        return self.protocol in ("SSL", "SASL_SSL")

    def describe(self) -> str:
        """The login in a few words, for the page and `check` (never a secret)."""
        if self.mechanism is None:
            what = "no SASL login"
        elif self.mechanism in PASSWORD_MECHANISMS:
            what = f"SASL/{self.mechanism} as {self.username}"
        elif self.mechanism == "GSSAPI":
            source = f"keytab {self.kerberos.keytab}" if self.kerberos.keytab else "the process's ticket cache"
            what = f"SASL/GSSAPI (Kerberos) as {self.kerberos.principal}, from {source}"
        else:
            what = "SASL/OAUTHBEARER, " + {
                OIDC: f"OIDC client credentials of {self.oidc.client_id} at {self.oidc.token_endpoint}"
                if self.oidc else "",
                MSK_IAM: f"AWS MSK IAM in {self.msk_iam.region}" if self.msk_iam else "",
                STATIC: "a static token",
                UNSECURED: "librdkafka's unsecured test token"}[self.token_source]
        if self.keystore is not None:
            what += f"; client certificate from PKCS#12 keystore {self.keystore.location}"
        return f"{what} over {self.protocol}"


def _get(props: Mapping[str, object], key: str) -> str | None:
    value = props.get(key)
    if value is None:
        value = next((props[alias] for alias, name in ALIASES.items() if name == key and alias in props), None)
    text = None if value is None else str(value).strip()
    return text or None


def parse(props: Mapping[str, object]) -> LoginSettings:
    """The login of these client properties; LoginSettingsError names what cannot work."""
    if _get(props, "ssl.engine.location"):
        raise LoginSettingsError("ssl.engine.location", "an OpenSSL engine (a key in an HSM) reaches librdkafka "
                                 "only, and txnwatch's KIP-664 client (kafka-python) needs the key too: give it "
                                 "as PEM or in a PKCS#12 keystore")
    protocol = (_get(props, "security.protocol") or "PLAINTEXT").upper()
    mechanism = (_get(props, "sasl.mechanism") or _get(props, "sasl.mechanisms") or "GSSAPI").upper() \
        if protocol.startswith("SASL") else None
    settings = LoginSettings(protocol=protocol, mechanism=mechanism, keystore=_keystore(props))
    if mechanism in PASSWORD_MECHANISMS:
        return replace(settings, username=_get(props, "sasl.username"))
    if mechanism == "GSSAPI":
        return replace(settings, kerberos=_kerberos(props))
    if mechanism == "OAUTHBEARER":
        return _oauthbearer(settings, props)
    return settings


def _keystore(props: Mapping[str, object]) -> Keystore | None:
    location = _get(props, "ssl.keystore.location")
    if location is None:
        return None
    if _get(props, "ssl.certificate.location") or _get(props, "ssl.certificate.pem"):
        raise LoginSettingsError("ssl.keystore.location", "a client certificate is given twice (also "
                                 "ssl.certificate.location or .pem): keep the keystore or the PEM files")
    return Keystore(location, str(props.get("ssl.keystore.password") or ""))


def _kerberos(props: Mapping[str, object]) -> KerberosSettings:
    keytab = _get(props, "sasl.kerberos.keytab")
    principal = _get(props, "sasl.kerberos.principal")
    if keytab and not principal:
        raise LoginSettingsError("sasl.kerberos.principal", "a keytab needs the principal it holds keys of "
                                 "(e.g. txnwatch@EXAMPLE.COM: klist -kt KEYTAB lists them)")
    return KerberosSettings(principal or "(the ticket cache's)", keytab,
                            _get(props, "sasl.kerberos.service.name") or "kafka")


def _oauthbearer(settings: LoginSettings, props: Mapping[str, object]) -> LoginSettings:
    method = (_get(props, "sasl.oauthbearer.method") or "default").lower()
    if method == "oidc":
        return replace(settings, token_source=OIDC, oidc=_oidc(props))
    if method == MSK_IAM:
        return replace(settings, token_source=MSK_IAM, msk_iam=_msk_iam(props))
    if method != "default":
        raise LoginSettingsError("sasl.oauthbearer.method", f"{method!r} is not a method txnwatch knows: "
                                 "oidc (client credentials at a token endpoint), aws_msk_iam, or default "
                                 "(a static sasl.oauthbearer.token)")
    token = _get(props, "sasl.oauthbearer.token")
    if token:
        return replace(settings, token_source=STATIC, static_token=token)
    if str(props.get("enable.sasl.oauthbearer.unsecure.jwt", "")).lower() == "true":
        return replace(settings, token_source=UNSECURED)
    raise LoginSettingsError("sasl.oauthbearer.method", "OAUTHBEARER needs a way to get tokens: "
                             "sasl.oauthbearer.method oidc (with sasl.oauthbearer.token.endpoint.url, "
                             ".client.id and .client.secret), aws_msk_iam (with sasl.oauthbearer.aws.region), "
                             "or a static sasl.oauthbearer.token")


def _oidc(props: Mapping[str, object]) -> OidcSettings:
    required = ("sasl.oauthbearer.token.endpoint.url", "sasl.oauthbearer.client.id",
                "sasl.oauthbearer.client.secret")
    missing = [k for k in required if not _get(props, k)]
    if missing:
        raise LoginSettingsError(missing[0], "sasl.oauthbearer.method oidc needs it (the client credentials "
                                 "grant: token endpoint, client id and secret)")
    grant = (_get(props, "sasl.oauthbearer.grant.type") or "client_credentials").lower()
    if grant != "client_credentials":
        raise LoginSettingsError("sasl.oauthbearer.grant.type", f"{grant!r}: txnwatch gets tokens with the "
                                 "client credentials grant only (client_credentials)")
    endpoint = _get(props, "sasl.oauthbearer.token.endpoint.url")
    _check_endpoint(endpoint)
    return OidcSettings(endpoint, _get(props, "sasl.oauthbearer.client.id"),
                        _get(props, "sasl.oauthbearer.client.secret"), _get(props, "sasl.oauthbearer.scope") or "",
                        _extensions(_get(props, "sasl.oauthbearer.extensions") or ""),
                        _get(props, "https.ca.location"), _get(props, "sasl.oauthbearer.sub.claim.name") or "sub")


def _check_endpoint(url: str) -> None:
    """https, or http to this host only (a local issuer or sidecar): the client secret goes in
    the request."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme == "https" and parts.hostname:
        return
    if parts.scheme == "http" and _is_loopback(parts.hostname or ""):
        return
    raise LoginSettingsError("sasl.oauthbearer.token.endpoint.url", f"{url!r} is not an https:// URL: the "
                             "client secret would cross the network in the clear (http:// is taken for "
                             "loopback addresses only)")


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _extensions(text: str) -> tuple[tuple[str, str], ...]:
    """librdkafka's `k=v,k=v` (KIP-342's SASL extensions)."""
    out = []
    for item in filter(None, (part.strip() for part in text.split(","))):
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise LoginSettingsError("sasl.oauthbearer.extensions", f"{item!r} is not key=value "
                                     "(extensions are written k1=v1,k2=v2)")
        out.append((key, value))
    return tuple(out)


def _msk_iam(props: Mapping[str, object]) -> MskIamSettings:
    region = _get(props, "sasl.oauthbearer.aws.region")
    if not region:
        raise LoginSettingsError("sasl.oauthbearer.aws.region", "aws_msk_iam needs the cluster's AWS region "
                                 "(e.g. eu-west-1): the signed token names it")
    profile, role = _get(props, "sasl.oauthbearer.aws.profile"), _get(props, "sasl.oauthbearer.aws.role.arn")
    if profile and role:
        raise LoginSettingsError("sasl.oauthbearer.aws.role.arn", "give a profile or a role to assume, not both")
    return MskIamSettings(region, profile, role)
