"""The forwarder's queueing, batching, retry and drop logic (urlopen replaced: no network)."""

from __future__ import annotations

import json
import threading
import time
import urllib.error

import pytest

from txnwatch.spark_listener import forwarder as fw
from txnwatch.spark_listener.state import SparkQueryState
from txnwatch_dev.net import wait_for


class FakeHTTP:
    """Stands in for urllib.request.urlopen; `script` is a list of outcomes per call."""

    def __init__(self, script=None, block: threading.Event | None = None):
        self.script = list(script or [])
        self.requests = []
        self.block = block
        self.lock = threading.Lock()

    def __call__(self, req, timeout=None):
        if self.block is not None:
            self.block.wait(10)
        with self.lock:
            self.requests.append(req)
            outcome = self.script.pop(0) if self.script else 202
        if isinstance(outcome, BaseException):
            raise outcome
        if outcome >= 400:
            raise urllib.error.HTTPError(req.full_url, outcome, "x", {}, None)
        return _Resp()

    def events(self):
        out = []
        for r in self.requests:
            out.extend(json.loads(r.data)["events"])
        return out


class _Resp:
    def read(self):
        return b"{}"

    def __enter__(self):
        return self

    def __exit__(self, *a):
        return False


def ev(i: int) -> dict:
    return {"type": "idle", "query_id": "q", "query": "q", "timestamp": float(i)}


@pytest.fixture
def http(monkeypatch):
    def install(*a, **k):
        fake = FakeHTTP(*a, **k)
        monkeypatch.setattr(fw.urllib.request, "urlopen", fake)
        return fake
    return install


def test_batches_posted_with_bearer_token(http):
    fake = http()
    f = fw.Forwarder("http://exporter:9308/", "tok", flush_interval=0.05)
    try:
        for i in range(5):
            assert f.submit(ev(i))
        assert f.flush(5)
    finally:
        f.close()
    assert [e["timestamp"] for e in fake.events()] == [0.0, 1.0, 2.0, 3.0, 4.0]
    req = fake.requests[0]
    assert req.full_url == "http://exporter:9308/api/v1/spark/events"
    assert req.get_header("Authorization") == "Bearer tok"
    assert req.get_header("Content-type") == "application/json"
    assert f.sent == 5 and f.dropped == {}


def test_retries_then_succeeds(http):
    fake = http([urllib.error.URLError("refused"), 503, 429, 202])
    f = fw.Forwarder("http://x", None, flush_interval=0.05, backoff=0.01)
    try:
        f.submit(ev(1))
        assert f.flush(5)
    finally:
        f.close()
    assert len(fake.requests) == 4
    assert fake.requests[0].get_header("Authorization") is None
    assert f.sent == 1 and f.dropped == {}


def test_gives_up_after_retries_and_counts(http):
    http([ConnectionRefusedError()] * 10)
    drops = []
    f = fw.Forwarder("http://x", "t", flush_interval=0.05, backoff=0.01, max_retries=2,
                     on_drop=lambda reason, n: drops.append((reason, n)))
    try:
        f.submit(ev(1))
        f.submit(ev(2))
        assert f.flush(5)
    finally:
        f.close()
    assert f.dropped == {"send_failed": 2}
    assert sum(n for _, n in drops) == 2


def test_4xx_is_not_retried(http):
    fake = http([400])
    f = fw.Forwarder("http://x", "t", flush_interval=0.05, backoff=0.01)
    try:
        f.submit(ev(1))
        assert f.flush(5)
    finally:
        f.close()
    assert len(fake.requests) == 1
    assert f.dropped == {"rejected": 1}


def test_full_queue_drops_without_blocking(http):
    gate = threading.Event()
    http(block=gate)                                  # the sender hangs on its first request
    state = SparkQueryState()
    f = fw.Forwarder("http://x", "t", max_queue=10, max_batch=5, flush_interval=0.01,
                     on_drop=state.count_dropped)
    try:
        t0 = time.perf_counter()
        results = [f.submit(ev(i)) for i in range(1000)]
        elapsed = time.perf_counter() - t0
        assert results.count(False) >= 1000 - 15
        assert f.dropped["queue_full"] == results.count(False)
        assert state.dropped()["queue_full"] == results.count(False)
        assert elapsed < 1.0                          # 1000 non-blocking puts
    finally:
        gate.set()
        f.close()


def test_large_batches_are_split_by_bytes(http):
    fake = http()
    f = fw.Forwarder("http://x", "t", max_batch=100, max_batch_bytes=2000, flush_interval=0.2)
    try:
        big = [dict(ev(i), pad="x" * 500) for i in range(10)]
        for e in big:
            f.submit(e)
        assert f.flush(5)
    finally:
        f.close()
    assert len(fake.requests) >= 3
    assert all(len(r.data) <= 2000 for r in fake.requests)
    assert [e["timestamp"] for e in fake.events()] == [float(i) for i in range(10)]


def test_unserializable_event_is_dropped_not_fatal(http):
    fake = http()
    f = fw.Forwarder("http://x", "t", flush_interval=0.05)
    try:
        f.submit(dict(ev(1), bad=object()))
        f.submit(ev(7))
        assert f.flush(5)
        wait_for(lambda: f.sent == 1, 5, what="the good event")
    finally:
        f.close()
    assert f.dropped == {"unserializable": 1}
    assert [e["timestamp"] for e in fake.events()] == [7.0]


def test_submit_after_close_is_dropped(http):
    http()
    f = fw.Forwarder("http://x", "t", flush_interval=0.05)
    f.close()
    assert f.submit(ev(1)) is False
    assert f.dropped == {"closed": 1}


def test_invalid_event_is_dropped_alone(http):
    fake = http()
    f = fw.Forwarder("http://x", "t", flush_interval=0.2)
    try:
        f.submit({"type": "idle", "query_id": "", "timestamp": 1.0})
        f.submit(ev(8))
        assert f.flush(5)
    finally:
        f.close()
    assert f.dropped == {"invalid": 1}
    assert [e["timestamp"] for e in fake.events()] == [8.0]
