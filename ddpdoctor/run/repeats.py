"""Is a line of the job's output a sign that it moves, or one error printed again?

run counts new output as progress (run/progress.py). A rank that prints one traceback over
and over (a DataLoader's resource-sharer thread retrying ``accept()`` with no file
descriptor left, every few milliseconds) would then never look stalled while its peer
waits in a collective forever: found when such a loop wrote 312 MB in a hung job run did
not stop. The lines of a traceback (its header, its frames, their code lines and the
markers under them, the exception) whose shape (digits folded) the job already printed
twice are that loop's, and do not count. Every other line counts, repeated or not: a
training log's "step N loss X" is the same shape every step and is progress.
"""

from __future__ import annotations

import re

_HEADER = b"Traceback (most recent call last):"
_FRAME = re.compile(rb'\s*File "[^"]*", line \d+')
# an exception's own line ("RuntimeError: ...", "KeyboardInterrupt")
EXCEPTION_LINE = re.compile(rb"\s*(?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*"
                            rb"(?:Error|Exception|Interrupt|Failure)\b(?::|\s*$)")
_FOLD = bytes.maketrans(b"123456789", b"000000000")
SEEN_BEFORE = 2  # a traceback line printed this many times already is a loop's
MAX_SHAPES = 4096  # shapes remembered: a job's distinct error lines, not its every line


class ErrorRepeats:
    """Feeds on the job's lines in order; says which ones move (not thread-safe: the
    output copy calls it under its lock)."""

    def __init__(self) -> None:
        self._seen: dict[bytes, int] = {}
        self._after_frame = False

    def moves(self, line: bytes) -> bool:
        """``line``: one line of the job's, a rank prefix taken off (process.split_rank)."""
        body = line.rstrip(b"\r\n")
        frame = _FRAME.match(body) is not None
        marks = body.strip(b" ^~") == b"" and b"^" in body  # Python 3.11's markers
        errorish = (frame or marks or body.strip() == _HEADER
                    or EXCEPTION_LINE.match(body) is not None
                    or (self._after_frame and body.startswith(b"    ")))
        self._after_frame = frame or (self._after_frame and marks)
        if not errorish:
            return True
        key = body.strip().translate(_FOLD)
        n = self._seen.get(key, 0)
        if n or len(self._seen) < MAX_SHAPES:
            self._seen[key] = n + 1
        return n < SEEN_BEFORE
