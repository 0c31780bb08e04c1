"""Is the job still moving? Three signals, read from outside the ranks:

- output: any new line from the job (but one traceback printed over and over, and the
  CPU of the rank that prints it: run/repeats.py);
- CPU time: a rank (its process and its DataLoader workers) that used more than
  ``cpu_rate`` of a core since the last sample is working; a rank blocked in a collective,
  asleep or stuck on a lock uses (almost) none;
- heartbeats: ``$DDPDOCTOR_HEARTBEAT_DIR/rank{R}.json`` written by ddpdoctor.watch (step,
  last_progress). Once a rank's heartbeat says training began, it is that rank's signal and
  its CPU time no longer counts: a rank can burn CPU without taking a step (a GPU rank
  spin-waits on a stuck NCCL kernel).

Sampling (psutil, files) is at the edge; :class:`ProgressTracker` is pure.
"""

from __future__ import annotations

import contextlib
import json
import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ddpdoctor.core import safefile
from ddpdoctor.core.oddrank import shared_env
from ddpdoctor.core.proctree import HostProcs
from ddpdoctor.core.rankclaim import argv_rank
from ddpdoctor.run.background_threads import BackgroundThreads
from ddpdoctor.run.rendezvous import RankEndpoint, endpoint_of

if TYPE_CHECKING:
    import psutil

JOB = -1  # the unit when no process carries RANK (a plain script, mp.spawn, startup)
DEFAULT_CPU_RATE = 0.05  # share of one core
# a rank's background threads (the watch's, gloo's event loops): their CPU is not its work;
# one instance for run's sampling and its recheck (run/looks.py): one name cache
BACKGROUND = BackgroundThreads()


@dataclass(frozen=True)
class ProcSample:
    pid: int
    rank: int | None  # RANK in its environment; None for the launcher and non-rank helpers
    cpu_s: float
    created: float
    zombie: bool = False
    top: bool = True  # the rank's own process, not one of its workers
    rss: int = 0  # bytes
    # where it was told to rendezvous (its environment / init_method): run/rendezvous
    rdzv: RankEndpoint | None = None
    env: tuple[tuple[str, str], ...] = ()  # its distributed set-up (oddrank.shared_env)


@dataclass(frozen=True)
class Identity:
    """What a process's environment says, read once per (pid, create time)."""

    rank: int | None
    rdzv: RankEndpoint | None = None
    env: tuple[tuple[str, str], ...] = ()  # the variables every rank of a node shares


@dataclass
class TreeSample:
    time: float
    procs: list[ProcSample] = field(default_factory=list)
    # pid -> monotonic time its process died, stamped as it happened (run/exit_watch.py)
    died: dict[int, float] = field(default_factory=dict)


@dataclass(frozen=True)
class Heartbeat:
    rank: int
    step: int
    last_progress: float
    time: float
    phase: str = ""
    status: str = ""

    @property
    def training(self) -> bool:
        # a paused watch (evaluation, checkpointing) beats without steps: its CPU counts
        return (self.status not in ("closed", "paused")
                and (self.step > 0 or self.phase not in ("", "starting")))


def _identity_of(proc: psutil.Process) -> Identity:
    import psutil

    try:
        env = proc.environ()
    except (psutil.Error, OSError):
        return Identity(None)
    value = env.get("RANK")
    try:
        rank = int(value) if value is not None else None
    except ValueError:
        return Identity(None)
    try:
        cmdline = proc.cmdline()
    except (psutil.Error, OSError):
        cmdline = []
    if rank is None:  # one `python main.py --rank N --world-size W` per rank, no launcher
        said = argv_rank(cmdline)
        rank = said.number if said is not None else None
    if rank is None:
        return Identity(None)
    return Identity(rank, endpoint_of(env, cmdline), shared_env(env))


