"""Every fact ddpdoctor reads from NVML (the only package that talks to pynvml)."""

from ddpdoctor.nvml.model import (
    BENIGN_CLOCK_REASONS,
    P2P_STATUSES,
    TOPOLOGY_LEVELS,
    DeviceInfo,
    NvLinkInfo,
    NvmlSnapshot,
    NvmlUnavailable,
    PairInfo,
    ProcessInfo,
    XidEvent,
    decode_clock_event_reasons,
    nvml_index_of,
    pci_key,
)
from ddpdoctor.nvml.reader import read_snapshot
from ddpdoctor.nvml.xid import parse_xid_line, read_kernel_xids

__all__ = [
    "BENIGN_CLOCK_REASONS", "P2P_STATUSES", "TOPOLOGY_LEVELS", "DeviceInfo", "NvLinkInfo",
    "NvmlSnapshot", "NvmlUnavailable", "PairInfo", "ProcessInfo", "XidEvent",
    "decode_clock_event_reasons", "nvml_index_of", "parse_xid_line", "pci_key", "read_kernel_xids",
    "read_snapshot",
]
