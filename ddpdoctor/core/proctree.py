"""Process trees: every process on the host read in one walk, and killing a whole job.

torchrun starts each rank in a session of its own, so signalling torchrun's process group
leaves the ranks running; the tree is collected first (children are reparented to init
once their parent dies), then killed.

Finding a process's descendants reads the parent of every process on the host
(``psutil.Process.children`` does so on each call). A supervisor that asked once per
process of its job paid (job processes) x (host processes) reads a poll: 30 ms a poll at
61 job processes on a 525-process host (docs/benchmarks.md). :class:`HostProcs` reads
the host once and answers every descendants question of that poll from memory.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Mapping
from dataclasses import dataclass, field


@dataclass(frozen=True)
class HostProcs:
    """Every process on the host at one moment: its parent and start time (epoch
    seconds, as psutil gives them), read in one walk of ``/proc``."""

    parent: Mapping[int, int]
    created: Mapping[int, float]
    children_of: Mapping[int, tuple[int, ...]] = field(repr=False)

    @classmethod
    def read(cls) -> HostProcs:
        import psutil

        parent: dict[int, int] = {}
        created: dict[int, float] = {}
        # one stat read per process (oneshot inside process_iter gives both values)
        for p in psutil.process_iter(["ppid", "create_time"]):
            ppid, ctime = p.info["ppid"], p.info["create_time"]
            if ppid is None or ctime is None:
                continue  # gone during the walk, or not ours to read
            parent[p.pid], created[p.pid] = ppid, ctime
        return cls.build(parent, created)

    @classmethod
    def build(cls, parent: Mapping[int, int], created: Mapping[int, float]) -> HostProcs:
        kids: dict[int, list[int]] = {}
        for pid, ppid in parent.items():
            if ppid != pid:
                kids.setdefault(ppid, []).append(pid)
        return cls(dict(parent), dict(created),
                   {pid: tuple(sorted(c)) for pid, c in kids.items()})

    def descendants(self, pid: int) -> list[int]:
        """Every descendant of ``pid``, parents before their children."""
        out: list[int] = []
        todo = list(self.children_of.get(pid, ()))
        seen = {pid}
        while todo:
            child = todo.pop(0)
            if child in seen:  # a pid reused mid-walk cannot make a loop
                continue
            seen.add(child)
            out.append(child)
            todo += self.children_of.get(child, ())
        return out


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
