"""run's ranks where no launcher numbered them: mp.spawn / multiprocessing children.

run's sampler (run/progress.py) numbers a process by the ``RANK`` in its environment; the
children of ``torch.multiprocessing.spawn`` have none, so the whole job was one unit and
a crash or hang named no rank. Each poll, before the sample, this fills the sampler's
identity cache for every multiprocessing child of the job (and its workers) with the rank
read from the process itself (``ddpdoctor/core/rankclaim.py``: the watch's heartbeat for its
pid, else py-spy's locals, else mp.spawn's index). A child not yet in its rank function
(importing torch) has no claim yet and is tried again the next poll; a claim from the
spawn index alone is provisional for ``_SETTLE_S`` (the function may not have assigned
its ``rank`` local at the first read). ``index_to_rank`` maps mp.spawn's process index
(what its "-- Process N terminated" lines name) to the real rank.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field

from ddpdoctor.core.proctree import HostProcs
from ddpdoctor.core.rankclaim import RankClaim, RankSource, is_mp_child, resolve
from ddpdoctor.run.progress import Identity
from ddpdoctor.run.rendezvous import endpoint_of

_SETTLE_S = 10.0  # re-read a spawn-index claim this long after the process started
_READ_TIMEOUT_S = 1.0
_MAX_TRIES = 30  # a child that never reveals its rank is not read forever
_EVERY_S = 1.0  # at most one read of a child a second


@dataclass
class _Child:
    created: float
    cmdline: list[str]
    env: dict[str, str]
    claim: RankClaim | None = None
    tries: int = 0
    next_try: float = 0.0  # monotonic
    # a fork (its parent's command line): a DataLoader worker of a plain script looks the
    # same, so it is read only once it holds a TCP connection (a process group's store)
    forked: bool = False


@dataclass
class SpawnRanks:
    """The mp children of one job, by (pid, create time), and the rank each has."""

    children: dict[tuple[int, float], _Child] = field(default_factory=dict)
    not_mp: set[tuple[int, float]] = field(default_factory=set)

    def fill(self, job_pid: int, host: HostProcs, rank_cache: dict) -> None:
        """Put each mp child's rank (and its workers') into run's identity cache."""
        for pid in host.descendants(job_pid):
            key = (pid, host.created.get(pid, -1.0))
            if key in self.not_mp or self._under_child(pid, host):
                continue
            child = self.children.get(key) or self._classify(pid, key, host, rank_cache)
            if child is None:
                continue
            if self._due(child) and (not child.forked or _has_tcp(pid)):
                child.tries += 1
                child.next_try = time.monotonic() + _EVERY_S
                claim = resolve(pid, child.created, child.env, _READ_TIMEOUT_S)
                child.claim = claim if claim is not None else child.claim
            if self._settled(child):
                self._publish(pid, key, child, host, rank_cache)

    def _under_child(self, pid: int, host: HostProcs) -> bool:
        parent = host.parent.get(pid)
        while parent is not None and parent in host.parent and parent != host.parent[parent]:
            if (parent, host.created.get(parent, -1.0)) in self.children:
                return True
            parent = host.parent.get(parent)
        return False

    def _classify(self, pid: int, key: tuple[int, float], host: HostProcs,
                  rank_cache: dict) -> _Child | None:
        import psutil

        cached = rank_cache.get(key)
        try:
            proc = psutil.Process(pid)
            cmd, env = proc.cmdline(), proc.environ()
            ppid = host.parent.get(pid)
            parent_cmd = psutil.Process(ppid).cmdline() if ppid else []
        except (psutil.Error, OSError):
            return None  # gone, or not ours to read: tried again next poll
        if (cached is not None and cached.rank is not None) or "RANK" in env \
                or not is_mp_child(cmd, parent_cmd):
            self.not_mp.add(key)  # a launcher numbered it, or it is no mp child
            return None
        child = self.children[key] = _Child(key[1], cmd, env,
                                            forked=not is_mp_child(cmd))
        return child

    @staticmethod
    def _due(child: _Child) -> bool:
        if child.tries >= _MAX_TRIES or time.monotonic() < child.next_try:
            return False
        if child.claim is None:
            return True
        return (child.claim.source == RankSource.SPAWN_INDEX
                and time.time() - child.created < _SETTLE_S)

    @staticmethod
    def _settled(child: _Child) -> bool:
        """A claim run may number the rank by: a spawn index only once the function had
        time to assign its own rank (a renumbered pid would read as a rank's exit)."""
        if child.claim is None:
            return False
        return (child.claim.source != RankSource.SPAWN_INDEX
                or time.time() - child.created >= _SETTLE_S or child.tries >= _MAX_TRIES)

    @staticmethod
    def _publish(pid: int, key: tuple[int, float], child: _Child, host: HostProcs,
                 rank_cache: dict) -> None:
        assert child.claim is not None
        ident = Identity(child.claim.rank, endpoint_of(child.env, child.cmdline))
        rank_cache[key] = ident
        for worker in host.descendants(pid):  # its DataLoader workers count as it
            rank_cache[(worker, host.created.get(worker, -1.0))] = Identity(child.claim.rank)

    def claims(self) -> dict[int, RankClaim]:
        """pid -> the rank claim of each mp child read so far."""
        return {pid: c.claim for (pid, _), c in self.children.items() if c.claim is not None}

    def index_to_rank(self) -> dict[int, int]:
        """mp.spawn's process index -> the rank, where both were read."""
        return {c.spawn_index: c.rank for c in self.claims().values()
                if c.spawn_index is not None}

    def unknown(self) -> list[int]:
        """PIDs of mp children whose rank could not be read."""
        return sorted(pid for (pid, _), c in self.children.items() if c.claim is None)


def _has_tcp(pid: int) -> bool:
    import psutil

    try:
        return bool(psutil.Process(pid).net_connections("tcp"))
    except (psutil.Error, OSError):
        return False


# mp.spawn's own words for a failed child: its process index, not its rank
_SPAWN_FAILED = re.compile(r"(?:-- Process|process) (\d+) terminated with "
                           r"(?:the following error|signal|exit code)")


def name_spawn_culprit(findings: list, log_text: str, index_to_rank: dict[int, int],
                       claims: dict[int, RankClaim]) -> None:
    """The lead finding that names no rank gets the rank of the child mp.spawn says failed
    (pure): "-- Process 0 terminated" is index 0, which the read claims map to a rank.
    mp.spawn's own words also beat a rank triage took from the order the processes died,
    and a rank the log's reading took from the index itself (diagnose reads a one-node
    log's index as its rank: here the job says which rank the index ran)."""
    from ddpdoctor.run.triage import rank_from_exits

    m = _SPAWN_FAILED.search(log_text)
    if not findings or m is None:
        return
    index = int(m.group(1))
    timed = rank_from_exits(findings[0])
    if findings[0].ranks and not timed and findings[0].ranks != [index]:
        return
    rank = index_to_rank.get(index)
    lead = findings[0]
    if rank is None:
        if timed or lead.ranks:
            return  # the order the processes died, or the log's reading, still names one
        lead.evidence["rank_from"] = (f"mp.spawn names process index {index}; its rank "
                                      "could not be read from the process")
        return
    how = next((c.detail for c in claims.values() if c.spawn_index == index), "")
    lead.ranks = [rank]
    lead.evidence["rank_from"] = (f"mp.spawn names process index {index}, which is rank "
                                  f"{rank} ({how})")
