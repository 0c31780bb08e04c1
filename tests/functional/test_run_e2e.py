"""End to end: `ddpdoctor run` supervises real 2-rank gloo jobs with a planted fault.

Hangs: run must notice by itself (no progress for --hang-timeout), diagnose (attach),
stop the job and exit 1 with the HANG finding naming the culprit. Crashes: run passes
the job's exit code on and names the first failing rank and the finding.

Each case is its own torchrun launch (~5 s of CPU); the cases of one kind run side by
side (a module fixture), so the wait for a hang or for torchrun's teardown overlaps.
Whole file: ~2 min on 2 busy cores.
"""

from __future__ import annotations

import json

import psutil
import pytest
from run_helpers import RunJob, findings, run_all, trainer

pytestmark = pytest.mark.slow

HANG_TIMEOUT = 6.0
SLACK = 4.0  # "within hang-timeout + a few seconds": poll interval, load, sampling

# name -> (command, finding, culprit ranks), each a reference trainer injection.
HANGS = {
    # 3 ranks: ranks 0 and 2 wait in the step's all_gather, rank 1 alone in its all_reduce
    "missing": (trainer("--steps", "50", "--inject", "lone-collective@1:2", nproc=3),
                "HANG_RANK_MISSING_COLLECTIVE", [1]),
    "compute": (trainer("--steps", "50", "--inject", "hang-compute@0:2"),
                "HANG_RANK_MISSING_COLLECTIVE", [0]),
    "data": (trainer("--steps", "50", "--inject", "data-stall@1:2"), "HANG_DATALOADER", [1]),
    "mismatch": (trainer("--steps", "50", "--inject", "collective-order@1:2"),
                 "HANG_COLLECTIVE_MISMATCH", [0, 1]),
    "p2p": (trainer("--steps", "50", "--inject", "p2p-deadlock@0:2"),
            "HANG_P2P_DEADLOCK", [0, 1]),
}
CRASHES = {
    "exception": (trainer("--steps", "5", "--inject", "crash@1:2"), {"RANK_CRASHED"}, [1]),
    "sigkill": (trainer("--steps", "5", "--inject", "oom-kill@1:2"),
                {"RANK_CRASHED", "OOM"}, [1]),
    "oom": (trainer("--steps", "5", "--inject", "oom@1:2"), {"OOM"}, [1]),
    # a DataLoader worker SIGKILLed: the OOM killer's usual victim, so "most likely the
    # host ran out of memory" may lead (the worker failure follows it)
    "worker-killed": (trainer("--steps", "5", "--inject", "worker-kill@1:2"),
                      {"DATALOADER_WORKER_FAILURE", "OOM"}, [1]),
    "unused": (trainer("--steps", "5", "--inject", "unused-branch@1:2"),
               {"DDP_REDUCTION_NOT_FINISHED", "DDP_UNUSED_PARAMETERS"}, [1]),
}


@pytest.fixture(scope="module")
def hang_runs(tmp_path_factory):
    base = tmp_path_factory.mktemp("run-hangs")
    jobs = {name: RunJob(name, base / name, cmd,
                         ["--hang-timeout", str(HANG_TIMEOUT), "--kill-grace", "2"])
            for name, (cmd, _, _) in HANGS.items()}
    run_all(list(jobs.values()), deadline_s=200)
    return jobs


@pytest.fixture(scope="module")
def crash_runs(tmp_path_factory):
    base = tmp_path_factory.mktemp("run-crashes")
    jobs = {name: RunJob(name, base / name, cmd, ["--hang-timeout", "60"])
            for name, (cmd, _, _) in CRASHES.items()}
    # a healthy run rides along: the launches overlap
    jobs["healthy"] = RunJob("healthy", base / "healthy", trainer("--steps", "3"),
                             ["--hang-timeout", "60"])
    # and a job that "succeeds" with NaN losses: only the in-training checks can tell (the
    # defaults: the first check step is step 10)
    jobs["nan"] = RunJob("nan", base / "nan", trainer("--steps", "11", "--inject", "nan@1:2"),
                         ["--hang-timeout", "60", "--fail-on-findings"])
    run_all(list(jobs.values()), deadline_s=150)
    return jobs


def _hang_started(job: RunJob) -> float | None:
    """When the job stopped moving, by the ranks' own account (wall time): the last
    heartbeat progress (reference trainer, watched) or hang.py's ready files."""
    times = []
    for hb in (job.run_dir / "heartbeat").glob("rank*.json"):
        times.append(json.loads(hb.read_text())["last_progress"])
    times += [p.stat().st_mtime for p in job.ready_dir.glob("rank*.ready")]
    return max(times) if times else None


