"""PARAM_DESYNC: replicas that should be bit-identical have diverged.

On check steps, after the optimizer step (for ZeRO after its parameter broadcast), each
rank sums the bits of every replicated parameter as int64: exact, order-independent, one
read of the parameters every K steps. The per-parameter sums ride in the all_gather; a rank
whose sums differ from the majority of its data-parallel group is named with the first
tensor that differs (with no majority, every disagreeing rank). Sharded parameters
(FSDP) are not replicas and are skipped.

Steps are optimizer steps (watch/steps.py). Each row also carries the step's micro-batch
count and whether its gradients were synchronised: replicas are compared only after a
synchronised step (inside ``no_sync`` accumulation they may differ until the sync), and
uneven counts go to GRAD_ACCUM_OUT_OF_STEP (watch/accumulation.py), not to a desync.
The finding says whether parameters differ or only buffers (BatchNorm statistics under
``broadcast_buffers=False``: a different fix), and names every disagreeing rank where no
majority says which replica is right.

Compared is only what must be equal at that moment: each row also carries how many steps
the rank's parameters lag (steps it sat out in DDP's Join, until the Join's final
broadcast: watch/join.py) and how many updates its optimizer state missed. A group is
compared only when no rank lags and every rank's optimizer state went through the same
updates; otherwise the comparison waits (said once, in a ``note``). Replicated means
equal on every rank of the group: plain tensors and DTensors whose placements are all
Replicate, or Shard over a mesh dimension of size 1 (a whole copy).

What counts as a replica is checked, not only assumed: when the watch attaches (before
the model's first optimizer step when it attached itself: watch/optim_attach.py), every
rank gathers its checksums once, and a tensor is compared later only within the ranks
where it was equal then. A model the watch cannot see the layout of (plain modules
trained by a hand-rolled all-reduce, or pipeline stages of the same shape that were never
meant to be equal) is thus compared only where it started as a replica; tensors that
differed from the start are said in a ``note``. FSDP1's flat parameters are per-rank
shards and are never compared.

The row carries the rank's training state too (watch/train_state.py: the optimizer's own
step count, the step it resumed from, the learning rate): a desync whose ranks resumed
different state names the rank whose state differs. And where the wrapper's group holds
only one rank in a job of several (FSDP2 over a size-1 mesh dimension, DDP over a
one-rank group) the structurally identical ranks are compared over the world: replicas
that diverge there were never reduced (watch/exchange.py).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ddpdoctor.core.findings import Finding
from ddpdoctor.watch import train_state
from ddpdoctor.watch.accumulation import AccumulationCheck
from ddpdoctor.watch.base import WatchCheck, bit_sum, local
from ddpdoctor.watch.train_state import RankState

if TYPE_CHECKING:
    import torch
    from torch.distributed import ProcessGroup

    from ddpdoctor.watch.context import CheckContext

# Per-rank values ahead of the checksums in this check's row of the gather (int64; the
# learning rate as its float64 bits).
_MICRO, _SYNCED, _LAG, _MISSED, _OPT_STEP, _START, _LR, _HEAD = range(8)


@dataclass(frozen=True)
class Head:
    """One rank's values ahead of its checksums."""

    micro: int
    synced: bool
    lag: int      # steps its parameters lag (sat out in a Join, not yet re-synced)
    missed: int   # updates its optimizer state missed (a stateful optimizer in a Join)
    state: RankState


def unpack_head(row: list[int]) -> Head:
    import struct

    lr = struct.unpack("<d", struct.pack("<q", int(row[_LR])))[0]  # its float64 bits
    return Head(int(row[_MICRO]), bool(row[_SYNCED]), int(row[_LAG]), int(row[_MISSED]),
                RankState(int(row[_OPT_STEP]), int(row[_START]), lr))


def not_comparable(heads: list[Head], ranks: list[int]) -> str | None:
    """Pure: why the replicas need not be equal now (None: they must be)."""
    if not all(h.synced for h in heads):
        return "inside no_sync gradient accumulation: replicas may differ until the sync"
    lagging = [r for r, h in zip(ranks, heads) if h.lag]
    if lagging:
        return (f"rank {','.join(map(str, lagging))} sat out steps in DDP's Join (uneven "
                "inputs): its parameters lag until the Join ends and DDP re-syncs them")
    if len({h.missed for h in heads}) > 1:
        behind = ",".join(f"{r} ({h.missed})" for r, h in zip(ranks, heads) if h.missed)
        return (f"the optimizer state (momentum, Adam moments) of rank {behind} missed the "
                "updates of the steps it sat out in DDP's Join: DDP re-syncs parameters "
                "at a Join's end, not optimizer state, so the replicas may differ after "
                "every later step")
    return None


