"""`ddpdoctor run` without torch jobs: environment, progress decisions, tee, exit codes,
crash triage of kept output, stop of a stuck non-Python job. Seconds in all."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from run_helpers import run_doctor

from ddpdoctor.run.env import job_environment, watch_bootstrap_dir
from ddpdoctor.run.process import rank_of_line
from ddpdoctor.run.progress import (
    JOB,
    Heartbeat,
    ProcSample,
    ProgressTracker,
    TreeSample,
    read_heartbeats,
)
from ddpdoctor.run.runner import job_exit_code
from ddpdoctor.run.triage import first_exit, triage_output

PY = sys.executable
FIXTURE_LOGS = Path(__file__).parents[1] / "fixtures" / "logs"
FIXTURE_DS = Path(__file__).parents[1] / "fixtures" / "deepspeed"




# --- environment

def test_env_adds_only_ddpdoctor_variables(tmp_path):
    base = {"PATH": "/bin", "PYTHONPATH": "/user/lib", "RANK_HINT": "x"}
    j = job_environment(base, tmp_path, watch=True, bootstrap_dir="/boot")
    assert j.env["PYTHONPATH"] == os.pathsep.join(["/boot", "/user/lib"])
    assert j.env["DDPDOCTOR_WATCH"] == "1" and j.watch
    assert j.env["DDPDOCTOR_FR_DIR"] == str(tmp_path / "fr")
    assert j.env["DDPDOCTOR_HEARTBEAT_DIR"] == str(tmp_path / "heartbeat")
    assert j.env["PYTHONUNBUFFERED"] == "1"
    assert {k: j.env[k] for k in ("PATH", "RANK_HINT")} == {"PATH": "/bin", "RANK_HINT": "x"}
    assert base == {"PATH": "/bin", "PYTHONPATH": "/user/lib", "RANK_HINT": "x"}


def test_env_keeps_user_choices_and_no_watch(tmp_path):
    base = {"DDPDOCTOR_FR_DIR": "/mine", "PYTHONUNBUFFERED": "0"}
    j = job_environment(base, tmp_path, watch=False, bootstrap_dir="/boot")
    assert j.fr_dir == "/mine" and j.env["PYTHONUNBUFFERED"] == "0"
    assert "DDPDOCTOR_WATCH" not in j.env and "PYTHONPATH" not in j.env and not j.watch
    missing = job_environment({}, tmp_path, watch=True, bootstrap_dir=None)
    assert not missing.watch and "no bootstrap" in missing.notes[0]


def test_watch_bootstrap_is_found():
    d = watch_bootstrap_dir()
    assert d is not None and os.path.isfile(os.path.join(d, "sitecustomize.py"))


# --- output split

@pytest.mark.parametrize("line,rank", [
    (b"[rank1]: Traceback (most recent call last):\n", 1),
    (b"[default3]:step 4\n", 3),
    (b"  [rank12]: x\n", 12),
    (b"[ddp] step 1/3 loss 5.0\n", None),
    (b"rank1: nothing\n", None),
])
def test_rank_of_line(line, rank):
    assert rank_of_line(line) == rank


# --- progress decisions (pure)

def sample(t: float, *procs: tuple[int, int | None, float]) -> TreeSample:
    return TreeSample(t, [ProcSample(pid, rank, cpu, created=1.0) for pid, rank, cpu in procs])


def test_cpu_of_ranks_is_progress_launcher_polling_is_not():
    tr = ProgressTracker(0.0)
    tr.update(0.0, 0, sample(0.0, (10, None, 1.0), (11, 0, 2.0), (12, 1, 2.0)))
    # rank 0 computes; the launcher (no RANK) polls busily: only rank 0 counts
    tr.update(1.0, 0, sample(1.0, (10, None, 1.9), (11, 0, 2.5), (12, 1, 2.0)))
    assert tr.stalled_for(1.0) == 0 and tr.last_what.startswith("CPU time of rank 0")
    # every rank blocked in a collective: a trickle of CPU (heartbeat thread) is no progress
    for t in range(2, 9):
        tr.update(float(t), 0, sample(float(t), (10, None, 1.9 + t), (11, 0, 2.5 + 0.001 * t),
                                      (12, 1, 2.0 + 0.002 * t)))
    assert tr.stalled_for(8.0) == pytest.approx(7.0)
    assert tr.rank_last == {0: 1.0}


def test_output_line_is_progress_and_workers_count_for_their_rank():
    tr = ProgressTracker(0.0)
    tr.update(0.0, 0, sample(0.0, (11, 0, 1.0)))
    tr.update(5.0, 3, sample(5.0, (11, 0, 1.0)))
    assert tr.stalled_for(5.0) == 0 and tr.last_what == "output"
    # a new DataLoader worker of rank 0 (RANK inherited) burning CPU
    tr.update(6.0, 3, sample(6.0, (11, 0, 1.0), (20, 0, 0.5)))
    assert tr.stalled_for(6.0) == 0 and 0 in tr.rank_last


def test_no_rank_env_means_the_whole_tree_is_one_unit():
    tr = ProgressTracker(0.0)
    tr.update(0.0, 0, sample(0.0, (10, None, 0.0)))
    tr.update(1.0, 0, sample(1.0, (10, None, 0.5)))
    assert tr.stalled_for(1.0) == 0 and "the job" in tr.last_what
    assert JOB not in tr.rank_last


def test_heartbeat_of_a_training_rank_overrides_its_cpu():
    """A GPU rank can spin at 100% CPU on a stuck NCCL kernel: once its heartbeat says it
    trains, only a new step/progress mark counts."""
    tr = ProgressTracker(0.0)
    hb = {0: Heartbeat(0, 3, 100.0, 100.0, "step", "running")}
    tr.update(0.0, 0, sample(0.0, (11, 0, 0.0)), hb)
    for t in range(1, 6):
        tr.update(float(t), 0, sample(float(t), (11, 0, float(t))), hb)  # 100% CPU
    assert tr.stalled_for(5.0) == 5.0
    tr.update(6.0, 0, sample(6.0, (11, 0, 6.0)), {0: Heartbeat(0, 4, 105.0, 105.0, "step")})
    assert tr.stalled_for(6.0) == 0 and "heartbeat of rank 0 (step 4)" in tr.last_what
    # before training starts (step 0, "starting") CPU still counts
    tr2 = ProgressTracker(0.0)
    early = {0: Heartbeat(0, 0, 1.0, 1.0, "starting", "running")}
    tr2.update(0.0, 0, sample(0.0, (11, 0, 0.0)), early)
    tr2.update(1.0, 0, sample(1.0, (11, 0, 1.0)), early)
    assert tr2.stalled_for(1.0) == 0
    # a paused watch (a long evaluation) makes no steps: its CPU counts again
    paused = {0: Heartbeat(0, 4, 105.0, 105.0, "step", "paused")}
    tr.update(7.0, 0, sample(7.0, (11, 0, 7.0)), paused)
    tr.update(20.0, 0, sample(20.0, (11, 0, 20.0)), paused)
    assert tr.stalled_for(20.0) == 0 and "CPU time of rank 0" in tr.last_what


def test_rank_exit_order():
    tr = ProgressTracker(0.0)
    tr.update(0.0, 0, sample(0.0, (10, None, 0), (11, 0, 0), (12, 1, 0)))
    tr.update(1.0, 0, sample(1.0, (10, None, 0), (11, 0, 0)))
    tr.update(2.0, 0, sample(2.0, (10, None, 0)))
    assert [(e.rank, e.pid) for e in tr.exits] == [(1, 12), (0, 11)]
    assert first_exit(tr.exits).rank == 1
    tr2 = ProgressTracker(0.0)
    tr2.update(0.0, 0, sample(0.0, (11, 0, 0), (12, 1, 0)))
    tr2.update(1.0, 0, sample(1.0, (10, None, 0)))
    assert first_exit(tr2.exits) is None  # both went in one interval: no order claimed


def test_read_heartbeats_skips_stale_and_garbage(tmp_path):
    (tmp_path / "rank0.json").write_text(json.dumps(
        {"rank": 0, "step": 2, "last_progress": 50.0, "time": 60.0, "phase": "step"}))
    (tmp_path / "rank1.json").write_text(json.dumps(
        {"rank": 1, "step": 9, "last_progress": 1.0, "time": 2.0}))  # an earlier run's
    (tmp_path / "rank2.json").write_bytes(b"\x00garbage")
    (tmp_path / "rank3.json.tmp5").write_text("{}")
    got = read_heartbeats(str(tmp_path), not_before=10.0)
    assert list(got) == [0] and got[0].step == 2 and got[0].training
    assert read_heartbeats(str(tmp_path / "nope"), 0) == {}


# --- triage of kept output (diagnose's rules), exit codes

def test_triage_names_the_first_failing_rank_from_kept_output():
    findings, info = triage_output(FIXTURE_LOGS / "exception.log", [], 1)
    assert (findings[0].id, findings[0].ranks) == ("RANK_CRASHED", [1])
    assert info["events"] > 0


def test_triage_falls_back_to_the_rank_that_exited_first(tmp_path):
    from ddpdoctor.run.progress import RankExit

    log = tmp_path / "output.log"
    log.write_bytes(b"step 1\nstep 2\n")
    findings, _ = triage_output(log, [RankExit(1, 4242, 5.0), RankExit(0, 4241, 6.0)], -9)
    assert (findings[0].id, findings[0].ranks) == ("RANK_CRASHED", [1])
    assert "killed by SIGKILL" in findings[0].title
    assert triage_output(log, [], 1)[0] == []


def test_triage_names_the_rank_run_saw_exit_when_the_log_does_not(tmp_path):
    """The log tells how a process died but not which rank (an unprefixed line, torchrun's
    summary cut short): the rank run saw exit first is the culprit, and the evidence says
    how it was known."""
    from ddpdoctor.run.progress import RankExit

    log = tmp_path / "output.log"
    log.write_bytes(b"step 1\nFatal Python error: Segmentation fault\n")
    assert [(f.id, f.ranks) for f in triage_output(log, [], -11)[0]] == [("RANK_CRASHED", [])]
    findings, _ = triage_output(log, [RankExit(1, 4242, 5.0), RankExit(0, 4241, 6.0)], -11)
    assert (findings[0].id, findings[0].ranks) == ("RANK_CRASHED", [1])
    assert findings[0].evidence["rank_from"].startswith("process sampling: rank 1")


def test_job_exit_code():
    assert (job_exit_code(0), job_exit_code(3), job_exit_code(-9), job_exit_code(-15)) == (
        0, 3, 137, 143)


# --- the command, with small shell jobs

@pytest.mark.slow  # starts a process (tests/lib/spawn_report.py)
def test_not_found_and_no_command(tmp_path):
    r = run_doctor(tmp_path, "--", "ddpdoctor-no-such-command-xyz")
    assert r.returncode == 2
    assert r.stderr.strip().splitlines() == [
        "ddpdoctor run: cannot start 'ddpdoctor-no-such-command-xyz': command not found"]
    assert run_doctor(tmp_path).returncode == 2
    script = tmp_path / "noexec.sh"
    script.write_text("echo hi\n")
    r = run_doctor(tmp_path, "--", str(script))
    assert r.returncode == 2 and "permission denied" in r.stderr


@pytest.mark.slow  # starts a process (tests/lib/spawn_report.py)
@pytest.mark.timeout(60)
def test_tee_split_and_exit_code_passed_on(tmp_path):
    script = ("import sys, os\n"
              "print('hello out', flush=True)\n"
              "sys.stderr.write('[rank1]: ValueError: bad batch\\n')\n"
              "sys.stderr.write('[rank0]: fine\\n')\n"
              "print(os.environ['DDPDOCTOR_FR_DIR'])\n"
              "sys.stdout.write('no newline at end')\n"
              "sys.exit(7)\n")
    rd = tmp_path / "run"
    r = run_doctor(tmp_path, "--no-watch", "--run-dir", str(rd), "--json", "r.json", "--",
                   PY, "-c", script)
    assert r.returncode == 7, r.stderr
    assert "hello out" in r.stdout and "[rank1]: ValueError: bad batch" in r.stderr
    assert (rd / "rank1.log").read_text() == "[rank1]: ValueError: bad batch\n"
    assert (rd / "rank0.log").read_text() == "[rank0]: fine\n"
    kept = (rd / "output.log").read_text()
    # the two streams race each other; each line is whole, the partial one completed
    assert "hello out\n" in kept and "\nno newline at end\n" in kept
    assert str(rd / "fr") in kept  # the job saw run's environment
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["exit_code"] == 7
    assert report["probes"]["job"]["data"]["returncode"] == 7
    assert report["probes"]["watch"]["summary"] == "off"


@pytest.mark.slow  # starts a process (tests/lib/spawn_report.py)
@pytest.mark.timeout(60)
def test_quiet_job_with_no_hang_visible_is_not_stopped(tmp_path):
    """Quiet for 4x --hang-timeout, no Python stack to read: nothing confirms a hang, so
    run says once what it saw, keeps watching, and the job ends by itself (its code)."""
    r = run_doctor(tmp_path, "--hang-timeout", "1", "--json", "r.json", "--",
                   "sh", "-c", "sleep 4; echo finished; exit 3")
    assert r.returncode == 3, r.stderr
    assert "finished" in r.stdout
    assert r.stderr.count("still watching") == 1, r.stderr
    assert r.stderr.count("looking at the stacks") == 1, r.stderr
    report = json.loads((tmp_path / "r.json").read_text())
    assert "hang" not in report["probes"]
    assert not [f for f in report["findings"] if f["id"].startswith("HANG")]
    stall = report["probes"]["stall"]
    assert stall["status"] == "warning" and "no hang confirmed" in stall["summary"]
    assert len(stall["data"]["looks"]) >= 2
    assert all(not lk["confirmed"] for lk in stall["data"]["looks"])
    assert "not a Python process" in stall["data"]["looks"][0]["reason"]


_STOPPED_RANK = """
import os, signal, sys, time
rank = int(os.environ["RANK"])
pidfile = os.path.join(sys.argv[1], "rank1.pid")
if rank == 1:
    open(pidfile, "w").write(str(os.getpid()))
    os.kill(os.getpid(), signal.SIGSTOP)
    print("rank 1 continued", flush=True)
