"""Find every rank process from the PIDs a user gives: a launcher, any parent, or ranks.

Only processes proven to be ranks are returned (``rankproof``): a Python process with the
rank variables in its environment (torchrun, torch.distributed.run, deepspeed, accelerate
and MPI launchers set them before exec), never a launcher, never ddpdoctor itself or its
ancestors. Python descendants with the same rank variables are its DataLoader (or other)
workers. The targets that are no rank and hold none are left out with the reason; when no
rank remains, attach stops (exit 3) with that reason instead of reading anyone's stack.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from ddpdoctor.attach.rankproof import (
    ProcFacts,
    RankMark,
    argv_mark,
    is_python,
    launcher_name,
    own_lineage,
    rank_mark,
    why_no_ranks_under,
)
from ddpdoctor.attach.spawned import UNKNOWN, SpawnedRanks, find_spawned
from ddpdoctor.core import contract as C
from ddpdoctor.core.errors import DoctorError
from ddpdoctor.core.report import EXIT_DOCTOR_FAILED, EXIT_USAGE


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
    # The variable that numbers it ("env": RANK or its MPI spelling; "local_rank"),
    # "command_line" (`--rank N` beside a world size or an init method, no variable), or
    # "order" (only WORLD_SIZE set: numbered in PID order after the numbered ones).
    rank_source: str = "env"
    cmdline: str = ""
    heartbeat_dir: str = ""  # DDPDOCTOR_HEARTBEAT_DIR: its step count, from the watch
    rank_detail: str = ""  # what said which rank it is, where no launcher's variable did


@dataclass
class Discovery:
    ranks: list[RankProcess]
    world_size: int | None = None
    # Ranks expected on this machine with no live process (exited, killed).
    missing: list[int] = field(default_factory=list)
    zombies: dict[int, int] = field(default_factory=dict)  # rank -> pid, where known
    notes: list[str] = field(default_factory=list)
    left_out: dict[int, str] = field(default_factory=dict)  # target pid -> why no rank


def _describe(proc) -> str:
    import psutil

    try:
        return f"{proc.name()}: {' '.join(proc.cmdline())[:80]}"
    except psutil.Error:
        return "?"


def _roots(pids: list[int]) -> list:
    import psutil

    roots = []
    for pid in dict.fromkeys(pids):
        try:
            roots.append(psutil.Process(pid))
        except psutil.NoSuchProcess:
            raise AttachError(f"no such process: PID {pid}", EXIT_USAGE) from None
        except psutil.AccessDenied:
            raise AttachError(f"no permission to inspect PID {pid}") from None
    return roots


def _tree(roots: list) -> tuple[dict, dict[int, list[int]]]:
    """Every process at or under the roots, and each root's descendants."""
    import psutil

    seen = {}
    below: dict[int, list[int]] = {}
    for root in roots:
        seen[root.pid] = root
        try:
            kids = root.children(recursive=True)
        except psutil.Error:
            kids = []
        below[root.pid] = [k.pid for k in kids]
        for child in kids:
            seen.setdefault(child.pid, child)
    return seen, below


def _facts(proc, lineage: dict[int, str]) -> ProcFacts:
    """What proves (or disproves) that ``proc`` is a rank; its own lineage is not read."""
    import psutil

    if proc.pid in lineage:
        return ProcFacts(proc.pid, lineage=lineage[proc.pid])
    names, cmd = [], []
    try:
        names.append(os.path.basename(proc.exe()))
    except (psutil.Error, OSError):
        pass
    try:
        cmd = proc.cmdline()
    except (psutil.Error, OSError):
        pass
    names += [os.path.basename(cmd[0])] if cmd else []
    base = {"pid": proc.pid, "launcher": launcher_name(cmd), "python": is_python(names)}
    try:
        if proc.status() == psutil.STATUS_ZOMBIE:
            return ProcFacts(**base, env="zombie")
        return ProcFacts(**base, mark=rank_mark(proc.environ()) or argv_mark(cmd))
    except psutil.ZombieProcess:
        return ProcFacts(**base, env="zombie")
    except psutil.NoSuchProcess:
        return ProcFacts(**base, env="gone")
    except (psutil.AccessDenied, PermissionError):
        return ProcFacts(**base, env="denied")


