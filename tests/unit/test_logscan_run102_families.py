"""Blind run 102's lesson (batch XG9, committed run logs; URLs in the sidecars), a mechanism
with the real log as its case:

- mp.spawn's ProcessRaisedException is a launcher's report, like ChildFailedError: the
  child's own traceback after its header ("-- Process 1 terminated with the following
  error:") is what is said. Its process index is not a rank: the script maps it (node x
  nprocs + i, or anything: tests/fixtures/launches/spawn_job.py runs rank world - 1 - i,
  and `run` names that rank from the job itself, test_launch_spawn_restart_e2e), so a log
  alone leaves the rank unnamed.
"""

from __future__ import annotations

from pathlib import Path

from logscan_helpers import errors_of, findings_of

R = Path("tests/fixtures/reallogs")
EVAL_OOM = R / "XG9_detectron2_devit_4gpu_spawn_eval_oom_rank1.log"
CONFIG = R / "XF8_detectron2_spawn_config_none_crash.log"


def test_the_childs_own_error_is_said_not_the_launchers_report():
    found = findings_of(CONFIG)
    assert errors_of(found) == [("RANK_CRASHED", [])]
    assert found[0].title.startswith("the job raised TypeError: expected str, bytes or "
                                     "os.PathLike object, not NoneType")
    assert "ProcessRaisedException" not in found[0].title


def test_the_process_index_is_not_taken_for_a_rank():
    assert errors_of(findings_of(EVAL_OOM)) == [("OOM", [])]
