"""Topology: the GPU P2P / NVLink matrix (NVML, like `nvidia-smi topo -m`), the NUMA layout
and the NICs of this rank's host. The NUMA and NIC parts come from sysfs, so the check says
something useful on a machine without GPUs too.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from ddpdoctor import nvml
from ddpdoctor.check.analysis.topology import analyze
from ddpdoctor.check.options import CheckOptions
from ddpdoctor.check.probe import Probe
from ddpdoctor.check.probes.gpu import rank_identity
from ddpdoctor.check.probes.nvml_record import snapshot_into
from ddpdoctor.check.probes.records import Nic, NumaNode, TopologyData

if TYPE_CHECKING:
    from ddpdoctor.check.launcher.outcome import RankContext

NAME = "topology"

_NODE_ROOT = Path("/sys/devices/system/node")
_NET_ROOT = Path("/sys/class/net")
_PCI_ROOT = Path("/sys/bus/pci/devices")


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:  # e.g. EINVAL from .../speed on a link that is down
        return None


def _int(text: str | None) -> int | None:
    try:
        return int(text) if text is not None else None
    except ValueError:
        return None


def _node(text: str | None) -> int | None:
    value = _int(text)
    return value if value is not None and value >= 0 else None  # sysfs says -1 for "none"


def numa_nodes(root: Path = _NODE_ROOT) -> list[NumaNode]:
    nodes: list[NumaNode] = []
    for d in sorted(root.glob("node[0-9]*"), key=lambda p: int(p.name[4:])):
        mem_kib = None
        for line in (_read(d / "meminfo") or "").splitlines():
            if "MemTotal:" in line:
                mem_kib = _int(line.split()[-2])
        nodes.append({"node": int(d.name[4:]), "cpus": _read(d / "cpulist"),
                      "mem_total_kib": mem_kib})
    return nodes


def nics(root: Path = _NET_ROOT) -> list[Nic]:
    out: list[Nic] = []
    for d in sorted(root.iterdir() if root.is_dir() else []):
        if d.name == "lo":
            continue
        driver = None
        if (d / "device" / "driver").exists():
            driver = os.path.basename(os.path.realpath(d / "device" / "driver"))
        speed = _int(_read(d / "speed"))
        out.append({
            "name": d.name,
            "operstate": _read(d / "operstate"),
            "speed_mbps": speed if speed is not None and speed > 0 else None,
            "driver": driver,
            "physical": (d / "device").exists(),  # virtual ones (veth, bridges) have none
            "mtu": _int(_read(d / "mtu")),
            "numa_node": _node(_read(d / "device" / "numa_node")),
        })
    return out


def gpu_numa_node(pci_bus_id: str | None, root: Path = _PCI_ROOT) -> int | None:
    key = nvml.pci_key(pci_bus_id)
    if key is None:
        return None
    # NVML prints an 8-digit domain, sysfs a 4-digit one.
    return _node(_read(root / f"{key[0]:04x}:{key[1]:02x}:{key[2]:02x}.0" / "numa_node"))


def collect(ctx: RankContext, opts: CheckOptions) -> TopologyData:
    data: TopologyData = {**rank_identity(ctx)}
    data["numa"] = numa_nodes()
    data["nics"] = nics()
    snap = snapshot_into(data, topology=True, xids=False)
    if snap is None:
        return data
    data["gpu_numa"] = {str(d.index): gpu_numa_node(d.pci_bus_id) for d in snap.devices}
    return data


PROBE = Probe(NAME, "Topology", "rank", collect, analyze)