def discover(pids: list[int]) -> Discovery:
    """Rank processes under/at ``pids``. Raises AttachError with a one-line reason: exit 2
    for a PID that does not exist, 3 when no rank is found there."""
    roots = _roots(pids)
    seen, below = _tree(roots)
    lineage = own_lineage()
    facts = {pid: _facts(proc, lineage) for pid, proc in seen.items()}
    candidates = {pid for pid, f in facts.items() if f.is_rank}

    disc = Discovery(ranks=[])
    _ranks_from_marks(disc, seen, facts, candidates)
    spawned = find_spawned(seen, facts, candidates)
    _ranks_from_claims(disc, seen, facts, spawned)
    candidates |= set(spawned.claims)
    if not disc.ranks:
        unread = (f"; {len(spawned.unknown)} multiprocessing child(ren) under it (PIDs "
                  f"{spawned.unknown[:8]}): {UNKNOWN}") if spawned.unknown else ""
        raise AttachError(_no_ranks(roots, facts, below) + unread, EXIT_DOCTOR_FAILED)
    _leave_out(disc, roots, facts, below, candidates)
    _find_missing(disc, [p for p, f in facts.items() if f.env == "zombie"])
    denied = sorted(p for p, f in facts.items() if f.env == "denied")
    if denied:
        disc.notes.append(f"could not read the environment of PIDs {denied[:8]} "
                          "(permission): they were left out")
    return disc


def _no_ranks(roots: list, facts: dict[int, ProcFacts], below: dict[int, list[int]]) -> str:
    """One line: at which PIDs no rank was found, and why not at each."""
    def why(root) -> str:
        under = [facts[p] for p in below[root.pid] if p in facts]
        return f"{facts[root.pid].why_not()}; {why_no_ranks_under(under)}"

    if len(roots) == 1:
        return (f"no training ranks found at PID {roots[0].pid} ({_describe(roots[0])}): "
                f"{why(roots[0])}")
    return (f"no training ranks found at PIDs {', '.join(str(r.pid) for r in roots)}: "
            + "; ".join(f"PID {r.pid}: {why(r)}" for r in roots[:4]))


def _leave_out(disc: Discovery, roots: list, facts: dict[int, ProcFacts],
               below: dict[int, list[int]], candidates: set[int]) -> None:
    """Targets with no rank at or under them: left out, each with its reason."""
    for root in roots:
        if root.pid in candidates or candidates.intersection(below[root.pid]):
            continue
        under = [facts[p] for p in below[root.pid] if p in facts]
        why = f"{facts[root.pid].why_not()}; {why_no_ranks_under(under)}"
        disc.left_out[root.pid] = why
        disc.notes.append(f"PID {root.pid} left out, no rank: {why}")


def _marks(facts: dict[int, ProcFacts], candidates: set[int]) -> dict[int, RankMark]:
    """The candidates' marks: each is a rank (ProcFacts.is_rank), so its mark is set."""
    return {pid: m for pid in candidates if (m := facts[pid].mark) is not None}


