"""The CPU time of a rank's background threads, which is not its work (the edge: /proc).

A rank that sleeps forever still runs background threads: the watch's (a heartbeat a
second, the Flight Recorder dump that run itself asks for when it looks at the stacks) and
gloo's network event loops (~0.01 s of CPU a second each, measured on a sleeping rank).
Counted as the rank's work, that CPU made run call a hung rank "still working" now and
then (CI: test_run_catches_hang[compute] named the hang one look late). The watch names
its threads (contract.OWN_THREAD_PREFIX, threadname.py); gloo names its own. This module
sums their CPU so that the callers can take it out.
"""

from __future__ import annotations

import os
import time

from ddpdoctor.core.contract import OWN_THREAD_PREFIX

_TICK_S = 1.0 / (os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100)
# thread names (comm) that are not work: ours, and gloo's event loops as torch 2.13 names
# them (read from /proc/PID/task/*/comm of a gloo rank here). Not NCCL's: unverified.
_BACKGROUND = (OWN_THREAD_PREFIX.encode(), b"gloo_tcp_loop", b"pt_gloo_runloop")
_RECHECK_S = 10.0  # a thread read before it named itself is read again after this long


class BackgroundThreads:
    """Which threads of a process are background threads (each thread's name read once)."""

    def __init__(self) -> None:
        self._background: set[tuple[int, int]] = set()
        self._work_seen_at: dict[tuple[int, int], float] = {}

    def cpu_s(self, pid: int) -> float:
        """User + system seconds of ``pid``'s background threads; 0.0 when /proc cannot
        be read (not Linux, the process gone)."""
        task = f"/proc/{pid}/task"
        try:
            tids = os.listdir(task)
        except OSError:
            return 0.0
        total = 0.0
        now = time.monotonic()
        for name in tids:
            try:
                key = (pid, int(name))
            except ValueError:
                continue
            if self._is_background(key, f"{task}/{name}", now):
                total += _thread_cpu_s(f"{task}/{name}/stat")
        if len(self._background) + len(self._work_seen_at) > 50_000:  # short-lived threads
            self._background.clear()
            self._work_seen_at.clear()
        return total

    def _is_background(self, key: tuple[int, int], task_dir: str, now: float) -> bool:
        if key in self._background:
            return True
        seen = self._work_seen_at.get(key)
        if seen is not None and now - seen < _RECHECK_S:
            return False
        if _named_background(task_dir):
            self._background.add(key)
            self._work_seen_at.pop(key, None)
            return True
        self._work_seen_at[key] = now
        return False


def _named_background(task_dir: str) -> bool:
    try:
        with open(f"{task_dir}/comm", "rb") as f:
            return f.read(32).startswith(_BACKGROUND)
    except OSError:
        return False


def _thread_cpu_s(stat_path: str) -> float:
    """utime + stime of one thread (fields 14 and 15 of /proc/.../stat)."""
    try:
        with open(stat_path, "rb") as f:
            data = f.read(1024)
    except OSError:
        return 0.0
    # the name (field 2) may hold spaces and parentheses: split after its last ')'
    rest = data[data.rfind(b")") + 2:].split()
    try:
        return (int(rest[11]) + int(rest[12])) * _TICK_S
    except (IndexError, ValueError):
        return 0.0
