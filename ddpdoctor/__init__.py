"""ddpdoctor: diagnose PyTorch distributed training.

Kept import-light: ``import ddpdoctor`` must not import torch (the CLI's torch-free
commands rely on it).
"""

from typing import Any

__version__ = "0.1.0"


def __getattr__(name: str) -> Any:  # lazy exports keep `import ddpdoctor` torch-free
    # ``ddpdoctor.watch`` is the package ddpdoctor/watch/, whose module object is callable:
    # ``ddpdoctor.watch(model, optimizer, loader)``. Neither import pulls in torch.
    if name == "watch":
        import importlib

        return importlib.import_module("ddpdoctor.watch")
    if name == "DDPDoctorWarning":
        from ddpdoctor.watch.events import DDPDoctorWarning

        return DDPDoctorWarning
    raise AttributeError(f"module 'ddpdoctor' has no attribute {name!r}")
