"""Every fact ddpdoctor reads from NVML, as plain dataclasses. The only module that talks to
pynvml (nvidia-ml-py).

Each NVML call is guarded on its own: a GPU or driver that does not support a query (consumer
cards without ECC, old drivers without remapped rows, containers without permission) leaves
that field ``None`` and records why in ``errors``, so a partial GPU never costs the rest of the
snapshot. ``NvmlSnapshot.to_dict``/``from_dict`` make a snapshot recordable and replayable:
the analysis is tested on recorded snapshots, and ``read_snapshot`` on a fake pynvml module
that serves them back.

NVML has no XID history API. XIDs are read from the kernel log (``/dev/kmsg``) when it is
readable, within a small time budget; otherwise ``xids`` is ``None`` and ``xid_source`` says
why. (``dmesg``/the journal would be a future source for hosts that restrict /dev/kmsg.)
"""

from __future__ import annotations

import importlib
import os
import re
import time
from dataclasses import asdict, dataclass, field, fields
from typing import Any

# Clock event (throttle) reasons: (name, pynvml constant, benign). Benign ones are normal
# operation (idle, application clocks, sync boost, display clock) and never a finding.
_CLOCK_EVENT_REASONS = [
    ("gpu_idle", "nvmlClocksEventReasonGpuIdle", True),
    ("applications_clocks_setting", "nvmlClocksEventReasonApplicationsClocksSetting", True),
    ("sw_power_cap", "nvmlClocksEventReasonSwPowerCap", False),
    ("hw_slowdown", "nvmlClocksEventReasonHwSlowdown", False),
    ("sync_boost", "nvmlClocksEventReasonSyncBoost", True),
    ("sw_thermal_slowdown", "nvmlClocksEventReasonSwThermalSlowdown", False),
    ("hw_thermal_slowdown", "nvmlClocksEventReasonHwThermalSlowdown", False),
    ("hw_power_brake_slowdown", "nvmlClocksEventReasonHwPowerBrakeSlowdown", False),
    ("display_clock_setting", "nvmlClocksEventReasonDisplayClockSetting", True),
]
BENIGN_CLOCK_REASONS = frozenset(n for n, _, benign in _CLOCK_EVENT_REASONS if benign)

# nvmlGpuTopologyLevel_t -> the labels of `nvidia-smi topo -m`.
TOPOLOGY_LEVELS = {0: "BOARD", 10: "PIX", 20: "PXB", 30: "PHB", 40: "NODE", 50: "SYS"}

# nvmlGpuP2PStatus_t
P2P_STATUSES = {0: "OK", 1: "CHIPSET_NOT_SUPPORTED", 2: "GPU_NOT_SUPPORTED",
                3: "IOH_TOPOLOGY_NOT_SUPPORTED", 4: "DISABLED_BY_REGKEY", 5: "NOT_SUPPORTED",
                6: "UNKNOWN"}

_XID_RE = re.compile(r"NVRM: Xid \(PCI:([0-9a-fA-F:.]+)\): (\d+),\s*(.*)")
_KMSG_BUDGET_S = 0.3
_KMSG_MAX_RECORDS = 100_000


class NvmlUnavailable(Exception):
    """NVML cannot be used on this host at all; the message is the skip reason."""


@dataclass
class ProcessInfo:
    pid: int
    used_memory: int | None  # bytes; None where the driver cannot tell (WDDM, MIG)
    kind: str                # "compute" | "graphics"


@dataclass
class NvLinkInfo:
    link: int
    active: bool | None
    remote_pci_bus_id: str | None = None


