"""In-training checks: ``ddpdoctor.watch(model, optimizer, dataloader)``.

Importing this package does not import torch (``watch()`` does). The module itself is
callable, so ``ddpdoctor.watch(model)`` works although ``ddpdoctor.watch`` is a package.
"""

from __future__ import annotations

import contextlib
import sys
import types
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING

from ddpdoctor.watch.events import DDPDoctorWarning

if TYPE_CHECKING:
    import torch
    from typing_extensions import Unpack

    from ddpdoctor.watch.api import Watcher
    from ddpdoctor.watch.config import WatchSettings
    from ddpdoctor.watch.stream import Sink

__all__ = ["watch", "paused", "DDPDoctorWarning", "Watcher"]


def watch(model: torch.nn.Module, optimizer: torch.optim.Optimizer | None = None,
          dataloader: object = None, *, sinks: Iterable[Sink] = (),
          **kwargs: Unpack[WatchSettings]) -> Watcher:
    """See :func:`ddpdoctor.watch.api.watch`."""
    from ddpdoctor.watch.api import watch as _watch

    return _watch(model, optimizer, dataloader, sinks=sinks, **kwargs)


@contextlib.contextmanager
def paused() -> Iterator[None]:
    """``with ddpdoctor.watch.paused(): evaluate()``: pause every watcher of this process,
    those made under ``ddpdoctor run`` included (no handle needed), for work that is not a
    training step (evaluation, checkpoint saving): nothing is counted or checked and the
    hang watchdog waits. A no-op where nothing is watched."""
    api = sys.modules.get("ddpdoctor.watch.api")  # not loaded: nothing is watched
    watchers = [w for w in list(api._WATCHERS.values()) if not w.closed] if api else []
    with contextlib.ExitStack() as stack:
        for w in watchers:
            stack.enter_context(w.paused())
        yield


def __getattr__(name: str) -> type[Watcher]:
    if name == "Watcher":
        from ddpdoctor.watch.api import Watcher

        return Watcher
    raise AttributeError(name)


class _CallableModule(types.ModuleType):
    def __call__(self, model: torch.nn.Module,
                 optimizer: torch.optim.Optimizer | None = None, dataloader: object = None, *,
                 sinks: Iterable[Sink] = (), **kwargs: Unpack[WatchSettings]) -> Watcher:
        return watch(model, optimizer, dataloader, sinks=sinks, **kwargs)


sys.modules[__name__].__class__ = _CallableModule
