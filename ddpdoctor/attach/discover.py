"""Find every rank process from the PIDs a user gives: a launcher, any parent, or ranks.

A rank is the topmost Python process carrying ``RANK`` in its environment (torchrun,
torch.distributed.run, deepspeed, accelerate and Slurm wrappers all set it before exec);
Python descendants with the same RANK are its DataLoader (or other) workers.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field

from ddpdoctor import contract as C
from ddpdoctor.errors import DoctorError
from ddpdoctor.report import EXIT_USAGE


class AttachError(DoctorError):
    """Attach cannot go on (the one error type, named for where it is raised)."""


@dataclass
class RankProcess:
    rank: int
    pid: int
    local_rank: int | None = None
    world_size: int | None = None
    local_world_size: int | None = None
    fr_dir: str = ""  # DDPDOCTOR_FR_DIR: where it serves Flight Recorder dumps
    workers: list[int] = field(default_factory=list)  # Python child processes
    rank_source: str = "env"  # "env" (RANK) or "order" (no RANK: numbered as given)
    cmdline: str = ""
    heartbeat_dir: str = ""  # DDPDOCTOR_HEARTBEAT_DIR: its step count, from the watch


@dataclass
class Discovery:
    ranks: list[RankProcess]
    world_size: int | None = None
    # Ranks expected on this machine with no live process (exited, killed).
    missing: list[int] = field(default_factory=list)
    zombies: dict[int, int] = field(default_factory=dict)  # rank -> pid, where known
    notes: list[str] = field(default_factory=list)


_PYTHON = re.compile(r"^(python|pypy)[\d.]*[mtd]*$")


def _int(env: dict[str, str], key: str) -> int | None:
    try:
        return int(env[key])
    except (KeyError, ValueError):
        return None


def _is_python(proc) -> bool:  # psutil.Process, imported lazily
    import psutil

    names = []
    try:
        names.append(os.path.basename(proc.exe()))
    except (psutil.Error, OSError):
        pass
    try:
        cmd = proc.cmdline()
        if cmd:
            names.append(os.path.basename(cmd[0]))
    except (psutil.Error, OSError):
        pass
    return any(_PYTHON.match(n) for n in names)


def _describe(proc) -> str:
    import psutil

    try:
        return f"{proc.name()}: {' '.join(proc.cmdline())[:80]}"
    except psutil.Error:
        return "?"


def _roots(pids: list[int]) -> list:
    import psutil

    roots = []
    for pid in pids:
        try:
            roots.append(psutil.Process(pid))
        except psutil.NoSuchProcess:
            raise AttachError(f"no such process: PID {pid}", EXIT_USAGE) from None
        except psutil.AccessDenied:
            raise AttachError(f"no permission to inspect PID {pid}") from None
    return roots


def _tree(roots: list) -> dict:
    import psutil

    seen = {}
    for root in roots:
        seen[root.pid] = root
        try:
            for child in root.children(recursive=True):
                seen.setdefault(child.pid, child)
        except psutil.Error:
            continue
    return seen


def _environments(seen: dict) -> tuple[dict[int, dict[str, str]], list[int], list[int]]:
    """Each process's environment; the pids denied and the zombies."""
    import psutil

    envs: dict[int, dict[str, str]] = {}
    denied: list[int] = []
    zombies: list[int] = []
    for pid, proc in seen.items():
        try:
            if proc.status() == psutil.STATUS_ZOMBIE:
                zombies.append(pid)
                continue
            envs[pid] = proc.environ()
        except psutil.NoSuchProcess:
            continue
        except (psutil.AccessDenied, PermissionError):
            denied.append(pid)
        except psutil.ZombieProcess:
            zombies.append(pid)
    return envs, denied, zombies


def discover(pids: list[int]) -> Discovery:
    """Rank processes under/at ``pids``. Raises AttachError with a one-line reason."""
    roots = _roots(pids)
    seen = _tree(roots)
    envs, denied, zombies = _environments(seen)
    with_rank = {pid: env for pid, env in envs.items()
                 if _int(env, "RANK") is not None and _is_python(seen[pid])}
    if not with_rank and denied and set(denied) >= {r.pid for r in roots}:
        raise AttachError(f"no permission to read the environment of PID {denied[0]}: "
                          "run ddpdoctor as the job's user or as root")

    disc = Discovery(ranks=[])
    if with_rank:
        _ranks_from_env(disc, seen, with_rank)
    else:
        _ranks_by_order(disc, roots, seen)
    _find_missing(disc, zombies, seen)
    if denied:
        disc.notes.append(f"could not read the environment of PIDs {sorted(denied)[:8]} "
                          "(permission)")
    return disc


