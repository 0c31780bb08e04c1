"""End to end: ranks no launcher numbered (mp.spawn, multiprocessing) and torchrun restarts.

Real 2-rank gloo jobs (tests/fixtures/launches/):

- ``spawn_job.py`` under ``ddpdoctor run``, started by ``torch.multiprocessing.spawn``
  with process index i running rank 1 - i: rank 1 is the first child and the lower PID.
  Its crash and its hang each name rank 1 (not process 1, not the PID-order rank);
- the same job started with ``multiprocessing.Process`` (fork, rank 1 first), hung, with
  ``ddpdoctor attach`` on the parent: no RANK anywhere, no watch; the rank is read from
  each child's stack locals;
- ``restart_job.py`` under ``torchrun --max-restarts 1``: rank 1 fails on the first
  attempt only (the restart helps), or on every attempt (it does not), or fails on the
  first and hangs on the second (the hang of a later attempt is found and named). One
  section per attempt.

The run jobs go side by side (~40 s on 2 busy cores).
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest
from ports import free_port
from run_helpers import PY, RunJob, doctor, findings, kill_tree, run_all

pytestmark = [pytest.mark.slow, pytest.mark.matrix]

JOBS = Path(__file__).parents[1] / "fixtures" / "launches"
SPAWN = str(JOBS / "spawn_job.py")
RESTART = str(JOBS / "restart_job.py")
TORCHRUN = [PY, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--max-restarts", "1"]


def _restart(mode: str) -> list[str]:
    return [*TORCHRUN, "--master-port", str(free_port()), RESTART, mode]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    base = tmp_path_factory.mktemp("launches")
    jobs = {
        "crash": RunJob("crash", base / "crash", [PY, SPAWN, "crash", str(free_port())]),
        "hang": RunJob("hang", base / "hang", [PY, SPAWN, "hang", str(free_port())],
                       args=["--hang-timeout", "6"]),
        "once": RunJob("once", base / "once", _restart("once")),
        "always": RunJob("always", base / "always", _restart("always")),
    }
    run_all(list(jobs.values()), deadline_s=240)
    return jobs


@pytest.fixture(scope="module")
def hang_later(tmp_path_factory):
    """On its own, after the four above: a fifth job beside them once left run no time to
    read the mp.spawn children's ranks before the planted crash (CI)."""
    job = RunJob("hang-later", tmp_path_factory.mktemp("later") / "hang-later",
                 _restart("hang-later"), args=["--hang-timeout", "6"])
    run_all([job], deadline_s=180)
    return job


def _ranks_probe(report: dict) -> dict[int, dict]:
    return {r["rank"]: r for r in report["probes"]["ranks"]["data"]["ranks"]}


def test_run_mp_spawn_crash_names_the_real_rank(runs):
    job = runs["crash"]
    assert job.returncode == 1, job.output
    report = job.report()
    lead = report["findings"][0]
    assert (lead["id"], lead["ranks"]) == ("RANK_CRASHED", [1]), job.output
    # mp.spawn's "-- Process 0 terminated" is index 0, the child that runs rank 1
    assert "process index 0, which is rank 1" in lead["evidence"]["rank_from"]
    assert report["world"]["ranks_seen"] == [0, 1]


def test_run_mp_spawn_hang_names_the_real_rank(runs):
    job = runs["hang"]
    assert job.returncode == 1, job.output
    report = job.report()
    assert findings(report)[0] == ("HANG_RANK_MISSING_COLLECTIVE", [1]), job.output
    ranks = _ranks_probe(report)
    assert ranks[1]["pid"] < ranks[0]["pid"]  # PID order would have said rank 0
    assert {r["rank_source"] for r in ranks.values()} <= {"locals", "process_group"}


