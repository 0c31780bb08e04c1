"""A log hard-wrapped at a terminal's width read as the lines the job printed.

A copy out of a terminal's scrollback (tmux copy-mode, screen, PuTTY, a web console) can
cut every line longer than the terminal at its width: a traceback's frame, an NCCL error or
torchrun's summary then spans two or three lines, the continuations without the line's
rank prefix, and wordings read from a line's start no longer match. Measured on the
development set (tools.probe, styles wrap80 and wrap120): at 80 columns 165 of 764 logs
read right read differently, 25 failed jobs called healthy.

Told by the input's own shape, never guessed per line: its longest lines all have one
length W (nothing is longer), several of them, of different text, and most of them end
inside a word that the next line goes on with. Then a line exactly W long is joined to the
next one, unless the next one starts a record of its own (a time, a rank or log-level
prefix, a traceback, a frame), starts a new word with a capital ("Killed", "Epoch 3/30",
"Saved checkpoint ..."), names an exception or a death ("KeyError:", "Segmentation fault")
or starts as the logical line did (rows of a table or of a loss log that happen to be the
longest). Fixed-width rows (a loss log's step lines, Keras's epoch lines) each followed by
a line of another kind are rows, not a wrap: the next line starts a word of its own.

Width is counted in code points: CJK text (two columns a character), tabs the terminal
expanded, colour codes kept, or a trailing space the copy dropped leave a full piece not
exactly W, so such a piece is not joined (read as it is: nothing is lost but the join).
"""

from __future__ import annotations

import re
from collections import deque
from typing import BinaryIO

from ddpdoctor.diagnose.transformed import Transformed

# the terminal widths a log is believed wrapped at (a narrower "width" is a table)
_MIN_WIDTH, _MAX_WIDTH = 60, 400
# how much of the input the shape is read from
SNIFF_BYTES = 256 * 1024
# a line that starts a record of its own: never a wrapped line's continuation. A bracket
# only as a record's prefix ("[rank0]:", "[default3]:", "[2024-...", "[E ProcessGroup...",
# "[INFO]", mpirun's "[1,0]<stderr>:" and "[host:123]", Ray's "(RayTrainWorker pid=12)"):
# NCCL's and torch's own text is full of "(SeqNum=..." and "[...]" a cut can fall before.
_RECORD_START = re.compile(
    rb"\d{4}-\d\d-\d\d|\d\d:\d\d:\d\d|Traceback |\s*File \"|[IWEF]\d{4} |\d+: "
    rb"|\[(?:rank|default)?\d|\[[A-Z]{1,8}[\]\s\d]|\[[\w.-]+:\d+\]|\(\w*\s?pid=")
# a line that says a process died or raised: evidence of its own, never glued to another
_DEATH = re.compile(rb"(?:Killed|Segmentation fault|Aborted|Bus error|Floating point "
                    rb"exception|terminate called)\b|[\w.]*(?:Error|Exception|Interrupt)\b:?")
# a new word with a capital: after a digit it starts a line ("... val_acc 0.8523" then
# "Saved checkpoint", "tok/s 40504" then "Evaluating"), a cut inside a number never falls
# just there; after a small letter it may be either ("9ms/step" then "Epoch 2/30", or
# "Distributed" then "DataParallel" cut inside a camel-case name)
_CAPITAL_WORD = re.compile(rb"[A-Z][a-z]")
# a logical line joined from more pieces than this many bytes is passed on as it is
_MAX_JOINED = 1 << 20


def _new_word(last: bytes, nxt: bytes) -> bool:
    return bool(_CAPITAL_WORD.match(nxt)) and last[-1:].isdigit()


def _maybe_new_word(last: bytes, nxt: bytes) -> bool:
    return bool(_CAPITAL_WORD.match(nxt)) and last[-1:].islower()


def _chars(line: bytes) -> int:
    return len(line) if line.isascii() else len(line.decode("utf-8", errors="replace"))


def _goes_on(first: bytes, last: bytes, nxt: bytes) -> bool:
    """``nxt`` may be the rest of the logical line that starts with piece ``first`` and ends
    with piece ``last``: it is not empty, starts no record of its own, no capitalised word
    after a digit, no death or exception, and does not start as the line did (two rows of
    one kind: a table's, a loss log's)."""
    return bool(nxt) and nxt[:3] != first[:3] and not _RECORD_START.match(nxt) and \
        not _DEATH.match(nxt) and not _new_word(last, nxt)


