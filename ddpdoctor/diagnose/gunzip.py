"""Streaming gunzip for logs: a cut or corrupt archive still yields what precedes the damage."""

from __future__ import annotations

import zlib
from typing import BinaryIO, Protocol

GZIP_MAGIC = b"\x1f\x8b"


class _Stats(Protocol):
    """What is noted of damage: the reader's ReadStats (a protocol: reader imports this
    module)."""

    notes: list[str]
    incomplete: bool


class Gunzip:
    """A gzip stream decompressed piece by piece, so a cut or corrupt archive still yields
    everything before the damage (GzipFile drops the last block's data on EOFError)."""

    def __init__(self, head: bytes, raw: BinaryIO, stats: _Stats) -> None:
        """``stats``: the reader's ReadStats; damage is noted there (``incomplete``)."""
        self._raw = raw
        self._pending = head
        self._stats = stats
        self._z = zlib.decompressobj(wbits=31)
        # A bytearray drops its front in O(1) and decompress is capped per call
        # (max_length): a gzip bomb costs linear time and bounded memory, not quadratic.
        self._out = bytearray()
        self._done = False
        self._consumed = 0

    def read(self, n: int) -> bytes:
        while len(self._out) < n and not self._done:
            self._fill(n)
        out = bytes(self._out[:n])
        del self._out[:n]
        return out

    def _fill(self, n: int) -> None:
        data = self._pending or self._raw.read(max(n, 1 << 16))
        self._pending = b""
        if not data:
            if not self._z.eof:
                self._note(f"truncated gzip: the archive ends after {self._consumed} "
                           "compressed bytes; what came before was read")
            self._done = True
            return
        if self._z.eof:
            if not data.startswith(GZIP_MAGIC):  # not another member (cat a.gz b.gz)
                if data.strip(b"\x00"):
                    self._note("trailing bytes after the gzip data ignored")
                self._done = True
                return
            self._z = zlib.decompressobj(wbits=31)
        try:
            self._out += self._z.decompress(data, max(n, 1 << 16))
        except zlib.error as e:
            self._note(f"corrupt gzip after {self._consumed} compressed bytes ({e}); what "
                       "came before was read")
            self._done = True
            return
        tail = self._z.unconsumed_tail  # input held back by max_length: the same member
        self._consumed += len(data) - len(tail) - len(self._z.unused_data)
        if tail:
            self._pending = tail
        elif self._z.eof and self._z.unused_data:
            self._pending = self._z.unused_data

    def _note(self, text: str) -> None:
        self._stats.notes.append(text)
        self._stats.incomplete = True
