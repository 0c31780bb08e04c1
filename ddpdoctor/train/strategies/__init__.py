"""One module per family of parallelism; :func:`build` picks the strategy by name.

Every strategy hands the training loop the same small interface (:class:`Strategy`):
compute this rank's loss, run backward, clip, and say which ranks' losses and which data
shard count. The loop, the logging and the faults stay strategy-free.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol, runtime_checkable

import torch
import torch.distributed as dist
from torch import nn

from ddpdoctor.train.config import ModelConfig, RunConfig
from ddpdoctor.train.model import lm_loss

if TYPE_CHECKING:
    from torch.distributed.pipelining.schedules import PipelineScheduleSingle

    from ddpdoctor.train.comm_hooks import CommMeter
    from ddpdoctor.train.injector import Injector

# What the loss of a step goes through before backward (an injection may scale it).
LossHook = Callable[[torch.Tensor], torch.Tensor]


@runtime_checkable
class _NoSync(Protocol):
    """DDP: ``no_sync()`` accumulates gradients locally."""

    def no_sync(self) -> contextlib.AbstractContextManager[object]: ...


@runtime_checkable
class _GradientSync(Protocol):
    """FSDP2: gradient reduction switched off and on."""

    def set_requires_gradient_sync(self, requires_gradient_sync: bool) -> None: ...


@dataclass
class Strategy:
    name: str
    model: nn.Module                 # what forward calls (wrapped / sharded)
    module: nn.Module                # the module whose state dict is checkpointed
    optimizer: torch.optim.Optimizer
    dp_rank: int = 0                 # which data shard this rank reads
    dp_world: int = 1
    loss_ranks: list[int] = field(default_factory=list)   # ranks whose loss is the job's loss
    autocast_dtype: torch.dtype | None = None
    device: torch.device = torch.device("cpu")
    pp_schedule: PipelineScheduleSingle | None = None  # pp only
    pp_stage: int = 0
    pp_stages: int = 1
    norm_group: dist.ProcessGroup | None = None  # pp: grad norms are summed across the stages
    pp_loss_hook: dict[str, LossHook] | None = None  # pp: the loss_fn's injectable hook
    precision_by_policy: bool = False  # FSDP2 MixedPrecisionPolicy casts; no autocast then
    comm_meter: CommMeter | None = None  # ddp/zero1: payload bytes of the gradient collectives
    comm_plain_bytes: int = 0        # ddp/zero1: what the default all-reduce would hand over

    def loss(self, x: torch.Tensor, y: torch.Tensor, loss_hook: LossHook) -> torch.Tensor:
        """This rank's loss (before backward); pp runs the whole schedule here."""
        if self.pp_schedule is not None:
            return self._pp_step(x, y, loss_hook)
        with _autocast(self.device, self.autocast_dtype):
            logits = self.model(x)
        return loss_hook(lm_loss(logits, y))

    def backward(self, loss: torch.Tensor) -> None:
        if self.pp_schedule is None:
            loss.backward()

    def _pp_step(self, x: torch.Tensor, y: torch.Tensor, loss_hook: LossHook) -> torch.Tensor:
        last = self.pp_stage == self.pp_stages - 1
        losses: list[torch.Tensor] = []
        assert self.pp_schedule is not None and self.pp_loss_hook is not None  # set together
        self.pp_loss_hook["fn"] = loss_hook
        if self.pp_stage == 0:
            self.pp_schedule.step(x)
        elif last:
            self.pp_schedule.step(target=y, losses=losses)
        else:
            self.pp_schedule.step()
        if last:
            return torch.stack([t.detach().float() for t in losses]).mean()
        return torch.tensor(float("nan"), device=self.device)

    def grad_sync(self, on: bool) -> contextlib.AbstractContextManager[object]:
        """Context of one micro-batch's backward: gradients synchronised or accumulated
        locally (DDP ``no_sync``; FSDP2 ``set_requires_gradient_sync(False)``)."""
        if on:
            return contextlib.nullcontext()
        if isinstance(self.model, _NoSync):
            return self.model.no_sync()
        if isinstance(self.model, _GradientSync):
            return _fsdp_no_sync(self.model)
        return contextlib.nullcontext()  # tp / pp: no data-parallel gradient reduction

    @property
    def sharded(self) -> bool:
        """FSDP2 or tensor parallel: DTensor gradients, sharded (ShardedGradScaler's job)."""
        return any(hasattr(p, "_local_tensor") for p in self.model.parameters())

    def params(self) -> list[nn.Parameter]:
        return [p for p in self.model.parameters()]

    def clip(self, max_norm: float) -> float:
        return clip_grad_norm(self.params(), max_norm, self.norm_group)


