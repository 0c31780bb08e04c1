"""GRAD_SCALER_SKIPPING: backward keeps running, the optimizer never steps (fp16 overflow).

A GradScaler that finds an inf/NaN gradient skips ``optimizer.step()`` and halves its
scale: routine for a step or two while the scale settles, a dead run when it happens on
every step (an fp16 overflow the scale cannot fix): the loss stops moving, nothing fails.
The other checks count steps at the optimizer's step, so they see no step at all.

This check counts synchronised backwards (DDP outside ``no_sync``; every backward for a
plain module) since any torch optimizer last stepped (a global optimizer post-hook) and,
once ``SKIPPED_LIMIT`` of them passed without a step, looks at this rank's own first
gradient of the backward (before DDP's all-reduce): non-finite there means this rank's
backward makes the overflow, and this rank is named. A rank whose own gradient is finite
(the overflow came from another rank through the all-reduce) reports later, at
``2 * SKIPPED_LIMIT``, naming no rank. Works where the first gradient is seen (DDP, plain
modules); not under FSDP / tensor parallel.
"""

from __future__ import annotations

from typing import Any

from ddpdoctor.findings import Finding
from ddpdoctor.watch.base import WatchCheck, local

SKIPPED_LIMIT = 4  # synchronised backwards with no optimizer step before a finding


class SkippedStepsCheck(WatchCheck):
    name = "skipped"

    def attach(self, w: Any) -> None:
        from torch.optim.optimizer import register_optimizer_step_post_hook

        self.backwards = 0
        self.done = False
        self.handle = register_optimizer_step_post_hook(self._stepped)

    def _stepped(self, *args: Any) -> None:
        self.backwards = 0

    def first_grad(self, w: Any, grad: Any) -> None:
        if self.done or not bool(getattr(w.ddp, "require_backward_grad_sync", True)):
            return
        self.backwards += 1
        if self.backwards < SKIPPED_LIMIT:
            return
        import torch

        own = not bool(torch.isfinite(local(grad)).all())
        if own or self.backwards >= 2 * SKIPPED_LIMIT:
            self.done = True
            w.emit(skipping_finding(w.rank, self.backwards, own), w.step)
            w.unsubscribe(self, "first_grad")

    def close(self, w: Any) -> None:
        self.handle.remove()


def skipping_finding(rank: int, backwards: int, own: bool) -> Finding:
    """Pure: the finding for ``backwards`` synchronised backwards with no optimizer step."""
    where = (f"rank {rank}'s own gradients are non-finite before the all-reduce: its "
             "backward overflows" if own else
             f"rank {rank}'s own gradients are finite: the overflow comes from another "
             "rank or from the gradient all-reduce")
    return Finding(
        "GRAD_SCALER_SKIPPING",
        f"the optimizer skipped the last {backwards} steps (gradients overflow every step; "
        f"{where})",
        ranks=[rank] if own else [],
        evidence={"backwards_without_step": backwards, "own_gradient_nonfinite": own,
                  "why": "a GradScaler skips optimizer.step() when a gradient is inf/NaN "
                         "and halves its scale; when every step overflows the model never "
                         "updates and the scale falls towards 0"})
