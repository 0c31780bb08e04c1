"""SAMPLER_MISSING / SAMPLER_EPOCH_NOT_SET, and the DataLoader tap that times data waits.

SAMPLER_MISSING needs proof, not a guess from the sampler's type (people shard by hand):
on check steps every rank fingerprints its first input batch (an exact bit sum), and when
all ranks of a data-parallel group fed identical batches they train on the same data.
One identical check is enough when the loader is known not to use a DistributedSampler,
two otherwise; a loader with a DistributedSampler is never blamed.

SAMPLER_EPOCH_NOT_SET: each new iterator over a loader is an epoch start; a shuffling
DistributedSampler whose ``epoch`` did not change since the previous start replays the
same order.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ddpdoctor.core.findings import Finding
from ddpdoctor.watch.base import WatchCheck, bit_sum, first_tensor

if TYPE_CHECKING:
    import torch

    from ddpdoctor.watch.context import CheckContext


def sampler_of(loader: object) -> object:
    sampler = getattr(loader, "sampler", None)
    batch_sampler = getattr(loader, "batch_sampler", None)
    inner = getattr(batch_sampler, "sampler", None)
    if inner is not None and type(sampler).__name__ == "SequentialSampler":
        return inner  # a custom batch_sampler wraps the real one
    return sampler


def is_distributed(sampler: object) -> bool:
    from torch.utils.data import DistributedSampler

    return isinstance(sampler, DistributedSampler)


def epoch_not_advanced(previous: int | None, current: int) -> bool:
    return previous is not None and previous == current


class LoaderTap:
    """Instance-level wrappers on one DataLoader (its class is left alone; ``remove``
    restores it): new iterator = epoch start; ``_next_data`` = time spent waiting."""

    # Any: a DataLoader, or any loader with its private iterator factory, patched per instance
    def __init__(self, loader: Any, on_epoch: Callable[[object], None],
                 on_wait: Callable[[float], None]) -> None:
        self.loader = loader
        self.on_epoch, self.on_wait = on_epoch, on_wait
        self._had = "_get_iterator" in vars(loader)
        self._orig = loader._get_iterator
        loader._get_iterator = self._get_iterator

    def _get_iterator(self) -> object:
        it = self._orig()
        self.on_epoch(self.loader)
        try:
            nxt = it._next_data
            wait = self.on_wait

            def _next_data() -> object:
                t0 = time.perf_counter()
                try:
                    return nxt()
                finally:
                    wait(time.perf_counter() - t0)

            it._next_data = _next_data
            if getattr(self.loader, "persistent_workers", False):
                reset = it._reset

                def _reset(loader: object, first_iter: bool = False) -> object:
                    out = reset(loader, first_iter)
                    self.on_epoch(self.loader)
                    return out

                it._reset = _reset
        except AttributeError:
            pass
        return it

    def remove(self) -> None:
        if self._had:
            self.loader._get_iterator = self._orig
        else:
            vars(self.loader).pop("_get_iterator", None)


class SamplerCheck(WatchCheck):
    name = "sampler"
    width = 2

    def attach(self, w: CheckContext) -> None:
        self.fp: torch.Tensor | None = None  # this rank's input fingerprint (bit_sum)
        self.fp_step = 0
        self.identical = 0
        self.missing_done = False
        self.epochs: dict[int, int | None] = {}

    def loader_kinds(self, w: CheckContext) -> set[str]:
        return {"distributed" if is_distributed(sampler_of(ld)) else "other"
                for ld in w.loaders}

    def on_epoch(self, w: CheckContext, loader: object) -> None:
        sampler = sampler_of(loader)
        if not is_distributed(sampler) or not getattr(sampler, "shuffle", False):
            return
        key = id(loader)
        previous = self.epochs.get(key)
        current = int(getattr(sampler, "epoch", 0))
        self.epochs[key] = current
        if epoch_not_advanced(previous, current):
            step = w.step + 1
            w.emit(Finding(
                "SAMPLER_EPOCH_NOT_SET",
                f"a new epoch started with DistributedSampler.epoch still {current}: "
                "set_epoch() is not called, every epoch repeats the same order",
                ranks=[w.rank], evidence={"step": step, "sampler_epoch": current,
                                          "loader": type(loader).__name__}), step)

    def forward_pre(self, w: CheckContext, args: tuple, kwargs: dict) -> None:
        step = w.step + 1
        if self.missing_done or self.fp_step == step or not w.is_check_step(step):
            return
        t = first_tensor(args) if args else first_tensor(kwargs)
        if t is not None:
            self.fp, self.fp_step = bit_sum(t), step

    def pack(self, w: CheckContext, step: int) -> torch.Tensor:
        import torch

        out = torch.zeros(2, dtype=torch.int64)
        if self.fp is not None and self.fp_step == step:
            out[0], out[1] = self.fp.cpu(), 1
        self.fp = None
        return out.view(torch.float64)

    def analyze(self, w: CheckContext, step: int, rows: torch.Tensor) -> list[Finding]:
        import torch

        if self.missing_done:
            return []
        kinds = self.loader_kinds(w)
        if kinds == {"distributed"}:
            return []
        need = 1 if "other" in kinds else 2
        data = rows.contiguous().view(torch.int64).tolist()
        groups = [g for g in w.peer_groups() if len(g) > 1
                  and all(data[r][1] for r in g) and len({data[r][0] for r in g}) == 1]
        if not groups:
            self.identical = 0
            return []
        self.identical += 1
        if self.identical < need:
            return []
        self.missing_done = True
        samplers = sorted({type(sampler_of(ld)).__name__ for ld in w.loaders})
        return [Finding(
            "SAMPLER_MISSING",
            f"ranks {','.join(map(str, g))} fed bit-identical input batches: every "
            "data-parallel rank trains on the same samples (no DistributedSampler)",
            ranks=g, evidence={"step": step, "identical_checks": self.identical,
                               "samplers": samplers or None}) for g in groups]
