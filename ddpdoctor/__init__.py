"""ddpdoctor: diagnose PyTorch distributed training.

Kept import-light: ``import ddpdoctor`` must not import torch (the CLI's torch-free
commands rely on it).
"""

__version__ = "0.1.0"