def _ranks_from_env(disc: Discovery, seen: dict, with_rank: dict[int, dict[str, str]]) -> None:
    import psutil

    def python_ancestor_with_same_rank(pid: int) -> bool:
        rank = with_rank[pid]["RANK"]
        try:
            parent = seen[pid].parent()
            while parent is not None:
                env = with_rank.get(parent.pid)
                if env is not None and env["RANK"] == rank:
                    return True
                parent = parent.parent()
        except psutil.Error:
            pass
        return False

    tops = [pid for pid in sorted(with_rank) if not python_ancestor_with_same_rank(pid)]
    by_rank: dict[int, RankProcess] = {}
    for pid in tops:
        env = with_rank[pid]
        rank = int(env["RANK"])
        if rank in by_rank:
            disc.notes.append(f"RANK={rank} is set in PIDs {by_rank[rank].pid} and {pid} "
                              f"(two jobs?): using {by_rank[rank].pid}")
            continue
        workers = []
        try:
            workers = [c.pid for c in seen[pid].children(recursive=True)]
        except psutil.Error:
            pass
        by_rank[rank] = RankProcess(
            rank, pid, _int(env, "LOCAL_RANK"), _int(env, "WORLD_SIZE"),
            _int(env, "LOCAL_WORLD_SIZE"), env.get(C.FR_DIR, ""), workers,
            cmdline=_describe(seen[pid]),
            heartbeat_dir=env.get(C.HEARTBEAT_DIR, ""))
    disc.ranks = [by_rank[r] for r in sorted(by_rank)]
    sizes = {r.world_size for r in disc.ranks if r.world_size}
    disc.world_size = max(sizes) if sizes else None


def _ranks_by_order(disc: Discovery, roots: list, seen: dict) -> None:
    """No RANK anywhere (mp.spawn, custom launchers): the given Python processes, or the
    Python children of a given parent, numbered in order."""
    import psutil

    ranks: list = []
    for root in roots:
        try:
            kids = [c for c in root.children() if _is_python(c)]
        except psutil.Error:
            kids = []
        if kids and len(roots) == 1:
            ranks.extend(sorted(kids, key=lambda p: p.pid))
        elif _is_python(root):
            ranks.append(root)
    if not ranks:
        raise AttachError(
            f"PID {roots[0].pid} ({_describe(roots[0])}) is not a Python process and has no "
            "Python processes under it", EXIT_USAGE)
    for i, proc in enumerate(ranks):
        try:
            workers = [c.pid for c in proc.children(recursive=True)]
        except psutil.Error:
            workers = []
        disc.ranks.append(RankProcess(i, proc.pid, workers=workers, rank_source="order",
                                      cmdline=_describe(proc)))
    disc.notes.append("no RANK in the processes' environment: ranks are numbered in PID "
                      "order and may not match the job's own rank numbers")


def _find_missing(disc: Discovery, zombies: list[int], seen: dict) -> None:
    """Ranks this machine should run but that have no live process."""
    present = {r.rank for r in disc.ranks}
    expected: set[int] = set()
    lws = {r.local_world_size for r in disc.ranks if r.local_world_size}
    offsets = {r.rank - r.local_rank for r in disc.ranks if r.local_rank is not None}
    if len(lws) == 1 and len(offsets) == 1:
        # torchrun numbers a node's ranks contiguously from GROUP_RANK * LOCAL_WORLD_SIZE.
        offset = offsets.pop()
        expected = set(range(offset, offset + lws.pop()))
    disc.missing = sorted(expected - present)
    if disc.world_size and expected and len(expected) < disc.world_size:
        disc.notes.append(f"ranks {sorted(expected)} run on this machine; the other "
                          f"{disc.world_size - len(expected)} are on other nodes "
                          "(attach there too)")
    # A zombie child of the launcher is the likeliest body of a missing rank.
    rank_pids = {r.pid for r in disc.ranks}
    orphan_zombies = [z for z in sorted(zombies) if z not in rank_pids]
    if len(orphan_zombies) == len(disc.missing) == 1:
        disc.zombies[disc.missing[0]] = orphan_zombies[0]
