"""The audit trail of `txnwatch abort`: one JSON line per action, to a file and to stderr.

Markers written straight to a partition leave no record in the coordinator's log, so this
trail is the record of who aborted what. Each partition gets an `intent` line before its
markers are sent and an `outcome` line after (aborted, failed, skipped, interrupted), both
written through and synced before the command goes on: a run killed between the two leaves the
intent, and a re-run finds the partition already moved on and says so."""

from __future__ import annotations

import getpass
import json
import os
import socket
import sys
import time
import uuid
from pathlib import Path
from typing import TextIO

DEFAULT_AUDIT_LOG = "txnwatch-abort-audit.jsonl"


def default_path() -> Path:
    """$XDG_STATE_HOME/txnwatch/, else ~/.local/state/txnwatch/ (where a person's tools keep
    their logs); TXNWATCH_AUDIT_LOG overrides it."""
    explicit = os.environ.get("TXNWATCH_AUDIT_LOG")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "txnwatch" / DEFAULT_AUDIT_LOG


def actor(principal: str | None) -> dict:
    """Who acts: the Kafka principal, and the person and host that ran the command."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = str(os.getuid())
    return {"kafka_principal": principal or "ANONYMOUS", "os_user": user, "host": socket.gethostname()}


class AuditTrail:
    """Appends JSON lines; each is flushed and fsynced before write() returns."""

    def __init__(self, path: Path, who: dict, cluster: str, echo: TextIO | None = sys.stderr) -> None:
        self.path = Path(path)
        self.who = who
        self.cluster = cluster
        self.run_id = uuid.uuid4().hex[:12]
        self.echo = echo
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o640)
        self._file = os.fdopen(fd, "a", encoding="utf-8")

    def write(self, phase: str, action: str, **fields) -> dict:
        now = time.time()
        line = {"ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(now)) + f".{int(now * 1000) % 1000:03d}Z",
                "run": self.run_id, "phase": phase, "action": action, "cluster": self.cluster, "who": self.who,
                **fields}
        text = json.dumps(line, sort_keys=False, default=str)
        self._file.write(text + "\n")
        self._file.flush()
        os.fsync(self._file.fileno())
        if self.echo is not None:
            print(f"audit: {text}", file=self.echo, flush=True)
        return line

    def close(self) -> None:
        self._file.close()
