"""Blind run 99's lessons (batch XG4, committed run logs; URLs in the sidecars), each a
mechanism with the real log as its case and a variant that shows the mechanism decides:

- seff's end state of a batch job ("State: TIMEOUT (exit code 0)", the job-feedback
  epilogue of a cluster) is the scheduler's word that the job did not complete, where the
  trainer's own output just stops: it was called healthy.
- A rank waiting for the NCCL id whose store connection was reset (not timed out) waits on
  a process that ended: the publisher died (RANK_CRASHED), it was not busy elsewhere.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from logscan_helpers import errors_of, findings_in, findings_of, lines_of

R = Path("tests/fixtures/reallogs")
TIMEOUT = R / "XG4_llamafactory_qwen25vl_slurm_time_limit.log"
COMPLETED = R / "XG4_llamafactory_qwen3vl_4gpu_sft_completed.log"
RESET = R / "XG4_megatron_deepspeed_summit_rank0_helpers_build_fail_store_reset.log"
TIMED_OUT = R / "F2_rank1_waits_ncclid_store_timeout_zero_first_yolov5.log"


def test_a_job_the_scheduler_timed_out_is_not_healthy():
    found = findings_of(TIMEOUT)
    assert errors_of(found) == [("UNRECOGNIZED_FAILURE", [])]
    assert found[0].title.startswith("the scheduler stopped the job (time limit): "
                                     "State: TIMEOUT (exit code 0)")
    assert "checkpoint" in found[0].evidence["hint"]


def test_the_same_epilogue_of_a_completed_job_says_nothing():
    assert errors_of(findings_of(COMPLETED)) == []


@pytest.mark.parametrize("state,expect", [
    ("NODE_FAIL", "the scheduler stopped the job (node failure)"),
    ("PREEMPTED", "the scheduler stopped the job (preemption)"),
    ("CANCELLED by 1042", "the job was cancelled with no reason given"),
])
def test_every_end_state_the_scheduler_gives_is_said_with_its_reason(tmp_path, state, expect):
    # the real epilogue with only its State line changed: the state decides, not the words
    text = lines_of(TIMEOUT, 2220, 2245).replace("State: TIMEOUT", f"State: {state}")
    found = findings_in(tmp_path, text)
    assert found[0].title.startswith(expect)


def test_an_out_of_memory_end_state_is_an_oom(tmp_path):
    text = lines_of(TIMEOUT, 2220, 2245).replace("State: TIMEOUT", "State: OUT_OF_MEMORY")
    assert errors_of(findings_in(tmp_path, text))[0][0] == "OOM"


def test_a_reset_store_connection_is_a_publisher_that_died():
    found = findings_of(RESET)
    assert errors_of(found) == [("RANK_CRASHED", [0])]
    assert found[0].title.startswith("rank 0 died before it published the NCCL id that "
                                     "rank 1-47 waited for")


def test_a_store_timeout_is_still_a_publisher_busy_elsewhere():
    assert errors_of(findings_of(TIMED_OUT))[0] == ("HANG_RANK_MISSING_COLLECTIVE", [0])