def sample_tree(root_pid: int, now: float, rank_cache: dict[tuple[int, float], Identity],
                host: HostProcs | None = None) -> TreeSample:
    """CPU time, RANK and rendezvous endpoint of the root and every descendant
    (environments read once); ``host``: this poll's one walk of the host's processes."""
    import psutil

    sample = TreeSample(now)
    host = host or HostProcs.read()
    if root_pid not in host.parent:
        return sample
    procs: list[psutil.Process] = []
    for pid in (root_pid, *host.descendants(root_pid)):
        with contextlib.suppress(psutil.Error):
            procs.append(psutil.Process(pid))
    pids = {p.pid for p in procs}
    ranks: dict[int, int | None] = {}
    rdzv: dict[int, RankEndpoint | None] = {}
    envs: dict[int, tuple[tuple[str, str], ...]] = {}
    rows = []
    for p in procs:
        try:
            with p.oneshot():
                created = p.create_time()
                zombie = p.status() == psutil.STATUS_ZOMBIE
                t = p.cpu_times()
                cpu = t.user + t.system
                ppid = p.ppid()
                rss = 0 if zombie else p.memory_info().rss
        except psutil.Error:
            continue
        key = (p.pid, created)
        if key not in rank_cache:
            rank_cache[key] = Identity(None) if zombie else _identity_of(p)
        ident = rank_cache[key]
        ranks[p.pid], rdzv[p.pid], envs[p.pid] = ident.rank, ident.rdzv, ident.env
        if ranks[p.pid] is not None and not zombie:
            cpu = max(0.0, cpu - BACKGROUND.cpu_s(p.pid))
        rows.append((p.pid, cpu, created, zombie, ppid, rss))
    for pid, cpu, created, zombie, ppid, rss in rows:
        rank = ranks[pid]
        top = not (ppid in pids and ranks.get(ppid) is not None and ranks.get(ppid) == rank)
        sample.procs.append(ProcSample(pid, rank, cpu, created, zombie, top, rss,
                                       rdzv[pid], envs[pid]))
    return sample


def read_heartbeats(directory: str, not_before: float) -> dict[int, Heartbeat]:
    """Heartbeats written since ``not_before`` (wall time); unreadable files are skipped."""
    out: dict[int, Heartbeat] = {}
    try:
        names = os.listdir(directory)
    except OSError:
        return out
    for name in names:
        if not (name.startswith("rank") and name.endswith(".json")):
            continue
        try:
            # never through a link, never blocking on a FIFO planted in the directory
            fd = safefile.open_regular(os.path.join(directory, name), os.O_RDONLY)
            with os.fdopen(fd, "rb") as f:
                data = json.loads(f.read(1 << 20))
            hb = Heartbeat(int(data["rank"]), int(data.get("step") or 0),
                           float(data.get("last_progress") or 0), float(data.get("time") or 0),
                           str(data.get("phase") or ""), str(data.get("status") or ""))
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            continue
        if hb.time >= not_before:
            out[hb.rank] = hb
    return out


@dataclass
class RankExit:
    rank: int
    pid: int
    time: float  # monotonic, when the sampler first saw it gone
    died: float | None = None  # monotonic, when it died, where run/exit_watch.py saw it


def _died(pids: set[int], died: dict[int, float]) -> float | None:
    """When a rank went away: its last process's death, known only if each was stamped."""
    times = [died[p] for p in pids if p in died]
    return max(times) if times and len(times) == len(pids) else None


