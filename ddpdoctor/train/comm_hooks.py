"""DDP gradient compression (``--comm-hook``) and what it sends.

fp16, bf16 and PowerSGD are torch's own hooks (torch.distributed.algorithms.ddp_comm_hooks);
top-k is ours: each rank sends the ``ratio`` largest-magnitude entries of each bucket (values
and indices, all-gathered), keeps what it did not send as a residual and adds it to the next
step's bucket (error feedback), so nothing is lost, only delayed.

Every hook is wrapped by a :class:`CommMeter` that adds up the payload this rank hands to
the collectives: the tensors' bytes, before the collective algorithm's own traffic (a ring
all-reduce sends about twice that, an all-gather world - 1 times it).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, TypeVar

import torch
import torch.distributed as dist

if TYPE_CHECKING:
    from torch.distributed.algorithms.ddp_comm_hooks.powerSGD_hook import PowerSGDState
    from torch.nn.parallel import DistributedDataParallel

# PowerSGD's error feedback and warm start need at least one plain all-reduce first.
POWERSGD_START_ITER = 2
POWERSGD_RANK = 1


@dataclass
class CommMeter:
    """Payload bytes this rank handed to gradient collectives since the last ``take``.
    With no hook, DDP's own all-reduce hands over every gradient once: ``plain``."""

    plain: int = 0
    hooked: bool = False
    bytes: int = 0

    def take(self) -> int:
        n, self.bytes = self.bytes, 0
        return n if self.hooked else self.plain


@dataclass
class TopKState:
    ratio: float
    group: dist.ProcessGroup | None = None
    residuals: dict[int, torch.Tensor] = field(default_factory=dict)


def topk_hook(state: TopKState,  # called via metered_hook
              bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    """Top-k sparsified all-reduce with error feedback: the mean of every rank's top-k."""
    buf = bucket.buffer()
    world = dist.get_world_size(state.group)
    acc = buf + state.residuals.get(bucket.index(), 0)
    k = max(1, int(state.ratio * acc.numel()))
    _, ind = acc.abs().topk(k, sorted=False)
    vals = acc[ind]
    residual = acc.clone()
    residual[ind] = 0
    state.residuals[bucket.index()] = residual
    all_vals = vals.new_empty(world * k)
    all_ind = ind.new_empty(world * k)
    dist.all_gather_into_tensor(all_vals, vals.contiguous(), group=state.group)
    dist.all_gather_into_tensor(all_ind, ind.contiguous(), group=state.group)
    dense = torch.zeros_like(buf)
    dense.index_add_(0, all_ind, all_vals)
    buf.copy_(dense.div_(world))
    fut: torch.futures.Future[torch.Tensor] = torch.futures.Future()
    fut.set_result(buf)
    return fut


def topk_payload(state: TopKState, bucket: dist.GradBucket) -> int:
    k = max(1, int(state.ratio * bucket.buffer().numel()))
    return k * (bucket.buffer().element_size() + 8)  # values + int64 indices


def _half_payload(state: object, bucket: dist.GradBucket) -> int:
    return bucket.buffer().numel() * 2


def _powersgd_payload(state: PowerSGDState, bucket: dist.GradBucket) -> int:
    """Before ``start_powerSGD_iter`` a plain all-reduce; then P and Q of each matrix
    (``(rows + cols) * rank`` elements) and the vectors (biases, norms) uncompressed."""
    buf = bucket.buffer()
    if state.iter < state.start_powerSGD_iter:
        return buf.numel() * buf.element_size()
    n = 0
    for g in bucket.gradients():
        if g.ndim <= 1:
            n += g.numel()
        else:
            rows, cols = g.shape[0], g.numel() // g.shape[0]
            n += min(rows * cols, (rows + cols) * state.matrix_approximation_rank)
    return n * buf.element_size()


_State = TypeVar("_State")
_Hook = Callable[[_State, dist.GradBucket], torch.futures.Future[torch.Tensor]]


def _metered(hook: _Hook[_State], payload: Callable[[_State, dist.GradBucket], int],
             meter: CommMeter) -> _Hook[_State]:
    # No annotations: DDP's register_comm_hook refuses a bucket annotated as anything but
    # dist.GradBucket (and under postponed annotations every annotation is a string).
    def metered_hook(state, bucket):
        meter.bytes += payload(state, bucket)
        return hook(state, bucket)

    return metered_hook


def register(ddp: DistributedDataParallel, name: str, ratio: float, meter: CommMeter) -> None:
    """Register hook ``name`` on ``ddp`` (nothing for "none"), metered into ``meter``."""
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks, powerSGD_hook

    if name == "none":
        return
    meter.hooked = True
    if name == "topk":
        ddp.register_comm_hook(TopKState(ratio), _metered(topk_hook, topk_payload, meter))
    elif name in ("fp16", "bf16"):
        hook = default_hooks.fp16_compress_hook if name == "fp16" else \
            default_hooks.bf16_compress_hook
        ddp.register_comm_hook(None, _metered(hook, _half_payload, meter))
    elif name == "powersgd":
        state = powerSGD_hook.PowerSGDState(
            process_group=None, matrix_approximation_rank=POWERSGD_RANK,
            start_powerSGD_iter=POWERSGD_START_ITER)
        ddp.register_comm_hook(state, _metered(powerSGD_hook.powerSGD_hook,
                                               _powersgd_payload, meter))
    else:
        raise ValueError(f"unknown comm hook {name!r}")


def plain_payload(params: Iterable[torch.Tensor]) -> int:
    """What DDP's default hook hands to all-reduce per step: every gradient once."""
    return sum(p.numel() * p.element_size() for p in params if p.requires_grad)
