"""GRAD_NONFINITE from skipped steps: the rank whose own backward overflows on every step.

A GradScaler that finds an inf/NaN gradient skips ``optimizer.step()`` and halves its
scale: routine for a step or two while the scale settles, a dead run when it happens on
every step (an fp16 overflow the scale cannot fix): the loss stops moving, nothing fails.
The checks that count steps at the optimizer's step see no step at all; the nonfinite
check forgets skipped iterations and reports a long streak of them (``nonfinite_skips``)
for all ranks, since under DDP the all-reduce has made every rank's gradients non-finite.

This check names the rank that makes the overflow, early. It counts synchronised
backwards (DDP outside ``no_sync``; every backward for a plain module) since the watched
optimizer last stepped (the watcher's step boundary, its optimizer post-hook); once
``SKIPPED_LIMIT`` of them passed without a step, it looks at this rank's own first
gradient of the backward (before DDP's all-reduce): non-finite there means this
rank's backward overflows, and this rank
reports GRAD_NONFINITE naming itself. A rank whose own gradients are finite stays quiet
(the nonfinite check's streak report covers the job). Works where the first gradient is
seen (DDP, plain modules); not under FSDP or tensor parallel.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ddpdoctor.core.findings import Finding
from ddpdoctor.watch.base import WatchCheck, local

if TYPE_CHECKING:
    import torch

    from ddpdoctor.watch.context import CheckContext

SKIPPED_LIMIT = 4   # synchronised backwards with no optimizer step before looking
GIVE_UP_AFTER = 64  # own gradients finite that long: the overflow is not this rank's


class SkippedStepsCheck(WatchCheck):
    name = "skipped"

    def attach(self, w: CheckContext) -> None:
        self.backwards = 0

    def step_end(self, w: CheckContext, step: int) -> None:
        # the watched optimizer stepped (its post-hook, which pause() removes with the rest)
        self.backwards = 0

    def first_grad(self, w: CheckContext, grad: torch.Tensor) -> None:
        if not bool(getattr(w.ddp, "require_backward_grad_sync", True)):
            return
        self.backwards += 1
        if self.backwards < SKIPPED_LIMIT:
            return
        import torch

        if not bool(torch.isfinite(local(grad)).all()):
            w.emit(skipping_finding(w.rank, self.backwards), w.step)
        elif self.backwards < GIVE_UP_AFTER:
            return
        w.unsubscribe(self, "first_grad")


def skipping_finding(rank: int, backwards: int) -> Finding:
    """Pure: ``rank``'s own gradients overflow and no optimizer stepped for ``backwards``
    synchronised backwards."""
    return Finding(
        "GRAD_NONFINITE",
        f"the optimizer skipped the last {backwards} steps and rank {rank}'s own gradients "
        "are non-finite before the all-reduce: its backward overflows on every step "
        "(GradScaler skips the step and halves its scale each time)",
        ranks=[rank],
        evidence={"backwards_without_step": backwards, "own_gradient_nonfinite": True,
                  "source": "skipped optimizer steps (GradScaler)",
                  "why": "a GradScaler skips optimizer.step() when a gradient is inf/NaN "
                         "and halves its scale; when every step overflows the model never "
                         "updates and the scale falls towards 0"})
