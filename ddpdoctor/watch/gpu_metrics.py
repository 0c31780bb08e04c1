"""This rank's GPU, sampled on the heartbeat thread once per interval: NVML's utilisation,
device memory and clock-event (throttle) reasons, and PyTorch's allocated / reserved bytes.

Nothing runs on the training thread: the allocator's counters are host-side reads, and
the NVML queries are three calls to the driver (~tens of microseconds each). Without
NVML (no driver library, no pynvml, no permission) the allocator's numbers still come and
``skipped`` says why the rest does not; a model on the CPU has no GPU metrics at all.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ddpdoctor.nvml import NvmlUnavailable
from ddpdoctor.nvml.live import LiveReader, LiveSample

if TYPE_CHECKING:
    import torch


@dataclass(frozen=True)
class GpuSample:
    allocated_mb: float | None
    reserved_mb: float | None
    nvml: LiveSample | None


def pci_bus_id(props: object) -> str | None:
    """"domain:bus:device.0" from torch's device properties (ints there), when it has them."""
    bus = getattr(props, "pci_bus_id", None)
    if isinstance(bus, str):
        return bus
    if not isinstance(bus, int):
        return None
    domain, dev = getattr(props, "pci_domain_id", 0), getattr(props, "pci_device_id", 0)
    return f"{int(domain):04x}:{bus:02x}:{int(dev):02x}.0"


class GpuMetrics:
    def __init__(self, device: torch.device, reader: LiveReader | None,
                 skipped: str | None) -> None:
        self.device, self.reader, self.skipped = device, reader, skipped

    @classmethod
    def open(cls, device: torch.device | None) -> GpuMetrics | None:
        """None for a model not on a CUDA device."""
        if device is None or device.type != "cuda":
            return None
        import torch

        index = device.index if device.index is not None else torch.cuda.current_device()
        props = torch.cuda.get_device_properties(index)
        try:
            reader = LiveReader.open(pci_bus_id(props), index,
                                     os.environ.get("CUDA_VISIBLE_DEVICES"))
        except NvmlUnavailable as e:
            return cls(torch.device("cuda", index), None, str(e))
        return cls(torch.device("cuda", index), reader, None)

    def sample(self) -> GpuSample:
        import torch

        mib = 2**20
        return GpuSample(
            allocated_mb=round(torch.cuda.memory_allocated(self.device) / mib, 1),
            reserved_mb=round(torch.cuda.memory_reserved(self.device) / mib, 1),
            nvml=self.reader.read() if self.reader is not None else None)
