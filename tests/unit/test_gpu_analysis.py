"""GPU and topology analysis on recorded NVML snapshots: exact finding ids, ranks, devices."""

import pytest
from gpu_fixtures import NAMES, per_rank

from ddpdoctor.check.analysis import gpu, topology


def ids(findings, severities=("error", "warning")):
    return sorted((f.id, tuple(f.ranks), f.evidence.get("device_index"), f.evidence["problem"]
                   if "problem" in f.evidence else None)
                  for f in findings if f.severity in severities)


def test_every_fixture_analyses_without_error():
    assert len(NAMES) >= 9
    for name in NAMES:
        data = per_rank(name)
        for mod in (gpu, topology):
            check, findings = mod.analyze(data, len(data))
            assert check.status == "ok", (name, check.summary)
            for f in findings:
                f.to_dict()  # JSON-shaped


def test_healthy_h100_has_no_findings():
    data = per_rank("h100-healthy-8x")
    check, findings = gpu.analyze(data, 8)
    # Gen1 at idle is PCIe power saving, not a degraded link.
    assert findings == []
    assert check.summary == "8x NVIDIA H100 80GB HBM3, driver 550.54.15, 33-36 C"
    assert check.group == "GPU"
    check, findings = topology.analyze(data, 8)
    assert findings == []
    assert check.summary.startswith("8 GPUs, NVLink between all pairs (NV18); NUMA nodes 2, "
                                    "NICs ens108np0 (400000 Mb/s)")
    matrix = check.data["hosts"]["hgx-h100-a"]["matrix"]
    assert matrix[1].split() == ["GPU0", "X"] + ["NV18"] * 7


def test_a100_uncorrected_ecc_and_pending_remap_name_gpu3_and_rank3():
    check, findings = gpu.analyze(per_rank("a100-ecc-8x"), 8)
    assert ids(findings) == [("GPU_HEALTH", (3,), 3, "ecc_uncorrected"),
                             ("GPU_HEALTH", (3,), 3, "row_remap"),
                             ("GPU_HEALTH", (3,), 3, "xid")]
    assert all(f.severity == "error" for f in findings)
    ecc = next(f for f in findings if f.evidence["problem"] == "ecc_uncorrected")
    assert ecc.evidence["volatile_uncorrected"] == 2
    assert ecc.evidence["pci_bus_id"] == "00000000:4E:00.0"
    xid = next(f for f in findings if f.evidence["problem"] == "xid")
    assert [x["xid"] for x in xid.evidence["xids"]] == [94, 63]


def test_v100_retired_pages_pending_is_an_error_on_rank1():
    _, findings = gpu.analyze(per_rank("v100-retired-pages"), 4)
    assert ids(findings) == [("GPU_HEALTH", (1,), 1, "ecc_uncorrected_history"),
                             ("GPU_HEALTH", (1,), 1, "retired_pages")]
    pages = next(f for f in findings if f.evidence["problem"] == "retired_pages")
    assert pages.severity == "error"
    assert pages.evidence["double_bit"] == 2 and pages.evidence["pending"] is True


def test_pcie_gen1_x4_under_load_names_gpu5():
    _, findings = gpu.analyze(per_rank("h100-pcie-degraded"), 8)
    assert ids(findings) == [("GPU_HEALTH", (5,), 5, "pcie_degraded")]
    f = findings[0]
    assert f.severity == "warning" and f.evidence["under_load"] is True
    assert (f.evidence["pcie_gen"], f.evidence["pcie_width"]) == (1, 4)
    assert "Gen1 x4 (max Gen5 x16) under load" in f.title


def test_pcie_width_drop_at_idle_is_only_info():
    data = per_rank("h100-healthy-8x")
    for rec in data.values():
        rec["nvml"]["devices"][2]["pcie_width"] = 8
    _, findings = gpu.analyze(data, 8)
    assert [(f.id, f.severity, f.ranks, f.evidence["device_index"]) for f in findings] == \
        [("GPU_HEALTH", "info", [2], 2)]