@dataclass(frozen=True)
class Divergence:
    """Ranks whose checksums differ, and whether a majority said what is right."""

    ranks: list[int]  # the odd ones out; every disagreeing rank where no majority exists
    first: int  # index of the first tensor that differs
    differing: list[int]  # indices of every tensor that differs
    no_majority: bool  # some tensor had no majority value (2 ranks, or an even split)


def compare(sums: list[list[int]], ranks: list[int]) -> Divergence | None:
    """``sums[i]``: rank ``ranks[i]``'s per-tensor checksums -> who differs.

    A tensor's reference value is the one most ranks hold; where no value has a strict
    majority (two ranks that disagree, a 2-2 split) there is no reference and every rank
    that holds a value shared by no majority is named: calling one of two replicas
    "different" would be a guess.
    """
    if len(sums) < 2:
        return None
    named: dict[int, int] = {}
    differing: list[int] = []
    no_majority = False
    for j in range(len(sums[0])):
        column = [s[j] for s in sums]
        counts = Counter(column)
        if len(counts) == 1:
            continue
        differing.append(j)
        (ref, best), (_, second) = counts.most_common(2)
        if best == second:
            no_majority = True
            odd = list(range(len(column)))
        else:
            odd = [i for i, v in enumerate(column) if v != ref]
        for i in odd:
            named.setdefault(ranks[i], j)
    if not differing:
        return None
    return Divergence(sorted(named), differing[0], differing, no_majority)


def diverged(sums: list[list[int]], ranks: list[int]) -> tuple[list[int], int] | None:
    """(culprits, first differing index): :func:`compare` in short."""
    d = compare(sums, ranks)
    return None if d is None else (d.ranks, d.first)


def fsdp1_shards(model: object) -> set[int]:
    """ids of the parameters FSDP1 (``FullyShardedDataParallel``) manages: flat parameters
    and, with ``use_orig_params``, the views into them, both per-rank shards."""
    out: set[int] = set()
    for m in (model.modules() if hasattr(model, "modules") else ()):
        if type(m).__name__ == "FullyShardedDataParallel":
            out.update(id(p) for p in m.parameters())
    return out


# Any: a plain tensor or a DTensor, told apart by its attributes (placements, device_mesh)
def _replicated(t: Any) -> bool:
    """Equal on every rank of its group: a plain tensor, or a DTensor replicated (or
    "sharded" over a mesh dimension of size 1: every rank holds the whole tensor)."""
    placements = getattr(t, "placements", None)
    if placements is None:
        return True
    try:
        sizes = tuple(t.device_mesh.shape)
    except Exception:
        sizes = (0,) * len(placements)
    return all(type(p).__name__ == "Replicate" or size == 1
               for p, size in zip(placements, sizes))


