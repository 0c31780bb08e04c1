"""Killing a whole job: a process, its process group and every descendant.

torchrun starts each rank in a session of its own, so signalling torchrun's process group
leaves the ranks running; the tree is collected first (children are reparented to init
once their parent dies), then killed.
"""

from __future__ import annotations

import os
import signal


def kill_tree(pid: int, sig: int = signal.SIGKILL) -> None:
    import psutil

    try:
        procs = psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        procs = []
    for p in procs:
        try:
            p.send_signal(sig)
        except psutil.NoSuchProcess:
            pass
    try:
        os.killpg(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass
