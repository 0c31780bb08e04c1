"""discover + the attach command's clear errors, on real (torch-free) process trees."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest
from paths import REPO

from ddpdoctor.attach import stacks
from ddpdoctor.attach.discover import AttachError, discover
from ddpdoctor.core.report import EXIT_DOCTOR_FAILED, EXIT_USAGE

PY = sys.executable
DDPDOCTOR = [PY, "-m", "ddpdoctor"]
# A fake launcher: two "ranks" with torchrun's environment; rank 1 forks a worker.
LAUNCHER = r"""
import os, subprocess, sys, time
kids = []
for r in (0, 1):
    env = dict(os.environ, RANK=str(r), LOCAL_RANK=str(r), WORLD_SIZE="3",
               LOCAL_WORLD_SIZE="3")
    code = ("import os, time\n"
            "if os.environ['RANK'] == '1' and os.fork() == 0:\n"
            "    time.sleep(600)\n"
            "def wait_here():\n"
            "    time.sleep(600)\n"
            "wait_here()\n")
    kids.append(subprocess.Popen([sys.executable, "-c", code], env=env))
print("ready", flush=True)
time.sleep(600)
"""


@pytest.fixture(scope="module")
def fake_job():
    proc = subprocess.Popen([PY, "-c", LAUNCHER], stdout=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        assert proc.stdout.readline().strip() == "ready"
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:  # wait until the worker has forked
            d = discover([proc.pid])
            if len(d.ranks) == 2 and d.ranks[1].workers:
                break
            time.sleep(0.1)
        yield proc
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


@pytest.mark.slow  # starts a process (tests/lib/spawn_report.py)
@pytest.mark.timeout(30)
def test_discover_ranks_workers_and_missing_rank(fake_job):
    d = discover([fake_job.pid])
    assert [r.rank for r in d.ranks] == [0, 1]
    assert d.ranks[0].workers == [] and len(d.ranks[1].workers) == 1
    assert d.world_size == 3 and d.missing == [2]
    # rank PIDs given directly find the same ranks
    d2 = discover([r.pid for r in d.ranks])
    assert [(r.rank, r.pid) for r in d2.ranks] == [(r.rank, r.pid) for r in d.ranks]


@pytest.mark.slow  # starts a process (tests/lib/spawn_report.py)
@pytest.mark.timeout(30)
def test_attach_names_the_missing_rank_and_reads_stacks(fake_job, tmp_path):
    out = tmp_path / "r.json"
    res = subprocess.run(DDPDOCTOR + ["attach", "--json", str(out), str(fake_job.pid)],
                         capture_output=True, text=True, timeout=30)
    report = json.loads(out.read_text())
    states = report["probes"]["stacks"]["data"]["states"]
    assert states["0"]["kind"] == states["1"]["kind"] == "idle"
    assert states["2"]["kind"] == "missing"
    assert [(f["id"], f["ranks"]) for f in report["findings"]] == [("RANK_CRASHED", [2])]
    assert res.returncode == 1, res.stdout + res.stderr


@pytest.mark.slow  # starts a process (tests/lib/spawn_report.py)
def test_no_such_pid():
    res = subprocess.run(DDPDOCTOR + ["attach", "999999999"], capture_output=True, text=True,
                         timeout=30)
    assert res.returncode == EXIT_USAGE
    assert res.stderr.strip() == "ddpdoctor attach: no such process: PID 999999999"


@pytest.mark.slow  # starts a process (tests/lib/spawn_report.py)
@pytest.mark.timeout(30)
def test_not_a_python_process():
    sleeper = subprocess.Popen(["sleep", "60"], start_new_session=True)
    try:
        res = subprocess.run(DDPDOCTOR + ["attach", str(sleeper.pid)], capture_output=True,
                             text=True, timeout=30)
    finally:
        sleeper.kill()
        sleeper.wait()
    assert res.returncode == EXIT_DOCTOR_FAILED, res.stdout + res.stderr
    assert (f"no training ranks found at PID {sleeper.pid} (sleep: sleep 60): it is not a "
            "Python process and has no RANK, LOCAL_RANK or WORLD_SIZE in its environment; "
            "no processes run under it") in " ".join((res.stdout + res.stderr).split())


@pytest.mark.slow  # starts a process (tests/lib/spawn_report.py)
@pytest.mark.timeout(30)
def test_no_permission(tmp_path):
    if os.geteuid() != 0 or not os.path.exists("/usr/bin/setpriv"):
        pytest.skip("needs root and setpriv to run the doctor as another user")
    target = subprocess.Popen([PY, "-c", "import time; time.sleep(60)"],
                              env=dict(os.environ, RANK="0"), start_new_session=True)
    try:
        time.sleep(0.5)
        res = subprocess.run(["setpriv", "--reuid", "65534", "--regid", "65534",
                              "--clear-groups"] + DDPDOCTOR + ["attach", str(target.pid)],
                             capture_output=True, text=True, timeout=30,
                             cwd=REPO)
    finally:
        target.kill()
        target.wait()
    said = " ".join((res.stdout + res.stderr).split())
    assert res.returncode == EXIT_DOCTOR_FAILED, said
    assert f"no training ranks found at PID {target.pid} " in said, said
    assert (f"no permission to read /proc/{target.pid}/environ, so nothing proves it is a "
            "rank (run ddpdoctor as the job's user or as root)") in said, said


def test_py_spy_missing(monkeypatch, tmp_path):
    monkeypatch.setattr(stacks.sys, "executable", str(tmp_path / "python"))
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(stacks.StackError, match="py-spy is not installed"):
        stacks.find_py_spy()


@pytest.mark.slow  # starts a process (tests/lib/spawn_report.py)
def test_py_spy_deadline(tmp_path):
    slow = tmp_path / "py-spy"
    slow.write_text("#!/bin/sh\nsleep 30\n")
    slow.chmod(0o755)
    t0 = time.monotonic()
    (r,) = stacks.collect_stacks([(0, os.getpid())], timeout=0.5, py_spy=str(slow))
    assert time.monotonic() - t0 < 3
    assert r.error == f"py-spy did not answer for PID {os.getpid()} within 0.5 s"


def test_discover_error_carries_exit_code():
    with pytest.raises(AttachError) as e:
        discover([999999999])
    assert e.value.exit_code == EXIT_USAGE


@pytest.mark.slow  # starts a process (tests/lib/spawn_report.py)
def test_attach_does_not_import_torch():
    code = ("import sys\nfrom click.testing import CliRunner\nfrom ddpdoctor.cli import main\n"
            "r = CliRunner().invoke(main, ['attach', str(__import__('os').getpid())])\n"
            "print(r.exit_code, 'torch' in sys.modules)\n")
    res = subprocess.run([PY, "-c", code], capture_output=True, text=True, timeout=60)
    exit_code, torch_loaded = res.stdout.split()[-2:]
    assert torch_loaded == "False", res.stdout + res.stderr
    assert exit_code == "3"  # its own process is never a target: no ranks found there
