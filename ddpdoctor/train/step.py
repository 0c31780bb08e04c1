"""One optimizer step: micro-batches (gradient accumulation), loss scaling, clip, update.

With ``--grad-accum N`` the rank's batch is split into N micro-batches; all but the last
run their backward without gradient sync (:meth:`Strategy.grad_sync`), each loss is
divided by N, so the step's gradient is the mean over the whole batch, as without
accumulation. With ``--precision fp16`` a GradScaler (ShardedGradScaler under FSDP2, whose
gradient shards differ by rank) scales the loss, unscales before clipping, and skips the
update when a gradient overflowed (then lowers the scale).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from ddpdoctor.train.strategies import LossHook, Strategy


@dataclass
class StepResult:
    loss: float             # this rank's loss over its whole batch (mean of micro-batches)
    grad_norm: float
    skipped: bool = False   # the scaler found an overflow and skipped the update
    scale: float = 0.0      # the loss scale after this step (0: no scaler)


def make_scaler(strategy: Strategy, precision: str,
                device: torch.device) -> torch.amp.GradScaler | None:
    if precision != "fp16":
        return None
    if strategy.sharded:
        from torch.distributed.fsdp.sharded_grad_scaler import ShardedGradScaler

        return ShardedGradScaler(device=device.type)
    return torch.amp.GradScaler(device.type)


def micro_batches(x: torch.Tensor, y: torch.Tensor,
                  n: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """``n`` micro-batches of (nearly) equal size; one when ``n`` is 1 (no copy)."""
    if n <= 1:
        return [(x, y)]
    return list(zip(x.tensor_split(n), y.tensor_split(n)))


class StepRunner:
    """Runs the forward/backward passes of one optimizer step on this rank."""

    def __init__(self, strategy: Strategy, precision: str, device: torch.device) -> None:
        self.strategy = strategy
        self.scaler = make_scaler(strategy, precision, device)

    def forward_backward(self, chunks: list[tuple[torch.Tensor, torch.Tensor]],
                         loss_hook: LossHook,
                         before_last_backward: Callable[[float], None]) -> float:
        """Every micro-batch's forward and backward; ``before_last_backward`` gets this
        rank's batch loss between the last forward and its (synchronised) backward, where
        every rank of every strategy meets in the same order."""
        s, n = self.strategy, len(chunks)
        losses: list[float] = []
        for i, (x, y) in enumerate(chunks):
            last = i == n - 1
            with s.grad_sync(last):
                loss = s.loss(x, y, loss_hook)
                losses.append(float(loss.detach().float().item()))
                if last:
                    before_last_backward(sum(losses) / len(losses))
                if n > 1:
                    loss = loss / n
                s.backward(self.scaler.scale(loss) if self.scaler is not None else loss)
        return sum(losses) / len(losses)

    def update(self, clip: float) -> tuple[float, bool, float]:
        """Clip and step (through the scaler when there is one): (norm, skipped, scale)."""
        s = self.strategy
        if self.scaler is None:
            gnorm = s.clip(clip)
            s.optimizer.step()
            return gnorm, False, 0.0
        self.scaler.unscale_(s.optimizer)
        gnorm = s.clip(clip)
        before = float(self.scaler.get_scale())
        self.scaler.step(s.optimizer)
        self.scaler.update()
        after = float(self.scaler.get_scale())
        return gnorm, after < before, after
