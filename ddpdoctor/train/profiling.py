"""``--profile N``: a torch.profiler trace of N steps on every rank, as Chrome trace JSON.

The steps traced start at the second step when the run has more than N (the first pays
for lazy initialisation and allocator warm-up), else at the first. Each rank writes
``DIR/<strategy>-rank<R>.json`` and prints its path: open it in https://ui.perfetto.dev
or chrome://tracing. CUDA activity is traced too where there is a GPU.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

import torch

from ddpdoctor.train.config import RunConfig

if TYPE_CHECKING:
    from torch.profiler import profile


def traced_steps(first: int, last: int, count: int) -> range:
    """Pure: the steps to trace in a run of steps ``first``..``last``."""
    if count <= 0:
        return range(0)
    start = first + 1 if last - first + 1 > count else first
    return range(start, min(last, start + count - 1) + 1)


def trace_path(directory: str, strategy: str, rank: int) -> str:
    return os.path.join(directory, f"{strategy}-rank{rank}.json")


class StepProfiler:
    def __init__(self, strategy: str, rcfg: RunConfig, rank: int, first_step: int) -> None:
        self.steps = traced_steps(first_step, rcfg.steps, rcfg.profile)
        self.path = trace_path(rcfg.profile_dir, strategy, rank)
        self.rank = rank
        self._prof: profile | None = None

    def begin(self, step: int) -> None:
        if not self.steps or step != self.steps[0]:
            return
        from torch.profiler import ProfilerActivity, profile

        activities = [ProfilerActivity.CPU]
        if torch.cuda.is_available():
            activities.append(ProfilerActivity.CUDA)
        self._prof = profile(activities=activities, record_shapes=True, profile_memory=True)
        self._prof.__enter__()

    def end(self, step: int) -> None:
        if self._prof is None or step != self.steps[-1]:
            return
        prof, self._prof = self._prof, None
        prof.__exit__(None, None, None)
        os.makedirs(os.path.dirname(self.path) or ".", exist_ok=True)
        prof.export_chrome_trace(self.path)
        print(f"rank {self.rank}: profile of steps {self.steps[0]}-{self.steps[-1]}: "
              f"{os.path.abspath(self.path)} (open in https://ui.perfetto.dev)", flush=True)
