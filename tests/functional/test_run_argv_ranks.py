"""Ranks started one by one from a shell loop, each numbered by its command line
(`python argv_rank_job.py --rank N --world-size 2 --port P`, `init_method=tcp://`, no
torchrun and no RANK in the environment), rank 1 with a typo in its options: it exits 2 in
argparse, rank 0 waits for it in init_process_group for ever.

- run finds rank 0 by its command line, saw rank 1 go, and confirms the hang: rank 1 gone
  while rank 0 waits (RANK_CRASHED on rank 1), the usage error it printed leading;
- the same job ended by a signal to run before any hang was confirmed (the user gave up)
  still reports the usage error, never "No issues found!".
Both found by a blind trial of run (pytorch#18689's launch pattern): no rank was found and
the report of the signalled job was "No issues found!"."""

from __future__ import annotations

import os
import signal
import time

import pytest
from paths import FIXTURES
from ports import free_port
from run_helpers import PY, RunJob, findings, run_all

# Its process-starting tests run in `make test-e2e` (docs/development.md, "Two tiers").
pytestmark = [pytest.mark.slow, pytest.mark.matrix]

LAUNCH = str(FIXTURES / "run_jobs" / "argv_ranks.sh")


def _job(tmp_path, name: str, hang_timeout: str) -> RunJob:
    return RunJob(name, tmp_path / name, ["sh", LAUNCH, str(free_port()), "1"],
                  ["--hang-timeout", hang_timeout, "--kill-grace", "2"], env={"PYTHON": PY})


@pytest.mark.timeout(150)
def test_a_rank_numbered_by_its_command_line_is_found_and_its_death_confirms_the_hang(
        tmp_path):
    job = _job(tmp_path, "hang", "8")
    run_all([job], deadline_s=120)
    assert job.returncode == 1, job.output
    report = job.report()
    got = findings(report)
    assert got[0] == ("RANK_CRASHED", [1]), got
    assert "refused its command line" in report["findings"][0]["title"]
    assert ("RANK_CRASHED", [1]) in got[1:], got  # the stacks' own: rank 1 gone
    ranks = report["probes"]["ranks"]["data"]["ranks"]
    assert [(r["rank"], r["rank_source"], r["rank_from"]) for r in ranks] == [
        (0, "command_line", "--rank 0, --world-size 2 on its command line")], ranks
    assert report["probes"]["job"]["summary"].startswith("stopped by ddpdoctor")


@pytest.mark.timeout(120)
def test_a_rank_that_failed_before_a_signal_to_run_is_reported(tmp_path):
    job = _job(tmp_path, "signalled", "600")
    job.start()
    try:
        log = job.run_dir / "output.log"
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and (
                not log.exists() or b"invalid int value" not in log.read_bytes()):
            time.sleep(0.2)
        time.sleep(1.0)  # rank 0 is waiting in its rendezvous
        os.kill(job.proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and job.poll() is None:
            time.sleep(0.2)
    finally:
        job.kill()
    report = job.report()
    assert report["probes"]["job"]["status"] == "warning", job.output  # ended by run
    lead = report["findings"][0]
    assert lead["id"] == "RANK_CRASHED", findings(report)
    assert "refused its command line" in lead["title"], lead
    assert "No issues found" not in job.output
