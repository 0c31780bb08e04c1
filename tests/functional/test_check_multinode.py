"""Two "nodes" on one machine: network namespaces joined by a veth pair.

Node b's egress is throttled with tbf (this kernel has no netem): the check must still run
across both nodes and name node b's link as the slow one.
"""

import json

import pytest
from jobs import ddpdoctor_cmd, needs_netns, run_on_nodes, sh

pytestmark = [pytest.mark.matrix, pytest.mark.slow]

@needs_netns
@pytest.mark.timeout(240)
def test_two_node_check_names_the_throttled_nodes_link(two_nodes, tmp_path):
    ns, dev, addr = two_nodes
    # Slow node b's outgoing traffic to 100 Mbit/s.
    sh("tc", "-n", ns["b"], "qdisc", "add", "dev", dev["b"], "root", "tbf", "rate", "100mbit",
        "burst", "32kbit", "latency", "400ms")
    out = tmp_path / "report.json"
    endpoint = f"{addr['a']}:29655"
    commands = {}
    for node, k in ((0, "a"), (1, "b")):
        check = ddpdoctor_cmd() + [
            "check", "--nnodes", "2", "--node-rank", str(node), "--nproc", "1",
            "--rdzv-endpoint", endpoint, "--local-addr", addr[k],
            "--probe", "env", "--probe", "connectivity", "--probe", "bandwidth",
            "--max-bytes", "1M", "--deadline", "90"] + (["--json", str(out)] if node == 0
                                                        else [])
        commands[k] = (ns[k], f"node-{k}", check, {"GLOO_SOCKET_IFNAME": dev[k]})
    outputs, procs = run_on_nodes(commands, timeout=220)
    assert out.exists(), outputs
    report = json.loads(out.read_text())
    assert report["world"]["world_size"] == 2 and report["world"]["nodes"] == 2, outputs["a"]
    assert report["probes"]["connectivity"]["status"] == "ok"  # the 2-node check works
    slow = [f for f in report["findings"] if f["id"] == "COMM_BANDWIDTH_LOW"]
    assert [(f["id"], f["ranks"]) for f in report["findings"]] == [("COMM_BANDWIDTH_LOW", [1])]
    assert slow[0]["evidence"]["node"] == "node-b"
    assert slow[0]["evidence"]["direction"] == "egress"
    links = report["probes"]["bandwidth"]["data"]["links_gbps"]
    assert links["1->0"] * 4 < links["0->1"]
    assert procs["a"].returncode == 0  # warnings only
    assert "node 0 prints the report" in outputs["b"]
