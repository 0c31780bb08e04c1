"""GPU_DEVICE_MAPPING: the model's device against LOCAL_RANK, and GPUs shared by ranks.

The local rule runs once at attach; the all_gather carries (host, device index) so the
reporter can see two ranks of one host on the same GPU.
"""

from __future__ import annotations

import os
import socket
import zlib
from typing import TYPE_CHECKING

from ddpdoctor.core.findings import Finding
from ddpdoctor.watch.base import WatchCheck

if TYPE_CHECKING:
    import torch

    from ddpdoctor.watch.context import CheckContext


def local_mismatch(device_type: str, index: int | None, local_rank: int | None,
                   visible: int) -> str | None:
    """Why this rank's CUDA device does not fit its LOCAL_RANK, or None."""
    if device_type != "cuda" or local_rank is None or index is None:
        return None
    if visible <= 1:  # one visible GPU per process (CUDA_VISIBLE_DEVICES per rank)
        return None if index == 0 else f"cuda:{index} but only one GPU is visible"
    if index != local_rank % visible:
        return f"model on cuda:{index} but LOCAL_RANK is {local_rank}"
    return None


def shared_devices(rows: list[tuple[int, int]]) -> list[list[int]]:
    """``rows[rank] = (host id, cuda index or -1)`` -> groups of ranks sharing one GPU."""
    by: dict[tuple[int, int], list[int]] = {}
    for r, (host, idx) in enumerate(rows):
        if idx >= 0:
            by.setdefault((host, idx), []).append(r)
    return [g for g in by.values() if len(g) > 1]


class DeviceCheck(WatchCheck):
    name = "device"
    width = 2

    def attach(self, w: CheckContext) -> None:
        self.done = False
        dev = w.device
        self.index = dev.index if dev is not None and dev.type == "cuda" else -1
        if self.index is None:
            self.index = -1
        self.host = zlib.crc32(socket.gethostname().encode()) & 0x7FFFFFFF
        lr = os.environ.get("LOCAL_RANK")
        visible = 0
        if dev is not None and dev.type == "cuda":
            import torch

            visible = torch.cuda.device_count()
        why = local_mismatch(dev.type if dev is not None else "cpu", self.index,
                             int(lr) if lr and lr.isdigit() else None, visible)
        if why:
            w.emit(Finding("GPU_DEVICE_MAPPING", f"rank {w.rank}: {why}", ranks=[w.rank],
                           evidence={"step": 0, "device": str(dev), "local_rank": lr,
                                     "visible_gpus": visible}), 0)

    def pack(self, w: CheckContext, step: int) -> torch.Tensor:
        import torch

        return torch.tensor([self.host, self.index], dtype=torch.float64)

    def analyze(self, w: CheckContext, step: int, rows: torch.Tensor) -> list[Finding]:
        if self.done:
            return []
        self.done = True
        groups = shared_devices([(int(h), int(i)) for h, i in rows.tolist()])
        return [Finding("GPU_DEVICE_MAPPING",
                        f"ranks {','.join(map(str, g))} all use cuda:{int(rows[g[0]][1])} "
                        "on one host", ranks=g,
                        evidence={"step": step, "device_index": int(rows[g[0]][1])})
                for g in groups]
