"""A TCP proxy for fault tests and benchmarks: it forwards to a target, can stall (hold
every byte in both directions while keeping connections open), add per-chunk delay, and
counts Kafka requests (length-prefixed frames client -> broker).

The broker must advertise the proxy's address so clients never bypass it:
`make_broker(advertised_port=proxy.port)`.
"""

from __future__ import annotations

import select
import socket
import struct
import threading
import time

from .net import free_port


class KafkaProxy:
    def __init__(self, target_host: str, target_port: int, port: int | None = None,
                 host: str = "127.0.0.1") -> None:
        self.target = (target_host, target_port)
        self.host, self.port = host, port or free_port(host)
        self.delay = 0.0                  # seconds added before forwarding each chunk
        self._open = threading.Event()    # cleared = stalled
        self._open.set()
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self.requests = 0                 # Kafka request frames seen client -> broker
        self.requests_by_key: dict[int, int] = {}    # the same per API key
        # (api key, n): at the n-th request of that API key, act as a broker gone: that request
        # is not forwarded, every connection is closed and new ones are refused until reopen()
        self.cut_at: tuple[int, int] | None = None
        # (api key, n): at the n-th request of that API key, stall (that request is held)
        self.stall_at: tuple[int, int] | None = None
        self.refusing = threading.Event()
        self.held = 0                     # chunks that arrived while stalled
        self._conns: list[socket.socket] = []
        self._server: socket.socket | None = None

    def start(self) -> KafkaProxy:
        self._server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._server.bind((self.host, self.port))
        self._server.listen(128)
        threading.Thread(target=self._accept, daemon=True, name="proxy-accept").start()
        return self

    def stall(self) -> None:
        self._open.clear()

    def resume(self) -> None:
        self._open.set()

    def reset_count(self) -> int:
        with self._lock:
            n, self.requests = self.requests, 0
        return n

    def reopen(self) -> None:
        """Accept connections again after a cut (the broker is back)."""
        self.refusing.clear()

    def close_connections(self) -> None:
        with self._lock:
            conns, self._conns = self._conns, []
        for c in conns:
            try:
                c.close()
            except OSError:
                pass

    def stop(self) -> None:
        self._stop.set()
        self._open.set()
        if self._server:
            self._server.close()
        self.close_connections()

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                client, _ = self._server.accept()
            except OSError:
                return
            if self.refusing.is_set():
                client.close()
                continue
            try:
                upstream = socket.create_connection(self.target, timeout=5)
            except OSError:
                client.close()
                continue
            with self._lock:
                self._conns += [client, upstream]
            threading.Thread(target=self._pump, args=(client, upstream), daemon=True).start()

    def _pump(self, client: socket.socket, upstream: socket.socket) -> None:
        pending = b""  # client bytes not yet parsed into frames (for counting)
        need = 0       # bytes left of the current frame body
        socks = [client, upstream]
        try:
            while not self._stop.is_set():
                r, _, _ = select.select(socks, [], [], 0.5)
                for s in r:
                    data = s.recv(65536)
                    if not data:
                        return
                    if s is client:
                        pending, need, keys = self._count(pending + data, need)
                        if self._triggered(keys, self.cut_at):
                            self.refusing.set()
                            self.close_connections()
                            return
                        if self._triggered(keys, self.stall_at):
                            self.stall()
                    if not self._open.is_set():
                        with self._lock:
                            self.held += 1
                    while not self._open.is_set() and not self._stop.is_set():
                        time.sleep(0.05)  # stalled: hold the bytes
                    if self.delay:
                        time.sleep(self.delay)
                    if s is client:
                        upstream.sendall(data)
                    else:
                        client.sendall(data)
        except (OSError, ValueError):
            # ValueError: select on a socket another thread closed (a cut, or stop)
            pass
        finally:
            for s in socks:
                try:
                    s.close()
                except OSError:
                    pass

    def _triggered(self, keys: list[int], at: tuple[int, int] | None) -> bool:
        """Whether one of these requests (API keys, just counted) is the n-th of `at`'s key."""
        if at is None or at[0] not in keys:
            return False
        with self._lock:
            seen = self.requests_by_key.get(at[0], 0)
        return seen - keys.count(at[0]) < at[1] <= seen

    def _count(self, buf: bytes, need: int) -> tuple[bytes, int, list[int]]:
        """Count the request frames in `buf` (their API keys, returned), keeping what is left."""
        keys: list[int] = []
        while True:
            if need:
                take = min(need, len(buf))
                buf, need = buf[take:], need - take
                if need:
                    break
            if len(buf) < 6:
                break
            size, key = struct.unpack(">ih", buf[:6])
            buf, need = buf[4:], size
            keys.append(key)
        if keys:
            with self._lock:
                self.requests += len(keys)
                for k in keys:
                    self.requests_by_key[k] = self.requests_by_key.get(k, 0) + 1
        return buf, need, keys
