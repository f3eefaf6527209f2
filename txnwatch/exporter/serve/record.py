"""Where a serving process listens, for `txnwatch healthcheck`: a flag given to `serve` (`--port
9000`, `--web.listen-address`) is not in the environment or file the healthcheck reads, so the
process says itself. One small JSON file per process in the temporary directory (the image's
root is read-only; /tmp is writable), `txnwatch-serve-<pid>.json`: its pid, the URLs a client on
this host reaches it by, whether they need a client certificate, and its configuration file.
Written atomically once every address is bound, removed at a clean stop; a record whose process
is gone is ignored (and swept by the next `serve`)."""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

PREFIX = "txnwatch-serve-"


@dataclass(frozen=True)
class Record:
    pid: int
    urls: tuple[str, ...]
    client_certificates: bool = False      # the web config requires them: /healthz cannot be asked
    config: str | None = None              # its configuration file (absolute), if any


def config_key(path: str | None) -> str | None:
    """A configuration file as records compare them (absolute, links resolved)."""
    return os.path.realpath(path) if path else None


def _directory() -> Path:
    return Path(tempfile.gettempdir())


def write(record: Record) -> Path:
    path = _directory() / f"{PREFIX}{record.pid}.json"
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"pid": record.pid, "urls": list(record.urls),
                               "client_certificates": record.client_certificates, "config": record.config}))
    os.replace(tmp, path)
    _sweep()
    return path


def remove(path: Path) -> None:
    path.unlink(missing_ok=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:          # another user's process: alive
        return True
    return True


def _records() -> list[tuple[Path, Record]]:
    out = []
    for path in _directory().glob(f"{PREFIX}*.json"):
        with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
            d = json.loads(path.read_text())
            out.append((path, Record(int(d["pid"]), tuple(d["urls"]), bool(d.get("client_certificates")),
                                     d.get("config"))))
    return out


def _sweep() -> None:
    """Remove the records of processes that are gone (killed: they could not remove theirs)."""
    for path, rec in _records():
        if not _alive(rec.pid):
            with contextlib.suppress(OSError):
                path.unlink()


def find(config: str | None) -> Record | None:
    """The record of the serving process a healthcheck is for: among those alive, the one
    started with the configuration file `config` names; with none named, the only one. None
    (use the configuration) when there is no such record, or more than one."""
    live = [rec for _path, rec in _records() if _alive(rec.pid)]
    if config is not None:
        live = [rec for rec in live if rec.config == config_key(config)]
    return live[0] if len(live) == 1 else None
