"""The reference trainer's launch command, shared by `train` and `scale`."""

from __future__ import annotations

import sys


def torchrun_argv(nproc: int, worker_argv: list[str]) -> list[str]:
    """torchrun from this interpreter on a free port (standalone), running the trainer."""
    return [sys.executable, "-m", "torch.distributed.run", "--standalone",
            f"--nproc-per-node={nproc}", "-m", "ddpdoctor.train", *worker_argv]
