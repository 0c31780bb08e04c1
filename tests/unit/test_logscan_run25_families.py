"""Evidence families learned from locked runs 25 to 27 (batches X6_, X7_ and X8_, scored
blind first: 2/3, then 1/3): torch.nn.DataParallel's re-raise ("Caught X in replica N on
device N") shows a job of one process, so a log that names no rank is rank 0's, and the
lead finding says that the launch (one process per GPU) is the usual fix. DataParallel
inside the ranks of a launched job keeps their ranks. Real logs (URLs in the sidecars)."""

from __future__ import annotations

from pathlib import Path

from logscan_helpers import findings_in, findings_of

REAL = Path("tests/fixtures/reallogs")
DP = REAL / "X6_dataparallel_replica0_cuda_oom_slurm_oumi_not_distributed.log"


def test_a_dataparallel_job_is_one_process_rank_0():
    lead = findings_of(DP)[0]
    assert (lead.id, lead.ranks) == ("OOM", [0])
    assert lead.evidence["one_process"].split(": ", 1)[0].endswith(":83")
    assert "one process per GPU" in lead.evidence["one_process"]


def test_without_the_replica_line_no_rank_is_invented(tmp_path):
    text = "".join(x for x in DP.read_text().splitlines(True) if " in replica " not in x)
    lead = findings_in(tmp_path, text)[0]
    assert (lead.id, lead.ranks) == ("OOM", [])
    assert "one_process" not in lead.evidence


def test_dataparallel_inside_launched_ranks_keeps_their_ranks(tmp_path):
    # the same lines as torchrun's rank 3 printed them ([rank3]: prefix)
    text = "".join("[rank3]:" + x for x in DP.read_text().splitlines(True))
    lead = findings_in(tmp_path, text)[0]
    assert (lead.id, lead.ranks) == ("OOM", [3])


def test_a_recovered_fp16_overflow_in_a_deepspeed_run_is_healthy():
    log = REAL / "X6_healthy_deepspeed_chat_ppo_8gpu_fp16_overflow_recovers.log"
    assert [f for f in findings_of(log) if f.severity == "error"] == []


def test_a_loss_scale_stuck_at_its_floor_is_divergence():
    log = REAL / "X7_megatron_deepspeed_fp16_loss_scale_collapse_diverged.log"
    assert findings_of(log)[0].id == "GRAD_NONFINITE"


# Run 27 (batch X8_): the kernel's (or slurmstepd's) OOM-kill line names no rank; the
# launcher's own report of the task it lost does.
SRUN_OOM = REAL / "X8_megatron_ds_srun_host_oom_kill_task2_perlmutter.log"


def test_srun_names_the_task_the_oom_killer_took():
    lead = findings_of(SRUN_OOM)[0]
    assert (lead.id, lead.ranks) == ("OOM", [2])
    assert "launcher's report" in lead.title


def test_slurmstepds_line_in_task_0s_stream_names_no_rank(tmp_path):
    # srun --label put slurmstepd's oom_kill line behind "0: ": the task that printed it
    # is not the task that died
    text = "".join(x for x in SRUN_OOM.read_text().splitlines(True)
                   if "task 2: Out Of Memory" not in x)
    lead = findings_in(tmp_path, text)[0]
    assert (lead.id, lead.ranks) == ("OOM", [])
