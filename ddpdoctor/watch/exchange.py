"""The cross-rank exchange: one float64 all_gather every check step, on a gloo group of
the watch's own.

At attach, every rank gathers its data-parallel group, model fingerprint, settings width
and host once, so the ranks agree on the layout (or cross-rank checks stay off). On a
check step each collective check packs its ``width`` values; the gather is issued
asynchronously at the step boundary on every rank in the same order, and read at a later
boundary, so the training thread never waits for it. Rank 0 analyses the rows.
"""

from __future__ import annotations

import logging
import time
import zlib
from collections import deque
from collections.abc import Callable
from datetime import timedelta
from types import ModuleType
from typing import TYPE_CHECKING, Any, Protocol, cast

from ddpdoctor.watch.base import WatchCheck
from ddpdoctor.watch.introspect import dp_ranks, host_id, solo_group

if TYPE_CHECKING:
    import torch
    from torch.distributed import ProcessGroup, Work

    from ddpdoctor.watch.context import CheckContext

log = logging.getLogger("ddpdoctor.watch")
_GROUPS: dict[str, ProcessGroup] = {}  # the watch's gloo groups, one of each per process


class Baseline(Protocol):
    """The desync check as the layout agreement reads it (watch/desync.py DesyncCheck,
    which imports this file: found by name, not by class)."""

    width: int
    n_params: int
    tensors: list[tuple[str, torch.Tensor]]


# Any: torch types the collective as Any; it returns a Work with async_op=True, else None
def all_gather(dist: ModuleType) -> Callable[..., Any]:
    # all_gather_into_tensor is deprecated (a FutureWarning per call) where the new name
    # exists; torch < 2.10 only has the old one.
    return getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor


def make_group(name: str, timeout_s: float) -> ProcessGroup:
    # new_group is collective: every rank makes the same groups in the same order, which
    # holds because the ranks just agreed on the settings.
    if name not in _GROUPS:
        import torch.distributed as dist

        _GROUPS[name] = dist.new_group(backend="gloo", timeout=timedelta(seconds=timeout_s))
    return _GROUPS[name]


def release_groups() -> None:
    """At exit: drop the process's references to the watch's groups."""
    _GROUPS.clear()


