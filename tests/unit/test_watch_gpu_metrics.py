"""The watch's live GPU metrics: NVML through a fake pynvml replaying recorded snapshots
(the H200 one recorded by `make gpu-verify`), the allocator's bytes, the series record,
the metrics and Prometheus gauges. No GPU and no process: the heartbeat thread's sampling
is called directly."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pynvml
import pytest
from gpu_fake_pynvml import make_fake
from gpu_fixtures import load

from ddpdoctor import nvml
from ddpdoctor.nvml import nvml_index_of
from ddpdoctor.nvml.live import LiveReader, LiveSample
from ddpdoctor.watch import hang_watchdog
from ddpdoctor.watch.config import WatchConfig
from ddpdoctor.watch.gpu_metrics import GpuMetrics, GpuSample, pci_bus_id
from ddpdoctor.watch.series_file import SeriesRecord, merge
from ddpdoctor.watch.stream import StepMetrics

RECORDED = Path(__file__).parents[1] / "fixtures" / "nvml" / "recorded" / "h200-2026-11-27.json"


def h200() -> dict:
    return json.loads(RECORDED.read_text())["snapshot"]


def test_recorded_h200_snapshot_replays_through_the_reader():
    snap = nvml.read_snapshot(make_fake(h200()), topology=True, xids=False)
    [d] = snap.devices
    assert (d.name, d.pci_bus_id, d.clock_event_names) == ("NVIDIA H200", "00000000:00:06.0",
                                                           ["gpu_idle"])
    assert d.errors["nvlinks"] == "Not Supported"


def test_live_reader_finds_the_device_by_pci_bus_id_and_reads_three_fields():
    fx = load("h100-thermal")["snapshot"]
    hot = fx["devices"][2]
    reader = LiveReader.open(hot["pci_bus_id"], 0, None, nvml=make_fake(fx))
    s = reader.read()
    assert s.util_pct == hot["utilization_gpu"]
    assert s.memory_used_mb == round(hot["memory_used"] / 2**20, 1)
    assert "hw_thermal_slowdown" in s.clock_events and s.throttled is True


def test_live_reader_on_the_recorded_h200_is_idle_not_throttled():
    reader = LiveReader.open("0000:00:06.0", 5, None, nvml=make_fake(h200()))
    s = reader.read()
    assert (s.util_pct, s.clock_events, s.throttled) == (0, ("gpu_idle",), False)
    assert s.memory_used_mb == round(644939776 / 2**20, 1)


def test_live_reader_without_nvml_says_why():
    fake = make_fake(h200(), init_error=pynvml.NVML_ERROR_LIBRARY_NOT_FOUND)
    with pytest.raises(nvml.NvmlUnavailable, match="no NVIDIA driver"):
        LiveReader.open(None, 0, None, nvml=fake)


def test_a_query_the_driver_refuses_leaves_its_field_none():
    fake = make_fake(h200(), missing_functions=["nvmlDeviceGetUtilizationRates"])
    s = LiveReader.open(None, 0, None, nvml=fake).read()
    assert s.util_pct is None and s.memory_used_mb is not None


@pytest.mark.parametrize("index,visible,want", [(0, None, 0), (1, "4,5", 5),
                                                (0, "GPU-bb,GPU-aa", 1), (3, "1", None),
                                                (2, None, None)])
def test_nvml_index_follows_cuda_visible_devices(index, visible, want):
    # one mapping for the check's analysis and the watch (NVML numbers every GPU of the
    # host; CUDA_VISIBLE_DEVICES lists indices or uuid prefixes)
    devices = [(0, "GPU-aa11"), (1, "GPU-bb22")]
    assert nvml_index_of(index, visible, devices) == want


def test_without_a_pci_match_the_live_reader_takes_cuda_visible_devices():
    fx = load("h100-thermal")["snapshot"]
    hot = fx["devices"][2]
    reader = LiveReader.open(None, 1, f"0,{hot['index']}", nvml=make_fake(fx))
    assert reader.read().util_pct == hot["utilization_gpu"]
    with pytest.raises(nvml.NvmlUnavailable, match="no NVML device is cuda:3"):
        LiveReader.open(None, 3, "0,1", nvml=make_fake(fx))


def test_pci_bus_id_from_torch_properties():
    props = SimpleNamespace(pci_domain_id=0, pci_bus_id=0x18, pci_device_id=0)
    assert pci_bus_id(props) == "0000:18:00.0"
    assert pci_bus_id(SimpleNamespace()) is None


def test_a_model_on_the_cpu_has_no_gpu_metrics():
    import torch

    assert GpuMetrics.open(None) is None
    assert GpuMetrics.open(torch.device("cpu")) is None


class _Gpu:
    skipped = None

    def __init__(self, sample: GpuSample) -> None:
        self._s = sample

    def sample(self) -> GpuSample:
        return self._s


class _Sink:
    def __init__(self) -> None:
        self.events: list[tuple] = []
        self.published: list[StepMetrics] = []
        self.last: dict = {}

    def event(self, kind: str, step: int, **data: object) -> None:
        self.events.append((kind, step, data))

    def metrics(self, records: list[StepMetrics]) -> None:
        self.published.extend(records)


def _monitor(sink: _Sink, gpu: object | None, opened: bool = True) -> hang_watchdog.Monitor:
    m = hang_watchdog.Monitor(0, WatchConfig(), sink)  # type: ignore[arg-type]
    m._gpu, m._gpu_opened, m.started = gpu, opened, True  # type: ignore[assignment]
    return m


def test_the_interval_record_and_metrics_carry_the_gpu():
    thermal = LiveSample(util_pct=97, memory_used_mb=70000.0,
                         clock_events=("sw_power_cap", "hw_thermal_slowdown"))
    sink = _Sink()
    m = _monitor(sink, _Gpu(GpuSample(allocated_mb=1024.0, reserved_mb=2048.0, nvml=thermal)))
    m.boundary(10, 0.5)
    m._sample_series()
    [pub] = sink.published
    assert (pub.gpu_util_pct, pub.gpu_memory_used_mb, pub.cuda_allocated_mb,
            pub.cuda_reserved_mb, pub.gpu_throttled) == (97, 70000.0, 1024.0, 2048.0, 1.0)


def test_without_nvml_the_allocator_bytes_still_come_and_the_reason_is_said_once(monkeypatch):
    sink = _Sink()
    gpu = _Gpu(GpuSample(allocated_mb=5.0, reserved_mb=8.0, nvml=None))
    gpu.skipped = "no NVIDIA driver (NVML Shared Library Not Found)"
    m = _monitor(sink, None, opened=False)
    monkeypatch.setattr(hang_watchdog.GpuMetrics, "open", classmethod(lambda cls, d: gpu))
    for step in (1, 2):
        m.boundary(step, 0.1)
        m._sample_series()
    assert [e[0] for e in sink.events] == ["gpu_metrics"]
    assert "no NVIDIA driver" in str(sink.events[0][2]["skipped"])
    assert [(p.cuda_allocated_mb, p.gpu_util_pct, p.gpu_throttled)
            for p in sink.published] == [(5.0, None, None)] * 2


def test_a_gpu_that_fails_to_sample_keeps_the_step_series():
    class Broken:
        skipped = None

        def sample(self):
            raise RuntimeError("CUDA error: device-side assert")

    sink = _Sink()
    m = _monitor(sink, Broken())
    m.boundary(3, 0.2)
    m._sample_series()
    assert sink.published[0].step == 3 and sink.published[0].step_time_s is not None
    assert sink.events[0][0] == "gpu_metrics" and "device-side assert" in \
        str(sink.events[0][2]["skipped"])


def test_merged_series_records_keep_the_later_gpu_reading():
    a = SeriesRecord(step=10, rank=0, steps=10, step_time_s=1.0, gpu_util_pct=50,
                     cuda_allocated_mb=1.0, gpu_clock_events=["gpu_idle"])
    b = SeriesRecord(step=20, rank=0, steps=10, step_time_s=1.0, cuda_allocated_mb=2.0)
    m = merge(a, b)
    assert (m.gpu_util_pct, m.cuda_allocated_mb, m.gpu_clock_events) == (50, 2.0, ["gpu_idle"])


def test_prometheus_exports_the_gpu_gauges():
    from prometheus_client import CollectorRegistry, generate_latest
    from prometheus_client.parser import text_string_to_metric_families

    from ddpdoctor.watch.prometheus import PrometheusSink

    reg = CollectorRegistry()
    PrometheusSink(reg, host="h", job="j").metrics([StepMetrics(
        0, 5, "interval", 5, gpu_util_pct=97.0, gpu_memory_used_mb=1.0,
        cuda_allocated_mb=2.0, cuda_reserved_mb=3.0, gpu_throttled=1.0)])
    fams = {f.name: f.samples[0].value
            for f in text_string_to_metric_families(generate_latest(reg).decode())
            if f.samples}
    assert fams["ddpdoctor_gpu_utilization_percent"] == 97.0
    assert fams["ddpdoctor_gpu_memory_used_bytes"] == 2**20
    assert fams["ddpdoctor_cuda_allocated_bytes"] == 2 * 2**20
    assert fams["ddpdoctor_cuda_reserved_bytes"] == 3 * 2**20
    assert fams["ddpdoctor_gpu_throttled"] == 1.0