def test_hw_thermal_slowdown_names_gpu2_and_power_cap_is_info():
    _, findings = gpu.analyze(per_rank("h100-thermal"), 8)
    assert ids(findings) == [("GPU_HEALTH", (2,), 2, "clocks_throttled")]
    hot = next(f for f in findings if f.evidence["device_index"] == 2)
    assert hot.evidence["reasons"] == ["hw_slowdown", "hw_thermal_slowdown"]
    assert hot.evidence["temperature_c"] == 92
    assert ids(findings, ("info",)) == [("GPU_HEALTH", (6,), 6, "clocks_throttled")]


def test_foreign_process_holding_20gib_on_rank1_gpu():
    _, findings = gpu.analyze(per_rank("l40s-foreign-process"), 2)
    assert ids(findings) == [("GPU_MEMORY_OCCUPIED", (1,), 1, None)]
    f = findings[0]
    assert f.evidence["processes"] == [{"pid": 7781, "name": "python3", "kind": "compute",
                                        "used_bytes": 20 * 1024 ** 3, "used_gib": 20.0,
                                        "visible": True}]
    assert "20.0 GiB held by a process that is not part of this job (pid 7781 (python3))" \
        in f.title


def test_own_ranks_and_small_display_process_are_not_foreign():
    # 4090 box: each GPU holds its rank's context; Xorg holds 4 MiB on GPU 0.
    _, findings = gpu.analyze(per_rank("rtx4090-no-p2p"), 4)
    assert [f for f in findings if f.id == "GPU_MEMORY_OCCUPIED"] == []


def test_two_ranks_sharing_one_gpu_names_the_rank_off_its_local_rank():
    _, findings = gpu.analyze(per_rank("a10g-shared-gpu"), 2)
    assert ids(findings) == [("GPU_DEVICE_MAPPING", (1,), 0, None)]
    assert findings[0].severity == "error"
    assert findings[0].evidence["ranks"] == [0, 1]


def test_local_rank_mismatch_without_sharing_is_a_warning():
    data = per_rank("h100-healthy-8x")
    # Ranks 0 and 1 swapped their devices: nothing shared, but not what LOCAL_RANK says.
    data[0].update(cuda_index=1, device="cuda:1", gpu_uuid=data[1]["gpu_uuid"])
    data[1].update(cuda_index=0, device="cuda:0", gpu_uuid=data[0]["nvml"]["devices"][0]["uuid"])
    _, findings = gpu.analyze(data, 8)
    assert [(f.id, f.severity, f.ranks) for f in findings] == [
        ("GPU_DEVICE_MAPPING", "warning", [0]), ("GPU_DEVICE_MAPPING", "warning", [1])]


def test_cuda_visible_devices_maps_ranks_to_physical_gpus():
    data = per_rank("a100-ecc-8x")
    # A 2-rank job restricted to physical GPUs 2 and 3, without uuids from torch.
    data = {r: dict(data[r], gpu_uuid=None, cuda_visible_devices="2,3") for r in (0, 1)}
    _, findings = gpu.analyze(data, 2)
    assert {(f.ranks[0], f.evidence["device_index"]) for f in findings
            if f.severity == "error"} == {(1, 3)}


def test_problem_on_a_gpu_no_rank_uses_is_info():
    data = {r: rec for r, rec in per_rank("a100-ecc-8x").items() if r < 2}
    _, findings = gpu.analyze(data, 2)
    assert {f.severity for f in findings} == {"info"}
    assert {f.evidence["device_index"] for f in findings} == {3}
    assert all(f.ranks == [] for f in findings)


def test_partial_gpu_reports_what_it_can():
    check, findings = gpu.analyze(per_rank("gtx1080ti-partial"), 1)
    assert findings == []
    assert check.summary == "1x NVIDIA GeForce GTX 1080 Ti, driver 470.223.02, 41 C"
    dev = check.data["hosts"]["old-box"]["devices"][0]
    assert "ecc_mode" in dev["unsupported"] and "remapped_rows" in dev["unsupported"]
    check, findings = topology.analyze(per_rank("gtx1080ti-partial"), 1)
    assert findings == [] and check.summary.startswith("1 GPU; NUMA nodes 2")


def test_gpu_lost_is_an_error():
    data = per_rank("h100-healthy-8x")
    for rec in data.values():
        rec["nvml"]["devices"][7]["errors"]["memory"] = "GPU is lost"
    _, findings = gpu.analyze(data, 8)
    assert ids(findings) == [("GPU_HEALTH", (7,), 7, "gpu_lost")]


