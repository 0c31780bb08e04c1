"""GPU evidence -> GPU_HEALTH, GPU_MEMORY_OCCUPIED, GPU_DEVICE_MAPPING.

Every rank of a node reads the same NVML facts; the analysis takes one snapshot per node (the
lowest rank's) and maps each device to the ranks that use it, by the GPU uuid a rank reports
or, failing that, by its CUDA index through CUDA_VISIBLE_DEVICES. A problem on a GPU that no
rank of this job uses is reported as info: it is another job's GPU.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Any

from ddpdoctor.check.nvml import BENIGN_CLOCK_REASONS, DeviceInfo, NvmlSnapshot, XidEvent
from ddpdoctor.check.options import CheckOptions
from ddpdoctor.findings import Finding
from ddpdoctor.report import Check

GIB = 1024 ** 3
# A process below this is a display server or a monitoring agent, not a competing job.
FOREIGN_MIN_BYTES = 256 * 1024 ** 2
# Utilization (%) above which the GPU is "under load": PCIe links downshift when idle.
LOADED_UTIL_PCT = 5

# XIDs that mean broken or failing hardware/driver state (NVIDIA's XID catalog); others
# (13, 31, 43, 45, ...) are usually an application's own fault and are reported as info.
CRITICAL_XIDS = {
    48: "double-bit ECC error", 61: "internal micro-controller breakpoint",
    62: "internal micro-controller halt", 64: "row remapping failure",
    74: "NVLink error", 79: "GPU has fallen off the bus", 92: "high single-bit ECC rate",
    94: "contained ECC error", 95: "uncontained ECC error", 119: "GSP RPC timeout",
    120: "GSP error", 140: "unrecovered ECC error",
}
WARNING_XIDS = {63: "ECC page retirement / row remapping event"}

_SEVERITY_ORDER = {"info": 0, "warning": 1, "error": 2}


@dataclass
class HostView:
    """One node as the GPU analyses see it."""

    hostname: str
    ranks: list[int]
    records: dict[int, dict[str, Any]]
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


def device_of_rank(rec: dict[str, Any], snap: NvmlSnapshot) -> int | None:
    """The NVML index of the GPU a rank uses, or None (a CPU rank, or it cannot be told)."""
    by_uuid = {d.uuid: d.index for d in snap.devices if d.uuid}
    if rec.get("gpu_uuid") in by_uuid:
        return by_uuid[rec["gpu_uuid"]]
    idx = rec.get("cuda_index")
    device = str(rec.get("device") or "")
    if idx is None and device.startswith("cuda"):
        _, _, num = device.partition(":")
        idx = int(num) if num.isdigit() else 0
    if idx is None:
        return None
    visible = [x.strip() for x in (rec.get("cuda_visible_devices") or "").split(",") if x.strip()]
    if not visible:
        return idx if idx < len(snap.devices) else None
    if idx >= len(visible):
        return None
    item = visible[idx]
    if item.isdigit():
        return int(item)
    matches = [d.index for d in snap.devices if d.uuid and d.uuid.startswith(item)]
    return matches[0] if len(matches) == 1 else None


def host_views(per_rank: dict[int, dict[str, Any]]) -> dict[str, HostView]:
    groups: dict[str, dict[int, dict[str, Any]]] = defaultdict(dict)
    for r, rec in per_rank.items():
        if isinstance(rec, dict):
            groups[str(rec.get("hostname") or "?")][int(r)] = rec
    views = {}
    for host, records in sorted(groups.items(), key=lambda kv: min(kv[1])):
        view = HostView(host, sorted(records), records)
        first = records[min(records)]
        raw = next((rec["nvml"] for _, rec in sorted(records.items()) if rec.get("nvml")), None)
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


def _device_evidence(host: str, d: DeviceInfo) -> dict[str, Any]:
    return {"host": host, "device_index": d.index, "name": d.name, "uuid": d.uuid,
            "pci_bus_id": d.pci_bus_id}


def _is_loaded(d: DeviceInfo) -> bool:
    if d.utilization_gpu is not None:
        return d.utilization_gpu >= LOADED_UTIL_PCT
    return bool(d.clock_event_names is not None and "gpu_idle" not in d.clock_event_names
                and d.sm_clock_mhz and d.sm_clock_max_mhz
                and d.sm_clock_mhz >= 0.5 * d.sm_clock_max_mhz)


def device_problems(d: DeviceInfo, xids: list[XidEvent]) -> list[tuple[str, str, str, dict]]:
    """(severity, problem, text, evidence) for each health problem of one device."""
    out: list[tuple[str, str, str, dict]] = []
    lost = [f for f, why in d.errors.items() if "GPU is lost" in why]
    if lost:
        out.append(("error", "gpu_lost", "GPU is lost (fallen off the bus); NVML cannot "
                    "read it", {"failed_queries": sorted(lost)}))
    if d.ecc_volatile_uncorrected:
        out.append(("error", "ecc_uncorrected",
                    f"{d.ecc_volatile_uncorrected} uncorrected ECC error(s) since the driver "
                    "loaded", {"volatile_uncorrected": d.ecc_volatile_uncorrected,
                               "aggregate_uncorrected": d.ecc_aggregate_uncorrected,
                               "volatile_corrected": d.ecc_volatile_corrected}))
    elif d.ecc_aggregate_uncorrected:
        out.append(("warning", "ecc_uncorrected_history",
                    f"{d.ecc_aggregate_uncorrected} uncorrected ECC error(s) in the GPU's "
                    "lifetime (none since the driver loaded)",
                    {"aggregate_uncorrected": d.ecc_aggregate_uncorrected,
                     "aggregate_corrected": d.ecc_aggregate_corrected}))
    if d.retired_pages_pending or d.retired_pages_double_bit:
        pending = bool(d.retired_pages_pending)
        text = (f"{d.retired_pages_double_bit or 0} page(s) retired for double-bit ECC errors"
                + ("; a retirement is pending until the GPU is reset" if pending else ""))
        out.append(("error" if pending else "warning", "retired_pages", text,
                    {"double_bit": d.retired_pages_double_bit,
                     "single_bit": d.retired_pages_single_bit, "pending": pending}))
    if d.remap_failure or d.remap_pending:
        text = ("row remapping failed: the GPU needs service" if d.remap_failure
                else "a row remap is pending until the GPU is reset")
        out.append(("error", "row_remap", text,
                    {"remap_failure": d.remap_failure, "remap_pending": d.remap_pending,
                     "uncorrectable_rows": d.remapped_rows_uncorrectable,
                     "correctable_rows": d.remapped_rows_correctable}))
    reasons = [r for r in d.clock_event_names or [] if r not in BENIGN_CLOCK_REASONS]
    if reasons:
        severity = "info" if reasons == ["sw_power_cap"] else "warning"
        clocks = (f" (SM {d.sm_clock_mhz} of {d.sm_clock_max_mhz} MHz, "
                  f"{d.temperature_c} C, {d.power_w} of {d.power_limit_w} W)")
        out.append((severity, "clocks_throttled",
                    "clocks held down by " + ", ".join(r.replace("_", " ") for r in reasons)
                    + clocks,
                    {"reasons": reasons, "reasons_mask": d.clock_event_reasons,
                     "sm_clock_mhz": d.sm_clock_mhz, "sm_clock_max_mhz": d.sm_clock_max_mhz,
                     "temperature_c": d.temperature_c, "power_w": d.power_w,
                     "power_limit_w": d.power_limit_w}))
    gen_low = d.pcie_gen is not None and d.pcie_gen_max is not None and \
        d.pcie_gen < d.pcie_gen_max
    width_low = d.pcie_width is not None and d.pcie_width_max is not None and \
        d.pcie_width < d.pcie_width_max
    loaded = _is_loaded(d)
    # Gen drops at idle are power saving; only a link that stays low under load is degraded.
    if (gen_low or width_low) and (loaded or width_low):
        text = (f"PCIe link at Gen{d.pcie_gen} x{d.pcie_width} (max Gen{d.pcie_gen_max} "
                f"x{d.pcie_width_max})" + (" under load" if loaded else
                                           " while idle: re-check under load"))
        out.append(("warning" if loaded else "info", "pcie_degraded", text,
                    {"pcie_gen": d.pcie_gen, "pcie_gen_max": d.pcie_gen_max,
                     "pcie_width": d.pcie_width, "pcie_width_max": d.pcie_width_max,
                     "utilization_gpu": d.utilization_gpu, "under_load": loaded}))
    mine = [x for x in xids if x.device_index == d.index]
    if mine:
        severity = "info"
        for x in mine:
            if x.xid in CRITICAL_XIDS:
                severity = "error"
            elif x.xid in WARNING_XIDS and severity == "info":
                severity = "warning"
        codes = sorted({x.xid for x in mine})
        out.append((severity, "xid", f"XID {', '.join(map(str, codes))} in the kernel log "
                    "since boot",
                    {"xids": [{"xid": x.xid, "text": x.text,
                               "meaning": CRITICAL_XIDS.get(x.xid) or WARNING_XIDS.get(x.xid)}
                              for x in mine[-20:]]}))
    return out


def _health(view: HostView) -> list[Finding]:
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


def _memory(view: HostView, process_names: dict[str, Any]) -> list[Finding]:
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


def _mapping(view: HostView) -> list[Finding]:
    findings = []
    assert view.snapshot is not None
    by_device: dict[int, list[int]] = defaultdict(list)
    for r, dev in view.rank_device.items():
        if dev is not None:
            by_device[dev].append(r)
    shared_culprits: set[int] = set()
    for dev, ranks in sorted(by_device.items()):
        if len(ranks) < 2:
            continue
        ranks = sorted(ranks)
        # The culprits are the ranks whose device does not follow their LOCAL_RANK.
        off = [r for r in ranks if view.records[r].get("local_rank") != dev]
        culprits = off if off and len(off) < len(ranks) else ranks
        shared_culprits.update(culprits)
        d = view.snapshot.devices[dev] if dev < len(view.snapshot.devices) else None
        findings.append(Finding(
            "GPU_DEVICE_MAPPING",
            f"ranks {', '.join(map(str, ranks))} on {view.hostname} all use GPU {dev}"
            + (f" ({d.uuid})" if d and d.uuid else ""),
            ranks=culprits,
            evidence={"host": view.hostname, "device_index": dev,
                      "uuid": d.uuid if d else None, "ranks": ranks,
                      "local_ranks": {str(r): view.records[r].get("local_rank") for r in ranks},
                      "devices": {str(r): view.records[r].get("device") for r in ranks}}))
    visible = {view.records[r].get("cuda_visible_devices") for r in view.ranks}
    remapped = len(visible) > 1 or any(
        v and len([x for x in v.split(",") if x.strip()]) == 1 for v in visible)
    if not remapped:
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


def _host_summary(view: HostView) -> str:
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


def _device_data(d: DeviceInfo) -> dict[str, Any]:
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


def analyze(per_rank: dict[int, dict[str, Any]], world_size: int,
            opts: CheckOptions | dict[str, Any] | None = None) -> tuple[Check, list[Finding]]:
    views = host_views(per_rank)
    with_gpus = {h: v for h, v in views.items() if v.snapshot is not None and v.snapshot.devices}
    without = {h: v for h, v in views.items() if h not in with_gpus}
    if not with_gpus:
        reasons = {v.skipped or "NVML found no GPU" for v in views.values()}
        reason = next(iter(reasons)) if len(reasons) == 1 else "; ".join(
            f"{h}: {v.skipped or 'NVML found no GPU'}" for h, v in views.items())
        return Check("gpu", f"skipped: {reason or 'no rank returned data'}", status="skipped",
                     group="GPU"), []

    findings: list[Finding] = []
    data: dict[str, Any] = {"hosts": {}}
    for host, view in with_gpus.items():
        process_names: dict[str, Any] = {}
        for rec in view.records.values():
            process_names.update(rec.get("process_names") or {})
        findings += _mapping(view) + _health(view) + _memory(view, process_names)
        snap = view.snapshot
        assert snap is not None
        data["hosts"][host] = {"driver_version": snap.driver_version,
                               "cuda_driver_version": snap.cuda_driver_version,
                               "xid_source": snap.xid_source,
                               "devices": [_device_data(d) for d in snap.devices]}
    if len(with_gpus) == 1:
        host, view = next(iter(with_gpus.items()))
        summary = _host_summary(view)
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
    return Check("gpu", summary, group="GPU", data=data), findings
