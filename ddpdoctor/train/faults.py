"""The faults themselves. Function names are what a stack dump of the stuck rank shows
(tests and the docs look for them): keep them. Imported by the ranks only (torch).
"""

from __future__ import annotations

import os
import signal
import time
from typing import TYPE_CHECKING

import torch

from ddpdoctor.train.injections import SLOW_DATA_PER_SAMPLE_S

if TYPE_CHECKING:
    import torch.distributed as dist


def _stall_forever() -> None:
    while True:
        time.sleep(1)


def _compute_forever() -> None:
    while True:
        time.sleep(1)


def _straggle(seconds: float) -> None:
    time.sleep(seconds)


def _allocate_activations(device: torch.device) -> None:
    """One allocation larger than the device: the allocator's own out-of-memory error.

    On CPU, 4x the host's RAM + swap: beyond what the kernel's overcommit heuristic grants
    (check_host refuses where overcommit is "always", as nothing would fail then).
    """

    if device.type == "cuda":
        total = torch.cuda.get_device_properties(device).total_memory
    else:
        import psutil

        total = psutil.virtual_memory().total + psutil.swap_memory().total
    torch.empty(4 * total, dtype=torch.uint8, device=device)


def _throttle_egress(dev: str, rate: str) -> None:
    import subprocess

    r = subprocess.run(["tc", "qdisc", "replace", "dev", dev, "root", "tbf", "rate", rate,
                        "burst", "32kbit", "latency", "400ms"], capture_output=True, text=True,
                       timeout=30)
    if r.returncode:
        raise RuntimeError(f"tc could not throttle {dev}: {r.stderr.strip()}")



class _DataFault:
    """Picklable (DataLoader workers get a copy): acts when the sample of STEP is fetched."""

    def __init__(self, name: str, epoch: int, index: int) -> None:
        self.name, self.epoch, self.index = name, epoch, index

    def __call__(self, epoch: int, index: int) -> None:
        if epoch != self.epoch or index != self.index:
            return
        if self.name == "data-stall":
            _stall_forever()
        elif self.name == "worker-kill":
            os.kill(os.getpid(), signal.SIGKILL)
        elif self.name == "worker-bus":
            os.kill(os.getpid(), signal.SIGBUS)


class _SlowData:
    """Picklable: every sample from the epoch of STEP on takes a while to load."""

    def __init__(self, epoch: int) -> None:
        self.epoch = epoch

    def __call__(self, epoch: int, index: int) -> None:
        if epoch >= self.epoch:
            time.sleep(SLOW_DATA_PER_SAMPLE_S)


def _lone_all_reduce(t: torch.Tensor, group: dist.ProcessGroup | None) -> None:
    import torch.distributed as dist

    dist.all_reduce(t, group=group)


def _sync_metrics(t: torch.Tensor, culprit: bool) -> None:
    import torch.distributed as dist

    if culprit:
        dist.broadcast(t, src=0)
    else:
        dist.all_reduce(t)


def _exchange_with_peer(t: torch.Tensor, peer: int) -> None:
    import torch.distributed as dist

    buf = t.clone()
    dist.recv(buf, src=peer)  # both sides receive first: neither ever sends
    dist.send(t, dst=peer)


OVERFLOW_FACTOR = 1e30  # times the true gradient: far past fp16's 65504 at any loss scale


def _overflow_in_backward(loss: torch.Tensor) -> torch.Tensor:
    """The loss unchanged; its gradient OVERFLOW_FACTOR times too large (a loss term whose
    backward blows up), so every fp16 gradient below it is inf while the scale allows."""
    return _GradBlowup.apply(loss)


class _GradBlowup(torch.autograd.Function):
    @staticmethod
    def forward(ctx: torch.autograd.function.FunctionCtx, x: torch.Tensor) -> torch.Tensor:
        return x.clone()

    @staticmethod
    def backward(ctx: torch.autograd.function.FunctionCtx,
                 grad: torch.Tensor) -> torch.Tensor:
        return grad * OVERFLOW_FACTOR
