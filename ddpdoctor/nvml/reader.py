"""``read_snapshot``: every device and GPU pair of this host through NVML."""

from __future__ import annotations

from types import ModuleType

from ddpdoctor.nvml.device import _Reader, _text
from ddpdoctor.nvml.model import (
    DeviceInfo,
    NvmlSnapshot,
    NvmlUnavailable,
    _import_pynvml,
    pci_key,
)
from ddpdoctor.nvml.xid import read_kernel_xids


def read_snapshot(nvml: ModuleType | None = None, topology: bool = True,
                  xids: bool = True) -> NvmlSnapshot:
    """Read every device (and, with ``topology``, every GPU pair) through NVML.

    Raises NvmlUnavailable when NVML cannot start at all (no driver, no library, no pynvml);
    its message is the reason a check reports as skipped.
    """
    nvml = start(nvml)
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
        handles: list[object | None] = []
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
        except Exception:  # shutting down is best effort
            pass
    if xids:
        snap.xids, snap.xid_source = read_kernel_xids()
        by_bus = {pci_key(d.pci_bus_id): d.index for d in snap.devices}
        for x in snap.xids or []:
            x.device_index = by_bus.get(pci_key(x.pci))
    else:
        snap.xid_source = "not read"
    return snap


def start(nvml: ModuleType | None = None) -> ModuleType:
    """pynvml, initialised; NvmlUnavailable (its message the reason) when NVML cannot start
    at all (no driver, no library, no pynvml, no permission)."""
    nvml = nvml or _import_pynvml()
    try:
        nvml.nvmlInit()
    except Exception as e:  # every init failure means "NVML unusable here"
        raise NvmlUnavailable(_unavailable_reason(nvml, e)) from e
    return nvml


def _unavailable_reason(nvml: ModuleType, e: Exception) -> str:
    text = str(e)
    for cls in ("NVMLError_LibraryNotFound", "NVMLError_DriverNotLoaded"):
        if isinstance(e, getattr(nvml, cls, ())):
            return f"no NVIDIA driver ({text})"
    if isinstance(e, getattr(nvml, "NVMLError_NoPermission", ())):
        return f"NVML not permitted ({text})"
    return f"NVML could not start ({type(e).__name__}: {text})"
