"""`ddpdoctor run` is safe to put in front of a real job.

- it never kills a healthy job: a long silent evaluation, a long single step and a slow
  checkpoint save (rank 1 waiting in a barrier meanwhile) each run far past a short
  --hang-timeout and end with the job's own exit code and no hang finding, while a real
  hang (one rank never joins the all_reduce) under the same timeout is still stopped;
- it never orphans a rank: whatever ends run (SIGHUP, SIGTERM, SIGQUIT, Ctrl-C twice,
  SIGKILL), no process of the job's tree is left alive, checked by pid: the launcher,
  ranks that ignore SIGTERM/SIGINT/SIGHUP, and the daemons they started with setsid;
  the report (or, when run was SIGKILLed, the reaper's record) says what was ended;
- a rank that dies of SIGKILL after growing is shown growing (its RSS history).

Each group of jobs runs side by side (module fixtures).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import time
from pathlib import Path

import psutil
import pytest
from run_helpers import PY, RunJob, findings, run_all

pytestmark = [pytest.mark.slow, pytest.mark.matrix]

JOBS = Path(__file__).parents[1] / "fixtures" / "run_jobs"
QUIET_S = 12.0
TIMEOUT = 3.0


def quiet_job(mode: str) -> list[str]:
    return [PY, "-m", "torch.distributed.run", "--nproc-per-node", "2",
            str(JOBS / "quiet_job.py"), mode, str(QUIET_S)]


def trap_job(mode: str, ready: Path) -> list[str]:
    return [PY, "-m", "torch.distributed.run", "--nproc-per-node", "2",
            str(JOBS / "trap_job.py"), mode, str(ready)]


# --- never kill a healthy job

HEALTHY = ("eval", "step", "ckpt")


@pytest.fixture(scope="module")
def quiet_runs(tmp_path_factory):
    base = tmp_path_factory.mktemp("run-quiet")
    jobs = {mode: RunJob(mode, base / mode, quiet_job(mode),
                         ["--hang-timeout", str(TIMEOUT), "--kill-grace", "2"])
            for mode in (*HEALTHY, "hang")}
    run_all(list(jobs.values()), deadline_s=150)
    return jobs


@pytest.mark.timeout(200)
@pytest.mark.parametrize("mode", HEALTHY)
def test_quiet_but_working_job_is_not_stopped(quiet_runs, mode):
    job = quiet_runs[mode]
    assert job.returncode == 0, f"{mode}: rc {job.returncode}\n{job.output[-3000:]}"
    report = job.report()
    assert report["exit_code"] == 0
    assert report["probes"]["job"]["data"]["returncode"] == 0
    assert "hang" not in report["probes"], report["probes"].get("hang")
    assert findings(report) == [], findings(report)
    assert report["probes"]["watch"]["status"] == "ok"  # watch was on (the default)
    # run did look (the quiet spell was 4x the timeout) and said what it saw, once
    stall = report["probes"]["stall"]
    assert stall["status"] == "warning" and stall["data"]["looks"], stall
    assert not any(lk["confirmed"] for lk in stall["data"]["looks"])
    # said once for the quiet part (each quiet spell gets one line; a loaded machine's
    # slow start may have had its own): never stopped, and not a line per look
    quiet_part = job.output[job.output.rindex("silently"):]
    said = quiet_part.count("still watching")
    assert 1 <= said <= 2, job.output[-3000:]
    assert "ddpdoctor run: hang confirmed" not in job.output
    assert "done" in job.output  # both ranks went on training after the quiet part
    if mode == "ckpt":
        # the stacks alone would name rank 0 (rank 1 waits in barrier, rank 0 is not
        # there); rank 0's CPU time says it is working
        assert any(0 in lk["working_ranks"] for lk in stall["data"]["looks"]), stall


@pytest.mark.timeout(200)
def test_real_hang_under_the_same_timeout_is_stopped(quiet_runs):
    job = quiet_runs["hang"]
    assert job.returncode == 1, job.output[-3000:]
    report = job.report()
    got = findings(report)
    assert got and got[0] == ("HANG_RANK_MISSING_COLLECTIVE", [1]), got
    hang = report["probes"]["hang"]["data"]
    assert hang["stopped"] is True
    # caught from the moment the ranks went quiet: the timeout, a look (two under load)
    ready = max(p.stat().st_mtime for p in job.ready_dir.glob("rank*.ready"))
    assert hang["detected_at"] - ready <= 3 * TIMEOUT + 10, (
        hang, report["probes"].get("stall"), job.output[-2000:])
    killed = report["probes"]["cleanup"]["data"]["killed"]
    assert len(killed) >= 3  # torchrun and both ranks
    for k in killed:
        assert not _alive(k["pid"]), k


# --- never orphan a rank

SIGNALS = {
    "sighup": ("quiet", [signal.SIGHUP]),
    "sigterm": ("quiet", [signal.SIGTERM]),
    "sigquit": ("quiet", [signal.SIGQUIT]),
    "ctrl-c-twice": ("quiet", [signal.SIGINT, signal.SIGINT]),
    "sigkill-quiet": ("quiet", [signal.SIGKILL]),
    "sigkill-print": ("print", [signal.SIGKILL]),
}


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _tree_pids(job: RunJob) -> dict[str, int]:
    """Every process of the job, by role: launcher, rank R, daemon of rank R."""
    pids = {}
    for f in sorted(job.ready_dir.glob("rank*.pids")):
        r = f.name[4:-5]
        rank_pid, daemon_pid = map(int, f.read_text().split())
        pids[f"rank {r}"], pids[f"daemon of rank {r}"] = rank_pid, daemon_pid
    for p in psutil.Process(job.proc.pid).children():
        if "torch.distributed.run" in " ".join(p.cmdline()):
            pids["launcher"] = p.pid
    return pids


@pytest.fixture(scope="module")
def signal_runs(tmp_path_factory):
    base = tmp_path_factory.mktemp("run-signals")
    jobs = {}
    for name, (mode, _) in SIGNALS.items():
        tmp = base / name
        jobs[name] = RunJob(name, tmp, trap_job(mode, tmp / "ready"),
                            ["--hang-timeout", "60", "--kill-grace", "1"])
    # a rank that grows, then is SIGKILLed: rides along
    grow = base / "grow"
    jobs["grow"] = RunJob("grow", grow, trap_job("grow", grow / "ready"),
                          ["--hang-timeout", "60", "--kill-grace", "1"])
    trees: dict[str, dict[str, int]] = {}
    try:
        for j in jobs.values():
            j.start()
        deadline = time.monotonic() + 90
        pending = set(SIGNALS)
        while pending and time.monotonic() < deadline:
            for name in sorted(pending):
                job = jobs[name]
                if len(list(job.ready_dir.glob("rank*.pids"))) == 2:
                    trees[name] = _tree_pids(job)
                    for i, sig in enumerate(SIGNALS[name][1]):
                        if i:
                            time.sleep(1.0)
                        os.kill(job.proc.pid, sig)
                    pending.discard(name)
            time.sleep(0.2)
        # the grow job ends by itself: torchrun gives the rank that ignores SIGTERM its 30 s
        # grace before SIGKILL, so it needs longer than the signalled ones on a loaded machine
        deadline = max(deadline, time.monotonic() + 60)
        while time.monotonic() < deadline and any(j.poll() is None for j in jobs.values()):
            time.sleep(0.2)
        time.sleep(4.0)  # the reaper's grace (1 s) and SIGKILL after run was SIGKILLed
        alive_after = {name: {role: pid for role, pid in tree.items() if _alive(pid)}
                       for name, tree in trees.items()}
    finally:
        for j in jobs.values():
            j.poll()
            j.kill()
    return jobs, trees, alive_after


@pytest.mark.timeout(200)
@pytest.mark.parametrize("name", list(SIGNALS))
def test_no_process_of_the_job_outlives_run(signal_runs, name):
    jobs, trees, alive_after = signal_runs
    job = jobs[name]
    assert name in trees, f"{name}: the job never got ready\n{job.output[-3000:]}"
    tree = trees[name]
    assert {"launcher", "rank 0", "rank 1", "daemon of rank 0", "daemon of rank 1"} <= set(
        tree), tree
    assert job.returncode is not None, f"{name}: run did not end\n{job.output[-3000:]}"
    assert alive_after[name] == {}, f"{name}: left alive {alive_after[name]}\n" \
                                    f"{job.output[-3000:]}"
    ranks_and_daemons = {pid for role, pid in tree.items() if role != "launcher"}
    if SIGNALS[name][1][0] == signal.SIGKILL:
        record = json.loads((job.run_dir / "reaper.json").read_text())
        ended = {k["pid"] for k in record["killed"]}
        daemons = {pid for role, pid in tree.items() if role.startswith("daemon")}
        # printing ranks may die of the closed pipe first; the daemons never would
        must = ranks_and_daemons if name == "sigkill-quiet" else daemons
        assert must <= ended, (record, tree)
        # run's log copy holds what came before the kill (line-flushed, not buffered)
        assert "ready" in (job.run_dir / "output.log").read_text()
        return
    assert (job.run_dir / "report.json").exists()  # the report run always leaves
    report = job.report()
    cleanup = report["probes"]["cleanup"]
    ended = {k["pid"]: k for k in cleanup["data"]["killed"]}
    assert ranks_and_daemons <= set(ended), (cleanup, tree)
    assert all(k["name"] and k["how"] in ("SIGTERM", "SIGKILL") for k in ended.values())
    # the daemons ignore SIGTERM: run escalated
    assert ended[tree["daemon of rank 0"]]["how"] == "SIGKILL"
    sig = SIGNALS[name][1][-1]
    expected = ("a second Ctrl-C" if name == "ctrl-c-twice"
                else f"{signal.Signals(sig).name} to ddpdoctor run")
    assert cleanup["data"]["ended_by"].startswith(expected), cleanup
    assert report["probes"]["job"]["status"] == "warning"
    # a healthy job ended by a signal is no failure: the KeyboardInterrupt and
    # SignalException tracebacks the signal made it print come after what run reads
    assert [f for f in report["findings"] if f["severity"] == "error"] == [], findings(report)


@pytest.mark.timeout(200)
def test_a_rank_killed_after_growing_shows_its_memory_climb(signal_runs):
    jobs, _, _ = signal_runs
    job = jobs["grow"]
    assert job.returncode == 1, job.output[-3000:]
    report = job.report()
    crashed = [f for f in report["findings"] if f["ranks"] == [1]
               and f["id"] in ("RANK_CRASHED", "OOM")]
    assert crashed, (findings(report), job.output[-3000:])
    mem = crashed[0]["evidence"]["memory"]
    series = [mb for _, mb in mem["rss_mb_history"]]
    assert len(series) >= 3, mem
    assert mem["rss_mb_peak"] - mem["rss_mb_first"] >= 100, mem  # 16 x 16 MB held
    # climbing up to the kill (a sample taken while the kernel tears the killed process
    # down may already show its memory going)
    peak = series.index(max(series))
    assert series[:peak + 1] == sorted(series[:peak + 1]), series
    assert peak >= len(series) - 2, series


@pytest.mark.timeout(120)
def test_terminal_closing_under_run_ends_the_job_and_leaves_a_report(tmp_path):
    """ssh closes: run's controlling terminal goes away (the pty's master is closed),
    the kernel sends SIGHUP, and every later write to the terminal fails (EIO). run
    still ends the whole tree of a printing job whose ranks ignore SIGHUP/SIGTERM, and
    leaves its report in the run dir."""
    import pty

    from run_helpers import doctor, kill_tree

    ready, rd = tmp_path / "ready", tmp_path / "run"
    ready.mkdir()
    argv = [*doctor(), "run", "--hang-timeout", "60", "--kill-grace", "1", "--run-dir",
            str(rd), "--", *trap_job("print", ready)]
    env = dict(os.environ, TMPDIR=str(tmp_path), OMP_NUM_THREADS="1")
    pid, master = pty.fork()
    if pid == 0:  # the child: session leader on the pty, as a login shell's job would be
        os.chdir(tmp_path)
        os.execvpe(argv[0], argv, env)
    tree: dict[str, int] = {}
    try:
        deadline = time.monotonic() + 60
        while len(list(ready.glob("rank*.pids"))) < 2 and time.monotonic() < deadline:
            try:
                os.read(master, 65536)  # keep the terminal drained, as a terminal does
            except OSError:
                break
            time.sleep(0.05)
        job = RunJob("hup", tmp_path, [])
        job.proc = type("P", (), {"pid": pid})()
        tree = _tree_pids(job)
        assert len(tree) == 5, tree
        os.close(master)  # the terminal is gone
        deadline = time.monotonic() + 30
        done = 0
        while not done and time.monotonic() < deadline:
            done, _ = os.waitpid(pid, os.WNOHANG)
            time.sleep(0.1)
        assert done, "run did not end after its terminal went away"
        time.sleep(1.0)
        assert {role: p for role, p in tree.items() if _alive(p)} == {}
        report = json.loads((rd / "report.json").read_text())
        cleanup = report["probes"]["cleanup"]["data"]
        assert cleanup["ended_by"] == "SIGHUP to ddpdoctor run", cleanup
        assert {p for role, p in tree.items() if role != "launcher"} <= {
            k["pid"] for k in cleanup["killed"]}
    finally:
        kill_tree(pid)
        for p in tree.values():
            with contextlib.suppress(OSError):
                os.kill(p, signal.SIGKILL)
