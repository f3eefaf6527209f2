"""A local OIDC token issuer for tests, standing in for Keycloak, Okta or Entra ID: the
client credentials grant (RFC 6749 section 4.4) over HTTPS, RS256-signed JWT access tokens,
and the JWKS a Kafka broker's OAUTHBEARER validator fetches to check their signatures.

    with OidcIssuer(workdir, lifetime=20) as idp:      # HTTPS; its certificate from a CA of pki.py
        idp.register("txnwatch", "s3cret")               # client id and secret (scopes: "kafka")
        idp.token_url, idp.jwks_url, idp.issuer, idp.audience, idp.ca_cert
        request_token(idp.token_url, "txnwatch", "s3cret", ca_file=idp.ca_cert)   # a client's call
        idp.token_requests("txnwatch")                   # how often it asked (refreshes)
        idp.revoke("txnwatch")                           # 401 invalid_client from now on
        with idp.outage(): ...                           # connection refused; back on the same port
        idp.failing = 503                                # every answer a 503 until set to None
        idp.rotate_key()                                 # a new kid signs; the old one stays listed
        idp.mint("txnwatch", lifetime=-60)               # a well-signed token that expired a minute ago

`tls=False` serves plain HTTP (for the check that a client refuses such a token endpoint).
Tokens: iss = the issuer's base URL, sub = the client id (Kafka's principal), aud, iat, exp,
scope (space-separated), client_id, jti; the header names the signing key's kid.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import secrets
import socket
import socketserver
import ssl
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import padding, rsa

from ..net import free_port
from ..pki import CA, make_ca

TOKEN_PATH = "/oauth2/token"
JWKS_PATH = "/oauth2/jwks"
DISCOVERY_PATH = "/.well-known/openid-configuration"
IO_TIMEOUT = 5.0   # seconds a connection may idle (TLS handshake, request): no thread waits forever

Reply = tuple[int, dict, dict]   # HTTP status, JSON body, extra headers


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _compact(obj: Mapping) -> bytes:
    return json.dumps(obj, separators=(",", ":"), sort_keys=True).encode()


def _uint(n: int) -> str:
    return b64url(n.to_bytes((n.bit_length() + 7) // 8, "big"))


@dataclass(frozen=True)
class SigningKey:
    """An RSA key and its public JWK; the kid is the key's RFC 7638 thumbprint, so the same
    key always has the same kid."""

    private: rsa.RSAPrivateKey
    kid: str
    jwk: dict

    @classmethod
    def generate(cls) -> SigningKey:
        key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        pub = key.public_key().public_numbers()
        members = {"e": _uint(pub.e), "kty": "RSA", "n": _uint(pub.n)}
        kid = b64url(hashlib.sha256(_compact(members)).digest())
        return cls(key, kid, {**members, "kid": kid, "use": "sig", "alg": "RS256"})

    def sign(self, claims: Mapping) -> str:
        """A compact JWS (RS256) of `claims`."""
        signing_input = f"{b64url(_compact({'alg': 'RS256', 'typ': 'JWT', 'kid': self.kid}))}.{b64url(_compact(claims))}"
        signature = self.private.sign(signing_input.encode(), padding.PKCS1v15(), hashes.SHA256())
        return f"{signing_input}.{b64url(signature)}"


def decode_claims(token: str) -> dict:
    """The payload of a JWT, unverified (for assertions on what was issued)."""
    payload = token.split(".")[1]
    return json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))


@dataclass
class _Client:
    secrets: set[str]
    scopes: tuple[str, ...]


class TokenError(Exception):
    """The token endpoint refused (status and OAuth error code) or could not be reached (status 0)."""

    def __init__(self, status: int, error: str, description: str = "") -> None:
        super().__init__(f"{status} {error}: {description}" if description else f"{status} {error}")
        self.status, self.error, self.description = status, error, description


def request_token(token_url: str, client_id: str, secret: str, *, scope: str | None = None,
                  ca_file: str | Path | None = None, basic: bool = True, timeout: float = 5.0) -> dict:
    """A client credentials grant as a client sends it (secret by HTTP basic auth, else in the
    form): the token endpoint's JSON answer, or TokenError."""
    form = {"grant_type": "client_credentials", **({"scope": scope} if scope else {})}
    headers = {"Content-Type": "application/x-www-form-urlencoded", "Accept": "application/json"}
    if basic:   # RFC 6749 2.3.1: each part form-urlencoded, then base64
        pair = f"{urllib.parse.quote_plus(client_id)}:{urllib.parse.quote_plus(secret)}"
        headers["Authorization"] = "Basic " + base64.b64encode(pair.encode()).decode()
    else:
        form.update(client_id=client_id, client_secret=secret)
    req = urllib.request.Request(token_url, urllib.parse.urlencode(form).encode(), headers, method="POST")
    context = ssl.create_default_context(cafile=str(ca_file)) if ca_file else None
    try:
        with urllib.request.urlopen(req, timeout=timeout, context=context) as r:
            return json.loads(r.read())
    except urllib.error.HTTPError as exc:
        body = _json_or_empty(exc.read())
        raise TokenError(exc.code, body.get("error", "http_error"), body.get("error_description", "")) from None
    except OSError as exc:   # refused, reset, TLS failures, timeouts
        raise TokenError(0, "unreachable", str(getattr(exc, "reason", exc))) from None


