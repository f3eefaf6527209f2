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


# Loggers of the Kafka client libraries (kafka-python logs under "kafka.*"; librdkafka's
# lines are routed to "txnwatch.librdkafka").
CLIENT_LOGGERS = ("kafka", "txnwatch.librdkafka")


class RateLimitFilter(logging.Filter):
    """Lets through one line per (logger, message shape) per `interval` seconds, then a
    count of what it suppressed: a broker outage makes client libraries repeat the same
    connect error many times a second, and that must not become a log storm. Only records
    of loggers under `prefixes` are limited (all when None); their tracebacks are dropped:
    a client library's connection error says what failed in its message."""

    def __init__(self, interval: float = 60.0, prefixes: Iterable[str] | None = None) -> None:
        super().__init__()
        self.interval = interval
        self.prefixes = tuple(prefixes) if prefixes is not None else None
        self._seen: dict[tuple[str, str], list[float | int]] = {}

    def _applies(self, name: str) -> bool:
        return self.prefixes is None or any(name == p or name.startswith(p + ".") for p in self.prefixes)

    def filter(self, record: logging.LogRecord) -> bool:
        import re
        import time

        if not self._applies(record.name):
            return True
        record.exc_info, record.exc_text, record.stack_info = None, None, None
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
    # On the handler, not the loggers: logger filters do not apply to child loggers
    # (kafka-python logs from kafka.net.manager, kafka.cluster, ...).
    handler.addFilter(RateLimitFilter(60.0, CLIENT_LOGGERS))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    # kafka-python logs its whole configuration (passwords included) at DEBUG and every
    # reconnect at INFO; librdkafka and waitress are chatty too.
    for name in ("kafka", "txnwatch.librdkafka", "waitress.queue"):
        logging.getLogger(name).setLevel(logging.ERROR if name == "kafka" else logging.WARNING)