def _ranks_from_marks(disc: Discovery, seen: dict, facts: dict[int, ProcFacts],
                      candidates: set[int]) -> None:
    import psutil

    marks = _marks(facts, candidates)

    def has_ancestor_with_same_mark(pid: int) -> bool:
        """A forked worker inherits its rank's environment: same variables, Python parent."""
        mark = marks[pid]
        try:
            parent = seen[pid].parent()
            while parent is not None:
                if parent.pid in candidates and marks[parent.pid].identity == mark.identity:
                    return True
                parent = parent.parent()
        except psutil.Error:
            pass
        return False

    tops = [pid for pid in sorted(candidates) if not has_ancestor_with_same_mark(pid)]
    numbered = [(p, n) for p in tops if (n := marks[p].number) is not None]
    unnumbered = [p for p in tops if marks[p].number is None]
    by_rank: dict[int, RankProcess] = {}
    for pid, number in numbered:
        mark = marks[pid]
        if number in by_rank:
            disc.notes.append(f"{mark.source}={number} is set in PIDs "
                              f"{by_rank[number].pid} and {pid} (two jobs?): using "
                              f"{by_rank[number].pid}")
            continue
        by_rank[number] = rp = _rank_process(number, pid, seen, facts, mark.numbered_by)
        rp.rank_detail = mark.argv
    free = (n for n in range(len(by_rank) + len(unnumbered)) if n not in by_rank)
    for pid in unnumbered:
        n = next(free)
        by_rank[n] = _rank_process(n, pid, seen, facts, "order")
    disc.ranks = [by_rank[r] for r in sorted(by_rank)]
    if any(r.rank_source == "local_rank" for r in disc.ranks):
        disc.notes.append("no RANK in some ranks' environment: numbered by LOCAL_RANK (the "
                          "job's rank on one node; may differ across nodes)")
    if unnumbered:
        disc.notes.append("only WORLD_SIZE in some ranks' environment: numbered in PID order, "
                          "which may not match the job's own rank numbers")
    sizes = {r.world_size for r in disc.ranks if r.world_size}
    disc.world_size = max(sizes) if sizes else None


def _ranks_from_claims(disc: Discovery, seen: dict, facts: dict[int, ProcFacts],
                       spawned: SpawnedRanks) -> None:
    """multiprocessing children numbered by the rank read from them (attach/spawned.py);
    one whose rank could not be read is named as such, never numbered by PID order."""
    by_rank = {r.rank: r for r in disc.ranks}
    for pid, claim in sorted(spawned.claims.items(), key=lambda kv: (kv[1].rank, kv[0])):
        if claim.rank in by_rank:
            disc.notes.append(f"rank {claim.rank} is claimed by PIDs {by_rank[claim.rank].pid} "
                              f"and {pid} ({claim.detail}): using {by_rank[claim.rank].pid}")
            continue
        by_rank[claim.rank] = rp = _rank_process(claim.rank, pid, seen, facts,
                                                 claim.source.value)
        rp.rank_detail = claim.detail
        if claim.spawn_index is not None and rp.local_rank is None:
            rp.local_rank = claim.spawn_index
    disc.ranks = [by_rank[r] for r in sorted(by_rank)]
    if any(c.source.value == "spawn_index" for c in spawned.claims.values()):
        disc.notes.append("some ranks are numbered by mp.spawn's process index (no local "
                          "`rank` could be read): the rank each passes to "
                          "init_process_group may differ")
    for pid in spawned.unknown:
        disc.left_out[pid] = f"a multiprocessing child with no rank variable: {UNKNOWN}"
        disc.notes.append(f"PID {pid} left out: {disc.left_out[pid]}")
    sizes = {r.world_size for r in disc.ranks if r.world_size}
    disc.world_size = max(sizes) if sizes else None


def _rank_process(number: int, pid: int, seen: dict, facts: dict[int, ProcFacts],
                  source: str) -> RankProcess:
    import psutil

    try:
        workers = [c.pid for c in seen[pid].children(recursive=True)]
        env = seen[pid].environ()
    except psutil.Error:
        workers, env = [], {}
    mark = facts[pid].mark or RankMark(None, None, None, None, "")
    return RankProcess(number, pid, mark.local_rank, mark.world_size, mark.local_world_size,
                       env.get(C.FR_DIR, ""), workers, rank_source=source,
                       cmdline=_describe(seen[pid]),
                       heartbeat_dir=env.get(C.HEARTBEAT_DIR, ""))


def _find_missing(disc: Discovery, zombies: list[int]) -> None:
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
