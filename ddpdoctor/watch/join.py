"""DDP's ``Join`` for uneven inputs: the steps a joined rank sits out, counted as steps.

Under ``with Join([model, ...])`` (or ``model.join()``) a rank whose inputs ran out waits
in ``Join.__exit__`` and shadows the others' collectives (one ``main_hook`` per iteration
of the ranks still training) without stepping its optimizer: its parameters lag until
the Join ends, when DDP broadcasts the last joiner's model to every rank (``post_hook``).

Seen from the watch, such a rank would stop counting steps while its peers go on: its
later check steps would pair with different steps of theirs (replicas compared at
different moments: a false PARAM_DESYNC), and its hang watchdog would see a stall. So the
watch wraps the watched DDP's ``join_hook`` (an instance attribute on that one object,
removed at close) and counts each synchronised shadowed iteration as a *shadow step*:
the step numbers stay aligned, check-step gathers and link probes still pair up, and the
rank's rows say how far its parameters lag (``lag``) and how many updates its optimizer
state missed (``missed``, only for optimizers with per-step state such as momentum or Adam
moments). The desync check compares only ranks whose parameters and optimizer state went
through the same updates (watch/desync.py); ``post_hook`` (the final broadcast) clears the
lag, not the missed updates: the optimizer state of a joined rank stays different.
An optimizer that is itself in the Join (ZeroRedundancyOptimizer) steps on the joined
rank in its own join hook: those are ordinary steps, and no shadow step is counted.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    import torch
    from torch.distributed.algorithms.join import JoinHook
    from torch.nn.parallel import DistributedDataParallel

    from ddpdoctor.watch.hooks import HookSet

    # the ShadowHook class, made on first use: (DDP's hook, ddp, on_step, on_end) -> hook
    ShadowHookClass = Callable[[JoinHook, DistributedDataParallel, Callable[[], None],
                                Callable[[], None]], JoinHook]


class Joined(Protocol):
    """The watcher as the Join hook sees it (watch/api.py Watcher)."""

    @property
    def ddp(self) -> DistributedDataParallel | None: ...

    @property
    def hooks(self) -> HookSet: ...

    def on_shadow_step(self) -> None: ...

    def on_join_end(self) -> None: ...


def stateful(opt: torch.optim.Optimizer | None) -> bool:
    """Whether ``opt`` keeps per-step state besides a step count (momentum, Adam moments):
    a rank whose optimizer missed an update then differs after the Join's final sync."""
    if opt is None:
        return False
    state = getattr(opt, "state", None) or {}
    try:
        for s in state.values():
            if any(k != "step" and v is not None for k, v in s.items()):
                return True
        # no state yet (a rank that joined before its first step): what its settings make
        return any(g.get("momentum", 0) or "betas" in g for g in opt.param_groups)
    except Exception:  # an optimizer with a state of its own shape: assume it has one
        return True


def steps_itself(opt: torch.optim.Optimizer | None) -> bool:
    """Whether ``opt`` takes part in the Join itself (a Joinable such as
    ZeroRedundancyOptimizer, whose join hook runs ``opt.step()`` on the joined rank each
    iteration): its post-hook then ends those steps, and a shadow step would count twice."""
    return bool(getattr(getattr(opt, "_join_config", None), "enable", False))


class JoinTracker:
    """What a watcher knows about the Join steps of its rank."""

    def __init__(self) -> None:
        self.lag = 0         # shadow steps since this rank's parameters were last synced
        self.missed = 0      # optimizer-state updates this rank missed (stateful optimizers)
        self.shadowed = 0    # shadow steps in all (the rank's own optimizer steps: step - this)

    def shadow_step(self, opt: torch.optim.Optimizer | None) -> None:
        self.lag += 1
        self.shadowed += 1
        if stateful(opt):
            self.missed += 1

    def synced(self) -> None:
        """The Join ended: DDP broadcast the last joiner's parameters to every rank."""
        self.lag = 0


def install(w: Joined) -> None:
    """Wrap ``w.ddp.join_hook`` so a Join made from now on reports shadow steps to ``w``."""
    ddp = w.ddp
    if ddp is None or "join_hook" in vars(ddp) or not hasattr(ddp, "join_hook"):
        return
    original = ddp.join_hook
    # never raises into training: a failure disables the watch (watch/hooks.py)
    on_step, on_end = w.hooks.safe(w.on_shadow_step), w.hooks.safe(w.on_join_end)

    def join_hook(**kwargs: object) -> JoinHook:
        return _shadow_hook(original(**kwargs), ddp, on_step, on_end)

    join_hook._ddpdoctor = True  # type: ignore[attr-defined]
    ddp.join_hook = join_hook  # type: ignore[method-assign]  # this instance only


def remove(w: Joined) -> None:
    ddp = w.ddp
    if ddp is not None and getattr(vars(ddp).get("join_hook"), "_ddpdoctor", False):
        del ddp.join_hook


def _shadow_hook_class() -> ShadowHookClass:
    from torch.distributed.algorithms.join import JoinHook

    class ShadowHook(JoinHook):
        """DDP's own join hook, then the watch's count of what the joined rank sat out."""

        def __init__(self, inner: JoinHook, ddp: DistributedDataParallel,
                     on_step: Callable[[], None], on_end: Callable[[], None]) -> None:
            self.inner, self.ddp, self.on_step, self.on_end = inner, ddp, on_step, on_end

        def main_hook(self) -> None:
            self.inner.main_hook()
            # DDP sets this to whether the ranks still training synchronise gradients in
            # this iteration: one that does not (no_sync accumulation) ends no step
            if bool(getattr(self.ddp, "require_forward_param_sync", True)):
                self.on_step()

        def post_hook(self, is_last_joiner: bool) -> None:
            self.inner.post_hook(is_last_joiner)
            self.on_end()

    return ShadowHook


def _shadow_hook(inner: JoinHook, ddp: DistributedDataParallel, on_step: Callable[[], None],
                 on_end: Callable[[], None]) -> JoinHook:
    global _CLASS  # the class subclasses torch's JoinHook: made on first use
    if _CLASS is None:
        _CLASS = _shadow_hook_class()
    return _CLASS(inner, ddp, on_step, on_end)


_CLASS: ShadowHookClass | None = None