def test_run_restart_that_helps(runs):
    job = runs["once"]
    assert job.returncode == 0, job.output
    probes = job.report()["probes"]
    first, second = probes["attempt 0"], probes["attempt 1"]
    assert first["status"] == "error" and second["status"] == "ok"
    assert (first["data"]["rank"], first["data"]["exit_code"], first["data"]["finding"]) == (
        1, 1, "RANK_CRASHED")
    assert "FileNotFoundError" in first["summary"]
    assert first["data"]["ranks"].keys() == second["data"]["ranks"].keys() == {"0", "1"}
    assert set(first["data"]["ranks"].values()).isdisjoint(second["data"]["ranks"].values())
    restarts = probes["restarts"]
    assert restarts["data"]["restarts"] == 1 and restarts["data"]["helped"] is True
    assert "restarting helped" in restarts["summary"]
    assert Path(first["data"]["log"]).read_text().count("cannot open its data shard") >= 1


def test_run_restart_that_repeats_the_failure(runs):
    job = runs["always"]
    assert job.returncode == 1, job.output
    report = job.report()
    probes = report["probes"]
    for n in (0, 1):
        data = probes[f"attempt {n}"]["data"]
        assert (data["rank"], data["exit_code"], data["finding"]) == (1, 1, "RANK_CRASHED")
        assert f"(attempt {n})" in probes[f"attempt {n}"]["summary"]
    restarts = probes["restarts"]
    assert restarts["status"] == "error" and restarts["data"]["same_failure"] is True
    assert "restarting did not help" in restarts["summary"]
    # the job's own finding is its last attempt's
    assert findings(report)[0] == ("RANK_CRASHED", [1])
    assert "(attempt 1)" in report["findings"][0]["title"]


def test_attach_numbers_multiprocessing_ranks_by_their_locals(tmp_path):
    env = dict(os.environ, TMPDIR=str(tmp_path), HANG_READY_DIR=str(tmp_path),
               OMP_NUM_THREADS="1")
    job = subprocess.Popen([PY, SPAWN, "hang", str(free_port()), "--launch", "process"], env=env,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                           start_new_session=True)
    try:
        deadline = time.monotonic() + 90
        while not (tmp_path / "rank1").exists() and time.monotonic() < deadline:
            assert job.poll() is None, "the job ended before its hang"
            time.sleep(0.2)
        time.sleep(1.5)  # rank 0 reaches the all-reduce
        out = tmp_path / "attach.json"
        done = subprocess.run([*doctor(), "attach", "--json", str(out), str(job.pid)],
                              capture_output=True, text=True, timeout=60, env=env)
        report = json.loads(out.read_text())
    finally:
        kill_tree(job.pid)
        job.wait(timeout=10)
    assert done.returncode == 1, done.stdout + done.stderr
    assert findings(report)[0] == ("HANG_RANK_MISSING_COLLECTIVE", [1])
    ranks = _ranks_probe(report)
    assert ranks[1]["pid"] < ranks[0]["pid"]
    assert ranks[1]["rank_source"] == "locals" and "rank=1" in ranks[1]["rank_from"]


def test_run_names_a_hang_in_a_later_attempt(hang_later):
    """Attempt 0: rank 1 raises; torchrun restarts the group; attempt 1: rank 1 never
    reaches the all_reduce rank 0 waits in. run follows the new ranks, names the hang and
    its rank, and stops the job; attempt 0 keeps its own ending."""
    job = hang_later
    assert job.returncode == 1, job.output
    report = job.report()
    assert findings(report)[0] == ("HANG_RANK_MISSING_COLLECTIVE", [1]), job.output
    probes = report["probes"]
    first = probes["attempt 0"]["data"]
    assert (first["rank"], first["exit_code"], first["finding"]) == (1, 1, "RANK_CRASHED")
    second = probes["attempt 1"]
    # run's own SIGTERM to the hung ranks is not the attempt's failure
    assert second["summary"].startswith("attempt 1: stopped by ddpdoctor run (a confirmed "
                                        "hang): HANG_RANK_MISSING_COLLECTIVE on rank 1"), second
    assert (second["data"]["rank"], second["data"]["finding"]) == (
        1, "HANG_RANK_MISSING_COLLECTIVE")
    assert "SignalException" not in json.dumps(probes["restarts"])
    assert "stopped" in probes["hang"]["summary"], probes["hang"]
