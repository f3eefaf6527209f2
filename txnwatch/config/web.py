"""The web configuration file of Prometheus's exporters (exporter-toolkit's format), so
that one `web-config.yml` serves txnwatch beside node_exporter, kafka_exporter and the rest:

    tls_server_config:
      cert_file: server.crt            # PEM; paths relative to this file
      key_file: server.key
      client_auth_type: RequireAndVerifyClientCert
      client_ca_file: clients-ca.crt
      min_version: TLS12               # TLS10, TLS11, TLS12, TLS13
      max_version: TLS13
    http_server_config:
      headers: {X-Frame-Options: deny} # added to every answer
    basic_auth_users:                  # user: bcrypt hash (htpasswd -nBC 10 "" | tr -d ':\\n')
      prometheus: $2y$10$...

Parsing only (no I/O but reading the file): serve/tls.py builds the TLS context from it and
serve/app.py checks the users. A key this exporter cannot honour (Go's cipher-suite names,
client SAN allow-lists) is refused with what to do, never silently ignored: each narrows who
may connect, so ignoring it would widen it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType

import yaml

CLIENT_AUTH_TYPES = ("NoClientCert", "VerifyClientCertIfGiven", "RequireAndVerifyClientCert")
# exporter-toolkit's other two accept a client certificate without verifying it, which
# Python's ssl module cannot do.
UNVERIFIED_CLIENT_AUTH_TYPES = ("RequestClientCert", "RequireAnyClientCert")
TLS_VERSIONS = ("TLS10", "TLS11", "TLS12", "TLS13")
# exporter-toolkit's defaults
DEFAULT_MIN_VERSION = "TLS12"
BCRYPT_PREFIXES = ("$2a$", "$2b$", "$2y$")


class WebConfigError(ValueError):
    """A web configuration file that cannot be used; the message names the key."""


@dataclass(frozen=True)
class TLSServerConfig:
    cert_file: Path
    key_file: Path
    client_auth_type: str = "NoClientCert"
    client_ca_file: Path | None = None
    min_version: str = DEFAULT_MIN_VERSION
    max_version: str | None = None

    @property
    def client_cert_required(self) -> bool:
        return self.client_auth_type == "RequireAndVerifyClientCert"


@dataclass(frozen=True)
class WebConfig:
    path: Path | None = None
    tls: TLSServerConfig | None = None
    headers: MappingProxyType = field(default_factory=lambda: MappingProxyType({}))
    basic_auth_users: MappingProxyType = field(default_factory=lambda: MappingProxyType({}))   # user -> bcrypt hash

    @property
    def scheme(self) -> str:
        return "https" if self.tls else "http"


_TOP = ("tls_server_config", "http_server_config", "basic_auth_users")
_TLS_KEYS = ("cert_file", "key_file", "client_auth_type", "client_ca_file", "client_ca", "min_version",
             "max_version", "cipher_suites", "curve_preferences", "prefer_server_cipher_suites",
             "client_allowed_sans", "cert", "key")
_HTTP_KEYS = ("http2", "headers")
# Response headers exporter-toolkit lets a web config set (the rest are the server's own).
SETTABLE_HEADERS = ("Strict-Transport-Security", "X-Content-Type-Options", "X-Frame-Options", "X-XSS-Protection",
                    "Content-Security-Policy")


def load_web_config(path: str | Path) -> WebConfig:
    p = Path(path)
    try:
        text = p.read_text()
    except OSError as exc:
        raise WebConfigError(f"web config {p}: cannot read it ({exc.strerror or exc})") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise WebConfigError(f"web config {p}: not YAML ({exc})") from None
    return parse_web_config(data, p)


def parse_web_config(data, path: Path | None = None) -> WebConfig:
    """The web config of `data` (the file's YAML); relative paths are relative to `path`'s
    directory, as exporter-toolkit resolves them."""
    where = f"web config {path}" if path else "web config"
    base = path.parent if path else Path(".")

    def err(key: str, msg: str) -> WebConfigError:
        return WebConfigError(f"{where}: {key}: {msg}")

    if data is None:
        return WebConfig(path=path)
    if not isinstance(data, dict):
        raise WebConfigError(f"{where}: expected a mapping with {', '.join(_TOP)}")
    unknown = sorted(set(data) - set(_TOP))
    if unknown:
        raise err(unknown[0], f"unknown key (known: {', '.join(_TOP)})")

    def mapping(key: str, value) -> dict:
        if value is None:
            return {}
        if not isinstance(value, dict):
            raise err(key, "expected a mapping")
        return value

    def file(key: str, value) -> Path:
        if not isinstance(value, str) or not value:
            raise err(key, "expected a file path")
        p = Path(value)
        p = p if p.is_absolute() else base / p
        if not p.is_file():
            raise err(key, f"no such file: {p}")
        return p

    tls = None
    t = mapping("tls_server_config", data.get("tls_server_config"))
    if t:
        unknown = sorted(set(t) - set(_TLS_KEYS))
        if unknown:
            raise err(f"tls_server_config.{unknown[0]}", f"unknown key (known: {', '.join(_TLS_KEYS[:6])}, ...)")
        for inline, instead in (("cert", "cert_file"), ("key", "key_file"), ("client_ca", "client_ca_file")):
            if t.get(inline):
                raise err(f"tls_server_config.{inline}", f"inline PEM is not supported: write it to a file and "
                                                         f"set {instead} (the file is re-read when it changes)")
        for narrowing, why in (("cipher_suites", "Go's cipher-suite names have no OpenSSL equivalent here"),
                               ("curve_preferences", "curve preferences cannot be set per connection here"),
                               ("client_allowed_sans", "client SAN allow-lists are not implemented")):
            if t.get(narrowing):
                raise err(f"tls_server_config.{narrowing}",
                          f"not supported by txnwatch ({why}); remove it, or restrict clients with "
                          "client_ca_file and RequireAndVerifyClientCert")
        for k in ("cert_file", "key_file"):
            if not t.get(k):
                raise err(f"tls_server_config.{k}", "is required (with both cert_file and key_file)")
        auth = t.get("client_auth_type") or "NoClientCert"
        if auth in UNVERIFIED_CLIENT_AUTH_TYPES:
            raise err("tls_server_config.client_auth_type",
                      f"{auth} accepts a client certificate without verifying it, which txnwatch cannot do; "
                      "use VerifyClientCertIfGiven or RequireAndVerifyClientCert with client_ca_file")
        if auth not in CLIENT_AUTH_TYPES:
            raise err("tls_server_config.client_auth_type", f"{auth!r} is none of {', '.join(CLIENT_AUTH_TYPES)}")
        ca = file("tls_server_config.client_ca_file", t["client_ca_file"]) if t.get("client_ca_file") else None
        if auth != "NoClientCert" and ca is None:
            raise err("tls_server_config.client_ca_file", f"is required with client_auth_type {auth}")
        versions = {}
        for k in ("min_version", "max_version"):
            v = t.get(k)
            if v is None:
                continue
            if v not in TLS_VERSIONS:
                raise err(f"tls_server_config.{k}", f"{v!r} is none of {', '.join(TLS_VERSIONS)}")
            versions[k] = v
        lo, hi = versions.get("min_version", DEFAULT_MIN_VERSION), versions.get("max_version")
        if hi is not None and TLS_VERSIONS.index(hi) < TLS_VERSIONS.index(lo):
            raise err("tls_server_config.max_version", f"{hi} is below min_version {lo}")
        tls = TLSServerConfig(cert_file=file("tls_server_config.cert_file", t["cert_file"]),
                              key_file=file("tls_server_config.key_file", t["key_file"]),
                              client_auth_type=auth, client_ca_file=ca, min_version=lo, max_version=hi)

    h = mapping("http_server_config", data.get("http_server_config"))
    unknown = sorted(set(h) - set(_HTTP_KEYS))
    if unknown:
        raise err(f"http_server_config.{unknown[0]}", f"unknown key (known: {', '.join(_HTTP_KEYS)})")
    headers = mapping("http_server_config.headers", h.get("headers"))
    for name, value in headers.items():
        if name not in SETTABLE_HEADERS:
            raise err(f"http_server_config.headers.{name}", f"cannot be set (settable: {', '.join(SETTABLE_HEADERS)})")
        if not isinstance(value, str) or "\n" in value or "\r" in value:
            raise err(f"http_server_config.headers.{name}", "expected a one-line string")

    users = mapping("basic_auth_users", data.get("basic_auth_users"))
    for user, hashed in users.items():
        if not isinstance(user, str) or not user or ":" in user:
            raise err("basic_auth_users", f"user name {user!r} must be a non-empty string without ':'")
        if not isinstance(hashed, str) or not hashed.startswith(BCRYPT_PREFIXES) or len(hashed) != 60:
            # never echo the value: it may be a plaintext password written by mistake
            raise err(f"basic_auth_users.{user}", "expected a bcrypt hash ($2y$..., 60 characters), as "
                                                  "`htpasswd -nBC 10 \"\" | tr -d ':\\n'` prints")
    return WebConfig(path=path, tls=tls, headers=MappingProxyType(dict(headers)),
                     basic_auth_users=MappingProxyType(dict(users)))
