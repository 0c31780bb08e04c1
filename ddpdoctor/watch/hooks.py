"""The watch's hooks on torch: optimizer step pre/post hooks, module forward hooks and the
first-gradient tensor hook, registered and removed together (attach, pause, resume,
close), and the schedule of the module hooks (only the steps that need them)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    import torch
    from torch.utils.hooks import RemovableHandle

    from ddpdoctor.watch.config import WatchConfig
    from ddpdoctor.watch.first_grad import FirstGradient

log = logging.getLogger("ddpdoctor.watch")
CALLBACKS = ("pre_step", "post_step", "forward_pre", "inner_pre", "inner_out")


class Hooked(Protocol):
    """The watcher as its hooks see it (watch/api.py Watcher, whose callbacks are
    ``_on_<name>`` for each of CALLBACKS); by shape: step_hooks.py imports this file."""

    cfg: WatchConfig
    disabled: bool
    step: int
    timed: bool
    model: torch.nn.Module
    inner: torch.nn.Module
    first_grad: FirstGradient | None
    optimizer: torch.optim.Optimizer | None
    at: dict[str, list[Callable[..., None]]]

    def no_optimizer_seen(self) -> bool: ...


class HookSet:
    def __init__(self, w: Hooked) -> None:
        self.w = w
        self.on = False  # False until attached, and while paused
        self._opt: list[RemovableHandle] = []
        self._module: list[RemovableHandle] = []
        # made once: hooks that come and go (module hooks, a pause) reuse them
        self.fns = {name: self.safe(getattr(w, f"_on_{name}")) for name in CALLBACKS}
        self._span = -1  # steps before each check step that run the module hooks
        self._next_check_step = 0

    def safe(self, fn: Callable[..., object]) -> Callable[..., None]:
        """``fn`` as a hook that never raises into training: a failure disables the watch."""
        w = self.w

        def wrapper(*args: object, **kwargs: object) -> None:
            if w.disabled:
                return None
            try:
                fn(*args, **kwargs)
            except Warning:
                raise  # -W error::DDPDoctorWarning: the user asked for it
            except Exception as e:  # never break training
                w.disabled = True
                log.warning("ddpdoctor.watch disabled after an internal error: %r", e,
                            exc_info=log.isEnabledFor(logging.DEBUG))
            return None
        return wrapper

    @property
    def module_hooks_on(self) -> bool:
        return bool(self._module)

    def register(self) -> None:
        self.on = True
        self.hook_optimizer()
        if self.w.first_grad is not None:
            self.w.first_grad.restore()
        self.set_module_hooks(self.module_hooks_needed(self.w.step + 1))

    def remove(self) -> None:
        self.on = False
        for h in self._opt:
            h.remove()
        self._opt = []
        self.set_module_hooks(False)
        if self.w.first_grad is not None:
            self.w.first_grad.remove()

    def hook_optimizer(self) -> None:
        """The step hooks: the optimizer's own, or, while none was given, the global ones
        (bound to the first optimizer that steps this model). Never both: each step would
        count twice."""
        for h in self._opt:
            h.remove()
        pre, post = self.fns["pre_step"], self.fns["post_step"]
        opt = self.w.optimizer
        if opt is not None:
            self._opt = [opt.register_step_pre_hook(pre), opt.register_step_post_hook(post)]
            return
        from torch.optim.optimizer import (
            register_optimizer_step_post_hook,
            register_optimizer_step_pre_hook,
        )

        self._opt = [register_optimizer_step_pre_hook(pre),
                     register_optimizer_step_post_hook(post)]

    def set_module_hooks(self, on: bool) -> None:
        if on == bool(self._module):
            return
        if not on:
            for h in self._module:
                h.remove()
            self._module = []
            return
        outer, inner = self.w.model, self.w.inner
        self._module.append(outer.register_forward_pre_hook(
            self.fns["forward_pre"], prepend=True, with_kwargs=True))
        if inner is not outer:
            self._module.append(inner.register_forward_pre_hook(
                self.fns["inner_pre"], prepend=True))
        self._module.append(inner.register_forward_hook(self.fns["inner_out"]))

    def _learn_span(self) -> bool:
        """Fix the span once the model is learnt; False while every step needs the hooks."""
        w = self.w
        if w.first_grad is None or not w.first_grad.settled or w.at["forward_out"]:
            return False
        # the straggler check compares the forward times of the last steps before a
        # check step; forward_pre checks (the sampler) look at a check step's input
        self._span = max(w.cfg.straggler_samples if w.timed else 0,
                         1 if w.at["forward_pre"] else 0)
        return True

    def module_hooks_needed(self, step: int) -> bool:
        """Whether step ``step`` needs the module forward hooks (see base.py). Runs at
        every boundary: integer compares once the model is learnt."""
        if self._span < 0 and not self._learn_span():
            return True
        if step > self._next_check_step:
            self._next_check_step = self.next_check(step)
        if self._next_check_step - step < self._span:
            return True
        # until an optimizer steps, forwards are counted (and may become the boundary)
        return self.w.optimizer is None and self.w.no_optimizer_seen()

    def next_check(self, step: int) -> int:
        """The first check step at or after ``step``."""
        cfg = self.w.cfg
        regular = -(-step // cfg.every) * cfg.every
        return min([regular] + [s for s in cfg.early_checks if s >= step])
