"""What the watch does at each hook on the training thread: the step clock, the forward
and gradient callbacks, and the step boundary (optimizer post-hook) that runs the checks'
per-step and check-step work. Mixed into the Watcher, whose state it reads; each
callback is wrapped by HookSet.safe (watch/hooks.py)."""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ddpdoctor.watch import join as join_hooks

if TYPE_CHECKING:
    import torch

    from ddpdoctor.watch.base import WatchCheck
    from ddpdoctor.watch.context import TimedStep
    from ddpdoctor.watch.exchange import Exchange
    from ddpdoctor.watch.first_grad import FirstGradient
    from ddpdoctor.watch.hang_watchdog import Monitor
    from ddpdoctor.watch.hooks import HookSet
    from ddpdoctor.watch.join import JoinTracker
    from ddpdoctor.watch.steps import StepCounter


@dataclass
class StepClock:
    """The current step's times (training thread only)."""

    t_boundary: float = field(default_factory=time.perf_counter)
    in_step: bool = False
    data_s: float = 0.0
    fwd_s: float = 0.0
    t_fwd: float = 0.0
    bwd_s: float = 0.0  # this rank's own backward: first gradient to last (first_grad.py)
    t_first: float = 0.0
    # (step, step_s, data_s, fwd_s, bwd_s) of timed steps
    window: deque[TimedStep] = field(default_factory=deque)

    def restart(self) -> None:
        self.in_step = False
        self.data_s = self.fwd_s = self.bwd_s = 0.0
        self.t_boundary = time.perf_counter()


class StepHooks:
    """The hook callbacks of :class:`ddpdoctor.watch.api.Watcher`."""

    if TYPE_CHECKING:  # the watcher's state they read and write (set in watch/api.py)
        clock: StepClock
        step: int
        closed: bool
        disabled: bool
        model: torch.nn.Module
        inner: torch.nn.Module
        param_ids: set[int]
        optimizer: torch.optim.Optimizer | None
        stepping_optimizer: torch.optim.Optimizer | None
        loaders: list[object]
        checks: list[WatchCheck]
        at: dict[str, list[Callable[..., None]]]  # hook point -> the checks' bound methods
        first_grad: FirstGradient | None
        steps: StepCounter
        monitor: Monitor
        join: JoinTracker
        hooks: HookSet
        exchange: Exchange
        _owns_cache: dict[int, bool]

        @property
        def is_paused(self) -> bool: ...

        def is_check_step(self, step: int) -> bool: ...

    def _on_forward_pre(self, module: torch.nn.Module, args: tuple[object, ...],
                        kwargs: dict[str, object]) -> None:
        import torch

        if not torch.is_grad_enabled():
            return
        now = time.perf_counter()
        clock = self.clock
        optimizer_seen = self.optimizer is not None or not self.no_optimizer_seen()
        if self.steps.forward_ends_step(optimizer_seen) and clock.in_step:
            self._boundary(now)  # no optimizer ever stepped: a forward starts the next step
        self.steps.on_forward()
        if not clock.in_step:
            clock.in_step = True
            if not self.loaders:
                clock.data_s += now - clock.t_boundary
        self.monitor.progress(self.step, "forward")
        for fn in self.at["forward_pre"]:
            fn(self, args, kwargs)
        if self.inner is self.model:
            clock.t_fwd = time.perf_counter()

    def no_optimizer_seen(self) -> bool:
        return not any(self._owns_cache.values())

    def _on_inner_pre(self, module: torch.nn.Module, args: tuple[object, ...]) -> None:
        self.clock.t_fwd = time.perf_counter()

    def _on_inner_out(self, module: torch.nn.Module, args: tuple[object, ...],
                      output: object) -> None:
        import torch

        if not torch.is_grad_enabled():
            return
        self.clock.fwd_s += time.perf_counter() - self.clock.t_fwd
        for fn in self.at["forward_out"]:
            fn(self, output)
        self.monitor.progress(self.step, "backward")

    def _owns(self, opt: torch.optim.Optimizer) -> bool:
        if opt is self.optimizer:
            return True
        if self.optimizer is not None:
            return False
        key = id(opt)
        if key not in self._owns_cache:
            bound = any(self._owns_cache.values())
            self._owns_cache[key] = not bound and any(
                id(p) in self.param_ids for g in opt.param_groups for p in g["params"])
        return self._owns_cache[key]

    def _on_first_grad(self, grad: torch.Tensor) -> None:
        self.clock.t_first = time.perf_counter()
        self.steps.on_backward()
        self.monitor.progress(self.step, "backward")
        for fn in self.at["first_grad"]:
            fn(self, grad)

    def _on_last_grad(self) -> None:
        # accumulation: every micro-batch's backward adds to the step's
        self.clock.bwd_s += time.perf_counter() - self.clock.t_first

    def _on_pre_step(self, opt: torch.optim.Optimizer, args: tuple[object, ...],
                     kwargs: dict[str, object]) -> None:
        if not self._owns(opt):
            return
        self.monitor.progress(self.step, "optimizer")
        if self.at["before_check"] and self.is_check_step(self.step + 1):
            for fn in self.at["before_check"]:
                fn(self, self.step + 1)

    def _on_post_step(self, opt: torch.optim.Optimizer, args: tuple[object, ...],
                      kwargs: dict[str, object]) -> None:
        if self._owns(opt):
            self.stepping_optimizer = opt
            self._boundary(time.perf_counter())

    def on_shadow_step(self) -> None:
        """This rank sat out a synchronised iteration of its peers inside DDP's Join
        (watch/join.py): a step of theirs, counted here so the step numbers stay aligned;
        its parameters now lag by one more step."""
        opt = self.optimizer or self.stepping_optimizer
        if self.is_paused or self.closed or self.disabled or join_hooks.steps_itself(opt):
            return  # (an optimizer in the Join steps itself: its post-hook ends the step)
        self.join.shadow_step(opt)
        self._boundary(time.perf_counter(), shadow=True)

    def on_join_end(self) -> None:
        """The Join ended: DDP broadcast the last joiner's model; no lag any more."""
        self.join.synced()

    def _on_epoch(self, loader: object) -> None:
        for c in self.checks:
            if hasattr(c, "on_epoch"):
                c.on_epoch(self, loader)

    def _on_data_wait(self, seconds: float) -> None:
        self.clock.data_s += seconds

    # -- the step boundary

    def _boundary(self, now: float, shadow: bool = False) -> None:
        self.step += 1
        step, clock = self.step, self.clock
        self.steps.end_step()
        step_s = now - clock.t_boundary
        # its forward ran under the module hooks (a shadow step had no forward: untimed)
        timed = self.hooks.module_hooks_on and not shadow
        if timed:
            clock.window.append((step, step_s, clock.data_s, clock.fwd_s, clock.bwd_s))
        self.monitor.boundary(step, step_s, clock.data_s, clock.fwd_s, timed)
        clock.data_s = clock.fwd_s = clock.bwd_s = 0.0
        clock.in_step = False
        for fn in self.at["step_end"]:
            fn(self, step)
        if self.exchange.coll and self.is_check_step(step):
            for fn in self.at["at_check"]:
                fn(self, step)
            self.exchange.check_step(step)
        if self.exchange.pending:
            self.exchange.poll()
        if self.first_grad is not None and self.first_grad.settle():
            self.hooks.set_module_hooks(self.hooks.module_hooks_needed(step + 1))
        clock.t_boundary = time.perf_counter()  # the watcher's own time is not data wait

