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
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

from ddpdoctor.findings import Finding
from ddpdoctor.watch.accumulation import AccumulationCheck
from ddpdoctor.watch.base import WatchCheck, bit_sum

# Per-rank values ahead of the checksums in this check's row of the gather.
_MICRO, _SYNCED, _HEAD = 0, 1, 2


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


def _replicated(t: Any) -> bool:
    placements = getattr(t, "placements", None)
    if placements is None:
        return True
    return all(type(p).__name__ == "Replicate" for p in placements)


class DesyncCheck(WatchCheck):
    name = "desync"

    def attach(self, w: Any) -> None:
        self.tensors: list[tuple[str, Any]] = [(n, p) for n, p in w.named_params
                                               if _replicated(p)]
        self.n_params = len(self.tensors)
        # DDP re-broadcasts buffers from rank 0 before each forward: differing buffers at
        # the step boundary are expected then (BatchNorm statistics).
        if w.ddp is None or not getattr(w.ddp, "broadcast_buffers", True):
            self.tensors += [(n, b) for n, b in w.named_buffers if _replicated(b)]
        self.width = len(self.tensors) + _HEAD
        self.last_ok = 0
        self.done = False
        self.accum = AccumulationCheck()

    def pack(self, w: Any, step: int) -> Any:
        import torch

        out = torch.zeros(self.width, dtype=torch.int64)
        shape = w.steps.last
        out[_MICRO], out[_SYNCED] = shape.micro, int(shape.synced)
        if self.tensors and not self.done:
            sums = torch.stack([bit_sum(t) for _, t in self.tensors]).cpu()
            out[_HEAD:_HEAD + sums.numel()] = sums
        return out.view(torch.float64)

    def analyze(self, w: Any, step: int, rows: Any) -> list[Finding]:
        import torch

        findings = []
        for group in w.peer_groups(same_model=True):
            block = rows[group].contiguous().view(torch.int64).tolist()
            micro = [int(r[_MICRO]) for r in block]
            findings += self.accum.look(w, step, group, micro)
            if self.done or not self.tensors:
                continue
            if not all(r[_SYNCED] for r in block):
                continue  # inside no_sync accumulation: replicas may differ until the sync
            sums = [r[_HEAD:_HEAD + len(self.tensors)] for r in block]
            d = compare(sums, group)
            if d is not None:
                findings.append(self._finding(step, group, d, micro))
        if any(f.id == "PARAM_DESYNC" for f in findings):
            self.done = True
        elif not self.done:
            self.last_ok = step
        return findings

    def _finding(self, step: int, group: list[int], d: Divergence, micro: list[int]) -> Finding:
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
        evidence: dict = {
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
