"""The small interface every watch check implements; the watcher calls what is defined.

Hook points, in the order a training step meets them: ``forward_pre`` (before the model's
forward, outer module), ``forward_out`` (after the inner module's forward), ``first_grad``
(the first gradient of each backward, before any all-reduce), ``before_check``
(optimizer pre-hook of a check step: gradients are final), ``step_end`` (optimizer
post-hook: the step boundary), ``at_check`` (the boundary of a check step, on every rank,
before ``pack``). The watcher calls only the hooks a check defines, and the check-step
ones only on check steps: every call on the hot path costs time in each step. Where the
first gradient is seen (DDP, plain modules: ``w.first_grad``), the module hooks run only
on the steps that need them: while the watch learns the model, on check steps when a
check defines ``forward_pre``, always when one defines ``forward_out``. Checks that
need other ranks' data declare a fixed ``width`` and ``pack`` that many float64 values on
check steps; ``analyze`` then sees every rank's values.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from ddpdoctor.core.findings import Finding

if TYPE_CHECKING:
    import torch
    from torch.distributed import ProcessGroup

    from ddpdoctor.watch.context import CheckContext


class WatchCheck:
    name = ""
    width = 0  # float64 values this check adds to the every-K-steps all_gather
    # hook points this instance does not use although its class defines them (set in
    # attach: a check with two ways of working subscribes to one)
    skip: frozenset[str] = frozenset()

    def attach(self, w: CheckContext) -> None:
        pass

    def group_ready(self, w: CheckContext,
                    make_group: Callable[[str], ProcessGroup]) -> None:
        """Once, on every rank, after the ranks agreed on the watch settings: collective
        set-up goes here. ``make_group(name)`` returns this process's gloo group ``name``
        (made on first use, shared by watchers)."""

    def forward_pre(self, w: CheckContext, args: tuple[object, ...],
                    kwargs: dict[str, object]) -> None:
        pass

    def forward_out(self, w: CheckContext, output: object) -> None:
        pass

    def first_grad(self, w: CheckContext, grad: torch.Tensor) -> None:
        """This rank's own first gradient of a backward (not yet all-reduced)."""

    def before_check(self, w: CheckContext, step: int) -> None:
        pass

    def step_end(self, w: CheckContext, step: int) -> None:
        pass

    def at_check(self, w: CheckContext, step: int) -> None:
        """Collective work of a check step (every rank calls it in the same order)."""

    def pack(self, w: CheckContext, step: int) -> torch.Tensor | None:
        """A float64 CPU tensor of exactly ``width`` values (check steps only)."""
        return None

    def analyze(self, w: CheckContext, step: int, rows: torch.Tensor) -> list[Finding]:
        """``rows``: float64 tensor [world, width], row r is rank r's ``pack``."""
        return []

    def on_exception(self, w: CheckContext, exc: BaseException) -> None:
        """An exception ended the program or left the ``with watch(...)`` block."""

    def close(self, w: CheckContext) -> None:
        pass


def first_tensor(obj: object, floating: bool = False, depth: int = 0) -> torch.Tensor | None:
    """The first tensor in a (nested) output or argument structure, or None."""
    import torch

    if isinstance(obj, torch.Tensor):
        return obj if (not floating or obj.is_floating_point()) else None
    if depth > 3:
        return None
    if isinstance(obj, dict):
        obj = list(obj.values())
    elif hasattr(obj, "logits") and isinstance(obj.logits, torch.Tensor):
        obj = [obj.logits]
    if isinstance(obj, (list, tuple)):
        for item in obj:
            t = first_tensor(item, floating, depth + 1)
            if t is not None:
                return t
    return None


def local(t: torch.Tensor) -> torch.Tensor:
    """A DTensor's local shard (no communication), else the tensor itself."""
    to_local = getattr(t, "to_local", None)
    return to_local() if callable(to_local) else t


_INT_BY_SIZE = {1: "int8", 2: "int16", 4: "int32", 8: "int64"}


def bit_sum(t: torch.Tensor) -> torch.Tensor:
    """An exact, order-independent checksum of a tensor's bits: a 0-d int64 tensor.

    The bytes are summed as int64 words where the layout allows (wrapping: addition mod
    2**64 is still order-independent, and any one changed element changes the sum): 4x
    faster on CPU than widening each float32 to int64, left for odd byte counts. The
    same values give the same sum whatever the layout."""
    import torch

    t = t.detach()
    if t.is_complex():
        t = torch.view_as_real(t)
    if t.dtype == torch.bool:
        t = t.to(torch.int8)
    if t.numel() * t.element_size() % 8 == 0:  # by shape: the same way on every rank
        flat = t.reshape(-1)  # a copy only where the layout is not contiguous
        try:
            return flat.view(torch.int64).sum()
        except RuntimeError:  # an odd storage offset: no int64 view of it in place
            return flat.clone().view(torch.int64).sum()
    if t.is_floating_point():
        t = t.view(getattr(torch, _INT_BY_SIZE[t.element_size()]))
    return t.sum(dtype=torch.int64)
