"""What a step is: an optimizer step, never a forward; and the micro-batches inside it.

A step ends at the optimizer's post-hook from the very first step, so a rank that skipped
a batch (a forward with no backward) or accumulates more micro-batches than another still
counts the same steps as its peers, and replicas are compared at the same point. Only a
model that no torch optimizer ever steps falls back to forwards (after ``FALLBACK_AFTER``
of them), and then, under DDP, only to forwards that follow a synchronised backward.

Per step the counter keeps the micro-batches (backward passes; forwards where the first
gradient is not seen) and whether the step's gradients were synchronised (DDP outside
``no_sync``): the desync check compares replicas only after synchronised steps, and ranks
that run different numbers of micro-batches per step are GRAD_ACCUM_OUT_OF_STEP.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from torch.nn.parallel import DistributedDataParallel

log = logging.getLogger("ddpdoctor.watch")

FALLBACK_AFTER = 32  # forwards with no optimizer step: a model trained without one


@dataclass
class StepShape:
    """One finished step: micro-batches and whether its gradients were synchronised."""

    micro: int = 0
    synced: bool = True


class StepCounter:
    def __init__(self, ddp: DistributedDataParallel | None, counts_backward: bool) -> None:
        self.ddp = ddp
        self.counts_backward = counts_backward  # the first-gradient hook sees backwards
        self.micro = 0
        self.synced = True
        self.backward_since_forward = False
        self.forwards_no_opt = 0
        self.fallback = False
        self.last = StepShape()
        self.accumulates = False  # some step had more than one micro-batch

    def _sync_on(self) -> bool:
        return bool(getattr(self.ddp, "require_backward_grad_sync", True)) \
            if self.ddp is not None else True

    def forward_ends_step(self, optimizer_seen: bool) -> bool:
        """Called as a forward (grad enabled) begins: True when it ends the previous step,
        which only happens in the fallback for models no optimizer steps."""
        if optimizer_seen:
            return False
        self.forwards_no_opt += 1
        if self.forwards_no_opt > FALLBACK_AFTER and not self.fallback:
            self.fallback = True
            log.info("ddpdoctor: no optimizer stepped in %d forwards: counting steps by "
                     "%s", FALLBACK_AFTER, "DDP's synchronised backwards"
                     if self.ddp is not None else "forwards")
        if not self.fallback:
            return False
        if not self.counts_backward:
            return True  # no backward is seen: every forward (the old way)
        # a forward with no backward since the last one (a skipped batch) or an
        # unsynchronised backward (no_sync accumulation) continues the step
        return self.backward_since_forward and self.synced

    def on_forward(self) -> None:
        self.backward_since_forward = False
        if not self.counts_backward:
            self.micro += 1
            self.synced = self._sync_on()

    def on_backward(self) -> None:
        """The first gradient of a backward: one micro-batch."""
        self.backward_since_forward = True
        if self.counts_backward:
            self.micro += 1
            self.synced = self._sync_on()

    def end_step(self) -> StepShape:
        self.last = StepShape(self.micro, self.synced)
        if self.micro > 1:
            self.accumulates = True
        self.micro = 0
        self.synced = True
        return self.last
