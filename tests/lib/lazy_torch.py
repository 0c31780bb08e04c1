"""torch, imported when a test first uses it, not when its module is collected.

Every xdist worker collects every test module, so a module-level `import torch` costs each
worker about 2.5 s of CPU even where it runs none of that module's tests (make test-quick:
three workers on two cores)."""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import Any


class _LazyTorch(ModuleType):
    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):  # pytest's probes of every module attribute at collection
            raise AttributeError(name)
        return getattr(importlib.import_module("torch"), name)


torch = _LazyTorch("torch")
