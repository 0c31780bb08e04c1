"""Topology evidence -> TOPO_NO_P2P, and the `nvidia-smi topo -m`-style matrix per node.

Two problems: GPUs of one node that cannot read each other's memory peer-to-peer (NCCL then
stages every transfer through host memory), and GPUs built for NVLink (SXM boards) whose
pairs have no active NVLink (fabric manager down, a link trained down, a bad baseboard).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, TypedDict

from ddpdoctor.check.analysis.gpu import HostView, host_views
from ddpdoctor.check.options import CheckOptions
from ddpdoctor.core.findings import Finding
from ddpdoctor.core.report import Check
from ddpdoctor.nvml import PairInfo

if TYPE_CHECKING:
    from collections.abc import Mapping

    from ddpdoctor.check.probes.records import Nic, TopologyData

# GPUs sold only on NVLink baseboards (SXM/HGX). PCIe and NVL (bridged pairs) cards are not.
_NVLINK_BOARD = re.compile(r"SXM|H100 80GB HBM3|H100 64GB HBM3|H800|H200|B200|B100|B300|GB200",
                           re.IGNORECASE)
_NOT_BOARD = re.compile(r"PCIe|NVL\b", re.IGNORECASE)


def nvlink_expected(name: str | None) -> bool:
    return bool(name and _NVLINK_BOARD.search(name) and not _NOT_BOARD.search(name))


def pair_label(p: PairInfo | None) -> str:
    """The `nvidia-smi topo -m` cell for one pair: NV# over NVLink, else the PCIe path."""
    if p is None:
        return "?"
    if p.p2p_nvlink == "OK" and p.nvlinks:
        return f"NV{p.nvlinks}"
    return p.level or "?"


def matrix_lines(view: HostView[TopologyData]) -> list[str]:
    snap = view.snapshot
    assert snap is not None
    idx = [d.index for d in snap.devices]
    cell = {(p.a, p.b): p for p in snap.pairs or []}
    lines = ["      " + "".join(f"{'GPU' + str(j):>7}" for j in idx)]
    for i in idx:
        row = "".join(f"{'X' if i == j else pair_label(cell.get((i, j))):>7}" for j in idx)
        lines.append(f"{'GPU' + str(i):<6}{row}")
    return lines


def _unordered(pairs: list[PairInfo]) -> dict[tuple[int, int], list[PairInfo]]:
    out: dict[tuple[int, int], list[PairInfo]] = {}
    for p in pairs:
        out.setdefault((min(p.a, p.b), max(p.a, p.b)), []).append(p)
    return out


def _ranks_of(view: HostView[TopologyData], devices: set[int]) -> list[int]:
    return sorted(r for r, d in view.rank_device.items() if d in devices)


class _HostPairs:
    """One host's GPU pairs, as the TOPO_NO_P2P rules read them."""

    def __init__(self, view: HostView[TopologyData]) -> None:
        snap = view.snapshot
        assert snap is not None and snap.pairs is not None
        self.view = view
        self.pairs = _unordered(snap.pairs)
        self.used = {d for d in view.rank_device.values() if d is not None}
        self.names = {d.index: d.name for d in snap.devices}
        self.links = {d.index: d.active_nvlinks if d.nvlinks is not None else None
                      for d in snap.devices}

    def relevant(self) -> list[tuple[tuple[int, int], list[PairInfo]]]:
        """Pairs of GPUs this job uses (all pairs when no rank is on a GPU); the others
        are another job's concern."""
        return [((a, b), both) for (a, b), both in sorted(self.pairs.items())
                if not self.used or (a in self.used and b in self.used)]


class _BadPair(TypedDict):
    """A GPU pair of a TOPO_NO_P2P finding, as its evidence lists it."""

    a: int
    b: int
    level: str | None


class _NoP2P(_BadPair):
    p2p_read: str | None


class _NoNvlink(_BadPair):
    p2p_nvlink: str | None
    active_links: dict[str, int | None]


def _devices(pairs: Sequence[_BadPair]) -> set[int]:
    return {p["a"] for p in pairs} | {p["b"] for p in pairs}


def _no_p2p(host: _HostPairs) -> Finding | None:
    """TOPO_NO_P2P (no_p2p): pairs without peer access at all."""
    no_p2p: list[_NoP2P] = []
    for (a, b), both in host.relevant():
        bad = [p for p in both if p.p2p_read not in (None, "OK")]
        if bad:
            no_p2p.append({"a": a, "b": b, "level": bad[0].level, "p2p_read": bad[0].p2p_read})
    if not no_p2p:
        return None
    view, devices = host.view, _devices(no_p2p)
    levels = sorted({p["level"] or "?" for p in no_p2p})
    return Finding(
        "TOPO_NO_P2P",
        f"{len(no_p2p)} of {len(host.pairs)} GPU pair(s) on {view.hostname} have no P2P "
        f"access ({', '.join(levels)}; {no_p2p[0]['p2p_read']}): NCCL copies through "
        "host memory",
        ranks=_ranks_of(view, devices),
        evidence={"host": view.hostname, "problem": "no_p2p", "pairs": no_p2p,
                  "device_indices": sorted(devices), "matrix": matrix_lines(view)})


def _nvlink_up(both: list[PairInfo]) -> bool:
    return all(p.p2p_nvlink == "OK" and (p.nvlinks is None or p.nvlinks > 0) for p in both)