class ProgressTracker:
    """Pure: samples in, "how long since anything moved" out (monotonic seconds)."""

    def __init__(self, now: float, cpu_rate: float = DEFAULT_CPU_RATE) -> None:
        self.cpu_rate = cpu_rate
        self.last_progress = now
        self.last_what = "start"
        self.rank_last: dict[int, float] = {}
        self.exits: list[RankExit] = []
        self._lines = 0
        self._prev: TreeSample | None = None
        self._hb: dict[int, tuple[int, float]] = {}
        self.step = 0  # the highest step a rank's heartbeat reported
        self._rank_pids: dict[int, set[int]] = {}
        self._live_pids: dict[int, set[int]] = {}  # the ranks' processes in the last sample
        # each rank's distributed set-up as its process was first seen (oddrank.py)
        self.rank_env: dict[int, dict[str, str]] = {}
        # unit -> last time it used CPU, heartbeat or not: a quiet rank that still works
        # (an evaluation, a checkpoint save) is not hung (hang/verdict.py)
        self.cpu_last: dict[int, float] = {}
        # rank -> the rendezvous endpoint its process was given (run/rendezvous.py)
        self.endpoints: dict[int, RankEndpoint] = {}

    def update(self, now: float, lines: int, sample: TreeSample,
               heartbeats: dict[int, Heartbeat] | None = None,
               looping: frozenset[int] = frozenset()) -> None:
        """``lines``: the job's output lines that show it moving; ``looping``: the ranks
        printing one traceback over and over (run/repeats.py), whose CPU is that loop's."""
        heartbeats = heartbeats or {}
        if lines != self._lines:
            self._lines = lines
            self._moved(now, "output", None)
        hb_ranks = {r for r, hb in heartbeats.items() if hb.training}
        for r, hb in heartbeats.items():
            self.step = max(self.step, hb.step)
            mark = (hb.step, hb.last_progress)
            if self._hb.get(r) != mark:
                if r in self._hb:
                    self._moved(now, f"heartbeat of rank {r} (step {hb.step})", r)
                self._hb[r] = mark
        for unit, rate in self._cpu_rates(sample).items():
            if rate < self.cpu_rate or unit in looping:
                continue
            self.cpu_last[unit] = now
            if unit in hb_ranks:
                continue
            who = "the job" if unit == JOB else f"rank {unit}"
            self._moved(now, f"CPU time of {who} ({rate:.0%} of a core)",
                        None if unit == JOB else unit)
        self._track_exits(now, sample)
        self._prev = sample

    def stalled_for(self, now: float) -> float:
        return max(0.0, now - self.last_progress)

    def active_ranks(self, now: float, window: float) -> set[int]:
        """Units (ranks, or JOB) that used CPU within the last ``window`` seconds."""
        return {u for u, t in self.cpu_last.items() if now - t <= window}

    def _moved(self, now: float, what: str, rank: int | None) -> None:
        self.last_progress = now
        self.last_what = what
        if rank is not None:
            self.rank_last[rank] = now

    def _cpu_rates(self, sample: TreeSample) -> dict[int, float]:
        """CPU share per unit since the previous sample; new processes count from zero."""
        prev = self._prev
        if prev is None or sample.time <= prev.time:
            return {}
        before = {(p.pid, p.created): p.cpu_s for p in prev.procs}
        any_rank = any(p.rank is not None for p in sample.procs)
        used: dict[int, float] = {}
        for p in sample.procs:
            if any_rank and p.rank is None:
                continue  # the launcher's own polling is not the training's progress
            unit = p.rank if any_rank and p.rank is not None else JOB
            delta = p.cpu_s - before.get((p.pid, p.created), 0.0)
            used[unit] = used.get(unit, 0.0) + max(0.0, delta)
        dt = sample.time - prev.time
        return {u: c / dt for u, c in used.items()}

    @property
    def rank_pids(self) -> dict[int, int]:
        """Each rank seen so far and its process's pid: a live one where the rank lives
        (after a restart, the new attempt's, not the dead one's), else the lowest seen."""
        return {r: min(self._live_pids.get(r) or p) for r, p in self._rank_pids.items() if p}

    def _track_exits(self, now: float, sample: TreeSample) -> None:
        live: dict[int, set[int]] = {}
        for p in sample.procs:
            if p.rank is not None and p.top and not p.zombie:
                live.setdefault(p.rank, set()).add(p.pid)
                self.rank_env.setdefault(p.rank, dict(p.env))
                if p.rdzv is not None:
                    self.endpoints[p.rank] = p.rdzv
        self._live_pids = live
        gone_already = {e.rank for e in self.exits}
        for rank, pids in self._rank_pids.items():
            if rank not in live and rank not in gone_already:
                self.exits.append(RankExit(rank, min(pids), now))
        for e in self.exits:  # a death is stamped by another thread: maybe a poll later
            if e.died is None and e.rank not in live:
                e.died = _died(self._rank_pids.get(e.rank, set()), sample.died)
        for rank, pids in live.items():
            self._rank_pids.setdefault(rank, set()).update(pids)
