"""GPU: every device NVML can see on this rank's host (health, memory, processes, clocks).

Returns facts only; ddpdoctor.check.analysis.gpu decides what is wrong. Without a driver the data
says why (``skipped``) and the check is reported as skipped.
"""

from __future__ import annotations

import os
import socket
from typing import TYPE_CHECKING

from ddpdoctor.check.analysis.gpu import analyze
from ddpdoctor.check.options import CheckOptions
from ddpdoctor.check.probe import Probe
from ddpdoctor.check.probes.nvml_record import snapshot_into
from ddpdoctor.check.probes.records import GpuData, RankIdentity

if TYPE_CHECKING:
    from ddpdoctor.check.launcher.outcome import RankContext

NAME = "gpu"


def rank_identity(ctx: RankContext) -> RankIdentity:
    """Who this rank is and which GPU it uses: lets the analysis map devices to ranks and
    tell the job's own processes from foreign ones (both probes share it)."""
    data: RankIdentity = {
        "hostname": socket.gethostname(),
        "rank": ctx.rank,
        "local_rank": ctx.local_rank,
        "pid": os.getpid(),
        "ppid": os.getppid(),
        "backend": ctx.backend,
        "device": ctx.device,
        "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
        "cuda_index": None,
        "gpu_uuid": None,
    }
    if str(ctx.device).startswith("cuda"):
        try:
            import torch

            idx = torch.cuda.current_device()
            data["cuda_index"] = idx
            uuid = str(torch.cuda.get_device_properties(idx).uuid)
            data["gpu_uuid"] = uuid if uuid.startswith("GPU-") else f"GPU-{uuid}"
        except Exception as e:  # older torch has no uuid; the index still maps
            data["gpu_uuid_error"] = f"{type(e).__name__}: {e}"
    return data


def _process_name(pid: int) -> str | None:
    try:
        with open(f"/proc/{pid}/comm") as f:
            return f.read().strip() or None
    except OSError:  # another PID namespace (containers) or already gone
        return None


def collect(ctx: RankContext, opts: CheckOptions) -> GpuData:
    data: GpuData = {**rank_identity(ctx)}
    snap = snapshot_into(data, topology=False, xids=True)
    if snap is None:
        return data
    pids = {p.pid for d in snap.devices for p in d.processes or []}
    data["process_names"] = {str(pid): _process_name(pid) for pid in sorted(pids)}
    return data


PROBE = Probe(NAME, "GPU", "rank", collect, analyze)
