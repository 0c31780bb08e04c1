"""Zero-code watching of any model an optimizer steps: hand-rolled data parallel, FSDP1,
engines that wrap the model (DeepSpeed), compiled models.

Wrapping DDP's and ``fully_shard``'s constructors (watch/autowatch.py) only finds the
models those two wrappers build. What every training loop must call, whatever it wraps its
model in or however it averages gradients, is an optimizer's ``step``. So a global
optimizer step pre-hook (torch's own registry: every ``torch.optim.Optimizer`` subclass
runs it, also the torch optimizer inside DeepSpeed's ZeRO optimizer) looks, at the first
step of each optimizer, for the model that optimizer trains and watches it, before that
step changes a parameter: the replicas are still equal then, which the desync check's
baseline relies on (watch/exchange.py).

Where the model is: a local variable of a frame on the stack (the training loop holds
its model; a module-level script's globals are its frame's locals), or ``self`` of an
engine's ``step``. The model is the outermost module found there that owns one of the
optimizer's parameters or holds the optimizer (an engine whose optimizer keeps flat
fp32 copies of the parameters: ZeRO). Nothing is watched when the process group is not
initialised or holds one rank, when a watch already covers these parameters (DDP and
FSDP2 are watched at their construction), or when no single model is found.

Not every rank need get there: a script may train a model on rank 0 alone (an "earlier
run" that writes a checkpoint). The cross-rank checks set up collectively, so a rank
that attaches alone would wait in the watch's group creation while its peers wait for
it elsewhere. So the ranks first meet in the job's store, not in a collective: each adds
itself to a counter named for the model's shape and waits (at most ``MEET_S``) for the
world; the first rank to decide writes "group" (all came) or "local" (the wait ran out)
with one compare-and-set, and every rank, early or late, reads that one decision. A
local watch keeps its per-rank checks (NaN, memory, unused parameters) and says so.

Per step after the first, the hook costs one WeakSet lookup. No forward hook is added
before the first step (a global forward hook would change what ``torch.compile``
traces).
"""

from __future__ import annotations

import logging
import sys
import time
import weakref
import zlib
from collections.abc import Callable
from types import FrameType
from typing import TYPE_CHECKING, Protocol, TypedDict

if TYPE_CHECKING:
    import torch
    from torch.utils.hooks import RemovableHandle

log = logging.getLogger("ddpdoctor.watch")
_seen: weakref.WeakSet[torch.optim.Optimizer] = weakref.WeakSet()  # optimizers looked at


class _State(TypedDict, total=False):
    watch: Callable[..., None]  # autowatch's watch(model, optimizer=, how=, gather=)
    handle: RemovableHandle     # the global optimizer step pre-hook


class World(Protocol):
    """What :func:`meet` asks of ``torch.distributed`` (the module, or a test's stand-in)."""

    def get_world_size(self) -> int: ...


_state: _State = {}
_MAX_FRAMES = 64
# How long a rank waits in the store for its peers at its first optimizer step. In
# lock-step training they arrive within a step of each other (the backward's collectives
# align them, and the hook runs before the step's work); a rank that trains alone pays
# it once.
MEET_S = 10.0
_meetings: dict[str, int] = {}


def install(watch_fn: Callable[..., None]) -> None:
    """Idempotent; needs ``torch`` imported. ``watch_fn(model, optimizer=, how=)``
    watches a model (autowatch's, which adds the DataLoaders it saw)."""
    if _state.get("handle") is not None:
        return
    from torch.optim.optimizer import register_optimizer_step_pre_hook

    _state["watch"] = watch_fn
    _state["handle"] = register_optimizer_step_pre_hook(_on_step)


def uninstall() -> None:
    handle = _state.pop("handle", None)
    if handle is not None:
        handle.remove()


def _on_step(opt: torch.optim.Optimizer, args: tuple[object, ...],
             kwargs: dict[str, object]) -> None:
    try:
        if opt in _seen:
            return
        _seen.add(opt)
        _first_step(opt)
    except Exception as e:  # never break the user's step
        log.debug("ddpdoctor autowatch: optimizer step hook: %s", e)


