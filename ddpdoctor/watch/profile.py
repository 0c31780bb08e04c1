"""``run --profile START:STEPS``: a torch.profiler window on every rank, no code change.

At the boundary before step START the profiler starts (CPU, and CUDA where there is a
GPU); at the boundary after step START+STEPS-1 it stops, the trace goes to
``profile-rank{R}.json`` beside the events file (open it in Perfetto or chrome://tracing)
and a summary to ``profile-top-rank{R}.json`` (ddpdoctor/core/profiled.py): the operators
that took the most time of their own, and where the window's steps went by the watch's
clock (data wait, forward). Steps are optimizer steps, the watch's; the window costs the
profiler's overhead in those steps only.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable
from typing import TYPE_CHECKING, cast

from ddpdoctor.core.contract import PROFILE_TRACE_FILE
from ddpdoctor.core.profiled import OpTime, ProfileWindow
from ddpdoctor.watch.base import WatchCheck

if TYPE_CHECKING:
    from torch.autograd.profiler_util import FunctionEventAvg
    from torch.profiler import profile

    from ddpdoctor.watch.context import CheckContext

log = logging.getLogger("ddpdoctor.watch")
TOP = 15


def top_ops(averages: Iterable[FunctionEventAvg], limit: int = TOP) -> tuple[OpTime, ...]:
    """The operators with the most time of their own (CPU plus device), from
    ``profiler.key_averages()`` (times there are in microseconds)."""
    rows = []
    for evt in averages:
        cpu = float(getattr(evt, "self_cpu_time_total", 0.0) or 0.0) / 1000
        dev = float(getattr(evt, "self_device_time_total", 0.0) or 0.0) / 1000
        rows.append(OpTime(str(evt.key)[:200], int(evt.count), round(cpu, 3), round(dev, 3)))
    rows.sort(key=lambda o: -(o.self_cpu_ms + o.self_device_ms))
    return tuple(rows[:limit])


def _mean_ms(values: list[float]) -> float | None:
    return round(1000 * sum(values) / len(values), 3) if values else None


class ProfileCheck(WatchCheck):
    name = "profile"

    def attach(self, w: CheckContext) -> None:
        # registry.build adds this check only where a window is set
        self.start, self.steps = cast("tuple[int, int]", w.cfg.profile)
        self.prof: profile | None = None

    def step_end(self, w: CheckContext, step: int) -> None:
        if step == self.start - 1 and self.prof is None:
            self._begin()
        elif step == self.start + self.steps - 1 and self.prof is not None:
            self._end(w, self.prof)
            w.unsubscribe(self, "step_end")

    def _begin(self) -> None:
        import torch
        from torch.profiler import ProfilerActivity, profile

        activities = [ProfilerActivity.CPU]
        if torch.cuda.is_available():
            activities.append(ProfilerActivity.CUDA)
        self.prof = profile(activities=activities)
        self.prof.start()

    def _end(self, w: CheckContext, prof: profile) -> None:
        self.prof = None
        prof.stop()
        directory = os.path.dirname(os.path.abspath(w.sink.path)) if w.sink.path \
            else os.getcwd()
        path = os.path.join(directory, PROFILE_TRACE_FILE.format(rank=w.rank))
        trace: str | None = path
        try:
            prof.export_chrome_trace(path)
        except Exception as e:  # a full disk: the summary still says what it can
            log.warning("ddpdoctor: profile trace not written: %s", e)
            trace = None
        first = self.start
        timed = [t for t in w.window if first <= t[0] < first + self.steps]
        ProfileWindow(w.rank, first, self.steps, _mean_ms([t[1] for t in timed]),
                      _mean_ms([t[2] for t in timed]), _mean_ms([t[3] for t in timed]),
                      top_ops(prof.key_averages()), trace).write(directory)

    def close(self, w: CheckContext) -> None:
        if self.prof is not None:  # the loop ended inside the window
            self._end(w, self.prof)

    def final_local(self, w: CheckContext) -> None:
        self.close(w)  # a zero-code watch is never closed: the exit ends the window