@dataclass
class DeviceInfo:
    index: int
    name: str | None = None
    uuid: str | None = None
    pci_bus_id: str | None = None
    memory_total: int | None = None   # bytes
    memory_used: int | None = None    # bytes
    processes: list[ProcessInfo] | None = None
    utilization_gpu: int | None = None  # percent
    performance_state: int | None = None
    ecc_mode_current: bool | None = None
    ecc_mode_pending: bool | None = None
    ecc_volatile_uncorrected: int | None = None
    ecc_volatile_corrected: int | None = None
    ecc_aggregate_uncorrected: int | None = None
    ecc_aggregate_corrected: int | None = None
    retired_pages_single_bit: int | None = None
    retired_pages_double_bit: int | None = None
    retired_pages_pending: bool | None = None
    remapped_rows_correctable: int | None = None
    remapped_rows_uncorrectable: int | None = None
    remap_pending: bool | None = None
    remap_failure: bool | None = None
    clock_event_reasons: int | None = None     # NVML bitmask as read
    clock_event_names: list[str] | None = None  # decoded bitmask
    sm_clock_mhz: int | None = None
    sm_clock_max_mhz: int | None = None
    mem_clock_mhz: int | None = None
    mem_clock_max_mhz: int | None = None
    temperature_c: int | None = None
    power_w: float | None = None
    power_limit_w: float | None = None
    pcie_gen: int | None = None
    pcie_gen_max: int | None = None      # max of GPU and slot together
    pcie_gen_gpu_max: int | None = None  # the GPU's own max
    pcie_width: int | None = None
    pcie_width_max: int | None = None
    nvlinks: list[NvLinkInfo] | None = None
    errors: dict[str, str] = field(default_factory=dict)  # field -> why it is None

    @property
    def active_nvlinks(self) -> int:
        return sum(1 for link in self.nvlinks or [] if link.active)


@dataclass
class PairInfo:
    """One ordered GPU pair: P2P status from ``a`` to ``b`` and their common PCIe ancestor."""

    a: int
    b: int
    level: str | None = None        # PIX, PXB, PHB, NODE, SYS, BOARD
    p2p_read: str | None = None     # "OK" or the nvmlGpuP2PStatus_t name
    p2p_nvlink: str | None = None
    nvlinks: int | None = None      # active links that end at b (or at a switch)
    errors: dict[str, str] = field(default_factory=dict)


@dataclass
class XidEvent:
    pci: str           # as the kernel prints it: "0000:18:00"
    xid: int
    text: str
    device_index: int | None = None


