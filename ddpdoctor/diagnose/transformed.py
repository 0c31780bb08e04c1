"""A byte stream read through a conversion, piece by piece (bounded memory): the shape the
reader's UTF-16 and Docker json-file inputs share (the reader takes any ``read(n)``)."""

from __future__ import annotations

from typing import BinaryIO


class Transformed:
    """``raw`` (after ``head``, its bytes already read) as ``convert`` turns it: a subclass
    says how one piece converts, and what is left at the end (``final``)."""

    def __init__(self, head: bytes, raw: BinaryIO) -> None:
        self._raw = raw
        self._pending = head
        self._out = bytearray()
        self._done = False

    def convert(self, data: bytes, final: bool) -> bytes:
        raise NotImplementedError

    def read(self, n: int) -> bytes:
        while len(self._out) < n and not self._done:
            data = self._pending or self._raw.read(max(n, 1 << 16))
            self._pending = b""
            self._done = not data
            self._out += self.convert(data, self._done)
        out = bytes(self._out[:n])
        del self._out[:n]
        return out

    def close(self) -> None:
        self._raw.close()
