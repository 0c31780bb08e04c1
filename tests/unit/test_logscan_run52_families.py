"""Blind run 52's lesson (batches X50, X52): one node describes its NCCL network plugin in
several lines (its name: "Loaded net plugin NCCL RDMA Plugin v6"; its file: "Plugin Path :
/opt/hpcx/.../libnccl-net.so"). Two nodes that each print both loaded the same plugin:
nodes are compared by what each loaded (an external plugin, or NCCL's internal one where
none was found), and by the plugin's file where both name one.

Real logs, URLs in their sidecars; the variants are cut from them."""

from __future__ import annotations

from pathlib import Path

from logscan_helpers import findings_in, findings_of

DIR = Path("tests/fixtures/reallogs")
SAME = DIR / "X52_healthy_2node_16rank_lightning_srun_nccl_plugin_info_sd_reference.log"
SOME_NODES = DIR / "G2_nccl_net_plugin_on_some_nodes_only_hang.log"
PATH = "/opt/hpcx/nccl_rdma_sharp_plugin/lib/libnccl-net.so"


def _worker1_plugin_lines(text: str, new: str) -> str:
    """worker-1's plugin lines replaced by ``new`` (worker-0's kept)."""
    return "".join(new if line.startswith("worker-1:") and ("NET/Plugin" in line or
                                                           "Plugin Path" in line) else line
                   for line in text.splitlines(keepends=True))


def test_two_nodes_that_name_their_plugin_twice_load_the_same_one():
    found = findings_of(SAME)
    assert not [f for f in found if f.severity == "error"], [(f.id, f.title) for f in found]


def test_a_node_on_the_internal_plugin_beside_one_on_hpcx_is_a_mismatch(tmp_path):
    text = _worker1_plugin_lines(SAME.read_text(), "worker-1:19437:19437 [2] NCCL INFO "
                                 "NET/Plugin: Could not find: libnccl-net.so. Using internal "
                                 "network plugin.\n")
    lead = findings_in(tmp_path, text)[0]
    assert (lead.id, lead.ranks) == ("ENV_VERSION_MISMATCH", [])
    assert lead.evidence["nccl_net_plugins"]["internal"] == ["worker-1"]
    assert "worker-0" in lead.evidence["nccl_net_plugins"][PATH]


def test_two_nodes_loading_different_plugin_files_is_a_mismatch(tmp_path):
    text = _worker1_plugin_lines(SAME.read_text(), "worker-1:19437:19859 [2] NCCL INFO Plugin "
                                 "Path : /usr/local/aws-ofi-nccl/lib/libnccl-net.so\n")
    lead = findings_in(tmp_path, text)[0]
    assert lead.id == "ENV_VERSION_MISMATCH"


def test_the_real_case_of_a_plugin_on_some_nodes_only_is_still_found():
    assert findings_of(SOME_NODES)[0].id == "ENV_VERSION_MISMATCH"
