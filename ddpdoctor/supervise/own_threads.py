"""The CPU time of ddpdoctor's own threads inside a rank (the edge: /proc).

A rank that sleeps forever still runs the watch's threads: a heartbeat a second, and the
Flight Recorder dump that run itself asks for when it looks at the stacks. Counted as the
rank's work, that CPU made run call a hung rank "still working" now and then (CI, issue
#18's notes). The watch names its threads (contract.OWN_THREAD_PREFIX, threadname.py);
this module sums their CPU so the callers can take it out.
"""

from __future__ import annotations

import os
import time

from ddpdoctor.contract import OWN_THREAD_PREFIX

_TICK_S = 1.0 / (os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100)
_PREFIX = OWN_THREAD_PREFIX.encode()
_RECHECK_S = 10.0  # a thread read before it named itself is read again after this long


class OwnThreads:
    """Which threads of a process are ours (each thread's name read once)."""

    def __init__(self) -> None:
        self._ours: dict[tuple[int, int], bool] = {}
        self._not_ours_at: dict[tuple[int, int], float] = {}

    def cpu_s(self, pid: int) -> float:
        """User + system seconds of ``pid``'s threads named OWN_THREAD_PREFIX*; 0.0 when
        /proc cannot be read (not Linux, the process gone)."""
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
            if self._is_ours(key, f"{task}/{name}", now):
                total += _thread_cpu_s(f"{task}/{name}/stat")
        if len(self._ours) + len(self._not_ours_at) > 50_000:  # many short-lived threads
            self._ours.clear()
            self._not_ours_at.clear()
        return total

    def _is_ours(self, key: tuple[int, int], task_dir: str, now: float) -> bool:
        if key in self._ours:
            return True
        seen = self._not_ours_at.get(key)
        if seen is not None and now - seen < _RECHECK_S:
            return False
        if _named_ours(task_dir):
            self._ours[key] = True
            self._not_ours_at.pop(key, None)
            return True
        self._not_ours_at[key] = now
        return False


def _named_ours(task_dir: str) -> bool:
    try:
        with open(f"{task_dir}/comm", "rb") as f:
            return f.read(32).startswith(_PREFIX)
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
