"""Ranks that no launcher numbered: the children of ``torch.multiprocessing.spawn`` and
``multiprocessing.Process`` (their environment has no ``RANK``; their rank is an argument).

A Python child that multiprocessing started (``--multiprocessing-fork`` on its command
line, or a fork: its parent's command line) under the target, with no rank variable and
no proven rank above it, is read once: the watch's heartbeat / Flight Recorder file for
its pid, else its main thread's locals with py-spy (``ddpdoctor/core/rankclaim.py``). Only a
child whose rank is read this way is a rank; the others are left out with the reason
(never numbered by PID order).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ddpdoctor.attach.rankproof import ProcFacts
from ddpdoctor.core.rankclaim import RankClaim, is_mp_child, resolve

UNKNOWN = ("its rank could not be established: no watch heartbeat or Flight Recorder "
           "file names its pid, and its main thread has no local `rank` and no mp.spawn "
           "index (py-spy --locals)")


@dataclass
class SpawnedRanks:
    claims: dict[int, RankClaim] = field(default_factory=dict)  # pid -> its rank
    unknown: list[int] = field(default_factory=list)  # mp children with no rank read


def _cmdline(proc) -> list[str]:  # psutil.Process
    import psutil

    try:
        return list(proc.cmdline())
    except (psutil.Error, OSError):
        return []


def _below_any(proc, pids: set[int]) -> bool:
    import psutil

    try:
        return any(p.pid in pids for p in proc.parents())
    except psutil.Error:
        return False


def _unmarked_python(f: ProcFacts) -> bool:
    return (f.python and f.env == "read" and not f.lineage and not f.launcher
            and f.mark is None)


def find_spawned(seen: dict, facts: dict[int, ProcFacts], ranked: set[int],
                 timeout: float = 2.0) -> SpawnedRanks:
    """The multiprocessing children among ``seen`` (pid -> psutil.Process) that are not
    under a rank already proven (``ranked``: their workers), each with its rank read."""
    import psutil

    out = SpawnedRanks()
    taken: set[int] = set(ranked)
    for pid in sorted(seen):  # parents before children on one host, near enough
        proc = seen[pid]
        if not _unmarked_python(facts[pid]) or _below_any(proc, taken):
            continue
        try:
            parent = proc.parent()
            parent_cmd = _cmdline(parent) if parent is not None else []
            if not is_mp_child(_cmdline(proc), parent_cmd):
                continue
            claim = resolve(pid, proc.create_time(), proc.environ(), timeout)
        except psutil.Error:
            continue
        taken.add(pid)  # its own children are its workers, whatever it is
        if claim is None:
            out.unknown.append(pid)
        else:
            out.claims[pid] = claim
    return out
