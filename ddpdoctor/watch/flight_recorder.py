"""Flight Recorder and stack dumps on a signal, for ``ddpdoctor attach``.

A Python signal handler only runs when the main thread returns to the interpreter, which
never happens while it is blocked in a collective. So the C-level handler's wakeup fd is
pointed at a pipe that a side thread reads: on SIGUSR2 it writes this process's Flight
Recorder trace (``torch._C._distributed_c10d._dump_fr_trace_json``, works while the main
thread waits in gloo) to ``$DDPDOCTOR_FR_DIR/ddpdoctor-fr-rank{R}.json`` atomically.
SIGUSR1 gets ``faulthandler`` (all Python stacks, written from the signal handler itself)
into ``ddpdoctor-stacks-rank{R}.txt``. Nothing is installed over a handler someone else
owns.

``ddpdoctor attach`` uses the file contract instead of a signal (a signal is fatal to a rank
that has no handler): ``serve_requests`` writes ``ddpdoctor-fr-rank{R}.ready`` with this
pid and a side thread dumps whenever ``ddpdoctor-fr.request`` is touched
(``ddpdoctor/attach/flight_recorder.py`` is the other side).
"""

from __future__ import annotations

import faulthandler
import logging
import os
import signal
import threading
from collections.abc import Callable
from typing import TextIO, TypedDict

from ddpdoctor.core import safefile
from ddpdoctor.core.contract import fr_dump_file, stacks_file
from ddpdoctor.core.threadname import name_this_thread

log = logging.getLogger("ddpdoctor.watch")


class _State(TypedDict, total=False):
    """What this process installed (once per process)."""

    installed: bool
    signum: int
    fds: tuple[int, int]  # the wakeup pipe: (read end, write end)
    stacks_file: TextIO
    serving: bool


_state: _State = {}


def fr_path(fr_dir: str, rank: int) -> str:
    return os.path.join(fr_dir, fr_dump_file(rank))


def dump(fr_dir: str, rank: int) -> str | None:
    """Write this process's Flight Recorder trace; the path, or None when unavailable."""
    try:
        # private, so absent from torch's stubs (and from some builds: the except below)
        from torch._C._distributed_c10d import (  # type: ignore[attr-defined]
            _dump_fr_trace_json,
        )

        data = _dump_fr_trace_json(includeCollectives=True, onlyActive=False)
    except Exception as e:  # no FR in this build / no process group
        log.debug("ddpdoctor: no Flight Recorder dump: %s", e)
        return None
    os.makedirs(fr_dir, exist_ok=True)
    path = fr_path(fr_dir, rank)
    # The directory may be shared with other users: an unpredictable O_EXCL temp name,
    # renamed over the dump (a planted symlink is replaced, never followed).
    try:
        safefile.write_atomic(path, data if isinstance(data, bytes) else str(data).encode())
    except OSError as e:
        log.info("ddpdoctor: cannot write the Flight Recorder dump %s: %s", path, e)
        return None
    return path


def install(fr_dir: str, rank: int, fr_signal: str = "SIGUSR2",
            stacks_signal: str = "SIGUSR1",
            on_dump: Callable[[str], object] | None = None) -> bool:
    """Install the signal hooks once per process (main thread only); True when active."""
    if _state.get("installed"):
        return True
    if threading.current_thread() is not threading.main_thread():
        return False
    os.makedirs(fr_dir, exist_ok=True)
    signum = getattr(signal, fr_signal)
    if signal.getsignal(signum) not in (signal.SIG_DFL, None):
        log.info("ddpdoctor: %s already handled; no Flight Recorder dump on it", fr_signal)
        return False
    r, w = os.pipe()
    os.set_blocking(w, False)
    previous_fd = signal.set_wakeup_fd(w, warn_on_full_buffer=False)
    if previous_fd != -1:  # someone (asyncio) owns the wakeup fd: leave it to them
        signal.set_wakeup_fd(previous_fd)
        os.close(r)
        os.close(w)
        return False
    signal.signal(signum, lambda *_: None)

    def reader() -> None:
        name_this_thread("ddpdoctor-fr")  # not the rank's work (run/background_threads.py)
        while True:
            try:
                data = os.read(r, 64)
            except OSError:
                return
            if not data:
                return
            if signum in data:
                path = dump(fr_dir, rank)
                if on_dump is not None and path:
                    try:
                        on_dump(path)
                    except Exception:
                        pass

    threading.Thread(target=reader, name="ddpdoctor-fr-dump", daemon=True).start()
    _state.update({"installed": True, "signum": signum, "fds": (r, w)})
    stack_sig = getattr(signal, stacks_signal, None)
    if stack_sig is not None and signal.getsignal(stack_sig) in (signal.SIG_DFL, None):
        try:
            fd = safefile.open_regular(os.path.join(fr_dir, stacks_file(rank)),
                                       os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        except OSError as e:  # a link or a FIFO planted there: no stack dumps, no harm
            log.info("ddpdoctor: no stack dumps on %s: %s", stacks_signal, e)
            return True
        f = os.fdopen(fd, "w")
        faulthandler.register(stack_sig, file=f, all_threads=True, chain=False)
        _state["stacks_file"] = f
    return True


REQUEST_POLL_S = 0.25  # a stat() four times a second: invisible next to a training step


def serve_requests(fr_dir: str, rank: int) -> bool:
    """Answer attach's dump requests (the file contract); once per process."""
    import json

    from ddpdoctor.attach.flight_recorder import REQUEST_FILE, ready_name

    if _state.get("serving"):
        return True
    try:
        os.makedirs(fr_dir, exist_ok=True)
        request = os.path.join(fr_dir, REQUEST_FILE)
        ready = os.path.join(fr_dir, ready_name(rank))
        safefile.write_atomic(ready, json.dumps({"pid": os.getpid()}), mode=0o644)
    except OSError as e:
        log.info("ddpdoctor: cannot serve Flight Recorder requests in %s: %s", fr_dir, e)
        return False

    def poll() -> None:
        name_this_thread("ddpdoctor-frreq")
        try:
            seen = os.stat(request).st_mtime
        except OSError:
            seen = 0.0
        while True:
            try:
                mtime = os.stat(request).st_mtime
            except OSError:
                mtime = seen
            if mtime > seen:
                seen = mtime
                dump(fr_dir, rank)
            threading.Event().wait(REQUEST_POLL_S)

    threading.Thread(target=poll, name="ddpdoctor-fr-requests", daemon=True).start()
    _state["serving"] = True
    return True
