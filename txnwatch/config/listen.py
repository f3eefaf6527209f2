"""Where the HTTP server listens, as exporter-toolkit's exporters spell it: listen addresses
(`host:port`, `[v6addr]:port`, `:port` for every interface) and the telemetry path.

The listen address is one setting with two spellings: `host` and `port`, or `listen_addresses`.
Across the layers (flags > environment > file > defaults) the highest layer that sets either
spelling decides; one layer setting both is an error naming both; host and port merge with
each other across layers. Pure functions: binding is exporter/serve/listen.py's.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping, Sequence

# Paths the exporter serves itself: the telemetry path may be none of them.
RESERVED_PATHS = ("/", "/healthz", "/readyz")
RESERVED_PREFIX = "/api/"
_NAME_RE = re.compile(r"[A-Za-z0-9]([A-Za-z0-9.-]*[A-Za-z0-9])?")
SINGLE = ("host", "port")        # the one-address spelling's keys under http
MANY = "listen_addresses"


def parse_host(text: str) -> str:
    """A host as the file's `http.host` or an address's host part takes it: an IPv4 or IPv6
    address (brackets optional here) or a name; '' is every interface. ValueError says why."""
    host = text.strip()
    if host.startswith("[") and host.endswith("]"):
        return _ipv6(host[1:-1])
    if ":" in host:
        return _ipv6(host)
    if host and not _NAME_RE.fullmatch(host):
        raise ValueError(f"{text!r} is not an IP address or host name")
    return host


def _ipv6(text: str) -> str:
    try:
        return str(ipaddress.IPv6Address(text))      # '::0' is '::', as clash() compares them
    except ValueError:
        raise ValueError(f"{text!r} is not an IPv6 address") from None


def parse_address(text: str) -> tuple[str, int]:
    """(host, port) of `host:port`, `[v6addr]:port` or `:port` ('' host: every interface)."""
    raw = str(text).strip()
    if "://" in raw or "/" in raw:
        raise ValueError(f"{raw!r} is an address to listen on, host:port, not a URL (no scheme or path)")
    host, sep, port = raw.rpartition(":")
    if not sep:
        raise ValueError(f"{raw!r} has no port: write host:port, [v6addr]:port or :port (every interface)")
    if ":" in host and not (host.startswith("[") and host.endswith("]")):
        raise ValueError(f"{raw!r}: an IPv6 address goes in brackets, as in [::1]:{port or 'PORT'}")
    if not (port.isascii() and port.isdigit()) or not 0 < int(port) < 65536:
        raise ValueError(f"{raw!r}: the port must be a number from 1 to 65535")
    return parse_host(host), int(port)


def split_addresses(value) -> list[str]:
    """A list of addresses, or one string of comma-separated ones (the flat variable's form)."""
    if isinstance(value, str):
        return [part.strip() for part in value.split(",") if part.strip()]
    return list(value)


def _covers(a: str, b: str) -> bool:
    """Whether listening on host `a` takes the port on host `b` too: every interface ('' or
    `::`, dual-stack) takes every address; 0.0.0.0 every IPv4 address (and names)."""
    return a in ("", "::") or (a == "0.0.0.0" and ":" not in b)


def clash(addresses: Sequence[tuple[str, int]]) -> tuple[int, int, str | None] | None:
    """The first pair of addresses that cannot both be listened on: (earlier index, later
    index, what the earlier or later one takes on the shared port: 'every interface', 'every
    IPv4 address', or None for the same address twice); None when there is none."""
    for j, (host_b, port_b) in enumerate(addresses):
        for i, (host_a, port_a) in enumerate(addresses[:j]):
            if port_a != port_b:
                continue
            if host_a == host_b:
                return i, j, None
            wide = host_a if _covers(host_a, host_b) else host_b if _covers(host_b, host_a) else None
            if wide is not None:
                return i, j, "every interface" if wide in ("", "::") else "every IPv4 address"
    return None


def check_telemetry_path(text: str) -> str:
    path = text.strip()
    if not path.startswith("/") or any(c.isspace() or c in "?#" for c in path):
        raise ValueError(f"{text!r} is not a URL path: it starts with / and has no spaces, ? or # (e.g. /metrics)")
    if path in RESERVED_PATHS or path.startswith(RESERVED_PREFIX):
        raise ValueError(f"{path} is served by the exporter already ({', '.join(RESERVED_PATHS)}, "
                         f"{RESERVED_PREFIX}...): choose another, e.g. /metrics")
    return path


def deciding_layer(layers: Sequence[Mapping[str, str]]) -> int | None:
    """Index of the layer (highest first; each maps the listen keys it sets, host, port or
    listen_addresses, to the name the user gave them) whose listen address wins; ValueError
    when a layer sets both spellings, naming them."""
    for layer in layers:
        single = [layer[k] for k in SINGLE if k in layer]
        if single and MANY in layer:
            raise ValueError(f"{' and '.join(single)} and {layer[MANY]} both set the listen address: "
                             f"give one of them (one address by host and port, or any number by {layer[MANY]})")
    return next((i for i, layer in enumerate(layers) if layer), None)
