"""Zero-code-change watching: every DDP / FSDP2 model a program builds gets ``watch()``,
and so does any other model an optimizer steps (watch/optim_attach.py).

:func:`install` (run by the bootstrap ``sitecustomize`` when ``DDPDOCTOR_WATCH=1``)
imports nothing heavy: a meta-path finder waits for ``torch`` and
``torch.distributed.fsdp`` to finish importing and then wraps
``DistributedDataParallel.__init__`` (watched as soon as it is built; DDP's init is
collective, so every rank of the group is there for the watch group's creation),
``fully_shard`` (the root is only known at its first forward, so the watch attaches
there) and ``DataLoader.__init__`` (loaders are remembered, weakly, and watched with
the model). Every wrapper swallows its own failures: the user's program runs as if
ddpdoctor were not there.
"""

from __future__ import annotations

import functools
import importlib.abc
import logging
import sys
import weakref
from collections.abc import Callable, Sequence
from importlib.machinery import ModuleSpec
from types import ModuleType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

log = logging.getLogger("ddpdoctor.watch")
_installed: dict[str, bool] = {}
_loaders: weakref.WeakSet[object] = weakref.WeakSet()
_sharded: list[weakref.ref[torch.nn.Module]] = []
_TARGETS = ("torch", "torch.distributed.fsdp")


def install() -> None:
    """Idempotent; patches right away what is already imported."""
    if _installed.get("done"):
        return
    _installed["done"] = True
    for name in _TARGETS:
        if name in sys.modules:
            _patch(name)
    sys.meta_path.insert(0, _PostImportFinder())


def _patch(name: str) -> None:
    try:
        if name == "torch":
            _patch_ddp()
            _patch_dataloader()
            from ddpdoctor.watch import optim_attach

            optim_attach.install(_watch)
        elif name == "torch.distributed.fsdp":
            _patch_fully_shard()
    except Exception as e:  # never break the user's import
        log.debug("ddpdoctor autowatch: cannot patch %s: %s", name, e)


class _PostImportFinder(importlib.abc.MetaPathFinder):
    """Finds nothing itself: lets the real finder find the module, then runs the patch
    right after the module's code has executed (before the importer sees it)."""

    def find_spec(self, name: str, path: Sequence[str] | None,
                  target: ModuleType | None = None) -> ModuleSpec | None:
        if name not in _TARGETS or name in _installed:
            return None
        _installed[name] = True
        try:
            for finder in sys.meta_path:
                if finder is self or not hasattr(finder, "find_spec"):
                    continue
                spec = finder.find_spec(name, path, target)
                if spec is not None:
                    break
            else:
                return None
            loader = spec.loader
            exec_module = getattr(loader, "exec_module", None)
            if exec_module is None:
                return None

            def exec_and_patch(module: ModuleType) -> None:
                exec_module(module)
                _patch(name)

            # this loader instance serves only `name` (and it has one: exec_module was found)
            loader.exec_module = exec_and_patch  # type: ignore[method-assign, union-attr]
            return spec
        except Exception as e:
            log.debug("ddpdoctor autowatch: finder failed for %s: %s", name, e)
            return None


def _watch(model: torch.nn.Module, optimizer: torch.optim.Optimizer | None = None,
           how: str = "auto", gather: bool = True) -> None:
    try:
        from ddpdoctor.watch.api import watch

        w = watch(model, optimizer=optimizer, _how=how, _gather=gather,
                  dataloader=[ld for ld in list(_loaders) if ld is not None] or None)
        w.auto = True
    except Exception as e:
        log.warning("ddpdoctor autowatch: not watching %s: %s", type(model).__name__, e)


def _after_init(cls: type, then: Callable[[object], None]) -> None:
    """Patch ``cls`` (once) so that every new instance is passed to ``then`` right after
    its own ``__init__`` returned."""
    original = cls.__init__  # type: ignore[misc]  # the class's own, patched on purpose
    if getattr(original, "_ddpdoctor", False):
        return

    def __init__(self: object, *args: object, **kwargs: object) -> None:
        original(self, *args, **kwargs)
        then(self)

    __init__._ddpdoctor = True  # type: ignore[attr-defined]
    __init__.__wrapped__ = original  # type: ignore[attr-defined]
    cls.__init__ = __init__  # type: ignore[misc]


def _patch_ddp() -> None:
    from torch.nn.parallel import DistributedDataParallel

    _after_init(DistributedDataParallel,
                functools.partial(_watch, how="at DDP's construction"))


def _patch_dataloader() -> None:
    from torch.utils.data import DataLoader

    _after_init(DataLoader, _new_loader)


def _new_loader(loader: object) -> None:
    try:
        _loaders.add(loader)
        from ddpdoctor.watch.api import _WATCHERS

        for w in list(_WATCHERS.values()):  # models watched before their loader existed
            if getattr(w, "auto", False) and not w.closed:
                w.add(dataloader=loader)
    except Exception as e:
        log.debug("ddpdoctor autowatch: loader not watched: %s", e)


def _patch_fully_shard() -> None:
    import torch.distributed.fsdp as fsdp

    original = fsdp.fully_shard
    if getattr(original, "_ddpdoctor", False):
        return

    # Any: one wrapper forwards both of the original's overloads (a module, or a list)
    def fully_shard(module: Any, *args: Any, **kwargs: Any) -> Any:
        out = original(module, *args, **kwargs)
        try:
            for m in (out if isinstance(out, list) else [out]):
                _sharded.append(weakref.ref(m))
                m.register_forward_pre_hook(_first_forward, prepend=True)
        except Exception as e:
            log.debug("ddpdoctor autowatch: fully_shard hook failed: %s", e)
        return out

    functools.update_wrapper(fully_shard, original)  # keeps fully_shard.state & co.
    fully_shard._ddpdoctor = True  # type: ignore[attr-defined]
    fully_shard.__wrapped__ = original  # type: ignore[attr-defined]
    fsdp.fully_shard = fully_shard
    # Not in the defining module: its own code looks ``fully_shard`` up as a global.
    for modname in ("torch.distributed.fsdp._fully_shard", "torch.distributed._composable.fsdp"):
        mod = sys.modules.get(modname)
        if mod is not None and getattr(mod, "fully_shard", None) is original:
            mod.fully_shard = fully_shard  # type: ignore[attr-defined]  # a module found by name


def _first_forward(module: torch.nn.Module, args: tuple[object, ...]) -> None:
    """The first forward of any sharded module comes from the root: watch the root(s)."""
    from ddpdoctor.watch.api import _WATCHERS

    try:
        alive = [m for m in (r() for r in _sharded) if m is not None]
        children = {id(c) for m in alive for c in m.modules() if c is not m}
        for m in alive:
            if id(m) not in children and m not in _WATCHERS:
                _watch(m, how="at its first forward (fully_shard)")
                w = _WATCHERS.get(m)
                if w is not None and m is module:
                    # this forward's hooks were fixed before the watch attached
                    w._on_forward_pre(m, args, {})
        _sharded.clear()
    except Exception as e:
        log.debug("ddpdoctor autowatch: %s", e)