else:
    time.sleep(float(sys.argv[2]))
    if os.path.exists(pidfile):
        os.kill(int(open(pidfile).read()), signal.SIGCONT)
"""


def _stopped_rank_job(tmp_path: Path, wake_after: float) -> list[str]:
    script = tmp_path / "stopped.py"
    script.write_text(_STOPPED_RANK)
    return ["sh", "-c", f"RANK=0 {PY} {script} {tmp_path} {wake_after} & "
                        f"RANK=1 {PY} {script} {tmp_path} 0 & wait"]


@pytest.mark.slow  # starts a process (tests/lib/spawn_report.py)
@pytest.mark.timeout(60)
def test_stopped_rank_is_a_confirmed_hang_and_the_job_is_stopped(tmp_path):
    """A rank stopped (SIGSTOP, state T) while its peer is not: a confirmed hang. The
    job is stopped (a stopped process ignores SIGTERM: SIGKILL after the grace), exit 1,
    and the report lists the processes ended."""
    r = run_doctor(tmp_path, "--hang-timeout", "2", "--kill-grace", "1", "--json", "r.json",
                   "--", *_stopped_rank_job(tmp_path, 300))
    assert r.returncode == 1, r.stderr
    report = json.loads((tmp_path / "r.json").read_text())
    hang = report["probes"]["hang"]["data"]
    assert hang["stopped"] is True
    rank1 = int((tmp_path / "rank1.pid").read_text())
    cleanup = report["probes"]["cleanup"]["data"]
    assert cleanup["ended_by"] == "a confirmed hang"
    assert {k["pid"]: k["how"] for k in cleanup["killed"]}[rank1] == "SIGKILL"
    import psutil

    for k in cleanup["killed"]:
        assert not psutil.pid_exists(k["pid"]) or \
            psutil.Process(k["pid"]).status() == psutil.STATUS_ZOMBIE, k


@pytest.mark.slow  # starts a process (tests/lib/spawn_report.py)
@pytest.mark.timeout(60)
def test_no_kill_keeps_the_job_running(tmp_path):
    """--no-kill: a confirmed hang is reported at once, the job runs on to its own end,
    and the exit code still says a hang was seen."""
    r = run_doctor(tmp_path, "--no-kill", "--hang-timeout", "1", "--json", "r.json", "--",
                   *_stopped_rank_job(tmp_path, 6))
    assert "rank 1 continued" in r.stdout, r.stderr
    assert "no rank made progress" in r.stdout
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["probes"]["hang"]["data"]["stopped"] is False
    assert report["probes"]["job"]["data"]["returncode"] == 0
    assert r.returncode == 1 and report["exit_code"] == 1


@pytest.mark.slow  # starts a process (tests/lib/spawn_report.py)
@pytest.mark.timeout(60)
def test_sigint_is_forwarded_to_the_job(tmp_path):
    import signal

    script = ("import signal, sys, time\n"
              "signal.signal(signal.SIGINT, lambda *a: (print('got SIGINT', flush=True),"
              " sys.exit(5)))\n"
              "print('ready', flush=True)\n"
              "time.sleep(60)\n")
    proc = subprocess.Popen([PY, "-m", "ddpdoctor", "run", "--no-watch", "--", PY, "-c",
                             script], cwd=tmp_path, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, start_new_session=True)
    try:
        line = proc.stdout.readline()
        assert line.strip() == b"ready"
        os.kill(proc.pid, signal.SIGINT)
        out, err = proc.communicate(timeout=30)
        assert b"got SIGINT" in out
        assert proc.returncode == 5
    finally:
        from run_helpers import kill_tree

        kill_tree(proc.pid)


@pytest.mark.slow  # starts a process (tests/lib/spawn_report.py)
def test_run_does_not_import_torch(tmp_path):
    """The supervisor never imports torch (not even through attach, diagnose or watch)."""
    code = ("import sys\n"
            "from click.testing import CliRunner\n"
            "from ddpdoctor.cli import main\n"
            "r = CliRunner().invoke(main, ['run', '--no-watch', '--hang-timeout', '2', '--',"
            " 'sh', '-c', 'echo \"[rank1]: RuntimeError: boom\" >&2; exit 3'])\n"
            "import ddpdoctor.run.hang, ddpdoctor.attach.diagnosis, ddpdoctor.diagnose\n"
            "import ddpdoctor.run.env as e; e.watch_bootstrap_dir()\n"
            "print(r.exit_code, 'torch' in sys.modules)\n")
    r = subprocess.run([PY, "-c", code], cwd=tmp_path, capture_output=True, text=True,
                       timeout=60)
    assert r.stdout.split() == ["3", "False"], r.stdout + r.stderr


def test_watch_findings_from_this_job_only_once_each_and_merged(tmp_path):
    import json

    from ddpdoctor.core.findings import Finding
    from ddpdoctor.run.watch_events import merge, watch_findings

    path = tmp_path / "watch-events.jsonl"

    def line(rank, step, t, fid, ranks, **ev):
        return json.dumps({"kind": "finding", "rank": rank, "step": step, "time": t,
                           "id": fid, "title": f"{fid} on {ranks}", "ranks": ranks,
                           "evidence": ev}) + "\n"
    path.write_text(
        line(0, 5, 100.0, "STRAGGLER", [1])        # an earlier job's: before `since`
        + line(0, 20, 205.0, "GRAD_NONFINITE", [1], source="loss")
        + line(1, 10, 201.0, "GRAD_NONFINITE", [1], source="loss")  # same id+ranks, earlier
        + line(1, 3, 202.0, "OOM", [1], kind="host", rss_mb=300.0)
        + '{"kind": "finding", "id": "NOT_AN_ID", "title": "x", "time": 300}\n'
        + "torn line\n")
    found = watch_findings(path, since=200.0)
    assert [(f.id, f.ranks, f.evidence["step"]) for f in found] == [
        ("OOM", [1], 3), ("GRAD_NONFINITE", [1], 10)]
    assert found[1].evidence["source"] == "loss"  # the check's own evidence is kept
    assert watch_findings(tmp_path / "missing.jsonl") == []
    triaged = [Finding("OOM", "host out of memory", ranks=[1], evidence={"kind": "host"})]
    new = merge(triaged, found)
    assert [f.id for f in new] == ["GRAD_NONFINITE"]
    assert triaged[0].evidence["watch"]["rss_mb"] == 300.0


def test_the_tracker_names_each_ranks_lowest_pid():
    from ddpdoctor.run.progress import ProcSample, ProgressTracker, TreeSample

    t = ProgressTracker(0.0)
    t.update(1.0, 0, TreeSample(1.0, [ProcSample(30, 0, 0.0, 1.0), ProcSample(10, 0, 0.0, 1.0),
                                      ProcSample(11, 1, 0.0, 1.0),
                                      ProcSample(12, 1, 0.0, 1.0, top=False)]))
    assert t.rank_pids == {0: 10, 1: 11}  # a worker (not top) is not the rank's process


def test_triage_names_the_one_rank_that_lost_no_peer_when_all_went_in_one_poll(tmp_path):
    """DeepSpeed's launcher kills the other ranks the moment one dies, so one sampling
    interval can see them all gone, and its own death line quotes the last spawned rank's
    command. Rank 0 printed "Connection closed by peer": it was alive when rank 1 went
    (a real run's kept output: rank 1 SIGKILLed)."""
    from ddpdoctor.run.progress import RankExit

    log = FIXTURE_DS / "sigkill_second_rank_run_output.log"
    together = [RankExit(0, 4241, 5.0), RankExit(1, 4242, 5.0)]
    findings, info = triage_output(log, together, 247)
    assert (findings[0].id, findings[0].ranks) == ("OOM", [1])
    assert "alone reported no lost peer" in findings[0].evidence["rank_from"]
    assert info["first_exit"]["rank"] == 1
    # no rank said it lost a peer, or every rank did: no rank is claimed
    lines = log.read_text().splitlines(keepends=True)
    silent = tmp_path / "silent.log"
    silent.write_text("".join(x for x in lines if not x.startswith("[rank0]")))
    assert triage_output(silent, together, 247)[0][0].ranks == []
    both = tmp_path / "both.log"
    both.write_text("".join(lines) + "".join(x.replace("[rank0]", "[rank1]") for x in lines
                                             if "Connection closed by peer" in x))
    assert triage_output(both, together, 247)[0][0].ranks == []


def test_triage_names_the_rank_that_died_first_by_its_stamped_death(tmp_path):
    """The CI failure of stop 36: DeepSpeed's launcher ended rank 0 within its 1 s poll
    after rank 1's SIGKILL, one sample saw both gone, and rank 0 printed no lost peer, so
    the OOM finding named no rank. The times each process died (run/exit_watch.py) order
    them wherever the sampler could not."""
    from ddpdoctor.run.progress import RankExit

    lines = (FIXTURE_DS / "sigkill_second_rank_run_output.log").read_text().splitlines(True)
    silent = tmp_path / "silent.log"
    silent.write_text("".join(x for x in lines if not x.startswith("[rank0]")))
    stamped = [RankExit(0, 4241, 5.0, died=4.7), RankExit(1, 4242, 5.0, died=4.3)]
    findings, info = triage_output(silent, stamped, 247)
    assert (findings[0].id, findings[0].ranks) == ("OOM", [1])
    assert findings[0].evidence["rank_from"] == \
        "exit times: rank 1 (pid 4242) died 0.40 s before any other rank"
    assert info["first_exit"]["rank"] == 1
    # a tie, or one death not stamped, claims nothing
    for died in ((4.3, 4.3), (None, 4.3)):
        exits = [RankExit(0, 4241, 5.0, died=died[0]), RankExit(1, 4242, 5.0, died=died[1])]
        assert triage_output(silent, exits, 247)[0][0].ranks == []


def test_the_tracker_takes_a_death_stamped_after_the_poll_that_saw_the_rank_gone():
    tr = ProgressTracker(0.0)
    tr.update(0.0, 0, sample(0.0, (11, 0, 0), (12, 1, 0)))
    gone = sample(1.0, (10, None, 0))
    gone.died = {12: 0.4}
    tr.update(1.0, 0, gone)
    assert [(e.rank, e.died) for e in tr.exits] == [(0, None), (1, 0.4)]
    assert first_exit(tr.exits) is None
    later = sample(2.0, (10, None, 0))
    later.died = {12: 0.4, 11: 0.9}
    tr.update(2.0, 0, later)
    assert [(e.rank, e.died) for e in tr.exits] == [(0, 0.9), (1, 0.4)]
    assert first_exit(tr.exits).rank == 1