@pytest.mark.timeout(260)
@pytest.mark.parametrize("name", list(HANGS))
def test_run_catches_hang(hang_runs, name):
    job = hang_runs[name]
    _, finding, culprits = HANGS[name]
    assert job.returncode == 1, f"{name}: rc {job.returncode}\n{job.output[-3000:]}"
    report = job.report()
    assert report["exit_code"] == 1
    got = findings(report)
    assert got and got[0][0] == finding, (got, job.output[-3000:])
    assert got[0][1] == culprits, (got, job.output[-3000:])
    hang = report["probes"]["hang"]["data"]
    assert hang["stopped"] is True
    said = [line for line in job.output.splitlines() if line.startswith("ddpdoctor run:")]
    print("\n".join(said))  # shown whole on a failure (an assert message is cut short)
    assert HANG_TIMEOUT <= hang["no_progress_s"] <= HANG_TIMEOUT + SLACK
    started = _hang_started(job)
    assert started is not None, "no heartbeat / ready file: cannot time the detection"
    assert hang["detected_at"] - started <= HANG_TIMEOUT + SLACK, (hang, started)
    # stopped: no rank process of the job is left
    for r in report["probes"]["ranks"]["data"]["ranks"]:
        alive = psutil.pid_exists(r["pid"]) and \
            psutil.Process(r["pid"]).status() != psutil.STATUS_ZOMBIE
        assert not alive, f"rank {r['rank']} (pid {r['pid']}) survived the stop"
    # the output went through to the terminal and a copy was kept
    assert "no rank made progress" in job.output
    assert (job.run_dir / "output.log").exists()


@pytest.mark.timeout(260)
@pytest.mark.parametrize("name", list(CRASHES))
def test_run_triages_crash(crash_runs, name):
    job = crash_runs[name]
    _, ids, culprits = CRASHES[name]
    # torchrun exits 1 when a rank fails; run passes that on
    assert job.returncode == 1, f"{name}: rc {job.returncode}\n{job.output[-3000:]}"
    report = job.report()
    got = findings(report)
    assert got, job.output[-3000:]
    lead_id, lead_ranks = got[0]
    assert lead_id in ids, (got, job.output[-3000:])
    assert lead_ranks == culprits, (got, job.output[-3000:])
    assert "hang" not in report["probes"]
    assert report["probes"]["crash triage"]["summary"].startswith(
        f"first failure: rank {culprits[0]}")
    # the output went through (the trainer's own lines) and was kept
    kept = (job.run_dir / "output.log").read_text(errors="replace")
    assert "[ddp]" in job.output and "[ddp]" in kept


@pytest.mark.timeout(260)
def test_run_healthy_job_exit_code_and_watch(crash_runs):
    """Exit 0 passed on, no findings, and watch switched on with no code change: every
    rank wrote heartbeats (what run reads for progress)."""
    job = crash_runs["healthy"]
    assert job.returncode == 0, job.output[-3000:]
    report = job.report()
    assert findings(report) == []
    assert report["exit_code"] == 0
    assert report["probes"]["watch"]["status"] == "ok"
    beats = sorted(p.name for p in (job.run_dir / "heartbeat").glob("rank*.json"))
    assert beats == ["rank0.json", "rank1.json"], beats


@pytest.mark.timeout(260)
def test_run_reports_what_the_watch_found_in_a_job_that_exited_0(crash_runs):
    job = crash_runs["nan"]
    report = job.report()
    assert report["probes"]["job"]["data"]["returncode"] == 0, job.output[-3000:]
    # an error finding and --fail-on-findings: exit 1, although the job itself exited 0
    assert job.returncode == 1 and report["exit_code"] == 1, job.output[-3000:]
    [nan] = [f for f in report["findings"] if f["id"] == "GRAD_NONFINITE"]
    assert nan["ranks"] == [1] and nan["evidence"]["step"] == 2, nan
    assert nan["evidence"]["detected_at_step"] == 10
    assert nan["evidence"]["check"] == "watch"
    assert "found GRAD_NONFINITE" in report["probes"]["watch"]["summary"]


@pytest.mark.timeout(260)
def test_run_oom_carries_the_watchs_memory_evidence(crash_runs):
    """The output names the CPU allocator's OOM; the watch adds the rank's memory history
    and the host's free memory at that moment."""
    report = crash_runs["oom"].report()
    [oom] = [f for f in report["findings"] if f["id"] == "OOM"]
    assert oom["ranks"] == [1] and oom["evidence"]["kind"] == "host (allocator)"
    watch = oom["evidence"]["watch"]
    assert watch["step"] == 2 and watch["kind"] == "host" and watch["history_mb"]
    assert watch["host_available_mb"] > 0 and watch["requested_mb"] > watch["host_total_mb"]
