"""Reads with a deadline: no input can make ``diagnose`` wait forever.

A path that stats as a regular file may still block on read: ``/proc/kmsg`` waits for the
next kernel message, a ``/sys`` attribute can wait on hardware, a file on a hung NFS or FUSE
mount never answers. ``fstat`` cannot tell these apart from a log, so every read of a file
input goes through :class:`DeadlineReader`: a read that gives nothing within the deadline
raises :class:`ReadDeadlineExceeded` (an ``OSError``, so the reader notes it on that input's
line and goes on with the next input).

Two layers, because neither covers every file alone:
- the descriptor is non-blocking and a read that would block waits in ``poll`` (this is what
  ``/proc/kmsg``, pipes and most pseudo-files honour; nothing is read after the deadline);
- the read itself runs in a worker thread, so a file that ignores ``O_NONBLOCK`` and blocks
  in the kernel (a hung mount) blocks that thread, not the caller. The caller gives up at
  the deadline; the abandoned thread owns the descriptor and closes it if the read ever
  returns.
"""

from __future__ import annotations

import os
import queue
import select
import threading
import time
from typing import NoReturn

# Seconds a single read may give nothing before the input is given up. A 1 MiB read of a
# local log takes milliseconds even on a loaded host; 10 s only trips on a read that waits
# for something that may never come.
READ_DEADLINE_S = 10.0
_POLL_SLICE_MS = 200  # how often a waiting worker checks whether it was abandoned


class ReadDeadlineExceeded(TimeoutError):
    """A read gave nothing within the deadline (or a pseudo-file kept going past it)."""


class DeadlineReader:
    """A binary stream over a file descriptor whose every ``read`` has a deadline.

    ``deadline_s``: how long one read may give nothing. ``total_s``: when set, how long the
    whole input may be read (for pseudo-files that report size 0 and may trickle forever,
    like ``/proc/kmsg`` on a busy host). The reader owns ``fd`` and closes it.
    """

    def __init__(self, fd: int, deadline_s: float = READ_DEADLINE_S,
                 total_s: float | None = None) -> None:
        self._fd = fd
        self.deadline_s = deadline_s
        self._until = time.monotonic() + total_s if total_s is not None else None
        self._total_s = total_s
        self._got = 0  # bytes handed out so far
        self._requests: queue.SimpleQueue[int | None] = queue.SimpleQueue()
        self._results: queue.SimpleQueue[bytes | OSError] = queue.SimpleQueue()
        self._abandoned = threading.Event()
        self._failed: ReadDeadlineExceeded | None = None
        self._closed = False
        self._thread = threading.Thread(target=self._work, name="ddpdoctor-log-read",
                                        daemon=True)
        self._thread.start()

    def read(self, n: int = -1) -> bytes:
        if self._failed is not None:
            raise self._failed
        if self._closed:
            raise ValueError("read of a closed DeadlineReader")
        wait = self.deadline_s
        if self._until is not None:
            wait = min(wait, self._until - time.monotonic())
        if wait > 0:
            self._requests.put(n if n > 0 else 1 << 20)
            try:
                result = self._results.get(timeout=wait)
            except queue.Empty:
                result = None
            if isinstance(result, OSError):
                raise result
            if result is not None:
                self._got += len(result)
                return result
        if self._got and wait < self.deadline_s:  # the total ran out, not this read's
            self._give_up(f"still giving data after {self._total_s:g} s (a pseudo-file "
                          f"that does not end); the first {self._got} bytes were read")
        self._give_up(f"no data within {self.deadline_s:g} s: the read blocks (a /proc or "
                      "/sys file, or a hung mount)"
                      + (f"; the first {self._got} bytes were read" if self._got else ""))

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if not self._abandoned.is_set():
            self._requests.put(None)  # the worker closes the fd and ends
            self._thread.join(timeout=1.0)

    def __enter__(self) -> DeadlineReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _give_up(self, message: str) -> NoReturn:
        # The worker may still be inside a read; it owns the fd from now on.
        self._abandoned.set()
        self._requests.put(None)
        self._failed = ReadDeadlineExceeded(message)
        raise self._failed

    def _work(self) -> None:
        try:
            while True:
                n = self._requests.get()
                if n is None or self._abandoned.is_set():
                    return
                self._results.put(self._read_one(n))
        finally:
            os.close(self._fd)

    def _read_one(self, n: int) -> bytes | OSError:
        poller = select.poll() if hasattr(select, "poll") else None
        if poller is not None:
            poller.register(self._fd, select.POLLIN | select.POLLPRI)
        while not self._abandoned.is_set():
            try:
                return os.read(self._fd, n)
            except BlockingIOError:
                if poller is not None:
                    poller.poll(_POLL_SLICE_MS)
                else:
                    time.sleep(_POLL_SLICE_MS / 1000)
            except OSError as e:
                return e
        return b""
