"""A fake pynvml module that serves a recorded NvmlSnapshot back through pynvml's own API.

It has the real module's constants and NVMLError classes and the call signatures and return
shapes of the real functions (structs with attributes, bytes bus ids, milliwatts, the
remapped-rows tuple), so ``ddpdoctor.nvml.read_snapshot`` runs its real parsing code on it.
A field that is None with a reason in the snapshot's ``errors`` raises the NVMLError of that
reason, as the driver did when it was recorded.
"""

from __future__ import annotations

import types
from typing import Any

import pynvml

from ddpdoctor.nvml import P2P_STATUSES, TOPOLOGY_LEVELS

_ERROR_CODES = {text: code for code, text in pynvml.NVMLError._errcode_to_string.items()}
_LEVELS = {name: level for level, name in TOPOLOGY_LEVELS.items()}
_P2P = {name: status for status, name in P2P_STATUSES.items()}


def _raise(text: str) -> None:
    raise pynvml.NVMLError(_ERROR_CODES.get(text, pynvml.NVML_ERROR_UNKNOWN))


class _Handle:
    def __init__(self, dev: dict[str, Any]):
        self.dev = dev


def make_fake(snapshot: dict[str, Any], missing_functions: list[str] | tuple = (),
              init_error: int | None = None) -> types.ModuleType:
    fake = types.ModuleType("pynvml")
    for name in dir(pynvml):
        if name.startswith(("NVML_", "NVMLError", "nvmlClocks")):
            setattr(fake, name, getattr(pynvml, name))
    devices = snapshot["devices"]
    pairs = {(p["a"], p["b"]): p for p in snapshot.get("pairs") or []}
    calls: list[str] = []
    fake.calls = calls

    def api(fn):
        def wrapper(*args):
            calls.append(fn.__name__)
            if fn.__name__ in missing_functions:
                raise pynvml.NVMLError(pynvml.NVML_ERROR_FUNCTION_NOT_FOUND)
            return fn(*args)
        wrapper.__name__ = fn.__name__
        setattr(fake, fn.__name__, wrapper)
        return wrapper

    def field(h: _Handle, *names: str) -> Any:
        """The recorded values, or the recorded NVML error for the first missing one."""
        values = []
        for name in names:
            if h.dev.get(name) is None:
                why = h.dev["errors"].get(name)
                _raise(why or "Not Supported")
            values.append(h.dev[name])
        return values[0] if len(values) == 1 else values

    @api
    def nvmlInit():
        if init_error is not None:
            raise pynvml.NVMLError(init_error)

    @api
    def nvmlShutdown():
        pass

    @api
    def nvmlSystemGetDriverVersion():
        return snapshot["driver_version"]

    @api
    def nvmlSystemGetCudaDriverVersion():
        return snapshot["cuda_driver_version"]

    @api
    def nvmlSystemGetNVMLVersion():
        return snapshot["nvml_version"]

    @api
    def nvmlDeviceGetCount():
        return len(devices)

    @api
    def nvmlDeviceGetHandleByIndex(i):
        if "handle" in devices[i]["errors"]:
            _raise(devices[i]["errors"]["handle"])
        return _Handle(devices[i])

    @api
    def nvmlDeviceGetName(h):
        return field(h, "name")

    @api
    def nvmlDeviceGetUUID(h):
        return field(h, "uuid")

    @api
    def nvmlDeviceGetPciInfo(h):
        bus = field(h, "pci_bus_id")
        return types.SimpleNamespace(busId=bus.encode(), busIdLegacy=bus[4:].encode())

    @api
    def nvmlDeviceGetMemoryInfo(h):
        total, used = field(h, "memory_total", "memory_used")
        return types.SimpleNamespace(total=total, used=used, free=total - used)

    def processes(h, kind):
        if h.dev.get("processes") is None:
            _raise(h.dev["errors"][f"processes_{kind}"])
        return [types.SimpleNamespace(pid=p["pid"], usedGpuMemory=p["used_memory"],
                                      gpuInstanceId=0xFFFFFFFF, computeInstanceId=0xFFFFFFFF)
                for p in h.dev["processes"] if p["kind"] == kind]

    @api
    def nvmlDeviceGetComputeRunningProcesses(h):
        return processes(h, "compute")

    @api
    def nvmlDeviceGetGraphicsRunningProcesses(h):
        return processes(h, "graphics")

    @api
    def nvmlDeviceGetUtilizationRates(h):
        return types.SimpleNamespace(gpu=field(h, "utilization_gpu"), memory=0)

    @api
    def nvmlDeviceGetPerformanceState(h):
        return field(h, "performance_state")

    @api
    def nvmlDeviceGetEccMode(h):
        if h.dev.get("ecc_mode_current") is None:
            _raise(h.dev["errors"]["ecc_mode"])
        return [int(h.dev["ecc_mode_current"]), int(h.dev["ecc_mode_pending"])]

    @api
    def nvmlDeviceGetTotalEccErrors(h, error_type, counter_type):
        kind = "uncorrected" if error_type == pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED \
            else "corrected"
        scope = "volatile" if counter_type == pynvml.NVML_VOLATILE_ECC else "aggregate"
        return field(h, f"ecc_{scope}_{kind}")

    @api
    def nvmlDeviceGetRetiredPages(h, cause):
        name = ("retired_pages_double_bit"
                if cause == pynvml.NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR
                else "retired_pages_single_bit")
        return [0x1F3E000 + 0x1000 * i for i in range(field(h, name))]

    @api
    def nvmlDeviceGetRetiredPagesPendingStatus(h):
        return int(field(h, "retired_pages_pending"))

    @api
    def nvmlDeviceGetRemappedRows(h):
        if h.dev.get("remap_pending") is None:
            _raise(h.dev["errors"]["remapped_rows"])
        d = h.dev
        return (d["remapped_rows_correctable"], d["remapped_rows_uncorrectable"],
                int(d["remap_pending"]), int(d["remap_failure"]))

    @api
    def nvmlDeviceGetCurrentClocksEventReasons(h):
        return field(h, "clock_event_reasons")

    @api
    def nvmlDeviceGetCurrentClocksThrottleReasons(h):
        return field(h, "clock_event_reasons")

    clock_fields = {pynvml.NVML_CLOCK_SM: "sm_clock", pynvml.NVML_CLOCK_MEM: "mem_clock"}

    @api
    def nvmlDeviceGetClockInfo(h, clock):
        return field(h, f"{clock_fields[clock]}_mhz")

    @api
    def nvmlDeviceGetMaxClockInfo(h, clock):
        return field(h, f"{clock_fields[clock]}_max_mhz")

    @api
    def nvmlDeviceGetTemperature(h, sensor):
        assert sensor == pynvml.NVML_TEMPERATURE_GPU
        return field(h, "temperature_c")

    @api
    def nvmlDeviceGetPowerUsage(h):
        return round(field(h, "power_w") * 1000)

    @api
    def nvmlDeviceGetEnforcedPowerLimit(h):
        return round(field(h, "power_limit_w") * 1000)

    for fn_name, name in (("nvmlDeviceGetCurrPcieLinkGeneration", "pcie_gen"),
                          ("nvmlDeviceGetMaxPcieLinkGeneration", "pcie_gen_max"),
                          ("nvmlDeviceGetGpuMaxPcieLinkGeneration", "pcie_gen_gpu_max"),
                          ("nvmlDeviceGetCurrPcieLinkWidth", "pcie_width"),
                          ("nvmlDeviceGetMaxPcieLinkWidth", "pcie_width_max")):
        def getter(h, _name=name):
            return field(h, _name)
        getter.__name__ = fn_name
        api(getter)

    @api
    def nvmlDeviceGetNvLinkState(h, link):
        links = h.dev.get("nvlinks")
        if links is None:
            _raise(h.dev["errors"]["nvlinks"])
        if link >= len(links):
            _raise("Invalid Argument")
        return int(links[link]["active"])

    @api
    def nvmlDeviceGetNvLinkRemotePciInfo(h, link):
        remote = h.dev["nvlinks"][link]["remote_pci_bus_id"]
        if remote is None:
            _raise("Not Supported")
        return types.SimpleNamespace(busId=remote.encode())

    def pair(h1, h2):
        return pairs[(h1.dev["index"], h2.dev["index"])]

    @api
    def nvmlDeviceGetTopologyCommonAncestor(h1, h2):
        return _LEVELS[pair(h1, h2)["level"]]

    @api
    def nvmlDeviceGetP2PStatus(h1, h2, index):
        # The real binding would choke on pynvml's tuple-typed READ constant: demand an int.
        assert isinstance(index, int), index
        key = "p2p_nvlink" if index == pynvml.NVML_P2P_CAPS_INDEX_NVLINK else "p2p_read"
        return _P2P[pair(h1, h2)[key]]

    return fake
