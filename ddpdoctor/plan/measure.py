"""What one rank of the reference trainer really holds: the check on ``plan``'s numbers.

The trainer measures its last step when ``DDPDOCTOR_TRAIN_MEMORY=1`` is set (tests and
``benchmarks/bench_plan.py``); otherwise nothing here runs and training is unchanged:

- model states: the exact bytes of the parameter, gradient and optimizer-state tensors
  this rank holds (the local shard of a DTensor / FSDP2 parameter, the local optimizer
  of ZeroRedundancyOptimizer), taken after ``optimizer.step()``, before ``zero_grad``;
- activations: the bytes autograd saves for backward in the step (saved-tensor hooks,
  each storage once, parameters and views of them left out);
- peak: ``torch.cuda.max_memory_allocated`` on GPU; on CPU the peak of live tensor bytes
  during the step from the profiler's memory timeline (PyTorch's allocator has no CPU
  statistics). The pack hook returns the tensor it is given: the step computes the same.
"""

from __future__ import annotations

import os
from typing import Any

import torch
from torch import nn

ENV = "DDPDOCTOR_TRAIN_MEMORY"
FIELDS = ("params_bytes", "grads_bytes", "optimizer_bytes", "activations_bytes", "peak_bytes")


def enabled() -> bool:
    return os.environ.get(ENV, "") == "1"


def _local(t: torch.Tensor) -> torch.Tensor:
    return getattr(t, "_local_tensor", t)


def _nbytes(t: torch.Tensor | None) -> int:
    if t is None:
        return 0
    t = _local(t)
    return t.numel() * t.element_size()


def state_bytes(module: nn.Module, optimizer: Any) -> tuple[int, int, int]:
    """(parameter, gradient, optimizer-state) bytes held by this rank, local shards only."""
    params = list(module.parameters())
    local_opt = getattr(optimizer, "optim", optimizer)  # ZeroRedundancyOptimizer's own shard
    opt = 0
    for state in local_opt.state.values():
        for v in state.values():
            if isinstance(v, torch.Tensor):
                opt += _nbytes(v)
    return (sum(_nbytes(p) for p in params), sum(_nbytes(p.grad) for p in params), opt)


def _is_param(t: torch.Tensor) -> bool:
    while t is not None:
        if isinstance(t, nn.Parameter):
            return True
        t = t._base
    return False


class StepMemory:
    """Measure the last training step of one strategy.

    ``start()`` before the strategy is built (on CPU the profiler then sees every tensor
    the rank allocates, so its running total is absolute), ``step()`` around the last
    step, ``take_states(...)`` after ``optimizer.step()``, ``stop()`` after it.
    """

    MARK = "ddpdoctor_measured_step"

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.values = dict.fromkeys(FIELDS, 0.0)
        self._seen: set[int] = set()
        self._hooks: Any = None
        self._prof: Any = None
        self._mark: Any = None

    def _pack(self, t: torch.Tensor) -> torch.Tensor:
        if not _is_param(t):
            local = _local(t)
            storage = local.untyped_storage()
            key = storage.data_ptr()
            if key not in self._seen and local.device.type != "meta":
                self._seen.add(key)
                self.values["activations_bytes"] += storage.nbytes()
        return t

    def start(self) -> StepMemory:
        if self.device.type != "cuda":
            from torch.profiler import ProfilerActivity, profile

            self._prof = profile(activities=[ProfilerActivity.CPU], profile_memory=True)
            self._prof.__enter__()
        return self

    def step(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
            torch.cuda.reset_peak_memory_stats(self.device)
        else:
            self._mark = torch.profiler.record_function(self.MARK)
            self._mark.__enter__()
        self._hooks = torch.autograd.graph.saved_tensors_hooks(self._pack, lambda t: t)
        self._hooks.__enter__()

    def take_states(self, module: nn.Module, optimizer: Any) -> None:
        p, g, o = state_bytes(module, optimizer)
        self.values.update(params_bytes=p, grads_bytes=g, optimizer_bytes=o)

    def stop(self) -> None:
        if self._hooks is not None:
            self._hooks.__exit__(None, None, None)
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
            self.values["peak_bytes"] = torch.cuda.max_memory_allocated(self.device)
            return
        if self._mark is not None:
            self._mark.__exit__(None, None, None)
        self._prof.__exit__(None, None, None)
        self.values["peak_bytes"] = _cpu_peak(self._prof, self.MARK)

    def vector(self) -> list[float]:
        return [float(self.values[k]) for k in FIELDS]


def _events(events: Any) -> Any:
    for e in events:
        yield e
        yield from _events(e.children)


def _cpu_peak(prof: Any, mark: str) -> float:
    """The CPU allocator's running total at its highest inside ``mark``, counted from
    ``start``: the reporter's total also keeps tensors that an earlier profile saw
    allocated and that were freed while it was off, so its value at ``start`` is taken off.
    """
    from torch._C._profiler import _EventType

    events = list(_events(prof.profiler.kineto_results.experimental_event_tree()))
    allocs = sorted((e for e in events if e.tag == _EventType.Allocation
                     and e.extra_fields.device.type == "cpu"), key=lambda e: e.start_time_ns)
    window = [e for e in events if e.name == mark]
    if not window or not allocs:
        return float("nan")
    base = allocs[0].extra_fields.total_allocated - allocs[0].extra_fields.alloc_size
    lo, hi = window[0].start_time_ns, window[0].end_time_ns
    totals = [e.extra_fields.total_allocated for e in allocs if lo <= e.start_time_ns <= hi]
    return float(max(totals, default=float("nan")) - base)
