"""ddpdoctor.nvml's NVML-reading code on a fake pynvml that replays the recorded fixtures."""

import sys

import pynvml
import pytest
from gpu_fake_pynvml import make_fake
from gpu_fixtures import NAMES, load, per_rank

from ddpdoctor import nvml
from ddpdoctor.check.analysis import gpu
from ddpdoctor.check.probes import gpu as gpu_probe
from ddpdoctor.check.probes import topology as topology_probe


@pytest.mark.parametrize("name", NAMES)
def test_replay_reads_back_the_recorded_snapshot(name):
    fx = load(name)
    fake = make_fake(fx["snapshot"], **fx["fake"])
    snap = nvml.read_snapshot(fake, topology=True, xids=False)
    expected = dict(fx["snapshot"], xids=None, xid_source="not read")
    assert snap.to_dict() == expected
    assert nvml.NvmlSnapshot.from_dict(snap.to_dict()) == snap
    assert "nvmlShutdown" in fake.calls


def test_partial_gpu_falls_back_to_throttle_reasons_and_records_why_fields_are_missing():
    fx = load("gtx1080ti-partial")
    fake = make_fake(fx["snapshot"], **fx["fake"])
    snap = nvml.read_snapshot(fake, topology=True, xids=False)
    d = snap.devices[0]
    assert "nvmlDeviceGetCurrentClocksThrottleReasons" in fake.calls
    assert d.clock_event_names == ["gpu_idle"]
    assert d.processes is None and d.power_w is None and d.ecc_volatile_uncorrected is None
    assert d.errors["remapped_rows"] == "Function Not Found"
    assert d.errors["ecc_mode"] == "Not Supported"


def test_clock_event_mask_is_decoded_with_pynvml_constants():
    mask = (pynvml.nvmlClocksEventReasonHwSlowdown | pynvml.nvmlClocksEventReasonHwThermalSlowdown
            | pynvml.nvmlClocksEventReasonHwPowerBrakeSlowdown
            | pynvml.nvmlClocksEventReasonSwPowerCap | pynvml.nvmlClocksEventReasonGpuIdle)
    assert nvml.decode_clock_event_reasons(mask) == [
        "gpu_idle", "sw_power_cap", "hw_slowdown", "hw_thermal_slowdown",
        "hw_power_brake_slowdown"]
    assert nvml.decode_clock_event_reasons(0x48) == ["hw_slowdown", "hw_thermal_slowdown"]


def test_a_call_that_raises_anything_leaves_only_that_field_empty():
    fx = load("h100-healthy-8x")
    fake = make_fake(fx["snapshot"])

    def broken(h):
        raise pynvml.NVMLError_GpuIsLost()
    fake.nvmlDeviceGetTemperature = lambda h, s: 1 / 0
    fake.nvmlDeviceGetMemoryInfo = broken
    snap = nvml.read_snapshot(fake, topology=False, xids=False)
    d = snap.devices[0]
    assert d.temperature_c is None and d.errors["temperature_c"].startswith("ZeroDivisionError")
    assert d.memory_total is None and d.errors["memory"] == "GPU is lost"
    assert d.uuid == fx["snapshot"]["devices"][0]["uuid"] and snap.pairs is None


@pytest.mark.parametrize("code,reason", [
    (pynvml.NVML_ERROR_LIBRARY_NOT_FOUND, "no NVIDIA driver (NVML Shared Library Not Found)"),
    (pynvml.NVML_ERROR_DRIVER_NOT_LOADED, "no NVIDIA driver (Driver Not Loaded)"),
    (pynvml.NVML_ERROR_NO_PERMISSION, "NVML not permitted (Insufficient Permissions)"),
])
def test_init_failures_become_skip_reasons(code, reason):
    fake = make_fake(load("h100-healthy-8x")["snapshot"], init_error=code)
    with pytest.raises(nvml.NvmlUnavailable, match=reason.replace("(", r"\(").replace(")", r"\)")):
        nvml.read_snapshot(fake)


def test_xid_lines_are_parsed_and_mapped_to_devices():
    x = nvml.parse_xid_line("6,1234,5678,-;NVRM: Xid (PCI:0000:4e:00): 79, pid=1234, "
                            "name=python, GPU has fallen off the bus.")
    assert (x.pci, x.xid) == ("0000:4e:00", 79)
    assert x.text.startswith("pid=1234")
    assert nvml.pci_key(x.pci) == nvml.pci_key("00000000:4E:00.0")
    assert nvml.parse_xid_line("usb 1-1: new device") is None


def test_unreadable_kernel_log_is_a_reason_not_an_error(tmp_path):
    events, source = nvml.read_kernel_xids(str(tmp_path / "missing"))
    assert events is None and source.startswith("unavailable:")


class Ctx:
    rank = 1
    world_size = 2
    local_rank = 1
    backend = "gloo"
    device = "cpu"
    deadline_s = 10.0


def test_probes_through_the_fake_driver(monkeypatch):
    # The whole rank-side path (probe -> nvml -> pynvml) with the fake in place of pynvml.
    fx = load("l40s-foreign-process")
    monkeypatch.setitem(sys.modules, "pynvml", make_fake(fx["snapshot"]))
    data = gpu_probe.collect(Ctx(), {})
    assert data["nvml"]["devices"][1]["processes"][1]["pid"] == 7781
    assert data["nvml"]["pairs"] is None
    topo = topology_probe.collect(Ctx(), {})
    assert len(topo["nvml"]["pairs"]) == 2 and set(topo["gpu_numa"]) == {"0", "1"}
    # Replace the recorded ranks' NVML data by what the probe read: same findings.
    recorded = per_rank("l40s-foreign-process")
    for rec in recorded.values():
        rec["nvml"] = data["nvml"]
    _, findings = gpu.analyze(recorded, 2)
    assert [(f.id, f.ranks, f.evidence["device_index"]) for f in findings] == [
        ("GPU_MEMORY_OCCUPIED", [1], 1)]
