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
                    if not self._open.is_set():
                        with self._lock:
                            self.held += 1
                    while not self._open.is_set() and not self._stop.is_set():
                        time.sleep(0.05)  # stalled: hold the bytes
                    if self.delay:
                        time.sleep(self.delay)
                    if s is client:
                        pending, need = self._count(pending + data, need)
                        upstream.sendall(data)
                    else:
                        client.sendall(data)
        except OSError:
            pass
        finally:
            for s in socks:
                try:
                    s.close()
                except OSError:
                    pass

    def _count(self, buf: bytes, need: int) -> tuple[bytes, int]:
        n = 0
        while True:
            if need:
                take = min(need, len(buf))
                buf, need = buf[take:], need - take
                if need:
                    break
            if len(buf) < 4:
                break
            (size,) = struct.unpack(">i", buf[:4])
            buf, need = buf[4:], size
            n += 1
        if n:
            with self._lock:
                self.requests += n
        return buf, need
