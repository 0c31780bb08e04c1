"""`ddpdoctor run` keeps its log, refuses bad inputs, leaves nothing behind on a failed
start, writes heartbeats safely and keeps the job's secrets out of what it records.
Small jobs without torch; seconds each."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from run_helpers import run_doctor

PY = sys.executable




# --- the kept log

@pytest.mark.slow  # starts a process (tests/lib/spawn_report.py)
@pytest.mark.timeout(60)
def test_log_is_written_while_the_job_runs(tmp_path):
    """Line by line: not 0 bytes while the job runs (nor after run is killed)."""
    from run_helpers import kill_tree

    rd = tmp_path / "run"
    proc = subprocess.Popen(
        [PY, "-m", "ddpdoctor", "run", "--no-watch", "--run-dir", str(rd), "--", PY, "-c",
         "import sys, time\nprint('[rank0]: first line', flush=True)\n"
         "sys.stderr.write('[rank1]: second line\\n')\ntime.sleep(60)\n"],
        cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        start_new_session=True)
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if all((rd / n).exists() and (rd / n).stat().st_size for n in
                   ("output.log", "rank0.log", "rank1.log")):
                break
            time.sleep(0.1)
        assert proc.poll() is None  # still running
        assert (rd / "rank0.log").read_text() == "[rank0]: first line\n"
        assert (rd / "rank1.log").read_text() == "[rank1]: second line\n"
        assert "first line" in (rd / "output.log").read_text()
    finally:
        kill_tree(proc.pid)


@pytest.mark.slow  # starts a process (tests/lib/spawn_report.py)
@pytest.mark.timeout(60)
@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("unshare"),
                    reason="needs root and unshare for a private tmpfs mount")
def test_full_disk_run_dir_reports_the_log_incomplete(tmp_path):
    """The run dir on a 64 KiB tmpfs, a job printing ~400 KiB: every line still reaches
    the terminal, and the report says the kept log is incomplete, with the errno and
    how much was lost (never 'N lines kept')."""
    mnt = tmp_path / "small"
    mnt.mkdir()
    job = ("import sys\n"
           "for i in range(4000): print(f'[rank0]: line {i:05d} ' + 'x' * 80)\n"
           "sys.stderr.write('[rank0]: RuntimeError: boom at the end\\n')\n"
           "sys.exit(1)\n")
    script_file = tmp_path / "job.py"
    script_file.write_text(job)
    doctor = shlex.join([PY, "-m", "ddpdoctor", "run", "--no-watch", "--run-dir",
                         str(mnt / "run"), "--json", str(tmp_path / "r.json"), "--", PY,
                         str(script_file)])
    script = f"mount -t tmpfs -o size=64k tmpfs {mnt} && exec {doctor}"
    r = subprocess.run(["unshare", "-m", "sh", "-c", script], cwd=tmp_path,
                       capture_output=True, text=True, timeout=60,
                       env=dict(os.environ, TMPDIR=str(tmp_path)))
    assert r.returncode == 1, r.stderr[-2000:]
    assert r.stdout.count("[rank0]: line ") == 4000  # the terminal got every line
    assert "RuntimeError: boom at the end" in r.stderr
    report = json.loads((tmp_path / "r.json").read_text())
    out = report["probes"]["output"]
    assert out["status"] == "error", out
    assert "INCOMPLETE" in out["summary"] and "ENOSPC" in out["summary"], out
    lost = {Path(f["file"]).name: f for f in out["data"]["incomplete"]}
    assert lost["output.log"]["lines_lost"] > 0 and lost["output.log"]["bytes_lost"] > 0
    assert lost["output.log"]["lines_kept"] + lost["output.log"]["lines_lost"] == 4001
    assert "incomplete" in report["probes"]["crash triage"]["summary"]


# --- inputs

@pytest.mark.slow  # starts a process (tests/lib/spawn_report.py)
@pytest.mark.parametrize("opt,value", [
    ("--hang-timeout", "nan"), ("--hang-timeout", "inf"), ("--hang-timeout", "0"),
    ("--hang-timeout", "-5"), ("--kill-grace", "nan"), ("--kill-grace", "-inf"),
    ("--kill-grace", "0"), ("--kill-grace", "-1")])
def test_numeric_options_refuse_nan_inf_and_non_positive(tmp_path, opt, value):
    r = run_doctor(tmp_path, opt, value, "--run-dir", str(tmp_path / "rd"), "--", "true")
    assert r.returncode == 2, r.stderr
    assert opt in r.stderr
    assert not (tmp_path / "rd").exists()


@pytest.mark.slow  # starts a process (tests/lib/spawn_report.py)
@pytest.mark.parametrize("var,value", [
    ("DDPDOCTOR_WATCH_EVERY", "abc"), ("DDPDOCTOR_WATCH_EVERY", "0"),
    ("DDPDOCTOR_HANG_TIMEOUT", "nan"), ("DDPDOCTOR_WATCH_CHECKS", "nonfinite,bogus")])
def test_bad_watch_environment_is_refused_before_launch(tmp_path, var, value):
    """A bad value would switch the ranks' checks off while the report said they ran:
    refused with one line, exit 2, nothing started, no run dir."""
    marker = tmp_path / "started"
    r = run_doctor(tmp_path, "--run-dir", str(tmp_path / "rd"), "--", "touch", str(marker),
                   env={var: value})
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and var in lines[0], lines
    assert not marker.exists() and not (tmp_path / "rd").exists()


@pytest.mark.slow  # starts a process (tests/lib/spawn_report.py)
def test_failed_start_leaves_no_run_directory(tmp_path):
    r = run_doctor(tmp_path, "--", "ddpdoctor-no-such-command-xyz")
    assert r.returncode == 2
    assert not list(tmp_path.glob("ddpdoctor-run-*")), list(tmp_path.iterdir())
    nested = tmp_path / "a" / "b" / "run"
    r = run_doctor(tmp_path, "--run-dir", str(nested), "--", "ddpdoctor-no-such-command-xyz")
    assert r.returncode == 2
    assert not (tmp_path / "a").exists()
    keep = tmp_path / "mine"
    keep.mkdir()
    (keep / "notes.txt").write_text("the user's")
    r = run_doctor(tmp_path, "--run-dir", str(keep), "--", "ddpdoctor-no-such-command-xyz")
    assert r.returncode == 2
    assert sorted(p.name for p in keep.iterdir()) == ["notes.txt"]


def test_heartbeat_never_follows_a_planted_symlink(tmp_path):
    """A symlink at rank0.json (or a stacks file) pointing elsewhere: the heartbeat
    replaces the link, the target is untouched; the temp name is not predictable."""
    from types import SimpleNamespace

    from ddpdoctor.watch.hang_watchdog import Monitor

    hb = tmp_path / "hb"
    hb.mkdir()
    victim = tmp_path / "victim"
    victim.write_text("precious")
    (hb / "rank0.json").symlink_to(victim)
    (hb / f"rank0.json.tmp{os.getpid()}").symlink_to(victim)  # the old fixed temp name
    cfg = SimpleNamespace(heartbeat_dir=str(hb), fr_dir=str(hb), hang_timeout_s=10.0,
                          heartbeat_interval_s=1.0, checks=())
    m = Monitor(0, cfg, SimpleNamespace(path=None))
    m._heartbeat()
    assert victim.read_text() == "precious"
    assert not (hb / "rank0.json").is_symlink()
    assert json.loads((hb / "rank0.json").read_text())["rank"] == 0
    (hb / "ddpdoctor-stacks-rank0.txt").symlink_to(victim)
    with pytest.raises(OSError):
        m.dump_stacks()
    assert victim.read_text() == "precious"


# --- secrets

SECRETS = {"HF_TOKEN": "hf_SeCrEt111env", "MASTER_PASSWORD": "pw_SeCrEt222env"}
ARG_SECRET = "tok_SeCrEt333arg"


def _assert_no_secret(text: str, where: str) -> None:
    for s in [*SECRETS.values(), ARG_SECRET]:
        assert s not in text, f"{s} in {where}"


@pytest.mark.slow  # starts a process (tests/lib/spawn_report.py)
@pytest.mark.timeout(90)
def test_secrets_never_reach_what_run_records(tmp_path):
    """Secret env values and a --token argument of the job: not in the terminal report,
    the JSON, or any file run writes in the run dir, for a confirmed hang (rank command
    lines, the killed list) and for a crash whose output quotes the secret (triage)."""
    from test_run_unit import _stopped_rank_job

    rd = tmp_path / "run"
    cmd = _stopped_rank_job(tmp_path, 300)
    cmd[-1] = cmd[-1].replace(" 0 &", f" 0 --token {ARG_SECRET} &")
    r = run_doctor(tmp_path, "--hang-timeout", "2", "--kill-grace", "1", "--run-dir",
                   str(rd), "--json", "r.json", "--", *cmd, env=SECRETS)
    assert r.returncode == 1, r.stderr
    report = (tmp_path / "r.json").read_text()
    assert "--token ***" in report  # the rank's command line was recorded, masked
    assert "***" in json.loads(report)["world"]["env"]["HF_TOKEN"]
    _assert_no_secret(report, "the JSON report")
    _assert_no_secret(r.stdout + r.stderr, "the terminal")
    for f in rd.rglob("*"):
        if f.is_file() and f.name != "output.log" and not f.name.startswith("rank"):
            _assert_no_secret(f.read_text(errors="replace"), str(f))

    crash = ("import os, sys\n"
             "sys.stderr.write('[rank0]: RuntimeError: login failed for ' + "
             "os.environ['HF_TOKEN'] + ' and ' + sys.argv[2] + '\\n')\n"
             "sys.exit(1)\n")
    rd2 = tmp_path / "run2"
    r = run_doctor(tmp_path, "--no-watch", "--run-dir", str(rd2), "--json", "r2.json", "--",
                   PY, "-c", crash, "--token", ARG_SECRET, env=SECRETS)
    assert r.returncode == 1, r.stderr
    job_line = [ln for ln in r.stderr.splitlines() if ln.startswith("[rank0]: Runtime")]
    assert job_line and SECRETS["HF_TOKEN"] in job_line[0]  # the job's own output: as is
    report = json.loads((tmp_path / "r2.json").read_text())
    assert report["findings"] and report["findings"][0]["ranks"] == [0], report["findings"]
    _assert_no_secret(json.dumps(report), "the crash report")
    terminal = "\n".join(ln for ln in (r.stdout + r.stderr).splitlines()
                         if not ln.startswith("[rank0]: Runtime"))
    _assert_no_secret(terminal, "the terminal report")
    for f in rd2.rglob("*"):
        if f.is_file() and f.name != "output.log" and not f.name.startswith("rank"):
            _assert_no_secret(f.read_text(errors="replace"), str(f))
