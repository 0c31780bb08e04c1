"""PARAM_DESYNC: replicas that should be bit-identical have diverged.

On check steps, after the optimizer step (for ZeRO after its parameter broadcast), each
rank sums the bits of every replicated parameter as int64: exact, order-independent, one
read of the parameters every K steps. The per-parameter sums ride in the all_gather; a rank
whose sums differ from the majority of its data-parallel group (ties: from the group's
lowest rank, whose weights DDP broadcast at start) is named with the first parameter
that differs. Sharded parameters (FSDP) are not replicas and are skipped.
"""

from __future__ import annotations

from typing import Any

from ddpdoctor.findings import Finding
from ddpdoctor.watch.base import WatchCheck, bit_sum


def diverged(sums: list[list[int]], ranks: list[int]) -> tuple[list[int], int] | None:
    """``sums[i]`` are rank ``ranks[i]``'s per-tensor checksums -> (culprits, first index).

    The reference value of each tensor is the most common one (ties: the lowest rank's).
    """
    if len(sums) < 2:
        return None
    culprits: dict[int, int] = {}
    for j in range(len(sums[0])):
        column = [s[j] for s in sums]
        counts: dict[int, int] = {}
        for v in column:
            counts[v] = counts.get(v, 0) + 1
        best = max(counts.values())
        ref = next(v for v in column if counts[v] == best)
        for i, v in enumerate(column):
            if v != ref and ranks[i] not in culprits:
                culprits[ranks[i]] = j
    if not culprits:
        return None
    return sorted(culprits), min(culprits.values())


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
        # DDP re-broadcasts buffers from rank 0 before each forward: differing buffers at
        # the step boundary are expected then (BatchNorm statistics).
        if w.ddp is None or not getattr(w.ddp, "broadcast_buffers", True):
            self.tensors += [(n, b) for n, b in w.named_buffers if _replicated(b)]
        self.width = len(self.tensors)
        self.last_ok = 0
        self.done = False

    def pack(self, w: Any, step: int) -> Any:
        import torch

        out = torch.zeros(self.width, dtype=torch.int64)
        if self.tensors and not self.done:
            sums = torch.stack([bit_sum(t) for _, t in self.tensors]).cpu()
            out[: sums.numel()] = sums
        return out.view(torch.float64)

    def analyze(self, w: Any, step: int, rows: Any) -> list[Finding]:
        if self.done or not self.tensors:
            return []
        import torch

        findings = []
        for group in w.peer_groups(same_model=True):
            sums = rows[group].contiguous().view(torch.int64)[:, : len(self.tensors)].tolist()
            hit = diverged(sums, group)
            if hit is None:
                continue
            culprits, j = hit
            name = self.tensors[j][0]
            ndiff = sum(1 for k in range(len(self.tensors))
                        if len({s[k] for s in sums}) > 1)
            findings.append(Finding(
                "PARAM_DESYNC",
                f"rank {','.join(map(str, culprits))} holds different weights than its "
                f"data-parallel peers; first differing tensor: {name}",
                ranks=culprits,
                evidence={"step": step, "parameter": name, "differing_tensors": ndiff,
                          "last_agreeing_step": self.last_ok or None, "group": group}))
        if findings:
            self.done = True
        else:
            self.last_ok = step
        return findings
