"""Evidence families learned from locked runs 25 and 26 (batches X6_ and X7_, scored blind
first: 2/3, the miss a rank): torch.nn.DataParallel's re-raise ("Caught X in replica N on
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
