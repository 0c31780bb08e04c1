"""MEMORY_GROWTH and OOM.

Every few step boundaries one number is sampled: CUDA allocated bytes (no sync) or the
process RSS (one read of /proc/self/statm). Growth that is steady over a window of steps
(most steps grow, and the window grew by a floor) is a leak or a kept graph; the finding
carries the series and, once, the largest live tensors. A CUDA out-of-memory error
triggers, through the allocator's OOM observer, a memory snapshot written next to the
events file. An out-of-memory exception (CUDA, or the CPU allocator's "can't allocate
memory") that ends the program or leaves a ``with watch(...)`` block gives OOM with the
recent memory history, the host's free memory and the largest live tensors. A host OOM
*kill* (SIGKILL) gives no chance to react: ``ddpdoctor run`` and ``diagnose`` report it.
"""

from __future__ import annotations

import gc
import os
import re
import time
import warnings
from types import ModuleType
from typing import TYPE_CHECKING, TypedDict

from ddpdoctor.core.contract import OOM_SNAPSHOT_FILE
from ddpdoctor.core.findings import Finding
from ddpdoctor.watch.base import WatchCheck
from ddpdoctor.watch.oom_plan import advice_for_watch

if TYPE_CHECKING:

    from ddpdoctor.watch.context import CheckContext

_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


class TensorInfo(TypedDict):
    """One live tensor in a finding's ``largest_tensors``."""

    shape: list[int]
    dtype: str
    device: str
    mb: float
    requires_grad: bool


_statm: tuple[int, int] | None = None  # (pid, fd): one open file per process


def rss_bytes() -> int:
    """This process's resident memory: one pread of a kept-open /proc file (an open and
    a close per sample cost 7x more; a forked child opens its own)."""
    global _statm
    try:
        pid = os.getpid()
        if _statm is None or _statm[0] != pid:
            _statm = (pid, os.open(f"/proc/{pid}/statm", os.O_RDONLY | os.O_CLOEXEC))
        return int(os.pread(_statm[1], 128, 0).split()[1]) * _PAGE
    except (OSError, ValueError, IndexError, AttributeError):
        import psutil

        return int(psutil.Process().memory_info().rss)


def growth(samples: list[tuple[int, int]], min_growth: float,
           min_rising: float = 0.7) -> dict[str, object] | None:
    """``samples`` = [(step, bytes)] -> evidence when memory grew steadily, else None.

    Judged on the floor, not the samples: the floor at a sample is the least memory
    from that sample on, i.e. what the process never gave back. A leak or a kept graph
    raises the floor at most samples; memory that is freed again (an allocator's
    sawtooth, a cache filled and trimmed, a buffer held until the next check step) does
    not, however high its peaks."""
    if len(samples) < 3:
        return None
    floor = [b for _, b in samples]
    for i in range(len(floor) - 2, -1, -1):
        floor[i] = min(floor[i], floor[i + 1])
    diffs = [b - a for a, b in zip(floor, floor[1:])]
    total = floor[-1] - floor[0]
    rising = sum(d > 0 for d in diffs) / len(diffs)
    if total < min_growth or rising < min_rising:
        return None
    steps = samples[-1][0] - samples[0][0]
    return {"from_step": samples[0][0], "to_step": samples[-1][0],
            "growth_mb": round(total / 2**20, 1),
            "mb_per_step": round(total / 2**20 / max(steps, 1), 2),
            "rising_steps": f"{sum(d > 0 for d in diffs)}/{len(diffs)}"}


def largest_tensors(limit: int = 5,
                    exclude: frozenset[int] = frozenset()) -> list[TensorInfo]:
    """The biggest live tensors (a gc walk, ~50 ms: only when a finding is emitted);
    ``exclude``: storage pointers not to list (the watch's own buffers)."""
    import torch

    seen: dict[int, TensorInfo] = {}
    with warnings.catch_warnings():  # isinstance() pokes deprecated module attributes
        warnings.simplefilter("ignore")
        objects = [o for o in gc.get_objects() if isinstance(o, torch.Tensor)]
    for obj in objects:
        try:
            if isinstance(obj, torch.Tensor) and not obj.is_meta:
                key = obj.untyped_storage().data_ptr()
                if key in exclude:
                    continue
                size = obj.untyped_storage().nbytes()
                if key not in seen or seen[key]["mb"] < size / 2**20:
                    seen[key] = {"shape": list(obj.shape), "dtype": str(obj.dtype),
                                 "device": str(obj.device), "mb": round(size / 2**20, 2),
                                 "requires_grad": bool(obj.requires_grad)}
        except Exception:  # some objects refuse introspection
            continue
    return sorted(seen.values(), key=lambda d: -d["mb"])[:limit]


_ASKED = re.compile(r"(?:tried to allocate|Tried to allocate) (?P<n>\d+(?:\.\d+)?) ?"
                    r"(?P<unit>bytes|B|KiB|MiB|GiB|TiB)")
_UNITS = {"bytes": 1, "B": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "TiB": 2**40}


def oom_kind(exc: BaseException) -> str | None:
    """"cuda" / "host" when ``exc`` is an out-of-memory error, else None."""
    text = str(exc)
    if type(exc).__name__ == "OutOfMemoryError" or "CUDA out of memory" in text:
        return "cuda"
    if isinstance(exc, MemoryError) or (isinstance(exc, RuntimeError)
                                        and "can't allocate memory" in text):
        return "host"
    return None


