"""In-training checks: ``ddpdoctor.watch(model, optimizer, dataloader)``.

Importing this package does not import torch (``watch()`` does). The module itself is
callable, so ``ddpdoctor.watch(model)`` works although ``ddpdoctor.watch`` is a package.
"""

from __future__ import annotations

import sys
import types
from typing import Any

from ddpdoctor.watch.events import DDPDoctorWarning

__all__ = ["watch", "DDPDoctorWarning", "Watcher"]


def watch(model: Any, optimizer: Any = None, dataloader: Any = None, **kwargs: Any) -> Any:
    """See :func:`ddpdoctor.watch.api.watch`."""
    from ddpdoctor.watch.api import watch as _watch

    return _watch(model, optimizer, dataloader, **kwargs)


def __getattr__(name: str) -> Any:
    if name == "Watcher":
        from ddpdoctor.watch.api import Watcher

        return Watcher
    raise AttributeError(name)


class _CallableModule(types.ModuleType):
    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return watch(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule
