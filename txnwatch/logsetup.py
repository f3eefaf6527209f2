"""Logging: one line per event, chatty client libraries quietened, secrets scrubbed."""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterable


class SecretFilter(logging.Filter):
    """Replaces any known secret value in a log line with ***."""

    def __init__(self, secrets: Iterable[str]) -> None:
        super().__init__()
        self.secrets = sorted({s for s in secrets if s and len(s) >= 3}, key=len, reverse=True)

    def filter(self, record: logging.LogRecord) -> bool:
        if not self.secrets:
            return True
        msg = record.getMessage()
        if any(s in msg for s in self.secrets):
            for s in self.secrets:
                msg = msg.replace(s, "***")
            record.msg, record.args = msg, None
        return True


class RateLimitFilter(logging.Filter):
    """Lets through one line per (logger, message shape) per `interval` seconds, then a
    count of what it suppressed: a broker outage makes client libraries repeat the same
    connect error many times a second, and that must not become a log storm."""

    def __init__(self, interval: float = 60.0) -> None:
        super().__init__()
        self.interval = interval
        self._seen: dict[tuple[str, str], list[float | int]] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        import re
        import time

        shape = re.sub(r"\d+", "#", record.getMessage())[:200]
        key = (record.name, shape)
        now = time.monotonic()
        entry = self._seen.get(key)
        if entry is not None and now - entry[0] < self.interval:
            entry[1] += 1
            return False
        suppressed = entry[1] if entry else 0
        if len(self._seen) > 1000:
            self._seen.clear()
        self._seen[key] = [now, 0]
        if suppressed:
            record.msg, record.args = f"{record.getMessage()} ({suppressed} similar suppressed)", None
        return True


def setup_logging(level: str = "INFO", secrets: Iterable[str] = ()) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    handler.addFilter(SecretFilter(secrets))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    # kafka-python logs its whole configuration (passwords included) at DEBUG and every
    # reconnect at INFO; librdkafka and waitress are chatty too.
    for name in ("kafka", "txnwatch.librdkafka", "waitress.queue"):
        logging.getLogger(name).setLevel(logging.ERROR if name == "kafka" else logging.WARNING)
    librdkafka = logging.getLogger("txnwatch.librdkafka")
    librdkafka.filters[:] = [RateLimitFilter(60.0)]
