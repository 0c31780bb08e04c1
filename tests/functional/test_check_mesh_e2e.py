"""The reachability mesh and the hypercube rounds, end to end.

Healthy at 4 and 8 local ranks (every directed connection, log2 N rounds); a bad rank
among 4 and among 8 (its gloo interface does not exist: it never joins, and only it is
named, while every pair's TCP path is fine); then four
"nodes" (network namespaces on one bridge, one rank each) with two real faults planted:
a blackhole route between node-2 and node-4 (ranks 1 and 3 cannot connect, either way)
and node-3's rank listening on loopback (``GLOO_SOCKET_IFNAME=lo`` on one node, a classic
multi-node mistake: nobody can reach it). The check names the pair and the node.
"""

import json
import os
import subprocess

import pytest
from jobs import ddpdoctor_cmd, needs_netns, run_job, run_on_nodes, sh

pytestmark = [pytest.mark.matrix, pytest.mark.slow]


@pytest.mark.timeout(240)
@pytest.mark.parametrize("nproc", [4, 8])
def test_healthy_ranks_connect_every_pair_in_one_round_and_log_n_p2p_rounds(nproc, tmp_path):
    out = tmp_path / "report.json"
    rc, stdout = run_job(ddpdoctor_cmd() + ["check", "--nproc", str(nproc), "--probe",
                                            "reachability", "--probe", "connectivity",
                                            "--deadline", "120", "--json", str(out)],
                         timeout=230)
    assert rc == 0, stdout
    report = json.loads(out.read_text())
    assert report["findings"] == []
    pairs = nproc * (nproc - 1)
    rounds = {4: 2, 8: 3}[nproc]
    reach = report["probes"]["reachability"]["summary"]
    assert reach.startswith(f"{pairs}/{pairs} directed connections ok between {nproc} ranks"), reach
    conn = report["probes"]["connectivity"]["summary"]
    assert f"in {rounds} round(s)" in conn, conn


@pytest.fixture
def four_nodes():
    """Four namespaces on one bridge: (namespaces, devices, addresses), removed after."""
    tag = str(os.getpid() % 10000)
    bridge = f"ddpbr{tag}"
    ns = [f"ddpd-m{i}-{tag}" for i in range(4)]
    dev = [f"ddpm{i}x{tag}" for i in range(4)]
    peer = [f"ddpm{i}p{tag}" for i in range(4)]
    addr = [f"10.79.0.{i + 1}" for i in range(4)]  # inside namespaces this fixture creates
    try:
        sh("ip", "link", "add", bridge, "type", "bridge")
        sh("ip", "link", "set", bridge, "up")
        for i in range(4):
            sh("ip", "netns", "add", ns[i])
            sh("ip", "link", "add", dev[i], "type", "veth", "peer", "name", peer[i])
            sh("ip", "link", "set", dev[i], "netns", ns[i])
            sh("ip", "link", "set", peer[i], "master", bridge)
            sh("ip", "link", "set", peer[i], "up")
            sh("ip", "-n", ns[i], "addr", "add", f"{addr[i]}/24", "dev", dev[i])
            sh("ip", "-n", ns[i], "link", "set", dev[i], "up")
            sh("ip", "-n", ns[i], "link", "set", "lo", "up")
        yield ns, dev, addr
    finally:
        for n in ns:
            subprocess.run(["ip", "netns", "del", n], capture_output=True, timeout=30)
        subprocess.run(["ip", "link", "del", bridge], capture_output=True, timeout=30)


@needs_netns
@pytest.mark.timeout(240)
def test_four_nodes_name_the_blocked_pair_and_the_unreachable_rank(four_nodes, tmp_path):
    ns, dev, addr = four_nodes
    # node-4 drops everything for node-2: ranks 1 and 3 cannot open a connection either way.
    sh("ip", "-n", ns[3], "route", "add", "blackhole", f"{addr[1]}/32")
    out = tmp_path / "report.json"
    commands = {}
    for i in range(4):
        check = ddpdoctor_cmd() + [
            "check", "--nnodes", "4", "--node-rank", str(i), "--nproc", "1",
            "--rdzv-endpoint", f"{addr[0]}:29656", "--local-addr", addr[i],
            "--probe", "reachability", "--probe", "connectivity", "--deadline", "20"]
        check += ["--json", str(out)] if i == 0 else []
        ifname = "lo" if i == 2 else dev[i]
        commands[i] = (ns[i], f"node-{i + 1}", check, {"GLOO_SOCKET_IFNAME": ifname})
    outputs, procs = run_on_nodes(commands, timeout=200)
    assert out.exists(), outputs
    report = json.loads(out.read_text())
    reach = sorted((f for f in report["findings"]
                    if f["evidence"].get("check") == "reachability"), key=lambda f: f["ranks"])
    assert [(f["id"], f["ranks"]) for f in reach] == [("COMM_CONNECTIVITY", [1, 3]),
                                                     ("COMM_CONNECTIVITY", [2])], outputs[0]
    reach = reach[::-1]
    # One rank per node: its node is the unit cut off.
    assert reach[0]["evidence"]["node"] == "node-3", reach[0]["title"]
    assert reach[1]["evidence"]["pair"] == "1<->3"
    assert reach[1]["evidence"]["tier"] == "inter-node"
    # gloo's init cannot form with a blocked pair: every rank skipped it together, so the
    # check ended without waiting for its deadline and blamed nobody else.
    assert {r for f in report["findings"] for r in f["ranks"]} <= {1, 2, 3}, report["findings"]
    assert report["probes"]["connectivity"]["summary"] == (
        "could not run: the reachability mesh found ranks that cannot connect, so gloo's "
        "process group cannot form")
    assert not any("deadline" in f["title"] for f in report["findings"]), report["findings"]
    assert procs[0].returncode == 1


@pytest.mark.timeout(240)
@pytest.mark.parametrize("nproc, bad", [(4, 2), (8, 5)])
def test_a_rank_whose_gloo_interface_does_not_exist_is_named_among_many(nproc, bad):
    from ddpdoctor.check.run import run_check

    # One rank's launch environment names an interface this host does not have: its gloo
    # device cannot be created, so it never joins; every other rank is fine.
    report = run_check(nproc, ["reachability", "connectivity"], "gloo", 90,
                       rank_env={bad: {"GLOO_SOCKET_IFNAME": "nosuchif0"}})
    errors = [(f.id, f.ranks) for f in report.findings if f.severity == "error"]
    assert errors == [("COMM_CONNECTIVITY", [bad])], report.findings
    assert "nosuchif0" in report.findings[0].title
    reach = next(c for c in report.checks if c.name == "reachability")
    pairs = nproc * (nproc - 1)
    assert reach.summary.startswith(f"{pairs}/{pairs} directed connections ok"), reach.summary
