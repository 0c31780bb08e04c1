"""The first gradient of each backward, seen before any all-reduce: the watch's per-step pulse.

Where parameters get their gradients locally (DDP, plain modules, ZeRO), a tensor hook on
a leaf parameter runs before its gradient is accumulated and so before DDP's reducer
all-reduces it: it sees this rank's own gradient. The first backward finds the parameters
nearest the loss (the first to get gradients); from then on one persistent hook on the
smallest of the first three is all the watch needs in a step: the time this rank's local
work (data, forward, loss) ended, and the gradient that a NaN loss or output poisons
first. It replaces module forward hooks on the hot path, which cost ~20 us a step each on
a busy CPU (``nn.Module``'s slow call path), and a per-step hook registration.

A second persistent hook sits on the parameter whose gradient came last in the first
backward (the one nearest the input): the time from the first gradient to that one is
this rank's own backward compute. Under DDP the all-reduce overlaps the backward and
every rank's step ends together, so a rank slow in its backward hides there; its own
backward time does not.

FSDP1 without ``use_orig_params`` too: its model's parameters are FlatParameters, each
the concatenation of one wrapped unit's parameters. In the backward the flat parameter's
tensor hook sees this rank's whole unsharded gradient before FSDP's post-backward hook (on
its AccumulateGrad) reduce-scatters it. What the hook passes on is the gradient's last
``FLAT_TAIL`` elements (the unit's last parameters, nearest the loss): a NaN loss poisons
every element, and summing a 70B unit's whole gradient every step would cost more than the
module hooks it replaces.

Not for FSDP2 or FSDP1 with ``use_orig_params`` (a sharded parameter gets its gradient
after the reduce-scatter; the original parameters are not in the autograd graph) nor for
DTensor parameters (tensor parallel): there the watcher keeps its module hooks.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch
    from torch.utils.hooks import RemovableHandle

# a gradient hook (wrapped by ``wrap``: it returns nothing, so the gradient is kept)
GradHook = Callable[["torch.Tensor"], None]


FLAT_TAIL = 1 << 16  # elements of a FlatParameter's gradient passed on (256 KiB in fp32)


def is_flat(p: torch.Tensor) -> bool:
    """An FSDP1 FlatParameter (torch marks each with ``_is_flat_param``)."""
    return bool(getattr(p, "_is_flat_param", False))


def usable(wrapper: str, params: list[torch.nn.Parameter]) -> bool:
    """Whether a leaf hook sees a rank's own gradient for this model."""
    if not params or any(callable(getattr(p, "to_local", None)) for p in params):
        return False
    return wrapper in ("ddp", "module") or (wrapper == "fsdp1" and all(map(is_flat, params)))


def pick(order: list[int], numel: list[int]) -> int:
    """``order``: parameter indices in the order their gradients arrived (repeats allowed)
    -> the one to watch: the smallest of the first three (an LLM's head is large; the
    final norm next to it is not)."""
    first = list(dict.fromkeys(order))[:3]
    return min(first, key=lambda i: numel[i])


def _tail(on_grad: Callable[[torch.Tensor], None], grad: torch.Tensor) -> None:
    on_grad(grad.reshape(-1)[-FLAT_TAIL:])


class FirstGradient:
    """Calls ``on_grad(grad)`` with the first gradient of every backward.

    ``named``: (name, parameter) of the model; ``wrap``: makes a hook safe (the watcher's
    ``_safe``: an internal error switches the watch off, never breaks training)."""

    def __init__(self, named: list[tuple[str, torch.nn.Parameter]],
                 on_grad: Callable[[torch.Tensor], None],
                 wrap: Callable[[Callable[..., object]], GradHook],
                 on_last: Callable[[], None] | None = None) -> None:
        self.named, self.wrap = named, wrap
        self.on_grad = (partial(_tail, on_grad) if any(is_flat(p) for _, p in named)
                        else on_grad)
        self.on_last = on_last  # called with no argument when the last gradient arrives
        self.last: int | None = None  # index of the parameter whose gradient comes last
        self.last_hook: GradHook | None = None
        self.order: list[int] = []   # arrival order during discovery
        self.index: int | None = None
        self.late: list[torch.nn.Parameter] = []  # parameters whose gradients arrive last
        self.handles: list[RemovableHandle] = []
        # the one hook once settled, made once (a pause reuses it)
        self.hook: GradHook | None = None
        self.restore()

    @property
    def settled(self) -> bool:
        return self.index is not None

    @property
    def name(self) -> str | None:
        i = self.index if self.index is not None else (self.order[0] if self.order else None)
        return self.named[i][0] if i is not None else None

    def _discover(self, i: int, grad: torch.Tensor) -> None:
        if not self.order or i == self.order[0]:
            # a new backward begins (the first one, or a repeat before any optimizer step)
            seen = list(dict.fromkeys(self.order))
            self.late = [self.named[j][1] for j in seen[-3:] if j != i]
            self.on_grad(grad)
        self.order.append(i)

    def settle(self) -> bool:
        """At a step boundary: keep one hook (after the first backward); False before."""
        if self.index is not None:
            return True
        if not self.order:
            return False
        self.index = pick(self.order, [p.numel() for _, p in self.named])
        seen = list(dict.fromkeys(self.order))
        if self.on_last is not None and len(seen) > 1 and seen[-1] != self.index:
            self.last = seen[-1]
        self.late = [self.named[j][1] for j in seen[-3:] if j != self.index]
        self.remove()
        self.restore()
        return True

    def _last(self, grad: torch.Tensor) -> None:
        if self.on_last is not None:  # always: settle() hooks this only when there is one
            self.on_last()

    def grads_cleared(self) -> bool:
        """Called as a backward begins: True when zero_grad(set_to_none=True) ran since
        the last backward (the late parameters have no gradient yet), False while
        gradients accumulate. One of them could be unused: all must be None."""
        return bool(self.late) and all(p.grad is None for p in self.late)

    def restore(self) -> None:
        """(Re)register the hooks: after :meth:`remove` (a paused watch resumes) or at
        first. One hook once settled; until then one per trainable parameter."""
        if self.handles:
            return
        if self.index is not None:
            if self.hook is None:
                self.hook = self.wrap(self.on_grad)
            self.handles = [self.named[self.index][1].register_hook(self.hook)]
            if self.last is not None:
                if self.last_hook is None:
                    self.last_hook = self.wrap(self._last)
                self.handles.append(self.named[self.last][1].register_hook(self.last_hook))
        else:
            self.handles = [p.register_hook(self.wrap(partial(self._discover, i)))
                            for i, (_, p) in enumerate(self.named) if p.requires_grad]

    def remove(self) -> None:
        for h in self.handles:
            h.remove()
        self.handles = []
        # A removed hook leaves its emptied dict behind, and autograd still calls into
        # Python for it on every backward (~1 us a parameter: 0.5 ms a step for an LLM's
        # 500 tensors): drop the dicts that no other hook uses.
        for _, p in self.named:
            try:
                if p._backward_hooks is not None and not p._backward_hooks:
                    p._backward_hooks = None
            except (AttributeError, RuntimeError, TypeError):
                pass
