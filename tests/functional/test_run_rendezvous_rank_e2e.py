"""End to end: a job launched without torchrun whose one task was given another rendezvous
endpoint: `ddpdoctor run` names that rank, from each rank's own environment.

Real 2-rank gloo jobs (tests/fixtures/run_jobs/rdzv_task.py, a 3 s process-group
timeout), no torchrun:

- a Slurm-style shell script starting one task per rank, rank 1 computing base port + 1
  (rank 0's store times out "1/2 clients joined", rank 1's connect goes unanswered);
- a Python launcher starting the same script twice, rank 1 with another MASTER_ADDR;
- the same shell script with every task right: it exits 0 with no finding;
- the port case again with a bare `wait` that exits 0: the same culprit, the launch said
  to have hidden it.

The four run side by side (~25 s on 2 busy cores).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from ports import free_port
from run_helpers import PY, RunJob, findings, run_all

pytestmark = [pytest.mark.slow, pytest.mark.matrix]

JOBS = Path(__file__).parents[1] / "fixtures" / "run_jobs"
TIMEOUT_S = "3"
# an address no store listens on (TEST-NET-2): the connect fails or is answered wrongly
BAD_ADDR = "198.51.100.7"


@pytest.fixture(scope="module")
def rdzv_runs(tmp_path_factory):
    base = tmp_path_factory.mktemp("run-rdzv")
    shell = str(JOBS / "rdzv_tasks.sh")
    jobs = {
        "port": RunJob("port", base / "port", ["sh", shell, str(free_port(2)), "1",
                                               TIMEOUT_S], env={"PYTHON": PY}),
        "addr": RunJob("addr", base / "addr", [PY, str(JOBS / "rdzv_launch.py"),
                                               str(free_port(2)), "1", BAD_ADDR, TIMEOUT_S]),
        "hidden": RunJob("hidden", base / "hidden", ["sh", shell, str(free_port(2)), "1",
                                                     TIMEOUT_S, "hide"], env={"PYTHON": PY}),
        "healthy": RunJob("healthy", base / "healthy", ["sh", shell, str(free_port(2)), "-1",
                                                        TIMEOUT_S], env={"PYTHON": PY}),
    }
    run_all(list(jobs.values()), deadline_s=150)
    return jobs


@pytest.mark.parametrize("name", ["port", "addr"])
def test_the_rank_given_another_endpoint_is_the_culprit(rdzv_runs, name):
    job = rdzv_runs[name]
    assert job.returncode == 1, job.output
    report = job.report()
    lead = report["findings"][0]
    assert (lead["id"], lead["ranks"]) == ("ENV_RENDEZVOUS_UNREACHABLE", [1]), \
        findings(report)
    # the rank-0 store timeout and the c10d errors are its fallout, not findings
    assert findings(report) == [("ENV_RENDEZVOUS_UNREACHABLE", [1])], findings(report)
    ev = lead["evidence"]
    assert ev["endpoints"][0].startswith("rank 0: 127.0.0.1:"), ev
    odd = ev["endpoints"][1]
    assert odd.startswith(f"rank 1: {BAD_ADDR}:" if name == "addr" else "rank 1: 127.0.0.1:")
    assert odd != ev["endpoints"][0].replace("rank 0", "rank 1")
    assert any("clients joined" in line for line in ev["lines"]), ev["lines"]


def test_a_launch_that_hid_the_failed_rendezvous_names_the_same_culprit(rdzv_runs):
    job = rdzv_runs["hidden"]
    assert job.returncode == 0, job.output  # the launch's own code, passed on
    report = job.report()
    assert findings(report)[0] == ("ENV_RENDEZVOUS_UNREACHABLE", [1]), findings(report)
    assert "the launch hid it" in report["probes"]["job"]["summary"]


def test_the_same_launch_with_every_task_right_is_healthy(rdzv_runs):
    job = rdzv_runs["healthy"]
    assert job.returncode == 0, job.output
    assert findings(job.report()) == [], job.output
