"""What one rank of the reference trainer really holds: the check on ``plan``'s numbers.

The trainer measures its last step when ``DDPDOCTOR_TRAIN_MEMORY=1`` is set (tests and
``benchmarks/bench_plan.py``); otherwise nothing here runs and training is unchanged:

- model states: the exact bytes of the parameter, gradient and optimizer-state tensors
  this rank holds (the local shard of a DTensor / FSDP2 parameter, the local optimizer
  of ZeroRedundancyOptimizer), taken after ``optimizer.step()``, before ``zero_grad``;
- activations: the bytes autograd saves for backward in the step (saved-tensor hooks,
  each storage once, parameters and views of them left out);
- peak: ``torch.cuda.max_memory_allocated`` on GPU; on CPU (PyTorch's allocator keeps no
  CPU statistics) what lived when the step began (parameters, optimizer state, DDP's
  buckets) plus the highest rise of the profiler's allocation total during the step.

The pack hook returns the tensor it is given: the step computes the same.
"""

from __future__ import annotations

import gc
import os
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING

import torch
from torch import nn

from ddpdoctor.core.contract import TRAIN_MEMORY

if TYPE_CHECKING:
    from torch._C._profiler import _ProfilerEvent
    from torch.autograd.graph import saved_tensors_hooks
    from torch.profiler import profile, record_function

ENV = TRAIN_MEMORY
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


def state_bytes(module: nn.Module, optimizer: torch.optim.Optimizer) -> tuple[int, int, int]:
    """(parameter, gradient, optimizer-state) bytes held by this rank, local shards only."""
    params = list(module.parameters())
    local_opt = getattr(optimizer, "optim", optimizer)  # ZeroRedundancyOptimizer's own shard
    opt = 0
    for state in local_opt.state.values():
        for v in state.values():
            if isinstance(v, torch.Tensor):
                opt += _nbytes(v)
    return (sum(_nbytes(p) for p in params), sum(_nbytes(p.grad) for p in params), opt)


def _is_param(t: torch.Tensor | None) -> bool:
    while t is not None:
        if isinstance(t, nn.Parameter):
            return True
        t = t._base
    return False


class StepMemory:
    """Measure the last training step of one strategy: ``step()`` before it begins,
    ``take_states(...)`` after ``optimizer.step()``, ``stop()`` after that."""

    MARK = "ddpdoctor_measured_step"

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.values = dict.fromkeys(FIELDS, 0.0)
        self._seen: set[int] = set()
        self._hooks: saved_tensors_hooks | None = None
        self._prof: profile | None = None
        self._mark: record_function | None = None
        self._resident = 0

    def _pack(self, t: torch.Tensor) -> torch.Tensor:
        if not _is_param(t):
            local = _local(t)
            storage = local.untyped_storage()
            key = storage.data_ptr()
            if key not in self._seen and local.device.type != "meta":
                self._seen.add(key)
                self.values["activations_bytes"] += storage.nbytes()
        return t

    def step(self) -> None:
        # tensors of earlier steps caught in reference cycles die whenever the cyclic GC
        # runs: collect them now so the peak is this step's, not the GC's timing
        gc.collect()
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
            torch.cuda.reset_peak_memory_stats(self.device)
        else:
            from torch.profiler import ProfilerActivity, profile

            self._prof = profile(activities=[ProfilerActivity.CPU], profile_memory=True)
            self._prof.__enter__()
            self._mark = torch.profiler.record_function(self.MARK)
            self._mark.__enter__()
        self._hooks = torch.autograd.graph.saved_tensors_hooks(self._pack, lambda t: t)
        self._hooks.__enter__()

    def take_states(self, module: nn.Module, optimizer: torch.optim.Optimizer,
                    wrapper: object = None) -> None:
        p, g, o = state_bytes(module, optimizer)
        self.values.update(params_bytes=p, grads_bytes=g, optimizer_bytes=o)
        # what lived before the step began: parameters, optimizer state (made in step 1),
        # and DDP's gradient buckets (DDP reports their sizes itself)
        self._resident = p + o + _ddp_bucket_bytes(wrapper)

    def stop(self) -> None:
        if self._hooks is not None:
            self._hooks.__exit__(None, None, None)
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
            self.values["peak_bytes"] = torch.cuda.max_memory_allocated(self.device)
            return
        if self._mark is not None:
            self._mark.__exit__(None, None, None)
        assert self._prof is not None  # step() started it (CPU)
        self._prof.__exit__(None, None, None)
        self.values["peak_bytes"] = self._resident + _cpu_growth(self._prof, self.MARK)

    def vector(self) -> list[float]:
        return [float(self.values[k]) for k in FIELDS]


def _events(events: Iterable[_ProfilerEvent]) -> Iterator[_ProfilerEvent]:
    for e in events:
        yield e
        yield from _events(e.children)


def _ddp_bucket_bytes(wrapper: object) -> int:
    get = getattr(wrapper, "_get_ddp_logging_data", None)
    if get is None:
        return 0
    sizes = str(get().get("bucket_sizes", "") or "")
    return sum(int(x) for x in sizes.split(",") if x.strip().isdigit())


def _cpu_growth(prof: profile, mark: str) -> float:
    """How far the CPU allocator's running total rose above its value when ``mark`` began.

    Only the rise inside the step is taken from the counter: a tensor freed on a thread the
    profiler does not follow (gloo's, after an earlier step) is never subtracted from it,
    so its absolute value drifts by whole buffers from run to run.
    """
    from torch._C._profiler import _EventType, _ExtraFields_Allocation

    # the profile has been exited (stop()): its results are there
    assert prof.profiler is not None and prof.profiler.kineto_results is not None
    events = list(_events(prof.profiler.kineto_results.experimental_event_tree()))
    window = [e for e in events if e.name == mark]
    if not window:
        return float("nan")
    lo, hi = window[0].start_time_ns, window[0].end_time_ns
    in_step = sorted((e for e in events if e.tag == _EventType.Allocation
                      and lo <= e.start_time_ns <= hi), key=lambda e: e.start_time_ns)
    # an Allocation event's extra_fields are _ExtraFields_Allocation: isinstance says so
    allocs = [f for e in in_step
              if isinstance(f := e.extra_fields, _ExtraFields_Allocation)
              and f.device.type == "cpu"]
    if not allocs:
        return float("nan")
    base = allocs[0].total_allocated - allocs[0].alloc_size
    return float(max(f.total_allocated for f in allocs) - base)
