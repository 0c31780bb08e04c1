"""One GPU read again and again: what a training rank's watch samples once per interval.

``LiveReader.open`` starts NVML once and finds this rank's device by its PCI bus id (the
one name CUDA and NVML share whatever ``CUDA_VISIBLE_DEVICES`` renumbers); ``read`` then
costs three NVML queries (utilisation, memory, clock-event reasons), each guarded: a query
the GPU or driver refuses leaves its field None.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import ModuleType

from ddpdoctor.nvml.device import _Reader, _text
from ddpdoctor.nvml.model import (
    NvmlUnavailable,
    decode_clock_event_reasons,
    nvml_index_of,
    pci_key,
    throttled,
)
from ddpdoctor.nvml.reader import start


@dataclass(frozen=True)
class LiveSample:
    util_pct: int | None              # busy share of the last sample period (NVML)
    memory_used_mb: float | None      # the whole device, every process on it
    clock_events: tuple[str, ...] | None

    @property
    def throttled(self) -> bool | None:
        return throttled(self.clock_events)


class LiveReader:
    def __init__(self, nvml: ModuleType, handle: object) -> None:
        self._r, self._handle = _Reader(nvml), handle
        self.errors: dict[str, str] = {}

    @classmethod
    def open(cls, pci_bus_id: str | None, cuda_index: int, visible: str | None,
             nvml: ModuleType | None = None) -> LiveReader:
        """The device whose PCI bus id matches, else the one CUDA_VISIBLE_DEVICES maps
        ``cuda_index`` to. Raises NvmlUnavailable (its message the reason) when NVML cannot
        be used or no device can be told to be this one."""
        nvml = start(nvml)
        r, err = _Reader(nvml), dict[str, str]()
        want = pci_key(pci_bus_id)
        handles = [r.call(err, "handle", "nvmlDeviceGetHandleByIndex", i)
                   for i in range(int(r.call(err, "count", "nvmlDeviceGetCount") or 0))]
        for h in handles:
            if want is not None and h is not None and pci_key(r.bus_id(err, h)) == want:
                return cls(nvml, h)
        uuids: list[tuple[int, str | None]] = []
        for n, h in enumerate(handles):
            u = r.call(err, "uuid", "nvmlDeviceGetUUID", h) if h is not None else None
            uuids.append((n, _text(u) if u is not None else None))
        i = nvml_index_of(cuda_index, visible, uuids)
        h = handles[i] if i is not None and i < len(handles) else None
        if h is None:
            why = "".join(f"; {k}: {v}" for k, v in err.items())
            raise NvmlUnavailable(f"no NVML device is cuda:{cuda_index} "
                                  f"(CUDA_VISIBLE_DEVICES={visible or ''}{why})")
        return cls(nvml, h)

    def read(self) -> LiveSample:
        r, h, err = self._r, self._handle, self.errors
        util = r.call(err, "utilization", "nvmlDeviceGetUtilizationRates", h)
        mem = r.call(err, "memory", "nvmlDeviceGetMemoryInfo", h)
        mask = r.clock_event_mask(err, h)
        return LiveSample(
            util_pct=int(util.gpu) if util is not None else None,
            memory_used_mb=round(int(mem.used) / 2**20, 1) if mem is not None else None,
            clock_events=(tuple(decode_clock_event_reasons(mask, r.nvml))
                          if mask is not None else None))
