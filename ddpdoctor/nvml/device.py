"""One device's NVML facts, each call guarded on its own (see ``model``)."""

from __future__ import annotations

from types import ModuleType
from typing import Any

from ddpdoctor.nvml.model import (
    P2P_STATUSES,
    TOPOLOGY_LEVELS,
    DeviceInfo,
    NvLinkInfo,
    PairInfo,
    ProcessInfo,
    decode_clock_event_reasons,
    pci_key,
)

# (DeviceInfo field, NVML error type, NVML counter type)
_ECC_COUNTERS = (
    ("ecc_volatile_uncorrected", "NVML_MEMORY_ERROR_TYPE_UNCORRECTED", "NVML_VOLATILE_ECC"),
    ("ecc_volatile_corrected", "NVML_MEMORY_ERROR_TYPE_CORRECTED", "NVML_VOLATILE_ECC"),
    ("ecc_aggregate_uncorrected", "NVML_MEMORY_ERROR_TYPE_UNCORRECTED", "NVML_AGGREGATE_ECC"),
    ("ecc_aggregate_corrected", "NVML_MEMORY_ERROR_TYPE_CORRECTED", "NVML_AGGREGATE_ECC"),
)
_RETIRED_PAGES = (
    ("retired_pages_single_bit", "NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS"),
    ("retired_pages_double_bit", "NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR"),
)
_CLOCKS = (
    ("sm_clock_mhz", "nvmlDeviceGetClockInfo", "NVML_CLOCK_SM"),
    ("sm_clock_max_mhz", "nvmlDeviceGetMaxClockInfo", "NVML_CLOCK_SM"),
    ("mem_clock_mhz", "nvmlDeviceGetClockInfo", "NVML_CLOCK_MEM"),
    ("mem_clock_max_mhz", "nvmlDeviceGetMaxClockInfo", "NVML_CLOCK_MEM"),
)
_PCIE = (
    ("pcie_gen", "nvmlDeviceGetCurrPcieLinkGeneration"),
    ("pcie_gen_max", "nvmlDeviceGetMaxPcieLinkGeneration"),
    ("pcie_gen_gpu_max", "nvmlDeviceGetGpuMaxPcieLinkGeneration"),
    ("pcie_width", "nvmlDeviceGetCurrPcieLinkWidth"),
    ("pcie_width_max", "nvmlDeviceGetMaxPcieLinkWidth"),
)


def _text(value: object) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def _const(value: int | tuple[int]) -> int:
    # pynvml defines NVML_P2P_CAPS_INDEX_READ as "0," (a tuple): unwrap it.
    return int(value[0]) if isinstance(value, tuple) else int(value)


