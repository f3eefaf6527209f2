"""What the balance app (streams/BalanceApp.java) prints, read (pure): its process id and
thread, and the changelog restores of a start."""

from __future__ import annotations

import re

# "running thread=balance-app-<uuid>-StreamThread-1 ..." (default client.id = <application.id>-<process id>)
_RUNNING = re.compile(r"^running thread=(?P<client>\S+?)-StreamThread-(?P<thread>\d+)\b", re.M)
_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")


_RESTORE = re.compile(r"^restore \S+ (?P<tp>\S+) from (?P<start>-?\d+) to (?P<end>-?\d+)$", re.M)
_RESTORED = re.compile(r"^restored \S+ (?P<tp>\S+) records=(?P<n>\d+)$", re.M)


def restores_from_output(text: str) -> list[tuple[str, int, int]]:
    """(changelog partition, records to restore, records restored or -1 while restoring)
    from the app's "restore ... from A to B" / "restored ... records=N" lines (pure)."""
    done = {m.group("tp"): int(m.group("n")) for m in _RESTORED.finditer(text)}
    return [(m.group("tp"), int(m.group("end")) - int(m.group("start")), done.get(m.group("tp"), -1))
            for m in _RESTORE.finditer(text)]


def process_id_from_output(text: str, application_id: str) -> tuple[str, int] | None:
    """(process id, thread index) from the app's last "running thread=..." line (pure)."""
    matches = list(_RUNNING.finditer(text))
    if not matches:
        return None
    m = matches[-1]
    client = m.group("client")
    prefix = application_id + "-"
    if not client.startswith(prefix) or not _UUID.fullmatch(client[len(prefix):]):
        return None
    return client[len(prefix):], int(m.group("thread"))
