"""The blamed ranks' stacks, read again and again while run rechecks them (the edge).

A busy culprit is working or spinning in place; only its stack over time tells
(run/spinning.py decides). The look's own stacks are the first read; the recheck
adds one every ``INTERVAL_S`` (py-spy: ~20 ms a read here, each with a deadline), at most
``MAX_READS``. A recheck that starts from a busy culprit lasts at least ``SPIN_WINDOW_S``:
enough reads to see a working rank move.
"""

from __future__ import annotations

import os
import stat
import time
from functools import lru_cache
from typing import TYPE_CHECKING

from ddpdoctor.run.loops import Loop, enclosing_loop
from ddpdoctor.run.spinning import SpinVerdict, StackSample, sample_of, spin_verdict

if TYPE_CHECKING:
    from ddpdoctor.run.hang import HangDiagnosis

INTERVAL_S = 0.1
MAX_READS = 30
SPIN_WINDOW_S = 3.0
_READ_TIMEOUT_S = 2.0
_MAX_SOURCE_BYTES = 4 << 20  # a training script; past this, not parsed (the stacks decide)


class StackReads:
    def __init__(self, pids: dict[int, int], diagnosis: HangDiagnosis | None,
                 start: float) -> None:
        self.pids = pids
        self.samples: dict[int, list[StackSample]] = {r: [] for r in pids}
        for stack in getattr(diagnosis, "stacks", []) or []:
            if stack.rank in pids and stack.pid == pids[stack.rank]:
                self.samples[stack.rank].append(sample_of(stack, start))
        self.reads = 0
        self._next = start + INTERVAL_S

    def due(self, now: float) -> bool:
        return bool(self.pids) and self.reads < MAX_READS and now >= self._next

    def read(self, now: float) -> None:
        """One py-spy read of every watched rank; never raises, never waits past its
        deadline (a rank that cannot be read gets an error sample: not known to spin)."""
        self.reads += 1
        from ddpdoctor.attach.stacks import StackError, collect_stacks

        try:
            stacks = collect_stacks(sorted(self.pids.items()), timeout=_READ_TIMEOUT_S)
        except (StackError, OSError) as e:
            for r in self.pids:
                self.samples[r].append(StackSample(now, "unknown", error=str(e)))
            self._next = time.monotonic() + INTERVAL_S
            return
        for stack in stacks:
            self.samples[stack.rank].append(sample_of(stack, now))
        self._next = time.monotonic() + INTERVAL_S

    def verdict(self, rank: int) -> SpinVerdict:
        return spin_verdict(self.samples.get(rank, []), loop_in_source)


def loop_in_source(filename: str, function: str,
                   lines: tuple[int, ...]) -> tuple[Loop, int] | None:
    """The loop around ``lines`` of ``function`` in a rank's source file, as this host sees
    it; None when it cannot be read (another container's path, a path relative to the
    rank's directory, too big, not Python)."""
    if not os.path.isabs(filename):
        return None
    source = _source(filename)
    if source is None:
        return None
    try:
        return enclosing_loop(source, lines, function)
    except Exception:  # a parser's surprise never ends the supervision: the stacks decide
        return None


@lru_cache(maxsize=64)
def _source(filename: str) -> str | None:
    """A regular file's text; never a FIFO's or a device's: a frame's file name is the
    job's to choose, and run's supervision must not wait on it."""
    try:
        fd = os.open(filename, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        with os.fdopen(fd, "rb") as f:
            fd = -1  # the file object owns it now
            data = f.read(_MAX_SOURCE_BYTES + 1)
    except OSError:
        return None
    finally:
        if fd >= 0:
            os.close(fd)
    if len(data) > _MAX_SOURCE_BYTES:
        return None
    return data.decode("utf-8", errors="replace")