def _json_or_empty(data: bytes) -> dict:
    try:
        value = json.loads(data)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def _error(status: int, error: str, description: str, headers: Mapping[str, str] | None = None) -> Reply:
    return status, {"error": error, "error_description": description}, dict(headers or {})


def _client_credentials(authorization: str | None, form: Mapping[str, str]) -> list[tuple[str, str]]:
    """The (client id, secret) readings of a request's credentials, from either place RFC 6749
    2.3.1 allows; ValueError when both or neither carry them. Basic credentials are read as
    the RFC wants them (form-urlencoded first) and raw, as the Java client and librdkafka
    send them by default."""
    in_form = "client_secret" in form
    if authorization and authorization[:6].lower() == "basic ":
        if in_form:
            raise ValueError("client credentials both in the Authorization header and in the form")
        try:
            user, _, password = base64.b64decode(authorization[6:].strip(), validate=True).decode().partition(":")
        except ValueError:
            raise ValueError("malformed basic credentials") from None
        return [(urllib.parse.unquote_plus(user), urllib.parse.unquote_plus(password)), (user, password)]
    if in_form and form.get("client_id"):
        return [(form["client_id"], form["client_secret"])]
    raise ValueError("no client credentials (HTTP basic auth or client_id and client_secret)")


class OidcIssuer:
    """The issuer: register clients, then point clients at `token_url` and brokers at `jwks_url`.
    Every control may change between requests; all are thread-safe."""

    def __init__(self, directory: str | Path, *, ca: CA | None = None, tls: bool = True, lifetime: int = 30,
                 audience: str = "kafka", host: str = "127.0.0.1") -> None:
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.host, self.port = host, free_port(host)
        self.lifetime = lifetime          # seconds a token lives (expires_in)
        self.audience = audience
        self.failing: int | None = None   # a status (503) every request gets instead of an answer
        self._lock = threading.Lock()
        self._clients: dict[str, _Client] = {}
        self._keys = [SigningKey.generate()]
        self._requests: Counter[str] = Counter()
        self._issued: Counter[str] = Counter()
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None
        self.ca_cert: Path | None = None  # what a client (and the broker) must trust; None over HTTP
        self._context = self._tls_context(ca) if tls else None

    def _tls_context(self, ca: CA | None) -> ssl.SSLContext:
        ca = ca or make_ca(self.directory / "ca", "oidc-ca")
        pair = ca.issue("oidc-server", "localhost", server=True, directory=self.directory)
        self.ca_cert = ca.cert
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(pair.cert, pair.key)
        return context

    # -- addresses
    @property
    def base_url(self) -> str:
        return f"{'https' if self._context else 'http'}://{self.host}:{self.port}"

    @property
    def issuer(self) -> str:
        """The tokens' iss (and the broker's sasl.oauthbearer.expected.issuer)."""
        return self.base_url

    @property
    def token_url(self) -> str:
        return self.base_url + TOKEN_PATH

    @property
    def jwks_url(self) -> str:
        return self.base_url + JWKS_PATH

    @property
    def discovery_url(self) -> str:
        return self.base_url + DISCOVERY_PATH

    # -- clients
    def register(self, client_id: str, secret: str, scopes: Iterable[str] = ("kafka",)) -> None:
        """Add a valid secret of `client_id` (several may be valid at once, as during a
        rotation); `scopes` are those it may ask for, and gets when it asks for none."""
        with self._lock:
            client = self._clients.setdefault(client_id, _Client(set(), ()))
            client.secrets.add(secret)
            client.scopes = tuple(scopes)

    def revoke(self, client_id: str, secret: str | None = None) -> None:
        """One secret of the client, or all of them: a revoked secret gets 401 invalid_client."""
        with self._lock:
            client = self._clients.get(client_id)
            if client is not None:
                client.secrets = {s for s in client.secrets if secret is not None and s != secret}

    def token_requests(self, client_id: str) -> int:
        """Token requests naming `client_id`, granted or refused."""
        with self._lock:
            return self._requests[client_id]

    def tokens_issued(self, client_id: str) -> int:
        with self._lock:
            return self._issued[client_id]

    # -- keys and tokens
    def rotate_key(self, keep_old: bool = True) -> str:
        """A new signing key (its kid is returned); the JWKS lists the old ones too unless
        `keep_old` is false (then tokens signed before stop verifying, for a broker once it
        fetches the JWKS again: hourly by default, or when a token names a kid it lacks)."""
        key = SigningKey.generate()
        with self._lock:
            self._keys = [*self._keys, key] if keep_old else [key]
        return key.kid

    @property
    def kid(self) -> str:
        """The kid of the key that signs now."""
        with self._lock:
            return self._keys[-1].kid

    def jwks(self) -> dict:
        with self._lock:
            return {"keys": [k.jwk for k in self._keys]}

    def mint(self, client_id: str, *, lifetime: int | None = None, scope: str = "kafka",
             audience: str | None = None, issuer: str | None = None, **claims: object) -> str:
        """A token as the endpoint issues it, signed by the current key. A lifetime <= 0 makes
        one already expired; `audience`/`issuer` override the claims (tokens a broker refuses)."""
        now = int(time.time())
        life = self.lifetime if lifetime is None else lifetime
        exp = now + life
        payload = {"iss": issuer or self.issuer, "sub": client_id, "aud": audience or self.audience,
                   "iat": now if life > 0 else exp - 60, "exp": exp, "client_id": client_id,
                   "jti": secrets.token_hex(8), **({"scope": scope} if scope else {}), **claims}
        with self._lock:
            key = self._keys[-1]
        return key.sign(payload)

    def discovery(self) -> dict:
        return {"issuer": self.issuer, "token_endpoint": self.token_url, "jwks_uri": self.jwks_url,
                "grant_types_supported": ["client_credentials"],
                "token_endpoint_auth_methods_supported": ["client_secret_basic", "client_secret_post"],
                "id_token_signing_alg_values_supported": ["RS256"], "response_types_supported": ["token"],
                "subject_types_supported": ["public"]}

    # -- HTTP (called by the request threads)
    def handle_get(self, path: str) -> Reply:
        if self.failing:
            return self._unavailable()
        route = urllib.parse.urlsplit(path).path
        if route == JWKS_PATH:
            return 200, self.jwks(), {}
        if route == DISCOVERY_PATH:
            return 200, self.discovery(), {}
        return _error(404, "not_found", route)

    def handle_post(self, path: str, authorization: str | None, body: str) -> Reply:
        if self.failing:
            return self._unavailable()
        if urllib.parse.urlsplit(path).path != TOKEN_PATH:
            return _error(404, "not_found", path)
        form = {k: v[-1] for k, v in urllib.parse.parse_qs(body, keep_blank_values=True).items()}
        try:
            readings = _client_credentials(authorization, form)
        except ValueError as exc:
            return _error(400, "invalid_request", str(exc))
        with self._lock:
            self._requests[readings[0][0]] += 1
        if form.get("grant_type") != "client_credentials":
            return _error(400, "unsupported_grant_type", f"grant_type={form.get('grant_type')!r}")
        client_id = self._authenticate(readings)
        if client_id is None:
            challenge = {"WWW-Authenticate": 'Basic realm="txnwatch-oidc"'} if authorization else {}
            return _error(401, "invalid_client", "unknown client or wrong secret", challenge)
        return self._grant(client_id, form.get("scope"))

    def _authenticate(self, readings: list[tuple[str, str]]) -> str | None:
        """The registered client whose valid secret one of the readings carries."""
        with self._lock:
            for client_id, secret in readings:
                client = self._clients.get(client_id)
                if client is not None and secret in client.secrets:
                    return client_id
        return None

    def _grant(self, client_id: str, scope: str | None) -> Reply:
        with self._lock:
            allowed = self._clients[client_id].scopes
        wanted = tuple(scope.split()) if scope else allowed
        if not set(wanted) <= set(allowed):
            return _error(400, "invalid_scope", f"{' '.join(wanted)} not within {' '.join(allowed)}")
        lifetime = self.lifetime
        token = self.mint(client_id, lifetime=lifetime, scope=" ".join(wanted))
        with self._lock:
            self._issued[client_id] += 1
        return 200, {"access_token": token, "token_type": "Bearer", "expires_in": lifetime,
                     "scope": " ".join(wanted)}, {}

    def _unavailable(self) -> Reply:
        return _error(self.failing or 503, "temporarily_unavailable", "the issuer is down for a while",
                      {"Retry-After": "1"})

    def log(self, line: str) -> None:
        with self._lock, open(self.directory / "requests.log", "a") as f:
            f.write(f"{time.strftime('%H:%M:%S')} {line}\n")

    # -- lifecycle
    def serve(self) -> OidcIssuer:
        """Listen (again) on the issuer's port; returns once connections are accepted."""
        if self._server is None:
            self._server = _Server(self, (self.host, self.port), self._context)
            self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.1},
                                            name=f"oidc-issuer-{self.port}")
            self._thread.start()
        return self

    def stop_serving(self) -> None:
        """Close the port (connections are refused) and end every thread of the server."""
        server, thread, self._server, self._thread = self._server, self._thread, None, None
        if server is not None:
            server.shutdown()
            server.drop_connections()
            server.server_close()    # joins the requests' threads
            thread.join()

    @contextlib.contextmanager
    def outage(self) -> Iterator[None]:
        """The issuer unreachable (connection refused) inside the block, back on the same port after."""
        self.stop_serving()
        try:
            yield
        finally:
            self.serve()

    def start(self) -> OidcIssuer:
        return self.serve()

    def stop(self) -> None:
        self.stop_serving()

    def __enter__(self) -> OidcIssuer:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