def requested_bytes(text: str) -> int | None:
    m = _ASKED.search(text)
    return int(float(m["n"]) * _UNITS[m["unit"]]) if m else None


def own_storages(w: CheckContext) -> frozenset[int]:
    return frozenset(t.untyped_storage().data_ptr() for c in w.checks
                     for t in getattr(c, "buffers", ()))


class MemoryCheck(WatchCheck):
    name = "memory"

    def attach(self, w: CheckContext) -> None:
        import torch

        self.samples: list[tuple[int, int]] = []
        self.every_n = max(1, min(w.cfg.memory_every, w.cfg.every))
        self.done = False
        self.device = w.device
        self.cuda = self.device is not None and self.device.type == "cuda"
        self.kind = "cuda_allocated" if self.cuda else "rss"
        if self.cuda:
            self._attach_oom(w, torch)

    def sample(self) -> int:
        if self.cuda:
            import torch

            return int(torch.cuda.memory_allocated(self.device))
        return rss_bytes()

    def step_end(self, w: CheckContext, step: int) -> None:
        # Reading RSS costs a /proc read; one sample every few steps shows a leak as well.
        if step % self.every_n:
            return
        value = self.sample()
        w.monitor.memory(value)
        if self.done:
            return
        cfg = w.cfg
        if step <= cfg.memory_warmup_steps:
            return
        self.samples.append((step, value))
        self.samples = self.samples[-cfg.memory_window:]
        if len(self.samples) < cfg.memory_window:
            return
        ev = growth(self.samples, cfg.memory_min_growth_mb * 2**20)
        if ev is None:
            return
        self.done = True
        ev.update(step=step, metric=self.kind,
                  series_mb=[round(b / 2**20, 1) for _, b in self.samples],
                  largest_tensors=largest_tensors(exclude=own_storages(w)))
        w.emit(Finding("MEMORY_GROWTH",
                       f"{self.kind} grew {ev['growth_mb']} MB over steps {ev['from_step']}-"
                       f"{ev['to_step']} ({ev['mb_per_step']} MB/step) on rank {w.rank}",
                       ranks=[w.rank], evidence=ev), step)

    def on_exception(self, w: CheckContext, exc: BaseException) -> None:
        kind = oom_kind(exc)
        if kind is None:
            return
        text = str(exc).strip()
        self._emit_oom(w, kind, requested_bytes(text),
                       {"error": text.splitlines()[0][:400] if text else type(exc).__name__})

    def _emit_oom(self, w: CheckContext, kind: str, asked: int | None,
                  extra: dict[str, object], gpu_free: int | None = None) -> None:
        """One OOM finding with the memory evidence; a CUDA OOM's first report (the
        allocator's observer, before the exception exists) is the one that counts."""
        import psutil

        vm = psutil.virtual_memory()
        ev: dict[str, object] = {
            "kind": kind,
            "requested_mb": round(asked / 2**20, 1) if asked is not None else None,
            "rss_mb": round(rss_bytes() / 2**20, 1),
            "host_available_mb": round(vm.available / 2**20, 1),
            "host_total_mb": round(vm.total / 2**20, 1),
            "metric": self.kind,
            # sampled every few steps (the heartbeat's history), and now (the failed step)
            "history_mb": [[s, round(b / 2**20, 1)] for s, b in
                           [*w.monitor.mem_history, (w.step + 1, self.sample())]],
            "largest_tensors": largest_tensors(exclude=own_storages(w)),
            "plan": advice_for_watch(w, kind), **extra}
        asked_text = f"asked {asked / 2**30:.2f} GiB" if asked is not None else "an allocation"
        if kind == "cuda":
            free = (f"{gpu_free / 2**30:.2f} GiB free on the GPU" if gpu_free is not None
                    else "see the error for the GPU's free memory")
            title = (f"CUDA out of memory on rank {w.rank} in step {w.step + 1}: "
                     f"{asked_text}, {free}")
        else:
            title = (f"host out of memory on rank {w.rank} in step {w.step + 1}: {asked_text}, "
                     f"{vm.available / 2**30:.1f} GiB of host memory available")
        w.emit(Finding("OOM", title, ranks=[w.rank], evidence=ev), w.step + 1)

    def _attach_oom(self, w: CheckContext, torch: ModuleType) -> None:
        observer = getattr(torch._C, "_cuda_attach_out_of_memory_observer", None)
        if observer is None:
            return
        if w.cfg.oom_history:
            try:
                torch.cuda.memory._record_memory_history(max_entries=100000)
            except Exception:  # older torch: snapshot without history
                pass

        def on_oom(device: int, alloc: int, device_alloc: int, device_free: int) -> None:
            try:
                path = self._snapshot(w, torch)
                self._emit_oom(w, "cuda", alloc, {
                    "device": device, "allocated_mb": round(device_alloc / 2**20, 1),
                    "gpu_free_mb": round(device_free / 2**20, 1), "snapshot": path},
                    gpu_free=device_free)
            except Exception:  # never turn an OOM into a different error
                pass

        observer(on_oom)

    def _snapshot(self, w: CheckContext, torch: ModuleType) -> str | None:
        import pickle

        base = os.path.dirname(w.sink.path or "") or w.cfg.heartbeat_dir or os.getcwd()
        path = os.path.join(base, OOM_SNAPSHOT_FILE.format(rank=w.rank, time=int(time.time())))
        with open(path, "wb") as f:
            pickle.dump(torch.cuda.memory._snapshot(), f)
        return path
