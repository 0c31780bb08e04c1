"""A hang whose cause the job printed before it: rank 1's DataLoader workers fail with
"Too many open files" (a low `ulimit -n` on its node), rank 1 waits for data forever and
rank 0 in DDP's all_reduce. The stacks alone say HANG_DATALOADER on rank 1; run reads what
the job printed before it stopped it, and the limit leads (next step: fix the config).
Found by a blind trial of run: the hang was reported, the "Too many open files" was not."""

from __future__ import annotations

import pytest
from paths import FIXTURES
from run_helpers import PY, RunJob, findings, run_all

# Its process-starting test runs in `make test-e2e` (docs/development.md, "Two tiers").
pytestmark = [pytest.mark.slow, pytest.mark.matrix]

JOB = str(FIXTURES / "run_jobs" / "fd_limit_job.py")


@pytest.mark.timeout(180)
def test_what_the_job_printed_before_its_hang_leads_the_hang(tmp_path):
    job = RunJob("fd", tmp_path / "fd",
                 [PY, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
                  JOB], ["--hang-timeout", "6", "--kill-grace", "2"])
    run_all([job], deadline_s=150)
    report = job.report()
    assert job.returncode == 1, job.output
    got = findings(report)
    assert got[0] == ("ENV_LIMITS", []), job.output
    assert ("HANG_DATALOADER", [1]) in got, job.output
    cause = report["probes"]["hang cause"]
    assert cause["status"] == "error" and "the stacks name rank 1" in cause["summary"]
    assert report["action"]["do"] == "fix_config", job.output
    # the stop's own teardown (torchrun's SignalException) is not read as a cause
    assert not any(f["id"] in ("RANK_CRASHED", "UNRECOGNIZED_FAILURE")
                   for f in report["findings"]), job.output
