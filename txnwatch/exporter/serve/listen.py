"""Binding the listen addresses, as node_exporter's exporter-toolkit does: every interface
(the default, or `:port`) is `[::]` with IPv4 mapped, and 0.0.0.0 where the host has no IPv6;
an explicit address is bound as given. Every address is bound before any is served, and a
failure is a ConfigError naming the setting (as the user spelled it) and what to do."""

from __future__ import annotations

import errno
import logging
import socket
from dataclasses import dataclass

from ...config import ConfigError, ListenAddress

log = logging.getLogger(__name__)

# What bind(`::`) or socket(AF_INET6) fails with where the host has no IPv6 (a kernel without
# it, or one whose address families are restricted, as systemd's RestrictAddressFamilies does).
NO_IPV6 = frozenset({errno.EAFNOSUPPORT, errno.EADDRNOTAVAIL})


@dataclass(frozen=True)
class Bound:
    """A listening socket and the address it was asked for."""

    sock: socket.socket
    address: ListenAddress

    @property
    def host(self) -> str:
        return self.sock.getsockname()[0]

    def netloc(self) -> str:
        return self.address.netloc(self.host)

    def local_netloc(self) -> str:
        """Where a client on this host reaches it: a wildcard by IPv4 loopback (`::` is
        dual-stack, and ::1 may be missing where IPv6 is switched off)."""
        return self.address.netloc("127.0.0.1" if self.host in ("::", "0.0.0.0") else self.host)


def wildcard_hosts(has_ipv6: bool) -> tuple[str, ...]:
    """What to bind, in order, for every interface: `::` (dual-stack) while the host may have
    IPv6, else 0.0.0.0."""
    return ("::", "0.0.0.0") if has_ipv6 else ("0.0.0.0",)


def falls_back(address: ListenAddress, exc: OSError) -> bool:
    """Only every interface falls back to IPv4, and only when IPv6 itself is missing: an
    explicit `[::]` or `::1` that cannot be bound is an error, and so is a taken port."""
    return address.every_interface and exc.errno in NO_IPV6


def bind_all(addresses: tuple[ListenAddress, ...], source: str | None) -> list[Bound]:
    """Bind every address (or none: those bound are closed when one fails)."""
    bound: list[Bound] = []
    hosts = wildcard_hosts(socket.has_ipv6)
    if not socket.has_ipv6 and any(a.every_interface for a in addresses):
        log.info("no IPv6 in this Python: listening on 0.0.0.0 (IPv4 only) for every interface")
    try:
        for address in addresses:
            sock, hosts = _bind_one(address, hosts, source, bound)
            bound.append(Bound(sock, address))
    except BaseException:
        for b in bound:
            b.sock.close()
        raise
    return bound


def _bind_one(address: ListenAddress, hosts: tuple[str, ...], source: str | None,
              bound: list[Bound]) -> tuple[socket.socket, tuple[str, ...]]:
    """The socket of `address`, and the wildcard hosts left to try for the next ones (once `::`
    failed for want of IPv6, later addresses go straight to 0.0.0.0)."""
    if not address.every_interface:
        return _bind(address, address.host, source, bound), hosts
    for i, host in enumerate(hosts):
        try:
            return _socket(host, address.port), hosts[i:]
        except OSError as exc:
            if host == hosts[-1] or not falls_back(address, exc):
                raise _error(address, host, exc, source, bound) from None
            log.info("no IPv6 on this host (%s): listening on 0.0.0.0 (IPv4 only) for every interface",
                     exc.strerror or exc)
    raise AssertionError("unreachable")


def _bind(address: ListenAddress, host: str, source: str | None, bound: list[Bound]) -> socket.socket:
    try:
        return _socket(host, address.port)
    except OSError as exc:
        raise _error(address, host, exc, source, bound) from None


def _socket(host: str, port: int) -> socket.socket:
    """A listening socket on `host`'s first address (a name's, as Go's exporters take it);
    socket.gaierror when the name does not resolve."""
    family, kind, proto, _name, sockaddr = socket.getaddrinfo(host, port, socket.AF_UNSPEC, socket.SOCK_STREAM, 0,
                                                              socket.AI_PASSIVE)[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if family == socket.AF_INET6 and sockaddr[0] == "::":
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)     # IPv4 mapped: dual-stack
        sock.bind(sockaddr)
        sock.listen()
    except BaseException:
        sock.close()
        raise
    return sock


def _error(address: ListenAddress, host: str, exc: OSError, source: str | None, bound: list[Bound]) -> ConfigError:
    """What failed and what to do, on the setting that can fix it: the port's for a taken or
    forbidden port, the host's otherwise."""
    where = address.netloc(host)
    port = address.port
    if isinstance(exc, socket.gaierror):
        return address.host_origin.error(
            f"cannot listen on {where}: {address.host!r} does not resolve ({exc.strerror}): give an IP address "
            f"of this host or a name it resolves, or :{port} for every interface", source)
    if exc.errno == errno.EADDRINUSE:
        ours = [b.netloc() for b in bound if b.address.port == port]
        held = f"this exporter listens on {', '.join(ours)} already" if ours else "another process listens on it"
        return address.port_origin.error(f"cannot listen on {where}: the port is in use ({held}): choose another "
                                         "port, or stop what holds it", source)
    if exc.errno == errno.EACCES:
        return address.port_origin.error(
            f"cannot listen on {where}: not permitted (ports below 1024 need root or the CAP_NET_BIND_SERVICE "
            f"capability): choose a port of 1024 or above", source)
    if exc.errno == errno.EADDRNOTAVAIL:
        return address.host_origin.error(
            f"cannot listen on {where}: {host} is not an address of this host: give one of its interfaces' "
            f"addresses, or :{port} for every interface", source)
    if exc.errno == errno.EAFNOSUPPORT:
        return address.host_origin.error(
            f"cannot listen on {where}: this host has no IPv6: give an IPv4 address, or :{port} for every "
            "interface (IPv4 only here)", source)
    return address.host_origin.error(f"cannot listen on {where}: {exc.strerror or exc}", source)