def test_consumer_gpus_without_p2p():
    check, findings = topology.analyze(per_rank("rtx4090-no-p2p"), 4)
    assert [(f.id, f.ranks, f.evidence["problem"], f.evidence["device_indices"])
            for f in findings] == [("TOPO_NO_P2P", [0, 1, 2, 3], "no_p2p", [0, 1, 2, 3])]
    assert len(findings[0].evidence["pairs"]) == 6
    assert findings[0].severity == "warning"
    assert check.summary.startswith("4 GPUs, no P2P on 6 of 6 pairs (SYS)")


def test_nvlink_gpus_talking_over_pcie():
    data = per_rank("h100-healthy-8x")
    # GPU 4 lost its NVLinks (fabric manager / baseboard): its pairs fall back to PCIe.
    for rec in data.values():
        snap = rec["nvml"]
        for link in snap["devices"][4]["nvlinks"]:
            link["active"] = False
        for p in snap["pairs"]:
            if 4 in (p["a"], p["b"]):
                p.update(p2p_nvlink="NOT_SUPPORTED", nvlinks=0)
    check, findings = topology.analyze(data, 8)
    assert [(f.id, f.ranks, f.evidence["problem"], f.evidence["no_active_nvlink"])
            for f in findings] == [("TOPO_NO_P2P", [4], "nvlink_missing", [4])]
    assert len(findings[0].evidence["pairs"]) == 7
    assert "SYS" in findings[0].title and "NODE" in findings[0].title
    assert check.data["hosts"]["hgx-h100-a"]["matrix"][5].split()[1:4] == ["SYS", "SYS", "SYS"]


@pytest.mark.parametrize("name", ["NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-80GB",
                                  "Tesla V100-SXM2-32GB", "NVIDIA H200"])
def test_nvlink_boards(name):
    assert topology.nvlink_expected(name)


@pytest.mark.parametrize("name", ["NVIDIA H100 PCIe", "NVIDIA H100 NVL", "NVIDIA L40S",
                                  "NVIDIA GeForce RTX 4090", "NVIDIA A100 80GB PCIe", None])
def test_not_nvlink_boards(name):
    assert not topology.nvlink_expected(name)


def test_two_nodes_are_analysed_separately():
    a = per_rank("h100-healthy-8x")
    b = per_rank("a100-ecc-8x")
    data = {**a, **{r + 8: dict(rec, rank=r + 8) for r, rec in b.items()}}
    check, findings = gpu.analyze(data, 16)
    assert {(f.id, tuple(f.ranks), f.evidence["host"]) for f in findings} == {
        ("GPU_HEALTH", (11,), "dgx-a100-07")}
    assert check.summary.startswith("16 GPUs on 2 nodes")


def test_no_driver_anywhere_is_skipped_with_the_reason():
    rec = {"hostname": "cpu-box", "rank": 0, "local_rank": 0, "pid": 10, "device": "cpu",
           "nvml": None, "skipped": "no NVIDIA driver (NVML Shared Library Not Found)",
           "numa": [{"node": 0, "cpus": "0-1", "mem_total_kib": 1}],
           "nics": [{"name": "eth0", "operstate": "up", "speed_mbps": 10000, "physical": True}]}
    data = {0: rec, 1: dict(rec, rank=1, local_rank=1, pid=11)}
    check, findings = gpu.analyze(data, 2)
    assert (check.status, check.summary, findings) == (
        "skipped", "skipped: no NVIDIA driver (NVML Shared Library Not Found)", [])
    check, findings = topology.analyze(data, 2)
    assert (check.status, check.summary, findings) == (
        "ok", "no GPU: NUMA nodes 1, NICs eth0 (10000 Mb/s)", [])


def test_garbage_nvml_data_does_not_crash():
    data = {0: {"hostname": "x", "rank": 0, "nvml": {"devices": [{"nonsense": 1}]}}}
    check, findings = gpu.analyze(data, 1)
    assert check.status == "skipped" and "unreadable NVML data" in check.summary
    check, _ = topology.analyze(data, 1)
    assert check.summary.startswith("no GPU")