@contextlib.contextmanager
def _fsdp_no_sync(model: _GradientSync) -> Iterator[None]:
    model.set_requires_gradient_sync(False)
    try:
        yield
    finally:
        model.set_requires_gradient_sync(True)


def _autocast(device: torch.device, dtype: torch.dtype | None
              ) -> contextlib.AbstractContextManager[object]:
    if dtype is None:
        return contextlib.nullcontext()
    return torch.autocast(device.type, dtype=dtype)


def clip_grad_norm(params: Iterable[nn.Parameter], max_norm: float,
                   group: dist.ProcessGroup | None = None) -> float:
    """Global grad-norm clipping that works for plain, sharded (FSDP) and TP (DTensor) grads.

    A DTensor's norm is reduced over its mesh; replicated tensors are counted once.
    ``group`` sums the squared norm over ranks holding different parameters (pipeline).
    """
    grads = [p.grad for p in params if p.grad is not None]
    total_sq = torch.zeros((), dtype=torch.float64)
    for g in grads:
        n = torch.linalg.vector_norm(g.detach(), dtype=torch.float32)
        if hasattr(n, "full_tensor"):
            n = n.full_tensor()
        total_sq += n.double().cpu() ** 2
    if group is not None:
        dev = grads[0].device if grads and grads[0].device.type != "meta" else "cpu"
        t = total_sq.to(dev)
        dist.all_reduce(t, group=group)
        total_sq = t.cpu()
    total = math.sqrt(float(total_sq))
    if max_norm > 0 and total > max_norm:
        coef = max_norm / (total + 1e-6)
        for g in grads:
            g.detach().mul_(coef)
    return total


BUILDERS: dict[str, tuple[str, str]] = {
    "ddp": ("data_parallel", "build_ddp"),
    "zero1": ("data_parallel", "build_zero1"),
    "fsdp": ("sharded", "build_fsdp"),
    "zero2": ("sharded", "build_zero2"),
    "zero3": ("sharded", "build_zero3"),
    "pp": ("pipeline", "build_pp"),
    "tp": ("tensor_parallel", "build_tp"),
    "tp-dp": ("tensor_parallel", "build_tp_dp"),
    "hsdp": ("sharded", "build_hsdp"),
}


def build(name: str, mcfg: ModelConfig, rcfg: RunConfig, device: torch.device,
          injector: Injector) -> Strategy:
    import importlib

    # Import only the chosen family: pipelining or DTensor alone cost seconds to import.
    module, fn = BUILDERS[name]
    builder = getattr(importlib.import_module(f"ddpdoctor.train.strategies.{module}"), fn)
    strategy = builder(mcfg, rcfg, device, injector)
    strategy.name = name
    strategy.device = device
    if not strategy.precision_by_policy:
        strategy.autocast_dtype = autocast_dtype(rcfg.precision, device)
    return strategy


def autocast_dtype(precision: str, device: torch.device) -> torch.dtype | None:
    if precision == "auto":
        return torch.bfloat16 if device.type == "cuda" else None
    return {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}[precision]


def make_optimizer(params: Iterable[nn.Parameter], rcfg: RunConfig) -> torch.optim.Optimizer:
    return torch.optim.AdamW(params, lr=rcfg.lr, weight_decay=0.01)