def _nvlink_missing(host: _HostPairs) -> Finding | None:
    """TOPO_NO_P2P (nvlink_missing): NVLink-board GPUs that talk over PCIe."""
    missing: list[_NoNvlink] = []
    for (a, b), both in host.relevant():
        expected = nvlink_expected(host.names.get(a)) and nvlink_expected(host.names.get(b))
        if not expected or _nvlink_up(both):
            continue
        missing.append({"a": a, "b": b, "level": both[0].level,
                        "p2p_nvlink": both[0].p2p_nvlink,
                        "active_links": {str(a): host.links.get(a), str(b): host.links.get(b)}})
    if not missing:
        return None
    view, devices = host.view, _devices(missing)
    dead = sorted(i for i in devices if host.links.get(i) == 0)
    levels = sorted({p["level"] or "?" for p in missing})
    title = (f"{len(missing)} pair(s) of NVLink GPUs ({host.names[missing[0]['a']]}) on "
             f"{view.hostname} talk over PCIe ({', '.join(levels)}) instead of NVLink")
    if dead:
        title += f"; GPU(s) {', '.join(map(str, dead))} have no active NVLink"
    return Finding(
        "TOPO_NO_P2P", title,
        ranks=_ranks_of(view, set(dead) if dead else devices),
        evidence={"host": view.hostname, "problem": "nvlink_missing", "pairs": missing,
                  "device_indices": sorted(devices), "no_active_nvlink": dead,
                  "hint": "on HGX/DGX boards check that nvidia-fabricmanager runs and "
                          "`nvidia-smi nvlink -s` shows every link up",
                  "matrix": matrix_lines(view)})


def _host_findings(view: HostView[TopologyData]) -> list[Finding]:
    snap = view.snapshot
    assert snap is not None
    if len(snap.devices) < 2 or snap.pairs is None:
        return []
    host = _HostPairs(view)
    return [f for f in (_no_p2p(host), _nvlink_missing(host)) if f is not None]


def _nic_text(nics: list[Nic]) -> str:
    chosen = [n for n in nics if n.get("physical")] or \
        [n for n in nics if n.get("operstate") == "up"]
    if not chosen:
        return "none"
    parts = []
    for n in chosen[:6]:
        speed = f"{n['speed_mbps']} Mb/s" if n.get("speed_mbps") else "speed unknown"
        state = "" if n.get("operstate") in ("up", None) else f", {n['operstate']}"
        parts.append(f"{n.get('name')} ({speed}{state})")
    if len(chosen) > 6:
        parts.append(f"+{len(chosen) - 6} more")
    return ", ".join(parts)


def _cpu_text(rec: TopologyData) -> str:
    numa = rec.get("numa")
    numa_text = str(len(numa)) if isinstance(numa, list) and numa else "unknown"
    return f"NUMA nodes {numa_text}, NICs {_nic_text(rec.get('nics') or [])}"


def _gpu_text(view: HostView[TopologyData]) -> str:
    snap = view.snapshot
    assert snap is not None
    n = len(snap.devices)
    if n < 2 or not snap.pairs:
        return f"{n} GPU"
    pairs = _unordered(snap.pairs)
    labels = {pair_label(p) for both in pairs.values() for p in both}
    nv = all(p.p2p_nvlink == "OK" for both in pairs.values() for p in both)
    p2p = all(p.p2p_read == "OK" for both in pairs.values() for p in both)
    shown = ", ".join(sorted(labels))
    if nv:
        return f"{n} GPUs, NVLink between all pairs ({shown})"
    if p2p:
        return f"{n} GPUs, P2P over PCIe ({shown})"
    bad = sum(1 for both in pairs.values() if any(p.p2p_read not in (None, "OK") for p in both))
    return f"{n} GPUs, no P2P on {bad} of {len(pairs)} pairs ({shown})"


def analyze(per_rank: Mapping[int, TopologyData], world_size: int,
            opts: CheckOptions | Mapping[str, object] | None = None) -> tuple[Check, list[Finding]]:
    views = host_views(per_rank)
    if not views:
        return Check("topology", "skipped: no rank returned data", status="skipped",
                     group="Topology"), []
    findings: list[Finding] = []
    hosts: dict[str, dict[str, object]] = {}
    data: dict[str, object] = {"hosts": hosts}
    texts = []
    for host, view in views.items():
        first = view.records[min(view.records)]
        host_data: dict[str, object] = {"numa": first.get("numa"), "nics": first.get("nics")}
        if view.snapshot is not None and view.snapshot.devices:
            findings += _host_findings(view)
            host_data["matrix"] = matrix_lines(view)
            host_data["gpu_numa"] = first.get("gpu_numa")
            texts.append(f"{_gpu_text(view)}; {_cpu_text(first)}")
        else:
            host_data["gpu_skipped"] = view.skipped or "NVML found no GPU"
            texts.append(f"no GPU: {_cpu_text(first)}")
        hosts[host] = host_data
    if len(views) == 1 or len(set(texts)) == 1:
        summary = texts[0] + (f" (same on {len(views)} nodes)" if len(views) > 1 else "")
    else:
        summary = "; ".join(f"{h}: {t}" for h, t in zip(views, texts))
    return Check("topology", summary, group="Topology", data=data), findings
