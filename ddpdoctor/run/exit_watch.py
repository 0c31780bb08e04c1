"""When each rank's process died, read as it happens (Linux pidfds), not at the next poll.

A launcher that sees one rank die ends the others within its own poll (DeepSpeed's launcher
sleeps 1 s between polls; torchrun's agent 0.1-5 s): on a loaded host run's sampler, which
polls about once a second, often sees them all gone in one sample and cannot say which went
first (the lead of a bare SIGKILL with no rank in the log). A pidfd becomes readable the
moment its process exits (before its parent reaps it), whoever the parent is; one thread
blocked in epoll stamps each death with the monotonic clock.

Edge module: the times go into run's samples (TreeSample.died); the analysis stays pure.
Where pidfds are missing (not Linux, kernel < 5.3) nothing is stamped and triage keeps the
sampler's order.
"""

from __future__ import annotations

import contextlib
import os
import select
import threading
import time


def _alive_and_same(fd: int, pid: int, created: float) -> bool:
    """The pidfd's process still runs and is the one the sampler saw (not a reused pid)."""
    import psutil

    if select.select([fd], [], [], 0)[0]:
        return False  # already exited: its time of death is not known
    try:
        return abs(psutil.Process(pid).create_time() - created) < 1e-3
    except psutil.Error:
        return False


class ExitWatch:
    """``watch(pid, created)`` each rank process once; ``died`` maps pid -> monotonic time."""

    def __init__(self) -> None:
        self.died: dict[int, float] = {}
        self._watched: set[int] = set()
        self._fds: dict[int, int] = {}  # fd -> pid
        self._lock = threading.Lock()
        self._ep: select.epoll | None = None
        self._thread: threading.Thread | None = None
        if not hasattr(os, "pidfd_open") or not hasattr(select, "epoll"):
            return
        self._ep = select.epoll()
        self._wake_r, self._wake_w = os.pipe()
        self._ep.register(self._wake_r, select.EPOLLIN)
        self._thread = threading.Thread(target=self._run, name="ddpdoctor-exit-watch",
                                        daemon=True)
        self._thread.start()

    @property
    def active(self) -> bool:
        return self._thread is not None

    def watch(self, pid: int, created: float) -> None:
        if self._ep is None or pid in self._watched:
            return
        self._watched.add(pid)
        try:
            fd = os.pidfd_open(pid)
        except OSError:
            return
        if not _alive_and_same(fd, pid, created):
            os.close(fd)
            return
        with self._lock:
            self._fds[fd] = pid
        try:
            self._ep.register(fd, select.EPOLLIN)
        except (OSError, ValueError):  # closed by close() meanwhile
            with self._lock:
                self._fds.pop(fd, None)
            os.close(fd)

    @property
    def pending(self) -> int:
        """Watched processes not seen to die yet."""
        with self._lock:
            return len(self._fds)

    def settle(self, timeout: float) -> None:
        """Wait (at most ``timeout`` s) for the watched processes still alive to die: a
        launcher that exits has just ended its other ranks, and their times order them."""
        deadline = time.monotonic() + timeout
        while self.pending and time.monotonic() < deadline:
            time.sleep(0.05)

    def deaths(self) -> dict[int, float]:
        with self._lock:
            return dict(self.died)

    def _run(self) -> None:
        assert self._ep is not None
        while True:
            try:
                events = self._ep.poll()
            except InterruptedError:
                continue
            except (OSError, ValueError):
                return
            # one stamp per wake-up: deaths that were both pending by then stay a tie
            stamp = time.monotonic()
            for fd, _ in events:
                if fd == self._wake_r:
                    return
                with self._lock:
                    pid = self._fds.pop(fd, None)
                    if pid is not None:
                        self.died[pid] = stamp
                with contextlib.suppress(OSError, ValueError):
                    self._ep.unregister(fd)
                os.close(fd)

    def close(self) -> None:
        if self._ep is None or self._thread is None:
            return
        os.write(self._wake_w, b"x")
        self._thread.join(timeout=5.0)
        with self._lock:
            fds = list(self._fds)
            self._fds.clear()
        for fd in fds:
            with contextlib.suppress(OSError):
                os.close(fd)
        for fd in (self._wake_r, self._wake_w):
            with contextlib.suppress(OSError):
                os.close(fd)
        self._ep.close()
        self._ep = None
        self._thread = None