def _first_step(opt: torch.optim.Optimizer) -> None:
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() < 2:
        return
    params = {id(p) for g in opt.param_groups for p in g["params"]}
    if _already_watched(params):
        return
    model = find_model(opt, params, sys._getframe(1))
    if model is None:
        log.info("ddpdoctor autowatch: no model found for %s; not watched", type(opt).__name__)
        return
    from ddpdoctor.watch.api import _WATCHERS

    # Bound to this optimizer from the start: its step ends the training step (also
    # where it holds flat copies of the parameters, ZeRO), and the watch hooks this
    # optimizer alone. Its global step hooks would be registered while torch iterates
    # over the global hooks: "dictionary changed size during iteration" in the user's
    # step.
    gather = meet(dist, _shape_key(model))
    how = f"at the first step of its optimizer ({type(opt).__name__})"
    if not gather:
        how += "; not every rank got there: this rank's own checks only"
    _state["watch"](model, optimizer=opt, how=how, gather=gather)
    if model not in _WATCHERS:
        log.info("ddpdoctor autowatch: %s not watched", type(model).__name__)


def _already_watched(params: set[int]) -> bool:
    from ddpdoctor.watch.api import _WATCHERS

    return any(not w.closed and not params.isdisjoint(w.param_ids)
               for w in list(_WATCHERS.values()))


def find_model(opt: torch.optim.Optimizer, params: set[int],
               frame: FrameType | None) -> torch.nn.Module | None:
    """The outermost module in the stack's frames that this optimizer trains, or None."""
    import torch

    found: dict[int, torch.nn.Module] = {}
    for _ in range(_MAX_FRAMES):
        if frame is None:
            break
        for value in list(frame.f_locals.values()):
            if isinstance(value, torch.nn.Module) and id(value) not in found \
                    and trains(value, opt, params):
                found[id(value)] = value
        frame = frame.f_back
    return outermost(list(found.values()))


def trains(module: torch.nn.Module, opt: torch.optim.Optimizer, params: set[int]) -> bool:
    """``module`` owns one of the optimizer's parameters, or holds the optimizer itself
    (directly or inside its own optimizer wrapper: an engine)."""
    held = getattr(module, "optimizer", None)
    if held is opt or getattr(held, "optimizer", None) is opt:
        return True
    return any(id(p) in params for p in module.parameters())


def outermost(modules: list[torch.nn.Module]) -> torch.nn.Module | None:
    """The one module that contains all the others, or None when they are disjoint
    (two models stepped by one optimizer: not guessed)."""
    if not modules:
        return None
    top = max(modules, key=lambda m: sum(1 for _ in m.modules()))
    inside = {id(m) for m in top.modules()}
    return top if all(id(m) in inside for m in modules) else None


def _shape_key(model: torch.nn.Module) -> str:
    names = "\n".join(f"{n}:{tuple(p.shape)}" for n, p in model.named_parameters())
    return f"{type(model).__name__}-{zlib.crc32(names.encode()):08x}"


def meet(dist: World, shape: str, wait_s: float | None = None,
         meetings: dict[str, int] | None = None) -> bool:
    """Whether every rank of the world attaches this model now: decided once, in the
    job's store, the same for every rank (False where there is no store to meet in)."""
    try:
        from torch.distributed.distributed_c10d import _get_default_store

        store = _get_default_store()
    except Exception:  # no default store (an init without one): no collective set-up
        return False
    # the n-th meeting for this shape in this process: ranks that attach the same models
    # in the same order meet under the same key
    seen = _meetings if meetings is None else meetings
    nth = seen.get(shape, 0)
    seen[shape] = nth + 1
    key = f"ddpdoctor/optim_attach/{shape}/{nth}"
    world = dist.get_world_size()
    arrived = store.add(key + "/arrived", 1)
    deadline = time.monotonic() + (MEET_S if wait_s is None else wait_s)
    while arrived < world and time.monotonic() < deadline:
        time.sleep(0.01)
        arrived = store.add(key + "/arrived", 0)
    want = b"group" if arrived >= world else b"local"
    # the store takes bytes as well; torch's stub says str
    decided = store.compare_set(key + "/decision", b"", want)  # type: ignore[arg-type]
    return bytes(decided) == b"group"
