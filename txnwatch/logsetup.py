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


class JsonFormatter(logging.Formatter):
    """One JSON object a line (Loki, Elasticsearch): time (RFC 3339, UTC), level, logger,
    message, and the traceback as `exception` when there is one."""

    def format(self, record: logging.LogRecord) -> str:
        import json

        out = {"time": _rfc3339(record.created), "level": record.levelname.lower(), "logger": record.name,
               "message": record.getMessage()}
        if record.exc_info:
            out["exception"] = self.formatException(record.exc_info)
        return json.dumps(out, ensure_ascii=False)


class LogfmtFormatter(logging.Formatter):
    """logfmt (key=value, as Prometheus and Grafana's own components log): time, level,
    logger, msg, and exception when there is one; values quoted where they need it."""

    def format(self, record: logging.LogRecord) -> str:
        pairs = [("time", _rfc3339(record.created)), ("level", record.levelname.lower()),
                 ("logger", record.name), ("msg", record.getMessage())]
        if record.exc_info:
            pairs.append(("exception", self.formatException(record.exc_info)))
        return " ".join(f"{k}={_logfmt_value(v)}" for k, v in pairs)


def _rfc3339(created: float) -> str:
    import datetime

    return datetime.datetime.fromtimestamp(created, datetime.UTC).isoformat(timespec="milliseconds") \
        .replace("+00:00", "Z")


def _logfmt_value(v: str) -> str:
    if v and not any(c in v for c in ' ="\\\n\t') and v.isprintable():
        return v
    return '"' + v.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n").replace("\t", "\\t") + '"'


class ScrubbingFormatter(logging.Formatter):
    """Any formatter's line with every known secret replaced by ***: SecretFilter scrubs the
    message, this also the traceback (an exception's text can carry what a client was given)."""

    def __init__(self, inner: logging.Formatter, secrets: Iterable[str]) -> None:
        super().__init__()
        self.inner = inner
        self.secrets = SecretFilter(secrets).secrets

    def format(self, record: logging.LogRecord) -> str:
        line = self.inner.format(record)
        for s in self.secrets:
            line = line.replace(s, "***")
        return line


FORMATS = {"text": lambda: logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"),
           "json": JsonFormatter, "logfmt": LogfmtFormatter}


def setup_logging(level: str = "INFO", secrets: Iterable[str] = (), fmt: str = "text") -> None:
    """The root logger's one handler (stderr) in `fmt` (text, json or logfmt), secrets
    scrubbed, the client libraries rate-limited."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(ScrubbingFormatter(FORMATS[fmt](), secrets))
    handler.addFilter(SecretFilter(secrets))
    # On the handler, not the loggers: logger filters do not apply to child loggers
    # (kafka-python logs from kafka.net.manager, kafka.cluster, ...).
    handler.addFilter(RateLimitFilter(60.0, CLIENT_LOGGERS))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    # kafka-python logs its whole configuration (passwords included) at DEBUG and every
    # reconnect at INFO; librdkafka is chatty too.
    for name in ("kafka", "txnwatch.librdkafka"):
        logging.getLogger(name).setLevel(logging.ERROR if name == "kafka" else logging.WARNING)
