"""A CUDA OOM message says what the GPU holds: its capacity, what is free, this process's
share, and the other processes it can name. What none of them accounts for is held by
processes it cannot name (another container's, a previous run's ranks that outlived it),
and other processes holding a quarter of a GPU or more took room the job counted on, even
where the job holds more than they do (blind run 35: ranks of an 8-GPU FSDP2 job ran out
at 48 GiB of 80 because the previous run's ranks still held 30 GiB each; called a plain
OOM). Real logs, URLs in their sidecars."""

from __future__ import annotations

from pathlib import Path

from logscan_helpers import findings_in, findings_of

REAL = Path("tests/fixtures/reallogs")
LEFTOVER = REAL / "X17_fsdp2_torchrun_oom_at_load_gpus_held_by_leftover_ranks.log"


def test_memory_no_process_accounts_for_is_another_holder():
    lead = findings_of(LEFTOVER)[0]
    assert (lead.id, lead.ranks) == ("GPU_MEMORY_OCCUPIED", [3, 4])
    assert "30.70 GiB" in lead.title and "does not name" in lead.title


def _line() -> str:
    return next(x for x in LEFTOVER.read_text().splitlines(True) if "CUDA out of memory" in x)


def test_a_gpu_this_process_fills_is_a_plain_oom(tmp_path):
    text = _line().replace("this process has 48.46 GiB", "this process has 79.15 GiB")
    assert findings_in(tmp_path, text)[0].id == "OOM"


def test_a_context_sized_gap_is_no_other_holder(tmp_path):
    # 1.5 GiB unaccounted for: a CUDA context and NCCL's buffers outside the count
    text = _line().replace("this process has 48.46 GiB", "this process has 77.66 GiB")
    assert findings_in(tmp_path, text)[0].id == "OOM"


def test_other_holders_under_a_quarter_of_the_gpu_leave_it_an_oom(tmp_path):
    text = _line().replace("this process has 48.46 GiB", "this process has 62.00 GiB")
    # 17.16 GiB held elsewhere: 22% of the GPU, and the job holds more
    lead = findings_in(tmp_path, text)[0]
    assert lead.id == "OOM", lead.title


def test_an_oom_of_the_jobs_own_making_stays_an_oom():
    lead = findings_of(REAL / "J1_cuda_oom_qwen32b_sft_2node_h100_s1.log")[0]
    assert lead.id == "OOM"
