"""GPU_HEALTH: the health problems of one device, one small rule per problem.

Each rule reads one ``DeviceInfo`` (and the host's XIDs) and returns a ``Problem`` or None;
``device_problems`` runs them in a fixed order (the order of the findings in a report).
"""

from __future__ import annotations

from collections.abc import Callable

from ddpdoctor.core.findings import Severity
from ddpdoctor.nvml import BENIGN_CLOCK_REASONS, DeviceInfo, XidEvent

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


# (severity, problem, text, evidence)
Problem = tuple[Severity, str, str, dict[str, object]]


def _is_loaded(d: DeviceInfo) -> bool:
    if d.utilization_gpu is not None:
        return d.utilization_gpu >= LOADED_UTIL_PCT
    return bool(d.clock_event_names is not None and "gpu_idle" not in d.clock_event_names
                and d.sm_clock_mhz and d.sm_clock_max_mhz
                and d.sm_clock_mhz >= 0.5 * d.sm_clock_max_mhz)


def _gpu_lost(d: DeviceInfo, xids: list[XidEvent]) -> Problem | None:
    lost = [f for f, why in d.errors.items() if "GPU is lost" in why]
    if not lost:
        return None
    return ("error", "gpu_lost", "GPU is lost (fallen off the bus); NVML cannot read it",
            {"failed_queries": sorted(lost)})


def _ecc(d: DeviceInfo, xids: list[XidEvent]) -> Problem | None:
    if d.ecc_volatile_uncorrected:
        return ("error", "ecc_uncorrected",
                f"{d.ecc_volatile_uncorrected} uncorrected ECC error(s) since the driver "
                "loaded", {"volatile_uncorrected": d.ecc_volatile_uncorrected,
                           "aggregate_uncorrected": d.ecc_aggregate_uncorrected,
                           "volatile_corrected": d.ecc_volatile_corrected})
    if d.ecc_aggregate_uncorrected:
        return ("warning", "ecc_uncorrected_history",
                f"{d.ecc_aggregate_uncorrected} uncorrected ECC error(s) in the GPU's "
                "lifetime (none since the driver loaded)",
                {"aggregate_uncorrected": d.ecc_aggregate_uncorrected,
                 "aggregate_corrected": d.ecc_aggregate_corrected})
    return None


def _retired_pages(d: DeviceInfo, xids: list[XidEvent]) -> Problem | None:
    if not (d.retired_pages_pending or d.retired_pages_double_bit):
        return None
    pending = bool(d.retired_pages_pending)
    text = (f"{d.retired_pages_double_bit or 0} page(s) retired for double-bit ECC errors"
            + ("; a retirement is pending until the GPU is reset" if pending else ""))
    return ("error" if pending else "warning", "retired_pages", text,
            {"double_bit": d.retired_pages_double_bit,
             "single_bit": d.retired_pages_single_bit, "pending": pending})


def _row_remap(d: DeviceInfo, xids: list[XidEvent]) -> Problem | None:
    if not (d.remap_failure or d.remap_pending):
        return None
    text = ("row remapping failed: the GPU needs service" if d.remap_failure
            else "a row remap is pending until the GPU is reset")
    return ("error", "row_remap", text,
            {"remap_failure": d.remap_failure, "remap_pending": d.remap_pending,
             "uncorrectable_rows": d.remapped_rows_uncorrectable,
             "correctable_rows": d.remapped_rows_correctable})


def _clocks(d: DeviceInfo, xids: list[XidEvent]) -> Problem | None:
    reasons = [r for r in d.clock_event_names or [] if r not in BENIGN_CLOCK_REASONS]
    if not reasons:
        return None
    severity: Severity = "info" if reasons == ["sw_power_cap"] else "warning"
    clocks = (f" (SM {d.sm_clock_mhz} of {d.sm_clock_max_mhz} MHz, "
              f"{d.temperature_c} C, {d.power_w} of {d.power_limit_w} W)")
    return (severity, "clocks_throttled",
            "clocks held down by " + ", ".join(r.replace("_", " ") for r in reasons) + clocks,
            {"reasons": reasons, "reasons_mask": d.clock_event_reasons,
             "sm_clock_mhz": d.sm_clock_mhz, "sm_clock_max_mhz": d.sm_clock_max_mhz,
             "temperature_c": d.temperature_c, "power_w": d.power_w,
             "power_limit_w": d.power_limit_w})


def _below(value: int | None, maximum: int | None) -> bool:
    return value is not None and maximum is not None and value < maximum


def _pcie(d: DeviceInfo, xids: list[XidEvent]) -> Problem | None:
    width_low = _below(d.pcie_width, d.pcie_width_max)
    loaded = _is_loaded(d)
    # Gen drops at idle are power saving; only a link that stays low under load is degraded.
    if not ((_below(d.pcie_gen, d.pcie_gen_max) or width_low) and (loaded or width_low)):
        return None
    text = (f"PCIe link at Gen{d.pcie_gen} x{d.pcie_width} (max Gen{d.pcie_gen_max} "
            f"x{d.pcie_width_max})" + (" under load" if loaded else
                                       " while idle: re-check under load"))
    return ("warning" if loaded else "info", "pcie_degraded", text,
            {"pcie_gen": d.pcie_gen, "pcie_gen_max": d.pcie_gen_max,
             "pcie_width": d.pcie_width, "pcie_width_max": d.pcie_width_max,
             "utilization_gpu": d.utilization_gpu, "under_load": loaded})


def _xid_severity(codes: set[int]) -> Severity:
    if codes & CRITICAL_XIDS.keys():
        return "error"
    return "warning" if codes & WARNING_XIDS.keys() else "info"


def _xids(d: DeviceInfo, xids: list[XidEvent]) -> Problem | None:
    mine = [x for x in xids if x.device_index == d.index]
    if not mine:
        return None
    codes = sorted({x.xid for x in mine})
    return (_xid_severity(set(codes)), "xid",
            f"XID {', '.join(map(str, codes))} in the kernel log since boot",
            {"xids": [{"xid": x.xid, "text": x.text,
                       "meaning": CRITICAL_XIDS.get(x.xid) or WARNING_XIDS.get(x.xid)}
                      for x in mine[-20:]]})


RULES: tuple[Callable[[DeviceInfo, list[XidEvent]], Problem | None], ...] = (
    _gpu_lost, _ecc, _retired_pages, _row_remap, _clocks, _pcie, _xids)


def device_problems(d: DeviceInfo, xids: list[XidEvent]) -> list[Problem]:
    """(severity, problem, text, evidence) for each health problem of one device."""
    return [p for p in (rule(d, xids) for rule in RULES) if p is not None]
