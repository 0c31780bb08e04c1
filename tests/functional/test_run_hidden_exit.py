"""A launch that drops its ranks' status (`torchrun ... || true`, a shell's bare `wait`)
exits 0 while a rank crashed: run reads the output anyway and never calls the job healthy
(the job's exit code is still passed on; `--fail-on-findings` makes it 1).
Found by a blind trial: a shell loop's `wait` hid a desync that killed both ranks, and run
said "No issues found!" with exit code 0."""

from __future__ import annotations

import pytest
from paths import FIXTURES
from ports import free_port
from run_helpers import PY, RunJob, findings, run_all

# Its process-starting tests run in `make test-e2e` (docs/development.md, "Two tiers").
pytestmark = pytest.mark.matrix

SCRIPT = str(FIXTURES / "run_jobs" / "hidden_exit.sh")


@pytest.mark.slow  # starts a process
@pytest.mark.timeout(180)
def test_a_crash_the_launch_hid_is_reported_never_called_healthy(tmp_path):
    jobs = [RunJob(name, tmp_path / name, [SCRIPT, str(free_port())], args=args,
                   env={"PYTHON": PY})
            for name, args in (("default", []), ("strict", ["--fail-on-findings"]))]
    run_all(jobs, deadline_s=150)
    for job in jobs:
        report = job.report()
        assert findings(report)[0] == ("RANK_CRASHED", [1]), job.output
        job_check = report["probes"]["job"]
        assert job_check["status"] == "error", job.output
        assert "exited with code 0" in job_check["summary"]
        assert "No issues found" not in job.output
    # the job's own exit code is passed on; --fail-on-findings fails the run on it
    assert [j.returncode for j in jobs] == [0, 1]
