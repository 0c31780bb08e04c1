"""The gpu and topology probes on this machine (no NVIDIA driver): skipped with the reason,
and topology still describes NUMA and NICs."""

import json
import os
import socket

import pytest

from ddpdoctor.check.analysis import gpu as gpu_analysis
from ddpdoctor.check.analysis import topology as topology_analysis
from ddpdoctor.check.probes import gpu as gpu_probe
from ddpdoctor.check.probes import topology as topology_probe

NO_DRIVER = "no NVIDIA driver (NVML Shared Library Not Found)"


def _has_nvidia() -> bool:
    return os.path.exists("/dev/nvidiactl")


class Ctx:
    def __init__(self, rank):
        self.rank = rank
        self.local_rank = rank
        self.world_size = 2
        self.backend = "gloo"
        self.device = "cpu"
        self.deadline_s = 10.0


@pytest.mark.skipif(_has_nvidia(), reason="this machine has an NVIDIA driver")
def test_gpu_probe_without_driver_is_skipped_with_the_reason():
    data = gpu_probe.collect(Ctx(0), {})
    json.dumps(data)
    assert data["skipped"] == NO_DRIVER and data["nvml"] is None
    assert data["pid"] == os.getpid() and data["hostname"] == socket.gethostname()
    check, findings = gpu_analysis.analyze({0: data, 1: dict(data, rank=1)}, 2)
    assert (check.name, check.status, check.group) == ("gpu", "skipped", "GPU")
    assert check.summary == f"skipped: {NO_DRIVER}" and findings == []


@pytest.mark.skipif(_has_nvidia(), reason="this machine has an NVIDIA driver")
def test_topology_probe_without_gpu_reports_numa_and_nics():
    data = topology_probe.collect(Ctx(0), {})
    json.dumps(data)
    assert data["skipped"] == NO_DRIVER
    nodes = sorted(p for p in os.listdir("/sys/devices/system/node") if p[4:].isdigit()
                   and p.startswith("node"))
    assert [n["node"] for n in data["numa"]] == [int(n[4:]) for n in nodes]
    assert "lo" not in [n["name"] for n in data["nics"]]
    check, findings = topology_analysis.analyze({0: data}, 1)
    assert check.status == "ok" and findings == []
    assert check.summary.startswith(f"no GPU: NUMA nodes {len(nodes)}, NICs ")
    physical = [n["name"] for n in data["nics"] if n["physical"]]
    for name in physical:
        assert name in check.summary


def test_nic_and_numa_readers_on_a_fake_sysfs(tmp_path):
    node = tmp_path / "node" / "node1"
    node.mkdir(parents=True)
    (node / "cpulist").write_text("48-95\n")
    (node / "meminfo").write_text("Node 1 MemTotal:       527915584 kB\n")
    net = tmp_path / "net"
    for name, speed in (("lo", None), ("ib0", "200000"), ("veth1", "10000")):
        (net / name).mkdir(parents=True)
        (net / name / "operstate").write_text("up\n")
        if speed:
            (net / name / "speed").write_text(speed + "\n")
    dev = tmp_path / "pci" / "0000:3b:00.0"
    dev.mkdir(parents=True)
    (tmp_path / "drivers" / "mlx5_core").mkdir(parents=True)
    os.symlink(tmp_path / "drivers" / "mlx5_core", dev / "driver")
    (dev / "numa_node").write_text("1\n")
    os.symlink(dev, net / "ib0" / "device")
    assert topology_probe.numa_nodes(tmp_path / "node") == [
        {"node": 1, "cpus": "48-95", "mem_total_kib": 527915584}]
    nics = topology_probe.nics(net)
    assert [(n["name"], n["speed_mbps"], n["physical"], n["numa_node"], n["driver"])
            for n in nics] == [("ib0", 200000, True, 1, "mlx5_core"),
                               ("veth1", 10000, False, None, None)]
    assert topology_probe.gpu_numa_node("00000000:3B:00.0", tmp_path / "pci") == 1


@pytest.mark.slow
@pytest.mark.timeout(90)
@pytest.mark.skipif(_has_nvidia(), reason="this machine has an NVIDIA driver")
def test_probes_on_two_launched_ranks():
    import gpu_launch_fns

    from ddpdoctor.check.launcher import launch

    res = launch(gpu_launch_fns.gpu_and_topology, nproc=2, backend="gloo", deadline_s=60)
    assert res.ok, [(o.rank, o.status, o.error) for o in res.outcomes]
    values = res.values()
    gpu_data = {r: v["gpu"] for r, v in values.items()}
    topo_data = {r: v["topology"] for r, v in values.items()}
    assert {d["pid"] for d in gpu_data.values()} == {o.pid for o in res.outcomes}
    check, findings = gpu_analysis.analyze(gpu_data, 2)
    assert (check.status, check.summary, findings) == ("skipped", f"skipped: {NO_DRIVER}", [])
    check, findings = topology_analysis.analyze(topo_data, 2)
    assert check.summary.startswith("no GPU: NUMA nodes") and findings == []