class DesyncCheck(WatchCheck):
    name = "desync"

    def attach(self, w: CheckContext) -> None:
        sharded = fsdp1_shards(getattr(w, "model", None))
        self.tensors: list[tuple[str, torch.Tensor]] = [(n, p) for n, p in w.named_params
                                               if _replicated(p) and id(p) not in sharded]
        self.n_params = len(self.tensors)
        # DDP re-broadcasts buffers from rank 0 before each forward: differing buffers at
        # the step boundary are expected then (BatchNorm statistics).
        if w.ddp is None or not getattr(w.ddp, "broadcast_buffers", True):
            self.tensors += [(n, b) for n, b in w.named_buffers if _replicated(b)]
        self.width = len(self.tensors) + _HEAD
        self.last_ok = 0
        self.done = False
        self.accum = AccumulationCheck()
        self.noted: set[str] = set()
        self.start: list[list[int]] | None = None  # every rank's checksums at attach

    def group_ready(self, w: CheckContext,
                    make_group: Callable[[str], ProcessGroup]) -> None:
        """The baseline: every rank's checksums now, before they could drift."""
        import torch
        import torch.distributed as dist

        from ddpdoctor.watch.exchange import all_gather

        mine = torch.zeros(self.width, dtype=torch.int64)
        if self.tensors:
            sums = torch.stack([bit_sum(local(t)) for _, t in self.tensors]).cpu()
            mine[_HEAD:_HEAD + sums.numel()] = sums
        out = torch.empty(w.world * self.width, dtype=torch.int64)
        all_gather(dist)(out, mine, group=make_group("gather"))
        self.start = out.view(w.world, self.width).tolist()

    def replicas_at_start(self, group: list[int]) -> list[bool]:
        """Per tensor: equal on every rank of ``group`` when the watch attached."""
        n = len(self.tensors)
        if self.start is None:
            return [True] * n
        rows = [self.start[r][_HEAD:_HEAD + n] for r in group]
        return [len({row[j] for row in rows}) == 1 for j in range(n)]

    def pack(self, w: CheckContext, step: int) -> torch.Tensor:
        import struct

        import torch

        out = torch.zeros(self.width, dtype=torch.int64)
        shape, join = w.steps.last, w.join
        state = train_state.read(w.optimizer or w.stepping_optimizer, w.step - join.shadowed)
        out[_MICRO], out[_SYNCED] = shape.micro, int(shape.synced)
        out[_LAG], out[_MISSED] = join.lag, join.missed
        out[_OPT_STEP], out[_START] = state.step, state.start
        out[_LR] = struct.unpack("<q", struct.pack("<d", state.lr))[0]  # its float64 bits
        if self.tensors and not self.done:
            # a DTensor's local tensor: where it counts as replicated it is the whole one
            sums = torch.stack([bit_sum(local(t)) for _, t in self.tensors]).cpu()
            out[_HEAD:_HEAD + sums.numel()] = sums
        return out.view(torch.float64)

    def analyze(self, w: CheckContext, step: int, rows: torch.Tensor) -> list[Finding]:
        import torch

        findings: list[Finding] = []
        compared = False  # some group was compared (and agreed, unless a finding says not)
        for group in w.peer_groups(same_model=True):
            block = rows[group].contiguous().view(torch.int64).tolist()
            heads = [unpack_head(r) for r in block]
            micro = [h.micro for h in heads]
            # a step with no micro-batch of a rank's own is one it sat out in a Join (a
            # shadow step, or ZeRO stepping in its join hook): no accumulation to compare
            if all(micro) and not any(h.lag for h in heads):
                findings += self.accum.look(w, step, group, micro)
            if self.done or not self.tensors:
                continue
            why_not = not_comparable(heads, group)
            if why_not is not None:
                self._deferred(w, step, why_not)
                continue
            keep = self.replicas_at_start(group)
            if not all(keep):
                self._not_replicas(w, step, group, keep)
            if not any(keep):
                continue
            compared = True
            sums = [[v if k else 0 for v, k in zip(r[_HEAD:_HEAD + len(self.tensors)], keep)]
                    for r in block]
            d = compare(sums, group)
            if d is not None:
                findings.append(self._finding(w, step, group, d, micro, heads))
        if any(f.id == "PARAM_DESYNC" for f in findings):
            self.done = True
        elif compared and not self.done:
            self.last_ok = step  # the last step whose replicas were compared and agreed
        return findings

    def _deferred(self, w: CheckContext, step: int, why: str) -> None:
        """Say once per reason that (and why) a check step compared nothing."""
        key = why.split(":")[0]
        if key in self.noted:
            return
        self.noted.add(key)
        w.sink.write({"kind": "note", "message": f"replicas not compared at step {step}: "
                                                 f"{why}"}, step)

    def _not_replicas(self, w: CheckContext, step: int, group: list[int], keep: list[bool]) -> None:
        names = [n for (n, _), k in zip(self.tensors, keep) if not k]
        self._deferred(w, step, (
            f"start: {len(names)} of {len(keep)} tensors already differed across ranks "
            f"{','.join(map(str, group))} when the watch attached (first: {names[0]}); "
            "they are not compared: not replicas by design (pipeline stages, per-rank "
            "shards), or replicas whose initial weights were never broadcast"))

    def _finding(self, w: CheckContext, step: int, group: list[int], d: Divergence,
                 micro: list[int], heads: list[Head]) -> Finding:
        solo = w.solo_groups(group)
        if solo is not None:
            return self._never_reduced(step, group, d, solo)
        verdict = train_state.odd_state([h.state for h in heads], group)
        if verdict is not None:
            return self._state_differs(step, group, d, heads, verdict)
        return self._replicas_differ(step, group, d, micro)

    def _replicas_differ(self, step: int, group: list[int], d: Divergence,
                         micro: list[int]) -> Finding:
        names = [self.tensors[j][0] for j in d.differing]
        params = [n for j, n in zip(d.differing, names) if j < self.n_params]
        buffers = [n for j, n in zip(d.differing, names) if j >= self.n_params]
        who = (f"rank {','.join(map(str, d.ranks))} holds" if not d.no_majority
               else f"ranks {','.join(map(str, d.ranks))} hold")
        if params:
            what = f"different weights; first differing parameter: {params[0]}"
        else:
            what = (f"different buffers only (parameters identical); first: {buffers[0]}")
        title = (f"{who} {what}" + ("" if not d.no_majority else
                                    " — no majority: neither replica is the reference"))
        evidence: dict[str, object] = {
            "step": step, "parameter": names[0], "differs": "parameters" if params else
            "buffers only", "differing_parameters": params[:8],
            "differing_buffers": buffers[:8], "differing_tensors": len(names),
            "last_agreeing_step": self.last_ok or None, "group": group,
            "steps_are": "optimizer steps" + (
                f"; {max(micro)} micro-batches per step (gradient accumulation): replicas "
                "are compared only after synchronised steps" if max(micro) > 1 else "")}
        if d.no_majority:
            evidence["why both"] = (
                "the ranks disagree and no value is held by a majority, so no rank can be "
                "called the different one; each now trains its own model, and a checkpoint "
                "saved by one rank is not what the others train. With 3+ replicas the odd "
                "one out is named")
        if not params:
            evidence["fix"] = (
                "buffers (BatchNorm running statistics) are not synchronised: use "
                "torch.nn.SyncBatchNorm.convert_sync_batchnorm(model), or DDP's "
                "broadcast_buffers=True, or broadcast the buffers yourself before eval and "
                "checkpointing")
        return Finding("PARAM_DESYNC", title, ranks=d.ranks, evidence=evidence)

    def _state_differs(self, step: int, group: list[int], d: Divergence, heads: list[Head],
                       verdict: train_state.StateVerdict) -> Finding:
        states = [h.state for h in heads]
        per_rank = train_state.describe(states, group)
        who = (f"rank {','.join(map(str, verdict.ranks))}" if verdict.decided
               else f"ranks {','.join(map(str, verdict.ranks))} (no majority)")
        title = (f"{who} {verdict.headline} ("
                 f"{train_state.summary(states, group, verdict.ranks)}): the replicas "
                 f"diverged; first differing parameter: {self.tensors[d.first][0]}")
        evidence = {"step": step, "parameter": self.tensors[d.first][0], "group": group,
                    "training_state": per_rank, "why": verdict.why,
                    "differing_tensors": len(d.differing),
                    "last_agreeing_step": self.last_ok or None,
                    "fix": "load the same checkpoint (model, optimizer and LR scheduler "
                           "state) on every rank before training resumes"}
        if not verdict.decided:
            evidence["why both"] = verdict.why
        return Finding("PARAM_DESYNC", title, ranks=verdict.ranks, evidence=evidence)

    def _never_reduced(self, step: int, group: list[int], d: Divergence,
                       solo: str) -> Finding:
        title = (f"gradients are never reduced across ranks: {solo}, so every rank of "
                 f"{len(group)} trains its own copy; first differing parameter: "
                 f"{self.tensors[d.first][0]}")
        return Finding("PARAM_DESYNC", title, ranks=sorted(group), evidence={
            "step": step, "parameter": self.tensors[d.first][0], "group": group,
            "data_parallel_group": solo, "differing_tensors": len(d.differing),
            "last_agreeing_step": self.last_ok or None,
            "why": "the wrapper's data-parallel group holds only its own rank, while the "
                   "ranks train the same model: nothing is sharded or reduced across them "
                   "and their replicas drift apart from the first step",
            "fix": "give fully_shard / DDP the mesh dimension (or process group) that spans "
                   "the data-parallel ranks: e.g. mesh['dp'] of a mesh whose 'dp' "
                   "dimension has the world's size, not a size-1 dimension"})
