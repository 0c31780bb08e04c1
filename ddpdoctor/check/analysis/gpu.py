"""GPU evidence -> GPU_HEALTH, GPU_MEMORY_OCCUPIED, GPU_DEVICE_MAPPING.

Every rank of a node reads the same NVML facts; the analysis takes one snapshot per node (the
lowest rank's) and maps each device to the ranks that use it, by the GPU uuid a rank reports
or, failing that, by its CUDA index through CUDA_VISIBLE_DEVICES. A problem on a GPU that no
rank of this job uses is reported as info: it is another job's GPU.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Generic, TypeVar

from ddpdoctor.check.analysis.gpu_health import device_problems
from ddpdoctor.check.options import CheckOptions
from ddpdoctor.core.findings import Finding
from ddpdoctor.core.report import Check
from ddpdoctor.nvml import DeviceInfo, NvmlSnapshot, nvml_index_of

if TYPE_CHECKING:
    from collections.abc import Mapping

    from ddpdoctor.check.probes.records import GpuData, RankIdentity

GIB = 1024 ** 3
# A process below this is a display server or a monitoring agent, not a competing job.
FOREIGN_MIN_BYTES = 256 * 1024 ** 2
_SEVERITY_ORDER = {"info": 0, "warning": 1, "error": 2}
# A rank's record: the gpu probe's data, or the topology probe's (both start with the
# rank's identity and its NVML snapshot).
R = TypeVar("R", bound="RankIdentity")


@dataclass
class HostView(Generic[R]):
    """One node as the GPU analyses see it."""

    hostname: str
    ranks: list[int]
    records: dict[int, R]
    snapshot: NvmlSnapshot | None = None
    skipped: str | None = None
    rank_device: dict[int, int | None] = field(default_factory=dict)

    @property
    def job_pids(self) -> set[int]:
        pids = set()
        for rec in self.records.values():
            for key in ("pid", "ppid"):
                if isinstance(rec.get(key), int):
                    pids.add(rec[key])
        return pids

    @property
    def uses_gpus(self) -> bool:
        return any(d is not None for d in self.rank_device.values())

    def ranks_of(self, device_index: int) -> list[int]:
        return sorted(r for r, d in self.rank_device.items() if d == device_index)


def device_of_rank(rec: RankIdentity, snap: NvmlSnapshot) -> int | None:
    """The NVML index of the GPU a rank uses, or None (a CPU rank, or it cannot be told)."""
    by_uuid: dict[str | None, int] = {d.uuid: d.index for d in snap.devices if d.uuid}
    if rec.get("gpu_uuid") in by_uuid:
        return by_uuid[rec["gpu_uuid"]]
    idx = rec.get("cuda_index")
    device = str(rec.get("device") or "")
    if idx is None and device.startswith("cuda"):
        _, _, num = device.partition(":")
        idx = int(num) if num.isdigit() else 0
    if idx is None:
        return None
    return nvml_index_of(idx, rec.get("cuda_visible_devices"),
                         [(d.index, d.uuid) for d in snap.devices])


def _is_record(rec: object) -> bool:
    """Whether a rank's data is a record at all (it came off the wire: a rank whose data is
    something else is left out, not a crash)."""
    return isinstance(rec, dict)


def host_views(per_rank: Mapping[int, R]) -> dict[str, HostView[R]]:
    groups: dict[str, dict[int, R]] = defaultdict(dict)
    for r, rec in per_rank.items():
        if _is_record(rec):
            groups[str(rec.get("hostname") or "?")][int(r)] = rec
    views = {}
    for host, records in sorted(groups.items(), key=lambda kv: min(kv[1])):
        view = HostView(host, sorted(records), records)
        ids: Mapping[int, RankIdentity] = records
        first = ids[min(ids)]
        raw = next((rec["nvml"] for _, rec in sorted(ids.items()) if rec.get("nvml")), None)
        if raw is None:
            view.skipped = first.get("skipped") or "no NVML data"
        else:
            try:
                view.snapshot = NvmlSnapshot.from_dict(raw)
            except (TypeError, ValueError, KeyError, AttributeError) as e:
                view.skipped = f"unreadable NVML data ({type(e).__name__}: {e})"
        if view.snapshot is not None:
            view.rank_device = {r: device_of_rank(rec, view.snapshot)
                                for r, rec in records.items()}
        views[host] = view
    return views


def _gpu_label(host: str, d: DeviceInfo) -> str:
    return f"GPU {d.index} ({d.name or 'unknown'}) on {host}"


def _device_evidence(host: str, d: DeviceInfo) -> dict[str, object]:
    return {"host": host, "device_index": d.index, "name": d.name, "uuid": d.uuid,
            "pci_bus_id": d.pci_bus_id}


def _health(view: HostView[GpuData]) -> list[Finding]:
    findings = []
    snap = view.snapshot
    assert snap is not None
    for d in snap.devices:
        ranks = view.ranks_of(d.index)
        unused = view.uses_gpus and not ranks
        for severity, problem, text, evidence in device_problems(d, snap.xids or []):
            if unused:
                severity = "info"
                evidence["note"] = "no rank of this job uses this GPU"
            findings.append(Finding(
                "GPU_HEALTH", f"{_gpu_label(view.hostname, d)}: {text}", ranks=ranks,
                evidence={**_device_evidence(view.hostname, d), "problem": problem,
                          **evidence},
                severity=severity))
    return findings


def _memory(view: HostView[GpuData], process_names: dict[str, str | None]) -> list[Finding]:
    findings = []
    assert view.snapshot is not None
    ours = view.job_pids
    for d in view.snapshot.devices:
        ranks = view.ranks_of(d.index)
        if view.uses_gpus and not ranks:
            continue  # another job's GPU: its memory is none of this job's business
        foreign = [p for p in d.processes or []
                   if p.pid not in ours and (p.used_memory or 0) >= FOREIGN_MIN_BYTES]
        if not foreign:
            continue
        held = sum(p.used_memory or 0 for p in foreign)
        procs = []
        for p in foreign:
            name = process_names.get(str(p.pid))
            procs.append({"pid": p.pid, "name": name, "kind": p.kind,
                          "used_bytes": p.used_memory,
                          "used_gib": round((p.used_memory or 0) / GIB, 2),
                          "visible": name is not None})
        who = ", ".join(f"pid {p['pid']}" + (f" ({p['name']})" if p["name"] else "")
                        for p in procs)
        evidence = {**_device_evidence(view.hostname, d), "processes": procs,
                    "foreign_bytes": held, "memory_total": d.memory_total,
                    "memory_used": d.memory_used}
        if any(not p["visible"] for p in procs):
            evidence["note"] = ("a pid not visible from the rank may live in another PID "
                                "namespace (container); NVML reports host pids")
        findings.append(Finding(
            "GPU_MEMORY_OCCUPIED",
            f"{_gpu_label(view.hostname, d)}: {held / GIB:.1f} GiB held by a process that is "
            f"not part of this job ({who})",
            ranks=ranks, evidence=evidence))
    return findings


def _mapping(view: HostView[GpuData]) -> list[Finding]:
    findings, shared_culprits = _shared_devices(view)
    return findings + _local_rank_mismatches(view, shared_culprits)


def _shared_devices(view: HostView[GpuData]) -> tuple[list[Finding], set[int]]:
    """GPU_DEVICE_MAPPING (error): two or more ranks on one GPU."""
    assert view.snapshot is not None
    by_device: dict[int, list[int]] = defaultdict(list)
    for r, dev in view.rank_device.items():
        if dev is not None:
            by_device[dev].append(r)
    findings, shared_culprits = [], set()
    for dev, ranks in sorted(by_device.items()):
        if len(ranks) < 2:
            continue
        ranks = sorted(ranks)
        # The culprits are the ranks whose device does not follow their LOCAL_RANK.
        off = [r for r in ranks if view.records[r].get("local_rank") != dev]
        culprits = off if off and len(off) < len(ranks) else ranks
        shared_culprits.update(culprits)
        d = view.snapshot.devices[dev] if dev < len(view.snapshot.devices) else None
        uuid = d.uuid if d else None
        findings.append(Finding(
            "GPU_DEVICE_MAPPING",
            f"ranks {', '.join(map(str, ranks))} on {view.hostname} all use GPU {dev}"
            + (f" ({uuid})" if uuid else ""),
            ranks=culprits,
            evidence={"host": view.hostname, "device_index": dev,
                      "uuid": uuid, "ranks": ranks,
                      "local_ranks": {str(r): view.records[r].get("local_rank") for r in ranks},
                      "devices": {str(r): view.records[r].get("device") for r in ranks}}))
    return findings, shared_culprits


def _remapped(view: HostView[GpuData]) -> bool:
    """CUDA_VISIBLE_DEVICES differs across ranks or gives each rank one GPU: then cuda:0
    on every rank is right, whatever LOCAL_RANK says."""
    visible = {view.records[r].get("cuda_visible_devices") for r in view.ranks}
    return len(visible) > 1 or any(
        v and len([x for x in v.split(",") if x.strip()]) == 1 for v in visible)


def _local_rank_mismatches(view: HostView[GpuData], shared_culprits: set[int]) -> list[Finding]:
    """GPU_DEVICE_MAPPING (warning): a rank on cuda:N with N != LOCAL_RANK."""
    if _remapped(view):
        return []
    findings = []
    for r in view.ranks:
        rec = view.records[r]
        idx = rec.get("cuda_index")
        if idx is None or r in shared_culprits or idx == rec.get("local_rank"):
            continue
        findings.append(Finding(
            "GPU_DEVICE_MAPPING",
            f"rank {r} on {view.hostname} uses cuda:{idx} but LOCAL_RANK is "
            f"{rec.get('local_rank')}",
            ranks=[r], severity="warning",
            evidence={"host": view.hostname, "device_index": view.rank_device.get(r),
                      "cuda_index": idx, "local_rank": rec.get("local_rank"),
                      "cuda_visible_devices": rec.get("cuda_visible_devices")}))
    return findings


def _host_summary(view: HostView[GpuData]) -> str:
    snap = view.snapshot
    assert snap is not None
    names = Counter(d.name or "unknown GPU" for d in snap.devices)
    text = ", ".join(f"{n}x {name}" for name, n in names.items())
    if snap.driver_version:
        text += f", driver {snap.driver_version}"
    temps = [d.temperature_c for d in snap.devices if d.temperature_c is not None]
    if temps:
        text += f", {min(temps)}-{max(temps)} C" if min(temps) != max(temps) \
            else f", {temps[0]} C"
    return text


def _device_data(d: DeviceInfo) -> dict[str, object]:
    return {
        "index": d.index, "name": d.name, "uuid": d.uuid, "pci_bus_id": d.pci_bus_id,
        "memory_used_gib": round(d.memory_used / GIB, 2) if d.memory_used is not None else None,
        "memory_total_gib": round(d.memory_total / GIB, 2) if d.memory_total else None,
        "utilization_gpu": d.utilization_gpu, "temperature_c": d.temperature_c,
        "power_w": d.power_w, "sm_clock_mhz": d.sm_clock_mhz,
        "clock_event_reasons": d.clock_event_names,
        "pcie": (f"Gen{d.pcie_gen} x{d.pcie_width} (max Gen{d.pcie_gen_max} "
                 f"x{d.pcie_width_max})" if d.pcie_gen is not None else None),
        "ecc": d.ecc_mode_current, "unsupported": sorted(d.errors),
    }


def _skipped(views: dict[str, HostView[GpuData]]) -> Check:
    reasons = {v.skipped or "NVML found no GPU" for v in views.values()}
    reason = next(iter(reasons)) if len(reasons) == 1 else "; ".join(
        f"{h}: {v.skipped or 'NVML found no GPU'}" for h, v in views.items())
    return Check("gpu", f"skipped: {reason or 'no rank returned data'}", status="skipped",
                 group="GPU")


def _host_findings(view: HostView[GpuData]) -> list[Finding]:
    process_names: dict[str, str | None] = {}
    for rec in view.records.values():
        process_names.update(rec.get("process_names") or {})
    return _mapping(view) + _health(view) + _memory(view, process_names)


def _host_data(snap: NvmlSnapshot) -> dict[str, object]:
    return {"driver_version": snap.driver_version,
            "cuda_driver_version": snap.cuda_driver_version,
            "xid_source": snap.xid_source,
            "devices": [_device_data(d) for d in snap.devices]}


def _summary(with_gpus: dict[str, HostView[GpuData]], without: dict[str, HostView[GpuData]],
             findings: list[Finding]) -> str:
    if len(with_gpus) == 1:
        summary = _host_summary(next(iter(with_gpus.values())))
    else:
        total = sum(len(v.snapshot.devices) for v in with_gpus.values() if v.snapshot)
        summary = (f"{total} GPUs on {len(with_gpus)} nodes; "
                   + "; ".join(f"{h}: {_host_summary(v)}" for h, v in with_gpus.items()))
    if without:
        summary += "; no GPU data from " + ", ".join(
            f"{h} ({v.skipped or 'NVML found no GPU'})" for h, v in without.items())
    worst = max((_SEVERITY_ORDER[f.severity] for f in findings), default=0)
    if worst == 0 and findings:
        summary += f" ({len(findings)} note(s))"
    return summary


def analyze(per_rank: Mapping[int, GpuData], world_size: int,
            opts: CheckOptions | Mapping[str, object] | None = None) -> tuple[Check, list[Finding]]:
    views = host_views(per_rank)
    with_gpus = {h: v for h, v in views.items() if v.snapshot is not None and v.snapshot.devices}
    without = {h: v for h, v in views.items() if h not in with_gpus}
    if not with_gpus:
        return _skipped(views), []
    findings: list[Finding] = []
    hosts: dict[str, dict[str, object]] = {}
    data: dict[str, object] = {"hosts": hosts}
    for host, view in with_gpus.items():
        findings += _host_findings(view)
        assert view.snapshot is not None
        hosts[host] = _host_data(view.snapshot)
    return Check("gpu", _summary(with_gpus, without, findings), group="GPU",
                 data=data), findings
