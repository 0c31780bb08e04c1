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
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields
from types import ModuleType
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

    def to_dict(self) -> dict[str, object]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, object]) -> NvmlSnapshot:
        def devs(raw: Mapping[str, object]) -> DeviceInfo:
            d = _known(DeviceInfo, raw)
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


def _known(cls: type, data: Mapping[str, object]) -> dict[str, Any]:
    # Recordings from a newer ddpdoctor may carry fields this one does not know. The values
    # are a recording's JSON, splatted into a dataclass unchecked, so they stay untyped.
    names = {f.name for f in fields(cls)}
    return {k: v for k, v in data.items() if k in names}



def nvml_index_of(cuda_index: int, visible: str | None,
                  devices: Sequence[tuple[int, str | None]]) -> int | None:
    """NVML's index of CUDA's device ``cuda_index``; None when it cannot be told. NVML
    numbers every GPU of the host, CUDA only those CUDA_VISIBLE_DEVICES lists, in its
    order, by index or by (a prefix of) the uuid. ``devices``: NVML's (index, uuid)."""
    items = [x.strip() for x in (visible or "").split(",") if x.strip()]
    if not items:
        return cuda_index if cuda_index < len(devices) else None
    if cuda_index >= len(items):
        return None
    item = items[cuda_index]
    if item.isdigit():
        return int(item)
    matches = [i for i, uuid in devices if uuid and uuid.startswith(item)]
    return matches[0] if len(matches) == 1 else None


def throttled(names: Sequence[str] | None) -> bool | None:
    """A clock-event reason beyond normal operation (power cap, thermal, HW slowdown) among
    ``names``; None when the reasons were not read."""
    if names is None:
        return None
    return any(n not in BENIGN_CLOCK_REASONS for n in names)


def decode_clock_event_reasons(mask: int, nvml: ModuleType | None = None) -> list[str]:
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



def _import_pynvml() -> ModuleType:
    try:
        return importlib.import_module("pynvml")
    except ImportError as e:
        raise NvmlUnavailable("pynvml (nvidia-ml-py) is not installed") from e

