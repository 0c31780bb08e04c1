"""UTF-16 logs read as UTF-8: Windows PowerShell 5.1's redirection (`python train.py >
log.txt`, `Out-File`, `Tee-Object`) writes UTF-16LE with a byte-order mark
(https://learn.microsoft.com/powershell/module/microsoft.powershell.core/about/
about_character_encoding?view=powershell-5.1), which the reader would otherwise judge binary
(half its bytes NUL) and skip."""

from __future__ import annotations

import codecs
from typing import BinaryIO

from ddpdoctor.diagnose.transformed import Transformed

_BOMS = ((codecs.BOM_UTF16_LE, "utf-16-le"), (codecs.BOM_UTF16_BE, "utf-16-be"))


def sniff(head: bytes) -> tuple[str, int]:
    """The UTF-16 codec ``head`` (an input's first bytes) is written in, or ``""``, and the
    length of its byte-order mark: by the mark, else by text whose every other byte is NUL
    (ASCII in UTF-16; no mark to skip)."""
    for bom, codec in _BOMS:
        if head.startswith(bom):
            return codec, len(bom)
    pairs = len(head) // 2
    if pairs < 16:
        return "", 0
    even, odd = head[0:pairs * 2:2], head[1:pairs * 2:2]
    if odd.count(0) >= 0.9 * pairs and even.count(0) <= 0.05 * pairs:
        return "utf-16-le", 0
    if even.count(0) >= 0.9 * pairs and odd.count(0) <= 0.05 * pairs:
        return "utf-16-be", 0
    return "", 0


class Utf16(Transformed):
    """A UTF-16 byte stream read as UTF-8 bytes; the byte-order mark is dropped and a broken
    pair becomes U+FFFD, as the reader's UTF-8 decoding does with bad bytes."""

    def __init__(self, head: bytes, raw: BinaryIO, codec: str) -> None:
        """``head``: the input's first bytes, its byte-order mark already off."""
        super().__init__(head, raw)
        self._decoder = codecs.getincrementaldecoder(codec)(errors="replace")

    def convert(self, data: bytes, final: bool) -> bytes:
        return self._decoder.decode(data, final).encode("utf-8")