@dataclass
class NvmlSnapshot:
    driver_version: str | None = None
    cuda_driver_version: int | None = None
    nvml_version: str | None = None
    devices: list[DeviceInfo] = field(default_factory=list)
    pairs: list[PairInfo] | None = None  # None: topology was not read
    xids: list[XidEvent] | None = None   # None: no readable source
    xid_source: str = ""
    errors: dict[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> NvmlSnapshot:
        def devs(d: dict[str, Any]) -> DeviceInfo:
            d = _known(DeviceInfo, d)
            if d.get("processes") is not None:
                d["processes"] = [ProcessInfo(**_known(ProcessInfo, p)) for p in d["processes"]]
            if d.get("nvlinks") is not None:
                d["nvlinks"] = [NvLinkInfo(**_known(NvLinkInfo, n)) for n in d["nvlinks"]]
            return DeviceInfo(**d)

        d = _known(cls, data)
        d["devices"] = [devs(x) for x in d.get("devices", [])]
        if d.get("pairs") is not None:
            d["pairs"] = [PairInfo(**_known(PairInfo, p)) for p in d["pairs"]]
        if d.get("xids") is not None:
            d["xids"] = [XidEvent(**_known(XidEvent, x)) for x in d["xids"]]
        return cls(**d)


def _known(cls: type, data: dict[str, Any]) -> dict[str, Any]:
    # Recordings from a newer ddpdoctor may carry fields this one does not know.
    names = {f.name for f in fields(cls)}
    return {k: v for k, v in data.items() if k in names}


def decode_clock_event_reasons(mask: int, nvml: Any = None) -> list[str]:
    """The names of the bits set in an NVML clock event (throttle) reason mask."""
    nvml = nvml or _import_pynvml()
    names = []
    for name, const, _ in _CLOCK_EVENT_REASONS:
        bit = getattr(nvml, const, None)
        if bit is None:  # older pynvml: the same bits under the "throttle" names
            bit = getattr(nvml, const.replace("ClocksEvent", "ClocksThrottle"), None)
        if bit and mask & bit:
            names.append(name)
    return names


def pci_key(bus_id: str | None) -> tuple[int, int, int] | None:
    """(domain, bus, device) of "00000000:18:00.0" (NVML) or "0000:18:00" (kernel log)."""
    if not bus_id:
        return None
    parts = bus_id.strip().lower().split(":")
    if len(parts) < 3:
        return None
    try:
        return int(parts[0], 16), int(parts[1], 16), int(parts[2].split(".")[0], 16)
    except ValueError:
        return None


def parse_xid_line(line: str) -> XidEvent | None:
    """An XidEvent from a kernel log line like
    ``NVRM: Xid (PCI:0000:18:00): 79, pid=1234, name=python, GPU has fallen off the bus.``"""
    m = _XID_RE.search(line)
    if not m:
        return None
    return XidEvent(pci=m.group(1), xid=int(m.group(2)), text=m.group(3).strip()[:300])


def read_kernel_xids(path: str = "/dev/kmsg") -> tuple[list[XidEvent] | None, str]:
    """XIDs logged since boot, from /dev/kmsg, within a small time budget.

    Returns (events, source); events is None when the log cannot be read (not root with
    dmesg_restrict, no /dev/kmsg in the container), with the reason in source.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError as e:
        return None, f"unavailable: {path} not readable ({e.strerror})"
    events: list[XidEvent] = []
    deadline = time.monotonic() + _KMSG_BUDGET_S
    complete = False
    try:
        for _ in range(_KMSG_MAX_RECORDS):
            if time.monotonic() > deadline:
                break
            try:
                record = os.read(fd, 8192)  # /dev/kmsg returns one record per read
            except BlockingIOError:
                complete = True
                break
            except OSError as e:
                if e.errno == 32:  # EPIPE: the record was overwritten while reading; go on
                    continue
                return None, f"unavailable: reading {path} failed ({e.strerror})"
            if not record:
                complete = True
                break
            text = record.decode("utf-8", "replace")
            if "Xid" in text:
                event = parse_xid_line(text.partition(";")[2] or text)
                if event is not None:
                    events.append(event)
    finally:
        os.close(fd)
    return events, "kmsg" if complete else "kmsg (partial: time budget reached)"


def _import_pynvml() -> Any:
    try:
        return importlib.import_module("pynvml")
    except ImportError as e:
        raise NvmlUnavailable("pynvml (nvidia-ml-py) is not installed") from e


def _text(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def _const(value: Any) -> int:
    # pynvml defines NVML_P2P_CAPS_INDEX_READ as "0," (a tuple): unwrap it.
    return int(value[0]) if isinstance(value, tuple) else int(value)


class _Reader:
    def __init__(self, nvml: Any):
        self.nvml = nvml

    def call(self, errors: dict[str, str], name: str, fn_name: str, *args: Any) -> Any:
        """One NVML call; any failure leaves the field None and says why in ``errors``."""
        fn = getattr(self.nvml, fn_name, None)
        if fn is None:
            errors[name] = f"{fn_name} not in this pynvml"
            return None
        try:
            return fn(*args)
        except Exception as e:  # noqa: BLE001 - NVMLError_*, ctypes errors: never fatal
            errors[name] = str(e) if isinstance(e, self.nvml.NVMLError) else \
                f"{type(e).__name__}: {e}"
            return None

    def device(self, index: int, handle: Any) -> DeviceInfo:
        n = self.nvml
        d = DeviceInfo(index=index)
        err = d.errors
        name = self.call(err, "name", "nvmlDeviceGetName", handle)
        d.name = _text(name) if name is not None else None
        uuid = self.call(err, "uuid", "nvmlDeviceGetUUID", handle)
        d.uuid = _text(uuid) if uuid is not None else None
        pci = self.call(err, "pci_bus_id", "nvmlDeviceGetPciInfo", handle)
        if pci is not None:
            d.pci_bus_id = _text(getattr(pci, "busId", b"") or getattr(pci, "busIdLegacy", b""))
        mem = self.call(err, "memory", "nvmlDeviceGetMemoryInfo", handle)
        if mem is not None:
            d.memory_total, d.memory_used = int(mem.total), int(mem.used)
        procs: list[ProcessInfo] = []
        got_any = False
        for kind, fn in (("compute", "nvmlDeviceGetComputeRunningProcesses"),
                         ("graphics", "nvmlDeviceGetGraphicsRunningProcesses")):
            listed = self.call(err, f"processes_{kind}", fn, handle)
            if listed is None:
                continue
            got_any = True
            for p in listed:
                used = getattr(p, "usedGpuMemory", None)
                procs.append(ProcessInfo(int(p.pid), int(used) if used is not None else None,
                                         kind))
        d.processes = procs if got_any else None
        util = self.call(err, "utilization_gpu", "nvmlDeviceGetUtilizationRates", handle)
        d.utilization_gpu = int(util.gpu) if util is not None else None
        d.performance_state = self.call(err, "performance_state",
                                        "nvmlDeviceGetPerformanceState", handle)

        ecc = self.call(err, "ecc_mode", "nvmlDeviceGetEccMode", handle)
        if ecc is not None:
            d.ecc_mode_current, d.ecc_mode_pending = bool(ecc[0]), bool(ecc[1])
        if d.ecc_mode_current:  # counters of a GPU with ECC off are meaningless
            for attr, etype, ctype in (
                ("ecc_volatile_uncorrected", "NVML_MEMORY_ERROR_TYPE_UNCORRECTED",
                 "NVML_VOLATILE_ECC"),
                ("ecc_volatile_corrected", "NVML_MEMORY_ERROR_TYPE_CORRECTED",
                 "NVML_VOLATILE_ECC"),
                ("ecc_aggregate_uncorrected", "NVML_MEMORY_ERROR_TYPE_UNCORRECTED",
                 "NVML_AGGREGATE_ECC"),
                ("ecc_aggregate_corrected", "NVML_MEMORY_ERROR_TYPE_CORRECTED",
                 "NVML_AGGREGATE_ECC"),
            ):
                setattr(d, attr, self.call(err, attr, "nvmlDeviceGetTotalEccErrors", handle,
                                           getattr(n, etype), getattr(n, ctype)))

        for attr, cause in (
            ("retired_pages_single_bit",
             "NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS"),
            ("retired_pages_double_bit", "NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR"),
        ):
            pages = self.call(err, attr, "nvmlDeviceGetRetiredPages", handle,
                              getattr(n, cause))
            setattr(d, attr, len(pages) if pages is not None else None)
        pending = self.call(err, "retired_pages_pending",
                            "nvmlDeviceGetRetiredPagesPendingStatus", handle)
        d.retired_pages_pending = bool(pending) if pending is not None else None
        rows = self.call(err, "remapped_rows", "nvmlDeviceGetRemappedRows", handle)
        if rows is not None:  # (correctable, uncorrectable, pending, failure)
            d.remapped_rows_correctable, d.remapped_rows_uncorrectable = int(rows[0]), \
                int(rows[1])
            d.remap_pending, d.remap_failure = bool(rows[2]), bool(rows[3])

        reasons_err: dict[str, str] = {}
        reasons = self.call(reasons_err, "clock_event_reasons",
                            "nvmlDeviceGetCurrentClocksEventReasons", handle)
        if reasons is None:  # drivers before r535 only have the "throttle" name
            reasons = self.call(reasons_err, "clock_event_reasons",
                                "nvmlDeviceGetCurrentClocksThrottleReasons", handle)
        if reasons is None:
            err.update(reasons_err)
        else:
            d.clock_event_reasons = int(reasons)
            d.clock_event_names = decode_clock_event_reasons(int(reasons), n)
        for attr, fn, ctype in (
            ("sm_clock_mhz", "nvmlDeviceGetClockInfo", "NVML_CLOCK_SM"),
            ("sm_clock_max_mhz", "nvmlDeviceGetMaxClockInfo", "NVML_CLOCK_SM"),
            ("mem_clock_mhz", "nvmlDeviceGetClockInfo", "NVML_CLOCK_MEM"),
            ("mem_clock_max_mhz", "nvmlDeviceGetMaxClockInfo", "NVML_CLOCK_MEM"),
        ):
            setattr(d, attr, self.call(err, attr, fn, handle, getattr(n, ctype)))
        d.temperature_c = self.call(err, "temperature_c", "nvmlDeviceGetTemperature", handle,
                                    n.NVML_TEMPERATURE_GPU)
        power = self.call(err, "power_w", "nvmlDeviceGetPowerUsage", handle)  # milliwatts
        d.power_w = round(power / 1000, 1) if power is not None else None
        limit = self.call(err, "power_limit_w", "nvmlDeviceGetEnforcedPowerLimit", handle)
        d.power_limit_w = round(limit / 1000, 1) if limit is not None else None
        for attr, fn in (
            ("pcie_gen", "nvmlDeviceGetCurrPcieLinkGeneration"),
            ("pcie_gen_max", "nvmlDeviceGetMaxPcieLinkGeneration"),
            ("pcie_gen_gpu_max", "nvmlDeviceGetGpuMaxPcieLinkGeneration"),
            ("pcie_width", "nvmlDeviceGetCurrPcieLinkWidth"),
            ("pcie_width_max", "nvmlDeviceGetMaxPcieLinkWidth"),
        ):
            setattr(d, attr, self.call(err, attr, fn, handle))
        d.nvlinks = self.nvlinks(handle, err)
        return d

    def nvlinks(self, handle: Any, err: dict[str, str]) -> list[NvLinkInfo] | None:
        links: list[NvLinkInfo] = []
        for link in range(int(getattr(self.nvml, "NVML_NVLINK_MAX_LINKS", 18))):
            probe: dict[str, str] = {}
            state = self.call(probe, "state", "nvmlDeviceGetNvLinkState", handle, link)
            if state is None:
                # Links are numbered from 0: the first unsupported one ends the list.
                if link == 0:
                    err["nvlinks"] = probe["state"]
                    return None
                break
            info = NvLinkInfo(link, bool(state))
            if info.active:
                remote = self.call(probe, "remote", "nvmlDeviceGetNvLinkRemotePciInfo",
                                   handle, link)
                if remote is not None:
                    info.remote_pci_bus_id = _text(getattr(remote, "busId", b""))
            links.append(info)
        return links

    def pairs(self, handles: list[Any], devices: list[DeviceInfo]) -> list[PairInfo]:
        n = self.nvml
        read_idx = _const(n.NVML_P2P_CAPS_INDEX_READ)
        nvlink_idx = _const(n.NVML_P2P_CAPS_INDEX_NVLINK)
        gpu_bus = {pci_key(d.pci_bus_id): d.index for d in devices if d.pci_bus_id}
        out = []
        for i, hi in enumerate(handles):
            for j, hj in enumerate(handles):
                if i == j or hi is None or hj is None:
                    continue
                p = PairInfo(devices[i].index, devices[j].index)
                level = self.call(p.errors, "level", "nvmlDeviceGetTopologyCommonAncestor",
                                  hi, hj)
                if level is not None:
                    p.level = TOPOLOGY_LEVELS.get(int(level), str(level))
                for attr, idx in (("p2p_read", read_idx), ("p2p_nvlink", nvlink_idx)):
                    status = self.call(p.errors, attr, "nvmlDeviceGetP2PStatus", hi, hj, idx)
                    if status is not None:
                        setattr(p, attr, P2P_STATUSES.get(int(status), str(status)))
                p.nvlinks = _links_between(devices[i], devices[j], gpu_bus)
                out.append(p)
        return out


def _links_between(a: DeviceInfo, b: DeviceInfo,
                   gpu_bus: dict[tuple[int, int, int] | None, int]) -> int | None:
    """Active links of ``a`` that end at ``b``; links to an NVSwitch reach every GPU on the
    fabric, so they all count (what `nvidia-smi topo -m` prints as NV18 on HGX H100)."""
    if a.nvlinks is None:
        return None
    direct = switched = 0
    for link in a.nvlinks:
        if not link.active:
            continue
        remote = gpu_bus.get(pci_key(link.remote_pci_bus_id), -1)
        if remote == b.index:
            direct += 1
        elif remote == -1:
            switched += 1
    return direct + switched


def read_snapshot(nvml: Any = None, topology: bool = True, xids: bool = True) -> NvmlSnapshot:
    """Read every device (and, with ``topology``, every GPU pair) through NVML.

    Raises NvmlUnavailable when NVML cannot start at all (no driver, no library, no pynvml);
    its message is the reason a check reports as skipped.
    """
    nvml = nvml or _import_pynvml()
    try:
        nvml.nvmlInit()
    except Exception as e:  # noqa: BLE001 - every init failure means "NVML unusable here"
        raise NvmlUnavailable(_unavailable_reason(nvml, e)) from e
    try:
        snap = NvmlSnapshot()
        reader = _Reader(nvml)
        ver = reader.call(snap.errors, "driver_version", "nvmlSystemGetDriverVersion")
        snap.driver_version = _text(ver) if ver is not None else None
        snap.cuda_driver_version = reader.call(snap.errors, "cuda_driver_version",
                                               "nvmlSystemGetCudaDriverVersion")
        ver = reader.call(snap.errors, "nvml_version", "nvmlSystemGetNVMLVersion")
        snap.nvml_version = _text(ver) if ver is not None else None
        count = reader.call(snap.errors, "device_count", "nvmlDeviceGetCount") or 0
        handles = []
        for i in range(int(count)):
            err: dict[str, str] = {}
            h = reader.call(err, "handle", "nvmlDeviceGetHandleByIndex", i)
            handles.append(h)
            snap.devices.append(reader.device(i, h) if h is not None
                                else DeviceInfo(index=i, errors=err))
        if topology:
            snap.pairs = reader.pairs(handles, snap.devices)
    finally:
        try:
            nvml.nvmlShutdown()
        except Exception:  # noqa: BLE001 - shutting down is best effort
            pass
    if xids:
        snap.xids, snap.xid_source = read_kernel_xids()
        by_bus = {pci_key(d.pci_bus_id): d.index for d in snap.devices}
        for x in snap.xids or []:
            x.device_index = by_bus.get(pci_key(x.pci))
    else:
        snap.xid_source = "not read"
    return snap


def _unavailable_reason(nvml: Any, e: Exception) -> str:
    text = str(e)
    for cls in ("NVMLError_LibraryNotFound", "NVMLError_DriverNotLoaded"):
        if isinstance(e, getattr(nvml, cls, ())):
            return f"no NVIDIA driver ({text})"
    if isinstance(e, getattr(nvml, "NVMLError_NoPermission", ())):
        return f"NVML not permitted ({text})"
    return f"NVML could not start ({type(e).__name__}: {text})"


def snapshot_into(data: dict[str, Any], topology: bool, xids: bool) -> NvmlSnapshot | None:
    """A probe's NVML part: ``data["nvml"]`` gets the snapshot, or None with
    ``data["skipped"]`` saying why NVML cannot be used here (then None is returned)."""
    try:
        snap = read_snapshot(topology=topology, xids=xids)
    except NvmlUnavailable as e:
        data["skipped"] = str(e)
        data["nvml"] = None
        return None
    data["nvml"] = snap.to_dict()
    return snap


__all__ = [
    "BENIGN_CLOCK_REASONS", "DeviceInfo", "NvLinkInfo", "NvmlSnapshot", "NvmlUnavailable",
    "PairInfo", "ProcessInfo", "XidEvent", "decode_clock_event_reasons", "parse_xid_line",
    "pci_key", "read_kernel_xids", "read_snapshot", "snapshot_into",
]
