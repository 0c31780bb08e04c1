"""A stream that says how far it has been read: what diagnose's progress line shows.

The reader's every read goes through ``read`` (reader._read_some), so wrapping the opened
input counts all of it, before gzip, UTF-16 or Docker json-file decoding: the bytes of the
file as it lies on disk, which its size can be set against.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import BinaryIO


@dataclass(frozen=True)
class ReadProgress:
    """How far one input has been read. ``size``: its size on disk, None for a pipe."""

    name: str
    done: int
    size: int | None

    def __str__(self) -> str:
        from rich.filesize import decimal

        if not self.size:
            return f"reading {self.name}: {decimal(self.done)}"
        return (f"reading {self.name}: {decimal(self.done)} of {decimal(self.size)} "
                f"({min(100, 100 * self.done // self.size)}%)")


class Metered:
    """``stream`` whose reads call ``on_read`` with the input's progress."""

    def __init__(self, stream: BinaryIO, name: str, size: int | None,
                 on_read: Callable[[ReadProgress], None]) -> None:
        self._stream = stream
        self._name = name
        self._size = size
        self._on_read = on_read
        self.done = 0

    def read(self, n: int = -1) -> bytes:
        data = self._stream.read(n)
        self.done += len(data)
        self._on_read(ReadProgress(self._name, self.done, self._size))
        return data

    def close(self) -> None:
        self._stream.close()
