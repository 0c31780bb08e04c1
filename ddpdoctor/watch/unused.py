"""DDP_UNUSED_PARAMETERS / DDP_FIND_UNUSED_OVERHEAD: parameters that get no gradient.

During the first ``unused_steps`` steps a post-accumulate-grad hook marks every parameter
that receives a gradient (then the hooks are removed: zero cost afterwards). At each of
those step boundaries the parameters that require grad but got none are named. The
boundary comes before DDP's second forward, which is where plain PyTorch fails with
"Expected to have finished reduction in the prior iteration".
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from ddpdoctor.core.findings import Finding
from ddpdoctor.watch.base import WatchCheck

if TYPE_CHECKING:
    import torch
    from torch.utils.hooks import RemovableHandle

    from ddpdoctor.watch.context import CheckContext


def missing_grads(names: list[str], requires_grad: list[bool], used: set[int]) -> list[str]:
    """Names of parameters that require grad but were not in ``used`` (indices)."""
    return [n for i, (n, rg) in enumerate(zip(names, requires_grad)) if rg and i not in used]


class UnusedCheck(WatchCheck):
    name = "unused"

    def attach(self, w: CheckContext) -> None:
        self.used: set[int] = set()
        self.handles: list[RemovableHandle] = []
        self.all_used_steps = 0
        self.done = False
        for i, (_, p) in enumerate(w.named_params):
            if p.requires_grad and hasattr(p, "register_post_accumulate_grad_hook"):
                self.handles.append(p.register_post_accumulate_grad_hook(self._mark(i)))

    def _mark(self, i: int) -> Callable[[torch.Tensor], None]:
        def hook(_p: torch.Tensor) -> None:
            self.used.add(i)
        return hook

    def step_end(self, w: CheckContext, step: int) -> None:
        if self.done:
            return
        if self.used:  # a step without backward (eval) says nothing
            names = [n for n, _ in w.named_params]
            rg = [p.requires_grad for _, p in w.named_params]
            missing = missing_grads(names, rg, self.used)
            if missing:
                find_unused = bool(getattr(w.ddp, "find_unused_parameters", False))
                w.emit(Finding(
                    "DDP_UNUSED_PARAMETERS",
                    f"{len(missing)} parameter(s) got no gradient on rank {w.rank}: "
                    f"{', '.join(missing[:4])}{' ...' if len(missing) > 4 else ''}",
                    ranks=[w.rank],
                    # DDP without find_unused_parameters fails on them: an error; DDP with
                    # it, FSDP or a plain module cope: a warning (wasted parameters)
                    severity="" if w.ddp is not None and not find_unused else "warning",
                    evidence={"step": step, "parameters": missing[:50], "count": len(missing),
                              "find_unused_parameters": find_unused,
                              "wrapper": w.wrapper}), step)
                self._finish(w)
                return
            self.all_used_steps += 1
        self.used = set()
        if step >= w.cfg.unused_steps:
            if self.all_used_steps and getattr(w.ddp, "find_unused_parameters", False):
                w.emit(Finding(
                    "DDP_FIND_UNUSED_OVERHEAD",
                    "find_unused_parameters=True but every parameter got a gradient in the "
                    f"first {self.all_used_steps} step(s): an extra graph walk every step",
                    ranks=[w.rank], evidence={"step": step, "steps_checked": self.all_used_steps}),
                    step)
            self._finish(w)

    def _finish(self, w: CheckContext) -> None:
        self.done = True
        w.unsubscribe(self, "step_end")
        for h in self.handles:
            h.remove()
        self.handles = []

    def close(self, w: CheckContext) -> None:
        self._finish(w)
