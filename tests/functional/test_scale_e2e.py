"""`ddpdoctor scale` end to end: real torchrun sweeps at 1 and 2 ranks (slow, ~1 min each).

One sweep of the reference trainer with a planted straggler on rank 1 (the table, the JSON
and the finding with its rank), one of a user's torchrun command that is
communication-bound by construction (tests/lib/scale_user_job.py).
"""

import json
import os
import sys

import pytest
from jobs import ddpdoctor_cmd, run_job
from paths import LIB

JOB = LIB / "scale_user_job.py"


@pytest.mark.slow
@pytest.mark.timeout(420)
def test_trainer_sweep_prints_the_table_and_names_a_planted_straggler(tmp_path):
    out = tmp_path / "scale.json"
    rc, text = run_job([*ddpdoctor_cmd(), "scale", "--nproc-list", "1,2", "--steps", "8",
                        "--warmup-steps", "2", "--inject", "straggler@1", "--run-timeout",
                        "180", "--json", str(out)], timeout=400)
    assert rc == 0, text  # every run finished: poor scaling is a warning
    assert "[1/2] 1 rank, batch 8/rank" in text and "[2/2] 2 ranks" in text  # progress
    for col in ("ranks", "tokens/s", "speedup", "efficiency", "straggler", "comm*"):
        assert col in text
    rep = json.loads(out.read_text())
    assert rep["command"] == "scale" and rep["world"]["worlds"] == [1, 2]
    one, two = rep["probes"]["1 rank"]["data"], rep["probes"]["2 ranks"]["data"]
    assert one["efficiency"] == 1.0 and one["rank_batch"] == 8 and one["unit"] == "tokens/s"
    assert two["throughput"] > 0 and two["breakdown"]["culprit"]["rank"] == 1
    # the injection sleeps 0.3 s in rank 1's forward at every step
    assert 0.25 < two["breakdown"]["straggler_s"] < 0.45
    assert [(f["id"], f["ranks"]) for f in rep["findings"]] == [("STRAGGLER", [1])]
    assert rep["exit_code"] == 0


@pytest.mark.slow
@pytest.mark.timeout(420)
def test_user_torchrun_command_is_measured_and_found_communication_bound(tmp_path):
    out = tmp_path / "scale.json"
    env = {**os.environ, "SCALE_JOB_STEPS": "8"}
    rc, text = run_job([*ddpdoctor_cmd(), "scale", "--nproc-list", "1,2", "--warmup-steps",
                        "2", "--run-timeout", "180", "--json", str(out), "--",
                        sys.executable, "-m", "torch.distributed.run", "--standalone",
                        str(JOB)], timeout=400, env=env)
    assert rc == 0, text
    rep = json.loads(out.read_text())
    assert rep["world"]["unit"] == "samples/s"
    two = rep["probes"]["2 ranks"]["data"]
    assert two["comm_s"] > 0.5 * two["lost_s"]
    assert [(f["id"], f["ranks"]) for f in rep["findings"]] == [("SCALING_COMM_BOUND", [])]