def sniff(head: bytes) -> int:
    """The width ``head`` (an input's first bytes) is hard-wrapped at, or 0."""
    lines = [ln.rstrip(b"\r") for ln in head.split(b"\n")[:-1]]
    if len(lines) < 3:
        return 0
    lengths = [_chars(ln) for ln in lines]
    width = max(lengths)
    if not _MIN_WIDTH <= width <= _MAX_WIDTH:
        return 0
    full = [i for i, n in enumerate(lengths[:-1]) if n == width]
    if len(full) < 2 or len({lines[i] for i in full}) < min(3, len(full)):
        return 0
    # a cut inside a word: the piece ends in a letter or digit and the next goes on with one
    cuts = [lines[i][-1:].isalnum() and lines[i + 1][:1].isalnum()
            and _goes_on(lines[i], lines[i], lines[i + 1]) for i in full]
    cut = sum(cuts)
    # a capitalised word after a small letter proves nothing alone: Keras's "9ms/step" rows
    # each followed by "Epoch 2/30" are rows, not a wrap, though every such pair "goes on"
    if not sum(c and not _maybe_new_word(lines[i], lines[i + 1])
               for c, i in zip(cuts, full)):
        return 0
    # two pieces both cut so, or three or more mostly so
    return width if cut == len(full) or (cut >= 3 and cut * 10 >= len(full) * 3) else 0


class HardWrapped(Transformed):
    """The stream with each line that fills the width joined to the line it goes on in."""

    def __init__(self, head: bytes, raw: BinaryIO, width: int) -> None:
        super().__init__(head, raw)
        self._width = width
        self._carry = b""
        self._line: bytearray | None = None  # the logical line being joined
        self._first = b""  # its first piece
        self._last = b""  # its last piece
        self._pieces_in_line = 0
        self.pieces = 0  # the input's lines so far
        self._emitted = 0  # the joined lines so far
        # (first joined line, how many input lines before it were joined away): a quote's
        # file:line is the input's, not the joined stream's
        self._shifts: deque[tuple[int, int]] = deque()
        self._shift = 0
        # bytes in and out: what the join dropped (line ends) is still the input's size
        self.taken = 0
        self.given = 0

    def input_line(self, joined_lineno: int) -> int:
        """The input's line number of a joined line's first piece; asked in order."""
        shifts = self._shifts
        while len(shifts) > 1 and shifts[1][0] <= joined_lineno:
            shifts.popleft()
        return joined_lineno + (shifts[0][1] if shifts and shifts[0][0] <= joined_lineno
                                else 0)

    def _emit(self, out: bytearray) -> None:
        assert self._line is not None
        out += self._line + b"\n"
        self._emitted += 1
        if self._pieces_in_line > 1:
            self._shift += self._pieces_in_line - 1
            self._shifts.append((self._emitted + 1, self._shift))
        self._line = None

    def _full(self, piece: bytes) -> bool:
        return len(piece) >= self._width and _chars(piece) == self._width

    def _take(self, piece: bytes, out: bytearray) -> None:
        piece = piece.rstrip(b"\r")
        self.pieces += 1
        if self._line is not None and len(self._line) < _MAX_JOINED and \
                _goes_on(self._first, self._last, piece):
            self._line += piece
            self._pieces_in_line += 1
        else:
            if self._line is not None:
                self._emit(out)
            self._line = bytearray(piece)
            self._first = piece
            self._pieces_in_line = 1
        self._last = piece
        if not self._full(piece):
            self._emit(out)

    def convert(self, data: bytes, final: bool) -> bytes:
        self.taken += len(data)
        out = self._convert(data, final)
        self.given += len(out)
        return out

    def _convert(self, data: bytes, final: bool) -> bytes:
        pieces = (self._carry + data).split(b"\n")
        self._carry = pieces.pop()
        out = bytearray()
        for piece in pieces:
            self._take(piece, out)
        if final and self._carry:  # the last line, with no line end
            self._take(self._carry, out)
            self._carry = b""
        endless = len(self._carry) > _MAX_JOINED  # one endless line: passed on as it comes
        if (final or endless) and self._line is not None:
            self._emit(out)
        if endless:
            out += self._carry
            self._carry = b""
        return bytes(out)
