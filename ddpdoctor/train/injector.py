"""The :class:`Injector`: plants this run's faults on this rank at the trainer's hook points
(model built, data pipeline built, step start, loss computed, step end).
"""

from __future__ import annotations

import os
import signal
from collections.abc import Callable
from typing import TYPE_CHECKING

from ddpdoctor.train.faults import (
    _allocate_activations,
    _compute_forever,
    _DataFault,
    _exchange_with_peer,
    _lone_all_reduce,
    _overflow_in_backward,
    _SlowData,
    _straggle,
    _sync_metrics,
    _throttle_egress,
)
from ddpdoctor.train.injections import (
    ALL_RANKS,
    DESYNC_NOISE,
    LEAK_BYTES_PER_STEP,
    SLOW_LINK_RATE,
    STRAGGLER_DELAY_S,
    Injection,
)

if TYPE_CHECKING:
    import torch
    import torch.distributed as dist
    from torch import nn

    from ddpdoctor.train.model import GPT


class Injector:
    """Plants this run's faults on this rank at the trainer's hook points."""

    def __init__(self, injections: list[Injection], rank: int, world: int) -> None:
        self.injections = injections
        self.rank = rank
        self.world = world
        self.step = 0
        self._leak: list[torch.Tensor] = []
        self._side_group: dist.ProcessGroup | None = None

    def _get(self, name: str) -> Injection | None:
        for inj in self.injections:
            if inj.name == name:
                return inj
        return None

    def _due(self, name: str, from_step: bool = False) -> Injection | None:
        """The injection if it acts on this rank at the current step."""
        inj = self._get(name)
        if inj is None or not inj.on(self.rank):
            return None
        hit = self.step >= inj.step if from_step else self.step == inj.step
        return inj if hit else None

    # -- set-up hooks

    def setup(self) -> None:
        """Collective set-up every rank must do alike (call right after init)."""
        if self._get("lone-collective"):
            import torch.distributed as dist

            # A side group made on every rank; only the culprit ever uses it.
            self._side_group = dist.new_group(backend=dist.get_backend())

    @property
    def use_sampler(self) -> bool:
        return self._get("no-sampler") is None

    @property
    def call_set_epoch(self) -> bool:
        return self._get("no-set-epoch") is None

    def num_workers(self, requested: int) -> int:
        if self._get("worker-kill") or self._get("worker-bus"):
            return max(1, requested)
        return requested

    def model_built(self, model: GPT) -> None:
        """Change the bare model before any wrapping (unused modules, forward hooks)."""
        from torch import nn

        from ddpdoctor.train.model import Block

        if self._get("unused-param"):
            # on every rank: DDP requires the same parameters everywhere
            model.unused_head = nn.Linear(model.cfg.dim, model.cfg.vocab)
        if self._get("unused-branch") and model.blocks:
            block = list(model.blocks.values())[-1]
            assert isinstance(block, Block)  # build_model's blocks; the branch calls its parts
            plain = type(block).forward
            injector = self

            def forward(x: torch.Tensor) -> torch.Tensor:
                if injector._due("unused-branch", from_step=True):
                    # the data-dependent branch: this batch "takes the other path"
                    return x + block.attn(block.ln1(x))
                return plain(block, x)

            block.forward = forward  # type: ignore[method-assign]  # the fault patches it
        if self._get("straggler") or self._get("hang-compute") or self._get("oom"):
            model.register_forward_pre_hook(self._forward_faults)

    def _forward_faults(self, module: nn.Module, args: tuple[object, ...]) -> None:
        if self._due("hang-compute"):
            _compute_forever()
        if self._due("oom"):
            _allocate_activations(next(module.parameters()).device)
        if self._due("straggler", from_step=True):
            _straggle(STRAGGLER_DELAY_S)

    def dataset_fault(self, batches_of_step: Callable[[int], list[int]],
                      steps_per_epoch: int) -> Callable[[int, int], None] | None:
        """A per-sample hook for the Dataset (runs in DataLoader workers too)."""
        for name in ("data-stall", "worker-kill", "worker-bus"):
            inj = self._get(name)
            if inj and inj.on(self.rank):
                epoch = (inj.step - 1) // steps_per_epoch
                first = batches_of_step(inj.step)[0]
                return _DataFault(name, epoch, first)
        inj = self._get("slow-data")
        if inj and inj.on(self.rank):
            return _SlowData((inj.step - 1) // steps_per_epoch)
        return None

    # -- per-step hooks

    def step_begin(self, step: int, params: Callable[[], list[nn.Parameter]]) -> None:
        self.step = step
        if self._due("crash"):
            raise RuntimeError(f"ddpdoctor injected crash: rank {self.rank} at step {step}")
        if self._due("oom-kill"):
            os.kill(os.getpid(), signal.SIGKILL)
        if self._due("slow-link"):
            _throttle_egress(os.environ["GLOO_SOCKET_IFNAME"], SLOW_LINK_RATE)
        if self._due("desync"):
            import torch

            with torch.no_grad():
                gen = torch.Generator().manual_seed(1234 + self.rank)
                for p in params():
                    local = getattr(p, "_local_tensor", p)
                    noise = torch.randn(local.shape, generator=gen, dtype=local.dtype)
                    local.add_(DESYNC_NOISE * noise.to(local.device))

    def micro_batches(self, configured: int) -> int:
        """accum-skew: the culprit splits its batch into one micro-batch more."""
        return configured + 1 if self._due("accum-skew", from_step=True) else configured

    def comm_hook(self, configured: str) -> str:
        """hook-one-rank: the culprit's DDP gets fp16 compression (none where the run
        compresses), the others keep what the run asked for."""
        inj = self._get("hook-one-rank")
        if inj is None or not inj.on(self.rank):
            return configured
        return "fp16" if configured == "none" else "none"

    def loss(self, loss: torch.Tensor) -> torch.Tensor:
        if self._due("nan"):
            return loss * float("nan")
        if self._due("scaler-overflow", from_step=True):
            loss = _overflow_in_backward(loss)
        if self._due("leak", from_step=True):
            import torch

            self._leak.append(torch.ones(LEAK_BYTES_PER_STEP // 4))
            self._leak.append(loss)  # keeps this step's autograd graph alive
        return loss

    def step_end(self, device: torch.device) -> None:
        import torch

        if self._due("lone-collective"):
            _lone_all_reduce(torch.ones(1, device=device), self._side_group)
        if (inj := self._get("collective-order")) and self.step == inj.step:
            _sync_metrics(torch.ones(4, device=device), culprit=inj.on(self.rank))
        if (inj := self._get("p2p-deadlock")) and self.step == inj.step:
            pair = {inj.rank, inj.rank ^ 1} if inj.rank != ALL_RANKS else {self.rank}
            if self.rank in pair:
                _exchange_with_peer(torch.ones(4, device=device), self.rank ^ 1)