class _Server(ThreadingHTTPServer):
    """A thread per request (HTTP/1.0: one request per connection), joined at close."""

    daemon_threads = False
    block_on_close = True

    def __init__(self, issuer: OidcIssuer, address: tuple[str, int], context: ssl.SSLContext | None) -> None:
        self.issuer = issuer
        self.context = context
        self._live: set[socket.socket] = set()
        self._live_lock = threading.Lock()
        super().__init__(address, _Handler)

    def process_request(self, request, client_address) -> None:
        with self._live_lock:
            self._live.add(request)
        super().process_request(request, client_address)

    def shutdown_request(self, request) -> None:
        with self._live_lock:
            self._live.discard(request)
        super().shutdown_request(request)

    def drop_connections(self) -> None:
        """End the connections still open (a client that connected and said nothing), so an
        outage starts now rather than when they time out."""
        with self._live_lock:
            live = list(self._live)
        for sock in live:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)

    def server_bind(self) -> None:
        """Without HTTPServer's reverse lookup of the address (getfqdn), which can take seconds."""
        socketserver.TCPServer.server_bind(self)   # SO_REUSEADDR: the same port again after an outage
        self.server_name, self.server_port = self.server_address[:2]

    def finish_request(self, request, client_address) -> None:
        """The TLS handshake in the request's thread, not the accept loop's: a client that never
        completes it stalls only itself."""
        if self.context is None:
            super().finish_request(request, client_address)
            return
        request.settimeout(IO_TIMEOUT)
        tls = self.context.wrap_socket(request, server_side=True, do_handshake_on_connect=False)
        with self._live_lock:     # `request` gave its descriptor to `tls`
            self._live.add(tls)
        try:
            tls.do_handshake()
            super().finish_request(tls, client_address)
        except (ssl.SSLError, OSError) as exc:   # the client did not trust us, or gave up
            self.issuer.log(f"{client_address[0]} TLS: {exc}")
        finally:
            with self._live_lock:
                self._live.discard(tls)
            tls.close()


class _Handler(BaseHTTPRequestHandler):
    timeout = IO_TIMEOUT
    server_version = "txnwatch-oidc"

    def do_GET(self) -> None:   # noqa: N802 - http.server's naming
        self._answer(self.server.issuer.handle_get(self.path))

    def do_POST(self) -> None:  # noqa: N802
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length).decode(errors="replace")
        self._answer(self.server.issuer.handle_post(self.path, self.headers.get("Authorization"), body))

    def _answer(self, reply: Reply) -> None:
        status, body, headers = reply
        data = json.dumps(body).encode()
        self.send_response(status)
        for name, value in {"Content-Type": "application/json", "Content-Length": str(len(data)),
                            "Cache-Control": "no-store", **headers}.items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args) -> None:  # noqa: A002 - http.server's signature
        self.server.issuer.log(f"{self.client_address[0]} {format % args}")


__all__ = ["DISCOVERY_PATH", "JWKS_PATH", "TOKEN_PATH", "OidcIssuer", "SigningKey", "TokenError", "b64url",
           "decode_claims", "request_token"]
