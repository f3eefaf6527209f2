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


_ESCAPED: dict[str, str] = {}


def escape_label(v: str) -> str:
    """Label value escaping, memoised: topic, group and id values repeat across series."""
    hit = _ESCAPED.get(v)
    if hit is not None:
        return hit
    out = v.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"') if (
        "\\" in v or "\n" in v or '"' in v) else v
    if len(_ESCAPED) > 200_000:
        _ESCAPED.clear()  # bounded: ids churn
    _ESCAPED[v] = out
    return out


def format_value(v: float) -> str:
    if v.is_integer() and -1e15 < v < 1e15:
        return f"{int(v)}.0"
    if v == math.inf:
        return "+Inf"
    if v == -math.inf:
        return "-Inf"
    if v != v:
        return "NaN"
    return repr(v)


def family_chunks(families: Iterable[Metric]) -> dict[str, FamilyChunk]:
    out: dict[str, FamilyChunk] = {}
    for fam in families:
        lines = []
        for s in fam.samples:
            if s.labels:
                lbl = ",".join(f'{k}="{escape_label(str(v))}"' for k, v in s.labels.items())
                lines.append(f"{s.name}{{{lbl}}} {format_value(float(s.value))}\n")
            else:
                lines.append(f"{s.name} {format_value(float(s.value))}\n")
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
    kind = "gauge" if c.kind == "info" else c.kind
    if kind not in ("gauge", "counter", "histogram", "summary"):
        kind = "untyped"
    name = text_name(c)
    return f"# HELP {name} {help_}\n# TYPE {name} {kind}\n".encode()


def text_name(c: FamilyChunk) -> str:
    """A family's name in the text format (0.0.4): a counter's with _total, an info's with _info."""
    return c.name + {"counter": "_total", "info": "_info"}.get(c.kind, "")


def assemble(parts: Iterable[Mapping[str, FamilyChunk]], openmetrics: bool, eof: bool = True) -> bytes:
    """One exposition document (or section) from several sources' chunks, merged by name."""
    pieces, _ = assemble_pieces(parts, openmetrics)
    if openmetrics and eof:
        pieces.append(b"# EOF\n")
    return b"".join(pieces)


_GZIP_HEADER = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff"  # no mtime, OS unknown


def assemble_pieces(parts: Iterable[Mapping[str, FamilyChunk]], openmetrics: bool) -> tuple[list[bytes], set[str]]:
    """Like `assemble` (without # EOF) but as a list of byte pieces and the family names."""
    order: list[str] = []
    merged: dict[str, list[FamilyChunk]] = {}
    for part in parts:
        for name, chunk in part.items():
            if name not in merged:
                merged[name] = []
                order.append(name)
            merged[name].append(chunk)
    pieces: list[bytes] = []
    for name in order:
        chunks = merged[name]
        pieces.append(_headers(chunks[0], openmetrics))
        pieces.extend(c.body for c in chunks)
    return pieces, set(order)


class Section:
    """The big, per-poll part of the document, formatted once: as plain bytes (when plain
    scrapes happen) and as raw deflate ending in a full flush (byte-aligned, not final) with
    its CRC-32 and length, so a scrape appends a small tail and still sends one gzip member."""

    __slots__ = ("plain", "names", "_deflate", "_crc", "_size")

    def __init__(self, pieces: tuple[list[bytes], set[str]] | list[bytes], keep_plain: bool,
                 deflate: bool, reuse: DeflateCache | None = None) -> None:
        if isinstance(pieces, tuple):
            pieces, self.names = pieces
        else:
            self.names = set()
        self.plain = b"".join(pieces) if keep_plain else None
        self._deflate: bytes | None = None
        self._crc = 0
        self._size = sum(map(len, pieces))
        if deflate:
            self._deflate, self._crc = (reuse or DeflateCache()).deflate(pieces)

    @property
    def has_plain(self) -> bool:
        return self.plain is not None

    @property
    def has_deflate(self) -> bool:
        return self._deflate is not None


class DeflateCache:
    """Raw deflate of a document's pieces that reuses, from the last document, the bytes of
    every big piece (a family's sample lines) that came back unchanged: a poll that moved a
    few partitions recompresses the families they are in, not the whole document.

    Each big piece is compressed on its own, from an empty window, and ends in a full flush
    (byte-aligned, not final); the small pieces between them (headers) go through one
    stream flushed the same way. Such runs of blocks make one valid deflate stream when
    concatenated, since none refers back into another."""

    BIG = 16 * 1024      # smaller pieces are not worth a flush of their own

    def __init__(self) -> None:
        self._last: dict[bytes, bytes] = {}
        self.compressed = 0          # big pieces compressed by the last call (tests, bench)

    def deflate(self, pieces: list[bytes]) -> tuple[bytes, int]:
        """(raw deflate of the pieces, ending in a full flush, their CRC-32)."""
        kept: dict[bytes, bytes] = {}
        out: list[bytes] = []
        crc = 0
        small = None            # the running stream of small pieces
        self.compressed = 0
        for p in pieces:
            crc = zlib.crc32(p, crc)
            if len(p) < self.BIG:
                if small is None:
                    # Level 1: exposition text is so repetitive it still shrinks ~30x, cheaply.
                    small = zlib.compressobj(1, zlib.DEFLATED, -15)
                out.append(small.compress(p))
                continue
            if small is not None:
                out.append(small.flush(zlib.Z_FULL_FLUSH))
                small = None
            z = kept.get(p) or self._last.get(p)
            if z is None:
                c = zlib.compressobj(1, zlib.DEFLATED, -15)
                z = c.compress(p) + c.flush(zlib.Z_FULL_FLUSH)
                self.compressed += 1
            kept[p] = z
            out.append(z)
        if small is not None:
            out.append(small.flush(zlib.Z_FULL_FLUSH))
        self._last = kept     # only this document's pieces: memory stays one document's
        return b"".join(out), crc


def with_tail(section: Section, tail: bytes, gzip: bool) -> bytes:
    if not gzip:
        return section.plain + tail
    c = zlib.compressobj(1, zlib.DEFLATED, -15)
    body = c.compress(tail) + c.flush(zlib.Z_FINISH)
    size = (section._size + len(tail)) & 0xFFFFFFFF
    return _GZIP_HEADER + section._deflate + body + struct.pack("<II", zlib.crc32(tail, section._crc), size)


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
