"""Restart attempts of an elastic job (``torchrun --max-restarts N``, elastic agents).

torchrun's agent restarts the whole worker group when a rank fails and restarts are left:
it SIGTERMs the other ranks, logs ``failed (exitcode: 1) local_rank: 1 (pid: P) of binary``
(WARNING level: its INFO "will restart worker group" line is not shown by default) and
starts new rank processes whose environment holds ``TORCHELASTIC_RESTART_COUNT=k``. So run
tells attempts apart by that variable of each rank process (read once per process); where
an agent sets none, a rank seen again under a new pid after its process exited starts the
next attempt. Each attempt keeps its rank pids, the output line where it began and the
order its ranks went away: the report's one section per attempt (run/attempt_report.py).

:class:`Attempts` is pure (samples in); :func:`restart_count` is the edge.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from ddpdoctor.run.progress import RankExit

RESTART_VAR = "TORCHELASTIC_RESTART_COUNT"
MAX_RESTARTS_VAR = "TORCHELASTIC_MAX_RESTARTS"
# torchrun's agent, when a worker fails (torch/distributed/elastic/multiprocessing/api.py)
AGENT_FAILED = re.compile(r"failed \(exitcode: (-?\d+)\) local_rank: (\d+) \(pid: (\d+)\)")


@dataclass(frozen=True)
class RankProc:
    """A rank's own process in one sample (no workers, no zombies)."""

    pid: int
    rank: int
    attempt: int | None  # TORCHELASTIC_RESTART_COUNT in its environment, if any


@dataclass
class Attempt:
    number: int
    started: float  # monotonic: when its first rank process was seen
    first_line: int  # lines of output before it
    pids: dict[int, int] = field(default_factory=dict)  # rank -> pid
    exits: list[RankExit] = field(default_factory=list)  # in the order they went away
    max_restarts: int | None = None

    def rank_of_pid(self, pid: int) -> int | None:
        return next((r for r, p in self.pids.items() if p == pid), None)


class Attempts:
    """Every attempt seen, from per-poll samples of the ranks' own processes."""

    def __init__(self) -> None:
        self.attempts: list[Attempt] = []
        self._where: dict[int, Attempt] = {}  # pid -> its attempt
        self._live: set[int] = set()
        self._exited: set[int] = set()  # ranks whose process went away (no-variable case)

    def observe(self, now: float, lines: int, procs: list[RankProc],
                max_restarts: int | None = None, died: dict[int, float] | None = None
                ) -> None:
        live = {p.pid for p in procs}
        for p in procs:
            if p.pid not in self._where:
                self._add(now, lines, p, max_restarts)
        for pid in sorted(self._live - live):
            att = self._where[pid]
            rank = att.rank_of_pid(pid)
            if rank is not None:
                att.exits.append(RankExit(rank, pid, now))
                self._exited.add(rank)
        for att in self.attempts:  # a death is stamped by another thread: maybe later
            for e in att.exits:
                e.died = e.died if e.died is not None else (died or {}).get(e.pid)
        self._live = live

    def _add(self, now: float, lines: int, p: RankProc, max_restarts: int | None) -> None:
        number = p.attempt if p.attempt is not None else self._next_number(p.rank)
        att = next((a for a in self.attempts if a.number == number), None)
        if att is None:
            att = Attempt(number, now, lines, max_restarts=max_restarts)
            self.attempts.append(att)
            self.attempts.sort(key=lambda a: a.number)
            self._exited.clear()
        att.pids.setdefault(p.rank, p.pid)
        self._where[p.pid] = att

    def _next_number(self, rank: int) -> int:
        """No restart variable: the same rank again after its process went away is the
        next attempt; otherwise the newest attempt."""
        if not self.attempts:
            return 0
        newest = self.attempts[-1]
        return newest.number + 1 if rank in self._exited or rank in newest.pids \
            else newest.number

    @property
    def restarted(self) -> bool:
        return len(self.attempts) > 1


@dataclass(frozen=True)
class AgentExit:
    """One worker failure as torchrun's agent logged it."""

    exit_code: int  # negative: killed by that signal
    local_rank: int
    pid: int


def agent_exits(lines: list[str]) -> list[AgentExit]:
    """torchrun's "failed (exitcode: X) local_rank: L (pid: P)" lines, in order (pure)."""
    out = []
    for line in lines:
        m = AGENT_FAILED.search(line)
        if m:
            out.append(AgentExit(int(m.group(1)), int(m.group(2)), int(m.group(3))))
    return out


def restart_count(pid: int, cache: dict[int, tuple[int | None, int | None]]
                  ) -> tuple[int | None, int | None]:
    """(TORCHELASTIC_RESTART_COUNT, TORCHELASTIC_MAX_RESTARTS) of a process, read once."""
    if pid in cache:
        return cache[pid]
    import psutil

    try:
        env = psutil.Process(pid).environ()
    except (psutil.Error, OSError):
        return None, None  # not cached: tried again next poll

    def num(name: str) -> int | None:
        try:
            return int(env[name])
        except (KeyError, ValueError):
            return None

    cache[pid] = (num(RESTART_VAR), num(MAX_RESTARTS_VAR))
    return cache[pid]


def observe_sample(attempts: Attempts, sample: object, now: float, lines: int,
                   cache: dict[int, tuple[int | None, int | None]]) -> None:
    """Feed one poll's sample (run/progress.TreeSample): its ranks' own live processes."""
    procs, most = [], None
    for p in getattr(sample, "procs", ()):
        if p.rank is None or not p.top or p.zombie:
            continue
        count, max_restarts = restart_count(p.pid, cache)
        most = max_restarts if max_restarts is not None else most
        procs.append(RankProc(p.pid, p.rank, count))
    attempts.observe(now, lines, procs, most, getattr(sample, "died", None))