class _Reader:
    def __init__(self, nvml: ModuleType):
        self.nvml = nvml

    # Left untyped: the function is looked up by name, so its result (a struct, a list, a
    # tuple, an int or bytes) is only known at the call site, which reads it as pynvml
    # documents.
    def call(self, errors: dict[str, str], name: str, fn_name: str, *args: object) -> Any:
        """One NVML call; any failure leaves the field None and says why in ``errors``."""
        fn = getattr(self.nvml, fn_name, None)
        if fn is None:
            errors[name] = f"{fn_name} not in this pynvml"
            return None
        try:
            return fn(*args)
        except Exception as e:  # NVMLError_*, ctypes errors: never fatal
            errors[name] = str(e) if isinstance(e, self.nvml.NVMLError) else \
                f"{type(e).__name__}: {e}"
            return None

    def device(self, index: int, handle: object) -> DeviceInfo:
        d = DeviceInfo(index=index)
        for part in (self._identity, self._processes, self._ecc, self._retirement,
                     self._clocks, self._power_and_pcie):
            part(d, handle)
        d.nvlinks = self.nvlinks(handle, d.errors)
        return d

    def bus_id(self, err: dict[str, str], handle: object) -> str | None:
        pci = self.call(err, "pci_bus_id", "nvmlDeviceGetPciInfo", handle)
        if pci is None:
            return None
        return _text(getattr(pci, "busId", b"") or getattr(pci, "busIdLegacy", b""))

    def clock_event_mask(self, err: dict[str, str], handle: object) -> int | None:
        """The clock-event (throttle) reason bits; None, with why in ``err``, when unread."""
        mine: dict[str, str] = {}
        mask = self.call(mine, "clock_event_reasons",
                         "nvmlDeviceGetCurrentClocksEventReasons", handle)
        if mask is None:  # drivers before r535 only have the "throttle" name
            mask = self.call(mine, "clock_event_reasons",
                             "nvmlDeviceGetCurrentClocksThrottleReasons", handle)
        if mask is None:
            err.update(mine)
            return None
        return int(mask)

    def _text_of(self, err: dict[str, str], name: str, fn_name: str, handle: object) -> str | None:
        value = self.call(err, name, fn_name, handle)
        return _text(value) if value is not None else None

    def _identity(self, d: DeviceInfo, handle: object) -> None:
        err = d.errors
        d.name = self._text_of(err, "name", "nvmlDeviceGetName", handle)
        d.uuid = self._text_of(err, "uuid", "nvmlDeviceGetUUID", handle)
        d.pci_bus_id = self.bus_id(err, handle)
        mem = self.call(err, "memory", "nvmlDeviceGetMemoryInfo", handle)
        if mem is not None:
            d.memory_total, d.memory_used = int(mem.total), int(mem.used)
        util = self.call(err, "utilization_gpu", "nvmlDeviceGetUtilizationRates", handle)
        d.utilization_gpu = int(util.gpu) if util is not None else None
        d.performance_state = self.call(err, "performance_state",
                                        "nvmlDeviceGetPerformanceState", handle)

    def _processes(self, d: DeviceInfo, handle: object) -> None:
        procs: list[ProcessInfo] = []
        got_any = False
        for kind, fn in (("compute", "nvmlDeviceGetComputeRunningProcesses"),
                         ("graphics", "nvmlDeviceGetGraphicsRunningProcesses")):
            listed = self.call(d.errors, f"processes_{kind}", fn, handle)
            if listed is None:
                continue
            got_any = True
            for p in listed:
                used = getattr(p, "usedGpuMemory", None)
                procs.append(ProcessInfo(int(p.pid), int(used) if used is not None else None,
                                         kind))
        d.processes = procs if got_any else None

    def _ecc(self, d: DeviceInfo, handle: object) -> None:
        n, err = self.nvml, d.errors
        ecc = self.call(err, "ecc_mode", "nvmlDeviceGetEccMode", handle)
        if ecc is not None:
            d.ecc_mode_current, d.ecc_mode_pending = bool(ecc[0]), bool(ecc[1])
        if not d.ecc_mode_current:  # counters of a GPU with ECC off are meaningless
            return
        for attr, etype, ctype in _ECC_COUNTERS:
            setattr(d, attr, self.call(err, attr, "nvmlDeviceGetTotalEccErrors", handle,
                                       getattr(n, etype), getattr(n, ctype)))

    def _retirement(self, d: DeviceInfo, handle: object) -> None:
        err = d.errors
        for attr, cause in _RETIRED_PAGES:
            pages = self.call(err, attr, "nvmlDeviceGetRetiredPages", handle,
                              getattr(self.nvml, cause))
            setattr(d, attr, len(pages) if pages is not None else None)
        pending = self.call(err, "retired_pages_pending",
                            "nvmlDeviceGetRetiredPagesPendingStatus", handle)
        d.retired_pages_pending = bool(pending) if pending is not None else None
        rows = self.call(err, "remapped_rows", "nvmlDeviceGetRemappedRows", handle)
        if rows is not None:  # (correctable, uncorrectable, pending, failure)
            d.remapped_rows_correctable, d.remapped_rows_uncorrectable = int(rows[0]), \
                int(rows[1])
            d.remap_pending, d.remap_failure = bool(rows[2]), bool(rows[3])

    def _clocks(self, d: DeviceInfo, handle: object) -> None:
        n, err = self.nvml, d.errors
        reasons = self.clock_event_mask(err, handle)
        if reasons is not None:
            d.clock_event_reasons = reasons
            d.clock_event_names = decode_clock_event_reasons(reasons, n)
        for attr, fn, ctype in _CLOCKS:
            setattr(d, attr, self.call(err, attr, fn, handle, getattr(n, ctype)))
        d.temperature_c = self.call(err, "temperature_c", "nvmlDeviceGetTemperature", handle,
                                    n.NVML_TEMPERATURE_GPU)

    def _power_and_pcie(self, d: DeviceInfo, handle: object) -> None:
        err = d.errors
        power = self.call(err, "power_w", "nvmlDeviceGetPowerUsage", handle)  # milliwatts
        d.power_w = round(power / 1000, 1) if power is not None else None
        limit = self.call(err, "power_limit_w", "nvmlDeviceGetEnforcedPowerLimit", handle)
        d.power_limit_w = round(limit / 1000, 1) if limit is not None else None
        for attr, fn in _PCIE:
            setattr(d, attr, self.call(err, attr, fn, handle))

    def nvlinks(self, handle: object, err: dict[str, str]) -> list[NvLinkInfo] | None:
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

    def pairs(self, handles: list[object | None], devices: list[DeviceInfo]) -> list[PairInfo]:
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

