"""Environment facts of one rank, gathered plainly (in the spirit of torch's collect_env).

Runs before the process group exists, so its facts survive a failed init (a bad
GLOO_SOCKET_IFNAME makes init_process_group fail; this probe explains why).
"""

from __future__ import annotations

import hashlib
import os
import platform
import resource
import shutil
import socket
from pathlib import Path
from typing import TYPE_CHECKING

from ddpdoctor.check.analysis.env import analyze
from ddpdoctor.check.options import CheckOptions
from ddpdoctor.check.probe import Probe
from ddpdoctor.check.probes.records import EnvData, IbDevice, P2pPair, P2pTopology, ShmInfo

if TYPE_CHECKING:
    from ddpdoctor.check.launcher.outcome import RankContext

NAME = "env"

# Variables that decide how a distributed job behaves; compared across ranks.
ENV_PREFIXES = ("NCCL_", "GLOO_", "MASTER_", "TORCH_", "CUDA_", "OMP_", "MKL_", "PYTORCH_",
                "FI_", "UCX_")


def _compared_env() -> dict[str, str]:
    """The variables compared across ranks. A secret-looking one (``MASTER_PASSWORD``,
    ``NCCL_..._TOKEN``) leaves the rank as a digest: equal values still compare equal,
    the value itself never travels to the parent or into a report."""
    from ddpdoctor.core import redact

    out = {}
    for k, v in os.environ.items():
        if not k.startswith(ENV_PREFIXES):
            continue
        if redact.is_secret_name(k) and v:
            v = "sha256:" + hashlib.sha256(v.encode()).hexdigest()[:16]
        out[k] = v
    return out


def _limit(which: int) -> list[int | None]:
    soft, hard = resource.getrlimit(which)
    return [None if soft == resource.RLIM_INFINITY else soft,
            None if hard == resource.RLIM_INFINITY else hard]


def _numa_nodes() -> dict[str, str]:
    nodes = {}
    for node in sorted(Path("/sys/devices/system/node").glob("node[0-9]*")):
        try:
            nodes[node.name] = (node / "cpulist").read_text().strip()
        except OSError:
            continue
    return nodes


def _interfaces() -> dict[str, list[str]]:
    import psutil

    out: dict[str, list[str]] = {}
    for name, addrs in psutil.net_if_addrs().items():
        out[name] = [a.address for a in addrs
                     if a.family in (socket.AF_INET, socket.AF_INET6)]
    return out


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def _infiniband(root: Path = Path("/sys/class/infiniband")) -> list[IbDevice]:
    """The RDMA devices of this host (InfiniBand or RoCE: NCCL's IB transport uses both),
    with each port's link layer and state, so NCCL_IB_DISABLE=1 can be judged."""
    out: list[IbDevice] = []
    for dev in sorted(root.iterdir() if root.is_dir() else []):
        ports = {}
        for port in sorted((dev / "ports").glob("*")):
            ports[port.name] = {k: _read(port / k) for k in ("link_layer", "state")}
        out.append({"name": dev.name, "ports": ports})
    return out


def _p2p_topology() -> P2pTopology:
    """The GPU pairs of this host and their path (NVML, as `nvidia-smi topo -m`), read only
    when NCCL_P2P_LEVEL is set: the only reason the env probe needs the topology."""
    if "NCCL_P2P_LEVEL" not in os.environ:
        return {}
    from ddpdoctor import nvml

    try:
        snap = nvml.read_snapshot(topology=True, xids=False)
    except nvml.NvmlUnavailable as e:
        return {"skipped": f"NVML: {e}"}
    except Exception as e:  # a broken driver must not cost the rest of the env facts
        return {"skipped": f"NVML read failed ({type(e).__name__}: {e})"}
    pairs: list[P2pPair] = []
    for p in snap.pairs or []:
        if p.a >= p.b:
            continue  # NVML gives both directions; one is enough here
        nvlink = p.p2p_nvlink == "OK" and (p.nvlinks or 0) > 0
        pairs.append({"a": p.a, "b": p.b, "path": "NVL" if nvlink else p.level,
                      "p2p_read": p.p2p_read})
    if len(snap.devices) < 2:
        return {"skipped": f"{len(snap.devices)} GPU on this host: no pair to compare"}
    return {"gpus": len(snap.devices), "pairs": pairs}


def collect(ctx: RankContext, opts: CheckOptions) -> EnvData:
    import torch

    try:
        shm = shutil.disk_usage("/dev/shm")
        shm_info: ShmInfo = {"total": shm.total, "free": shm.free}
    except OSError as e:
        shm_info = {"error": e.strerror}
    nccl = None
    if torch.cuda.is_available():
        try:
            nccl = ".".join(str(v) for v in torch.cuda.nccl.version())
        except Exception:  # a build without NCCL is a fact, not an error
            nccl = None
    try:
        affinity = sorted(os.sched_getaffinity(0))
    except AttributeError:
        affinity = list(range(os.cpu_count() or 1))
    return {
        "hostname": socket.gethostname(),
        "pid": os.getpid(),
        "local_rank": ctx.local_rank,
        "versions": {
            "python": platform.python_version(),
            "torch": torch.__version__,
            "cuda": torch.version.cuda,
            "nccl": nccl,
        },
        "env": _compared_env(),
        "interfaces": _interfaces(),
        "infiniband": _infiniband(),
        "p2p": _p2p_topology(),
        "shm": shm_info,
        "ulimit": {"nofile": _limit(resource.RLIMIT_NOFILE),
                   "memlock": _limit(resource.RLIMIT_MEMLOCK)},
        "cpu_count": os.cpu_count(),
        "affinity": affinity,
        "numa_nodes": _numa_nodes(),
        "torch_threads": torch.get_num_threads(),
        "torch_interop_threads": torch.get_num_interop_threads(),
        "local_world_size": int(os.environ.get("LOCAL_WORLD_SIZE", "1")),
    }


PROBE = Probe(NAME, "Environment", "pre_init", collect, analyze)