class Exchange:
    def __init__(self, w: CheckContext, coll: list[WatchCheck]) -> None:
        self.w = w  # the watcher: the context the checks pack and analyze with
        self.coll = coll
        self.group: ProcessGroup | None = None
        self.meta: list[tuple[int, int]] = [(0, 0)]  # per rank: (first dp rank, model crc)
        self.hosts: list[int] = [0]  # per rank, host_id(): hostname and network namespace
        # per rank: its wrapper's data-parallel group is only itself in a job of several
        # (FSDP2 over a size-1 mesh dimension): such ranks are compared over the world
        self.solo: list[bool] = [False]
        self.solo_text: str | None = None  # what that group is (from this rank's model)
        # (step, the gather's work, its output, its input: kept alive until it completes)
        self.pending: deque[tuple[int, Work, torch.Tensor, torch.Tensor]] = deque()

    def _make_group(self, name: str) -> ProcessGroup:
        return make_group(name, self.w.cfg.collective_timeout_s)

    def width_without_desync(self) -> int:
        return sum(c.width for c in self.coll if c.name != "desync")

    def setup(self) -> None:
        """Collective, once, on every rank: agree on the layout, then let checks set up."""
        import torch
        import torch.distributed as dist

        w = self.w
        try:
            group = self._make_group("gather")
            dp = dp_ranks(w.model, w.ddp, dist, w.world)
            desync = cast("Baseline | None",
                          next((c for c in self.coll if c.name == "desync"), None))
            # a group of one in a job of several, where every parameter is a whole copy (no
            # tensor-parallel shard makes the world's ranks hold different tensors)
            whole = desync is not None and desync.n_params == len(w.named_params)
            solo = len(dp) == 1 and w.world > 1 and whole
            if solo:  # a group that reduces nothing: the world's ranks are the replicas
                self.solo_text, dp = solo_group(w.model, w.ddp), list(range(w.world))
            names = "\n".join(f"{n}:{tuple(t.shape)}" for n, t in getattr(desync, "tensors", []))
            mine = torch.tensor([min(dp), zlib.crc32(names.encode()),
                                 desync.width if desync else 0, self.width_without_desync(),
                                 host_id(), float(solo)], dtype=torch.float64)
            out = torch.empty(w.world * 6, dtype=torch.float64)
            all_gather(dist)(out, mine, group=group)
            rows = out.view(w.world, 6).tolist()
            if len({int(r[3]) for r in rows}) != 1:
                log.warning("ddpdoctor: ranks disagree on watch settings; cross-rank checks off")
                return
            if desync is not None:
                desync.width = max(int(r[2]) for r in rows)
            self.meta = [(int(r[0]), int(r[1])) for r in rows]
            self.hosts = [int(r[4]) for r in rows]
            self.solo = [bool(r[5]) for r in rows]
            self.group = group
        except Exception as e:  # local checks still work
            log.warning("ddpdoctor: no watch process group (%s); cross-rank checks off", e)
            return
        for c in self.coll:
            c.group_ready(w, self._make_group)

    def peer_groups(self, same_model: bool = False) -> list[list[int]]:
        """Ranks grouped by data-parallel group (and identical model, if asked)."""
        groups: dict[tuple[int, ...], list[int]] = {}
        for r, (dp, crc) in enumerate(self.meta):
            groups.setdefault((dp, crc) if same_model else (dp,), []).append(r)
        return sorted(groups.values())

    def solo_groups(self, ranks: list[int]) -> str | None:
        """What reduces nothing, where every rank of ``ranks`` trains alone (else None)."""
        if len(ranks) > 1 and all(self.solo[r] for r in ranks if r < len(self.solo)):
            return self.solo_text or "the data-parallel group holds one rank"
        return None

    def check_step(self, step: int) -> None:
        """The boundary of a check step: gather (or, alone, analyse at once)."""
        if self.group is not None:
            self._gather(step)
        elif self.w.world == 1:
            self._analyze(step, self._pack(step).view(1, -1))  # one process: no gather

    def _gather(self, step: int) -> None:
        import torch
        import torch.distributed as dist

        inp = self._pack(step)
        out = torch.empty(self.w.world * inp.numel(), dtype=torch.float64)
        work = all_gather(dist)(out, inp, group=self.group, async_op=True)
        self.pending.append((step, work, out, inp))

    def _pack(self, step: int) -> torch.Tensor:
        import torch

        parts = [torch.tensor([float(step)], dtype=torch.float64)]
        for c in self.coll:
            t = c.pack(self.w, step)
            parts.append(t if t is not None else torch.zeros(c.width, dtype=torch.float64))
        return torch.cat(parts)

    def poll(self, deadline: float | None = None) -> None:
        """Read the gathers that completed (until ``deadline``, waiting, if given)."""
        while self.pending:
            step, work, out, _ = self.pending[0]
            if not work.is_completed():
                if deadline is None or time.monotonic() > deadline:
                    return
                time.sleep(0.01)
                continue
            self.pending.popleft()
            try:
                work.wait()
            except Exception as e:  # a peer died: stop cross-rank checks
                log.warning("ddpdoctor: watch all_gather failed (%s); cross-rank checks off", e)
                self.group, self.pending = None, deque()
                return
            if self.w.rank == 0:
                self._analyze(step, out.view(self.w.world, -1))

    def _analyze(self, step: int, rows: torch.Tensor) -> None:
        if {int(s) for s in rows[:, 0].tolist()} != {step}:
            log.warning("ddpdoctor: ranks out of step in the watch gather; checks off")
            self.group = None
            return
        off = 1
        for c in self.coll:
            for f in c.analyze(self.w, step, rows[:, off:off + c.width]):
                self.w.emit(f, int(f.evidence.get("step", step)))
            off += c.width
