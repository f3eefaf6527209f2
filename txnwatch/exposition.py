"""Fast exposition: metric families -> per-family byte chunks, merged across sources.

A poll's snapshot is immutable, so its families are formatted once and the bytes reused
by every scrape until the next poll; a scrape only concatenates chunks. Both formats are
produced: Prometheus text 0.0.4 and OpenMetrics 1.0 (what Prometheus asks for first).
Families with the same name from several sources (clusters) are merged under one header.
"""

from __future__ import annotations

import math
import struct
import zlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from prometheus_client.core import Metric

TEXT_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
OPENMETRICS_CONTENT_TYPE = "application/openmetrics-text; version=1.0.0; charset=utf-8"


@dataclass(frozen=True, slots=True)
class FamilyChunk:
    name: str          # family name (counters without _total, info without _info)
    kind: str          # gauge | counter | histogram | info | untyped ...
    help: str
    body: bytes        # sample lines, identical in both formats for our families


def _escape_label(v: str) -> str:
    return v.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _fmt(v: float) -> str:
    if v == math.inf:
        return "+Inf"
    if v == -math.inf:
        return "-Inf"
    if v != v:
        return "NaN"
    if v.is_integer() and abs(v) < 1e15:
        return f"{int(v)}.0"
    return repr(v)


def family_chunks(families: Iterable[Metric]) -> dict[str, FamilyChunk]:
    out: dict[str, FamilyChunk] = {}
    for fam in families:
        lines = []
        for s in fam.samples:
            if s.labels:
                lbl = ",".join(f'{k}="{_escape_label(str(v))}"' for k, v in s.labels.items())
                lines.append(f"{s.name}{{{lbl}}} {_fmt(float(s.value))}\n")
            else:
                lines.append(f"{s.name} {_fmt(float(s.value))}\n")
        body = "".join(lines).encode()
        prev = out.get(fam.name)
        out[fam.name] = FamilyChunk(fam.name, fam.type, fam.documentation,
                                    (prev.body if prev else b"") + body)
    return out


def _headers(c: FamilyChunk, openmetrics: bool) -> bytes:
    if openmetrics:
        help_ = c.help.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')
        kind = c.kind if c.kind in ("gauge", "counter", "histogram", "info", "summary", "stateset") else "unknown"
        return f"# HELP {c.name} {help_}\n# TYPE {c.name} {kind}\n".encode()
    help_ = c.help.replace("\\", "\\\\").replace("\n", "\\n")
    name, kind = c.name, c.kind
    if kind == "counter":
        name = c.name + "_total"
    elif kind == "info":
        name, kind = c.name + "_info", "gauge"
    elif kind not in ("gauge", "histogram", "summary"):
        kind = "untyped"
    return f"# HELP {name} {help_}\n# TYPE {name} {kind}\n".encode()


def assemble(parts: Iterable[Mapping[str, FamilyChunk]], openmetrics: bool, eof: bool = True) -> bytes:
    """One exposition document (or section) from several sources' chunks, merged by name."""
    order: list[str] = []
    merged: dict[str, list[FamilyChunk]] = {}
    for part in parts:
        for name, chunk in part.items():
            if name not in merged:
                merged[name] = []
                order.append(name)
            merged[name].append(chunk)
    out: list[bytes] = []
    for name in order:
        chunks = merged[name]
        out.append(_headers(chunks[0], openmetrics))
        out.extend(c.body for c in chunks)
    if openmetrics and eof:
        out.append(b"# EOF\n")
    return b"".join(out)


_GZIP_HEADER = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff"  # no mtime, OS unknown


class Section:
    """A cached, formatted section of the document: plain bytes, and the same bytes as
    raw deflate ending in a full flush (byte-aligned, not final), with its CRC-32, so a
    scrape can append a small tail and still send one valid gzip member."""

    __slots__ = ("plain", "_deflate", "_crc")

    def __init__(self, plain: bytes) -> None:
        self.plain = plain
        self._deflate: bytes | None = None
        self._crc = 0

    def deflated(self) -> tuple[bytes, int]:
        if self._deflate is None:
            # Level 1: exposition text is so repetitive it still shrinks >10x, cheaply.
            c = zlib.compressobj(1, zlib.DEFLATED, -15)
            self._deflate = c.compress(self.plain) + c.flush(zlib.Z_FULL_FLUSH)
            self._crc = zlib.crc32(self.plain)
        return self._deflate, self._crc


def with_tail(section: Section, tail: bytes, gzip: bool) -> bytes:
    if not gzip:
        return section.plain + tail
    head, crc = section.deflated()
    c = zlib.compressobj(1, zlib.DEFLATED, -15)
    body = c.compress(tail) + c.flush(zlib.Z_FINISH)
    size = (len(section.plain) + len(tail)) & 0xFFFFFFFF
    return _GZIP_HEADER + head + body + struct.pack("<II", zlib.crc32(tail, crc), size)


def accepts_gzip(accept_encoding: str) -> bool:
    for part in accept_encoding.split(","):
        token, _, params = part.strip().partition(";")
        if token.strip().lower() == "gzip":
            return "q=0" not in params.replace(" ", "") or "q=0." in params.replace(" ", "")
    return False


def wants_openmetrics(accept: str) -> bool:
    """Same negotiation as prometheus_client: OpenMetrics when the scraper lists it."""
    for part in accept.split(","):
        if part.split(";")[0].strip() == "application/openmetrics-text":
            return True
    return False
