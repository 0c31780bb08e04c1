"""The same error printed once by every process of a world the log sizes, no copy with a
rank: each copy is one rank's (real logs, URLs in their sidecars).

- DeepSpeed's one-node layout ("nnodes=1, num_local_procs=2") and two identical NameError
  tracebacks (L1_deepspeed_launcher_nameerror_rc0, deepspeedai/DeepSpeed#618): rank 0-1.
- Two tracebacks printed at once, one's exception line lost in the tangle
  (X25_megads_2rank_vocab_path_filenotfound): still two copies, rank 0-1.
- mp.spawn's four children that could not unpickle a notebook's function
  (X37_mpspawn_notebook_fn_not_picklable_4ranks): each failed once while starting, rank 0-3.
- Every node's DeepSpeed launcher reporting its --local_rank=0 (X11_deepspeed_cpu_adam_jit_
  build_gcc_too_old, two nodes): rank 0-1, whichever report is whose.
- Several nodes' torchrun summaries (XG9_nemo_k8s_3600rank_launcher_only_exit1): the first
  failure is the earliest by the records' time; roots of one second name no culprit.
Counts that do not match the world, a rank named with an error of its own, or a layout
of several nodes leave the copies unnamed.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from logscan_helpers import errors_of, findings_in, findings_of, lines_of

REAL = Path("tests/fixtures/reallogs")
L1 = REAL / "L1_deepspeed_launcher_nameerror_rc0.log"


@pytest.mark.parametrize("name,ranks", [
    ("L1_deepspeed_launcher_nameerror_rc0", [0, 1]),
    ("X25_megads_2rank_vocab_path_filenotfound", [0, 1]),
    ("X37_mpspawn_notebook_fn_not_picklable_4ranks", [0, 1, 2, 3]),
    # torch.distributed.launch's CalledProcessError carries its last child's command
    # (--local_rank=1): two processes, both raised the same ModuleNotFoundError
    ("XI1_mmdet_devit_2gpu_import_error_both_ranks", [0, 1]),
])
def test_one_copy_per_process_names_every_rank(name, ranks):
    assert errors_of(findings_of(REAL / f"{name}.log"))[:1] == [("RANK_CRASHED", ranks)]


def test_fewer_copies_than_the_world_name_no_rank(tmp_path):
    text = lines_of(L1, 1, 11).replace("num_local_procs=2", "num_local_procs=3")
    assert errors_of(findings_in(tmp_path, text))[:1] == [("RANK_CRASHED", [])]


def test_the_copies_of_a_world_of_two_with_one_copy_name_no_rank(tmp_path):
    assert errors_of(findings_in(tmp_path, lines_of(L1, 1, 11)))[:1] == [("RANK_CRASHED", [])]


def test_a_layout_of_several_nodes_names_no_rank(tmp_path):
    text = lines_of(L1, 1, 15).replace("nnodes=1", "nnodes=2")
    assert errors_of(findings_in(tmp_path, text))[:1] == [("RANK_CRASHED", [])]


def test_a_rank_named_with_its_own_error_keeps_the_copies_unnamed(tmp_path):
    text = lines_of(L1, 1, 15) + "[rank1]: ValueError: another error of its own\n"
    assert ("RANK_CRASHED", [0, 1]) not in errors_of(findings_in(tmp_path, text))


def test_different_errors_are_not_copies(tmp_path):
    text = lines_of(L1, 1, 15).replace("NameError: name 'garbageeeeee' is not defined",
                                       "NameError: name 'other' is not defined", 1)
    assert ("RANK_CRASHED", [0, 1]) not in errors_of(findings_in(tmp_path, text))


X11 = REAL / "X11_deepspeed_cpu_adam_jit_build_gcc_too_old.log"


def test_every_nodes_launcher_reporting_its_local_rank_names_every_rank():
    # two nodes of one process each (srun runs DeepSpeed's launcher on each), both
    # launchers report --local_rank=0: ranks 0 and 1, whichever report is whose
    [f, *_] = findings_of(X11)
    assert (f.id, f.ranks) == ("RANK_CRASHED", [0, 1])
    assert "failed to build" in f.title


def test_one_of_two_nodes_reporting_names_no_global_rank(tmp_path):
    # only the first node's report: which node's launcher it was cannot be told
    text = lines_of(X11, 1, 137)
    [f, *_] = findings_in(tmp_path, text)
    assert (f.id, f.ranks) == ("RANK_CRASHED", [])
    assert f.title.startswith("the job: a C++/CUDA extension failed to build")


XG9 = REAL / "XG9_nemo_k8s_3600rank_launcher_only_exit1.log"


def test_every_nodes_first_failure_in_one_second_names_no_culprit():
    # 3,600 ranks on many pods, every torchrun summary naming its own first failure, the
    # earliest second shared by two nodes, no rank's own error in the log
    [f, *_] = findings_of(XG9)
    assert (f.id, f.ranks, f.severity) == ("UNRECOGNIZED_FAILURE", [], "error")
    assert "in the same second (2025-12-06_21:40:59)" in f.title


def test_the_first_failure_is_the_earliest_by_time_not_by_place_in_the_file(tmp_path):
    # the first two pods' summaries (lines 1-63), the second pod's root one second earlier
    lines = lines_of(XG9, 1, 63).splitlines(keepends=True)
    lines[57] = lines[57].replace("21:41:00", "21:40:59")  # the second pod's root record
    assert "rank      : 1765" in lines[59]
    [f, *_] = findings_in(tmp_path, "".join(lines))
    assert (f.id, f.ranks) == ("RANK_CRASHED", [1765])


def test_a_schedulers_stated_reason_beside_the_summaries_is_not_at_once(tmp_path):
    # a node failure the scheduler names (K1_slurm_node_failure_after_validation_step_
    # cancelled_m4_jz's own line) says why every node exited: not "no culprit, at once"
    node = lines_of(REAL / "K1_slurm_node_failure_after_validation_step_cancelled_m4_jz.log",
                    *_line_of("K1_slurm_node_failure_after_validation_step_cancelled_m4_jz",
                              "DUE TO NODE FAILURE"))
    found = findings_in(tmp_path, lines_of(XG9, 1, 63) + node)
    assert not any("in the same second" in f.title for f in found)


def _line_of(name: str, needle: str) -> tuple[int, int]:
    lines = (REAL / f"{name}.log").read_text().splitlines()
    n = next(i for i, x in enumerate(lines, 1) if needle in x)
    return n, n
