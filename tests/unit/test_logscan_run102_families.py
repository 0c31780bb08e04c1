"""Blind run 102's lesson (batch XG9, committed run logs; URLs in the sidecars), a mechanism
with the real log as its case and variants that show the mechanism decides:

- mp.spawn's ProcessRaisedException is a launcher's report, like ChildFailedError: the
  child's traceback after its header ("-- Process 1 terminated with the following
  error:") is that process's, and on one node its index is the rank. A launch command
  that says this is one node of several (a node rank of 1 or more, nnodes > 1) leaves it
  unnamed: there the index is a local one. mp.spawn's "process N terminated with signal
  S" is read the same way.
"""

from __future__ import annotations

from pathlib import Path

from logscan_helpers import errors_of, findings_in, findings_of

R = Path("tests/fixtures/reallogs")
EVAL_OOM = R / "XG9_detectron2_devit_4gpu_spawn_eval_oom_rank1.log"
CONFIG = R / "XF8_detectron2_spawn_config_none_crash.log"
NODE2 = R / "X4_nccl_no_socket_interface_wrong_ifname_node2.log"


def test_the_traceback_mp_spawn_reports_is_its_process():
    assert errors_of(findings_of(EVAL_OOM)) == [("OOM", [1])]


def test_the_childs_own_error_is_said_not_the_launchers_report():
    found = findings_of(CONFIG)
    assert errors_of(found) == [("RANK_CRASHED", [3])]
    assert found[0].title.startswith("rank 3 raised TypeError: expected str, bytes or "
                                     "os.PathLike object, not NoneType")


def test_one_node_of_several_leaves_the_process_index_unnamed(tmp_path):
    # the real log of node 2 (its command says --rank 1): process 0 there is not rank 0
    found = findings_of(NODE2)
    assert errors_of(found)[0] == ("ENV_NCCL_CONFIG", [])
    assert all(f.ranks != [0] for f in found)
    # the same traceback with a two-node torchrun command before it
    text = "$ torchrun --nproc_per_node=4 --nnodes=2 --node_rank=0 train.py\n" + \
        EVAL_OOM.read_text()
    assert errors_of(findings_in(tmp_path, text)) == [("OOM", [])]


def test_only_the_reported_traceback_is_the_processs(tmp_path):
    # an unprefixed error after the child's exception line is not given the child's rank
    text = EVAL_OOM.read_text() + "RuntimeError: the parent's own cleanup failed\n"
    found = findings_in(tmp_path, text)
    assert errors_of(found)[0] == ("OOM", [1])
    assert not any(f.ranks == [1] and "cleanup" in f.title for f in found)


SIGNALLED = R / "F5_mp_spawn_process3_sigkill.log"


def test_mp_spawns_signal_report_names_its_index_as_the_rank_on_one_node_only(tmp_path):
    # "process 3 terminated with signal SIGKILL": the index is the rank on one node ...
    assert errors_of(findings_of(SIGNALLED))[0][1] == [3]
    # ... and not on a node of several, where it is a local index
    text = "$ torchrun --nproc_per_node=4 --nnodes=2 --node_rank=1 train.py\n" + \
        SIGNALLED.read_text()
    assert all(3 not in f.ranks for f in findings_in(tmp_path, text))
