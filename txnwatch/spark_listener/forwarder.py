"""Forward listener events to the exporter's ingest endpoint, never blocking the caller.

`Forwarder.submit(event)` puts the event on a bounded queue without waiting (a full
queue drops it and counts `queue_full`). A daemon thread drains the queue in batches
and POSTs `{"events": [...]}` as JSON to `{base_url}/api/v1/spark/events` with
`Authorization: Bearer <token>`, retrying connection errors, 429 and 5xx with
exponential backoff; after `max_retries` the batch is dropped (`send_failed`). A 4xx
other than 429 drops it at once (`rejected`). Only the standard library is used so a
Spark driver needs no extra dependency.
"""

from __future__ import annotations

import json
import logging
import queue
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Any

from .events import EventValidationError, validate_event

log = logging.getLogger(__name__)

INGEST_PATH = "/api/v1/spark/events"


class Forwarder:
    def __init__(self, url: str, token: str | None = None, *, max_queue: int = 10_000,
                 max_batch: int = 200, max_batch_bytes: int = 512_000, flush_interval: float = 0.5,
                 timeout: float = 5.0, max_retries: int = 5, backoff: float = 0.5,
                 max_backoff: float = 30.0,
                 on_drop: Callable[[str, int], None] | None = None,
                 on_error: Callable[[str, BaseException | None], None] | None = None) -> None:
        base = url.rstrip("/")
        self.url = base if base.endswith(INGEST_PATH) else base + INGEST_PATH
        self.token = token
        self.max_batch = max_batch
        self.max_batch_bytes = max_batch_bytes
        self.flush_interval = flush_interval
        self.timeout = timeout
        self.max_retries = max_retries
        self.backoff = backoff
        self.max_backoff = max_backoff
        self._on_drop = on_drop
        self._on_error = on_error
        self._queue: queue.Queue[Any] = queue.Queue(maxsize=max_queue)
        self._lock = threading.Lock()
        self._dropped: dict[str, int] = {}
        self._sent = 0
        self._logged: set[str] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="txnwatch-forwarder", daemon=True)
        self._thread.start()

    # ---------------------------------------------------------------- caller side
    def submit(self, event: dict[str, Any]) -> bool:
        """Queue one event; never blocks. False when it was dropped (queue full or closed)."""
        if self._stop.is_set():
            self._drop("closed", 1)
            return False
        try:
            self._queue.put_nowait(event)
            return True
        except queue.Full:
            self._drop("queue_full", 1)
            return False

    @property
    def dropped(self) -> dict[str, int]:
        with self._lock:
            return dict(self._dropped)

    @property
    def dropped_total(self) -> int:
        with self._lock:
            return sum(self._dropped.values())

    @property
    def sent(self) -> int:
        with self._lock:
            return self._sent

    def pending(self) -> int:
        return self._queue.qsize()

    def idle(self) -> bool:
        """Nothing queued or in flight."""
        return self._queue.unfinished_tasks == 0

    def flush(self, timeout: float = 10.0) -> bool:
        """Wait until everything queued so far was sent or dropped (for tests and shutdown)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._queue.unfinished_tasks == 0:
                return True
            time.sleep(0.02)
        return False

    def close(self, timeout: float = 5.0) -> None:
        """Try to deliver what is queued (up to `timeout`), then stop the thread."""
        self.flush(timeout)
        self._stop.set()
        self._thread.join(timeout=1.0)

    # ---------------------------------------------------------------- sender thread
    def _drop(self, reason: str, n: int) -> None:
        with self._lock:
            self._dropped[reason] = self._dropped.get(reason, 0) + n
            first = reason not in self._logged
            self._logged.add(reason)
        if first:
            log.warning("txnwatch forwarder to %s dropped %d event(s): %s (logged once per reason)",
                        self.url, n, reason)
        if self._on_drop is not None:
            try:
                self._on_drop(reason, n)
            except Exception:  # noqa: BLE001
                pass

    def _error(self, stage: str, exc: BaseException | None) -> None:
        if self._on_error is not None:
            try:
                self._on_error(stage, exc)
            except Exception:  # noqa: BLE001
                pass

    def _take_batch(self) -> list[Any]:
        try:
            first = self._queue.get(timeout=self.flush_interval)
        except queue.Empty:
            return []
        batch = [first]
        while len(batch) < self.max_batch:
            try:
                batch.append(self._queue.get_nowait())
            except queue.Empty:
                break
        return batch

    def _run(self) -> None:
        while not self._stop.is_set():
            batch = self._take_batch()
            if not batch:
                continue
            try:
                for body, n in self._chunks(batch):
                    self._deliver(body, n)
            except Exception as exc:  # noqa: BLE001 - the thread must survive anything
                self._error("forward", exc)
                self._drop("send_failed", len(batch))
            finally:
                for _ in batch:
                    self._queue.task_done()

    def _chunks(self, batch: list[Any]) -> list[tuple[bytes, int]]:
        """JSON bodies of at most max_batch_bytes (a single oversized event goes alone)."""
        out: list[tuple[bytes, int]] = []
        cur: list[str] = []
        size = 0
        for ev in batch:
            try:
                validate_event(ev)   # one bad event must not get a whole batch rejected
            except EventValidationError as exc:
                self._error("invalid_event", exc)
                self._drop("invalid", 1)
                continue
            try:
                s = json.dumps(ev, separators=(",", ":"), allow_nan=False)
            except (TypeError, ValueError, RecursionError) as exc:
                self._error("serialize", exc)
                self._drop("unserializable", 1)
                continue
            if cur and size + len(s) + 20 > self.max_batch_bytes:
                out.append((self._body(cur), len(cur)))
                cur, size = [], 0
            cur.append(s)
            size += len(s) + 1
        if cur:
            out.append((self._body(cur), len(cur)))
        return out

    @staticmethod
    def _body(items: list[str]) -> bytes:
        return ('{"events":[' + ",".join(items) + "]}").encode()

    def _deliver(self, body: bytes, n: int) -> None:
        headers = {"Content-Type": "application/json", "User-Agent": "txnwatch-spark-listener"}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        delay = self.backoff
        last: BaseException | None = None
        for attempt in range(self.max_retries + 1):
            if self._stop.is_set() and attempt > 0:
                break
            req = urllib.request.Request(self.url, data=body, headers=headers, method="POST")
            try:
                with urllib.request.urlopen(req, timeout=self.timeout) as resp:
                    resp.read()
                with self._lock:
                    self._sent += n
                return
            except urllib.error.HTTPError as exc:
                if exc.code != 429 and 400 <= exc.code < 500:
                    self._error("forward_rejected", exc)
                    self._drop("rejected", n)
                    return
                last = exc
            except (OSError, ValueError) as exc:   # URLError, connection refused, timeouts
                last = exc
            if attempt < self.max_retries:
                self._stop.wait(delay)
                delay = min(delay * 2, self.max_backoff)
        self._error("forward", last)
        self._drop("send_failed", n)
