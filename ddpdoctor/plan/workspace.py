"""cuBLAS workspaces: memory PyTorch's caching allocator hands out that no tensor of the
model owns.

PyTorch gives each (cuBLAS handle, stream) pair a workspace from the caching allocator on
the first matrix product and keeps it for the life of the process, so it counts in
``torch.cuda.max_memory_allocated``. Handles are per thread: a training step runs its
forward's products on the training thread and its backward's on autograd's device
thread, two workspaces. The default size is torch's ``CUBLAS_WORKSPACE_CONFIG``
``:4096:2:16:8`` (2 x 4096 + 8 x 16 KiB) before Hopper and ``:4096:8`` (32 MiB) on
Hopper (pytorch test/test_cuda.py, ``test_cublas_workspace_explicit_allocation``);
``CUBLAS_WORKSPACE_CONFIG`` overrides it. Measured on an H200 (torch 2.11, CUDA 13):
docs/gpu-verified.md.

Pure: no torch, so `plan` stays importable without it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

KIB = 1024
PRE_HOPPER = (4096 * 2 + 16 * 8) * KIB
HOPPER = 4096 * 8 * KIB
# the training thread (forward) and autograd's device thread (backward)
MATMUL_THREADS = 2
DEFAULT = MATMUL_THREADS * HOPPER   # `plan`'s default: today's training GPUs are Hopper+

_PAIR = re.compile(r":(\d+):(\d+)")


def per_handle(capability: tuple[int, int] | None, env: Mapping[str, str]) -> int:
    """Bytes of one handle's workspace on a GPU of this compute capability."""
    conf = env.get("CUBLAS_WORKSPACE_CONFIG", "")
    pairs = _PAIR.findall(conf)
    if pairs and "".join(f":{a}:{b}" for a, b in pairs) == conf.strip():
        return sum(int(size) * int(count) for size, count in pairs) * KIB
    if capability is not None and capability[0] >= 9:
        return HOPPER
    return PRE_HOPPER


def step_bytes(capability: tuple[int, int] | None, env: Mapping[str, str]) -> int:
    """What one training process holds in cuBLAS workspaces after its first step."""
    return MATMUL_THREADS * per_handle(capability, env)
