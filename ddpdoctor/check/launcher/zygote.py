"""The rank zygote: one process that imports torch once, from which every rank is forked.

Started as fresh interpreters ("spawn"), N ranks import torch N times (about 2 s of CPU
each; on a 2-core host, 2 ranks took ~3 s to start and 8 ranks ~4x that), and each ran a full
interpreter shutdown at the end (another ~1-2 s under load). Python's forkserver start method
is exactly the fix: a clean server process (no threads, no CUDA context, no process group)
imports torch once, and each rank is a fork of it that ends with ``os._exit``. torch's
elastic ``start_processes`` takes it as its ``start_method``. The server is started before the
doctor imports torch itself, so the two imports overlap.

What a rank sees does not change: with spawn too, torch was imported (by unpickling the
entry point) before the rank's own environment was applied; the rank's environment, working
directory and ``sys.path`` are still applied per rank. The server carries the environment of
the moment it started, so it is stopped after each launch and a later launch (a test that
changed the environment) gets a fresh one. Where a forkserver cannot run, or does not answer,
the launch falls back to spawn.

The forkserver is a per-process singleton of ``multiprocessing``; the two private names used
here (``_forkserver_pid``, ``_stop``) exist on Python 3.8 to 3.13 and are reached with
``getattr``: when they are missing, the server is left to end by itself when the doctor exits.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import signal
import threading
from multiprocessing import forkserver
from typing import Final

SPAWN = "spawn"
FORKSERVER: Final = "forkserver"

# What every rank imports anyway; the entry point's module is added per launch.
PRELOAD = ("torch", "torch.distributed", "torch.distributed.elastic.multiprocessing.api",
           "ddpdoctor.check.launcher.rank")

STOP_TIMEOUT_S = 5.0
_ours = False  # this module started the running server, so it may stop it


def _server_pid() -> int | None:
    return getattr(forkserver._forkserver, "_forkserver_pid", None)


def prestart(modules: tuple[str, ...] = ()) -> None:
    """Start the server now (it imports torch in the background) unless one runs already.

    Idempotent; cheap to call early, so that its import overlaps the caller's own work.
    """
    global _ours
    if FORKSERVER not in multiprocessing.get_all_start_methods() or _server_pid() is not None:
        return
    previous = list(getattr(forkserver._forkserver, "_preload_modules", ["__main__"]))
    # The main module first, as multiprocessing does by default: each rank would re-run it.
    multiprocessing.set_forkserver_preload(["__main__", *PRELOAD, *modules])
    try:
        forkserver.ensure_running()
        _ours = True
    except Exception:  # no AF_UNIX sockets, no fork: the launch uses spawn
        _ours = False
    finally:
        # The preload list is read at start only; a later server (the caller's own) gets
        # the caller's list again.
        multiprocessing.set_forkserver_preload(previous)


def _noop() -> None:
    """A process that does nothing: proves the server forks (module level: pickled by name)."""


def _fork_one(result: list[int | None]) -> None:
    with contextlib.suppress(Exception):  # a dead server: no exit code, spawn is used
        proc = multiprocessing.get_context(FORKSERVER).Process(target=_noop, daemon=True)
        proc.start()  # blocks until the server has forked, i.e. finished its preload
        proc.join()
        result.append(proc.exitcode)


def start_method(modules: tuple[str, ...], timeout_s: float) -> str:
    """The start method for this launch's ranks: forkserver once the server has forked one
    process (so its preload is done and it works), else spawn.

    Starting a process blocks until the server forks it, after its import of torch: that
    wait runs in a thread bounded by ``timeout_s`` (what is left of the deadline), and a
    server that has not forked by then is killed, so a hung import cannot hang the launch.
    """
    prestart(modules)
    if _server_pid() is None:
        return SPAWN
    result: list[int | None] = []
    t = threading.Thread(target=_fork_one, args=(result,), daemon=True,
                         name="ddpdoctor-zygote-ready")
    t.start()
    t.join(max(0.1, timeout_s))
    if result == [0]:
        return FORKSERVER
    stop()  # its pending fork request fails with the server: the thread ends
    return SPAWN


def stop() -> None:
    """End the server this module started, bounded: call it once the ranks are gone.

    multiprocessing's own ``_stop`` waits until every process forked from the server has
    closed its end of the server's pipe, which a rank that escaped the kill would never do;
    so the server is SIGKILLed first (it holds no state), and ``_stop`` (which reaps it and
    resets the module's state) gets a few seconds in a thread of its own.
    """
    global _ours
    pid = _server_pid()
    if not _ours or pid is None:
        return
    _ours = False
    with contextlib.suppress(OSError):
        os.kill(pid, signal.SIGKILL)
    stopper = getattr(forkserver._forkserver, "_stop", None)
    if stopper is not None:
        t = threading.Thread(target=_quietly, args=(stopper,), daemon=True,
                             name="ddpdoctor-zygote-stop")
        t.start()
        t.join(STOP_TIMEOUT_S)


def _quietly(fn) -> None:
    with contextlib.suppress(Exception):
        fn()
