"""`ddpdoctor check` with planted faults: each gives the exact finding and rank."""

import json
import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

import psutil
import pytest
from jobs import check_ranks_of, ddpdoctor_cmd, run_job

from ddpdoctor.check.analysis.launch import LAUNCHER_STEPS
from ddpdoctor.check.run import run_check

pytestmark = [pytest.mark.slow]


def _check(args, tmp_path, env=None, timeout=150, wrap=None):
    out = tmp_path / "report.json"
    cmd = ddpdoctor_cmd() + ["check", "--nproc", "2", "--json", str(out)] + args
    if wrap:
        cmd = wrap(cmd)
    rc, stdout = run_job(cmd, timeout, env={**os.environ, **(env or {})})
    assert out.exists(), stdout
    return rc, json.loads(out.read_text()), stdout


def _ranks_of(pid: int) -> list[psutil.Process]:
    return check_ranks_of(pid)


def _ids(report):
    return [(f["id"], f["ranks"]) for f in report["findings"]]


@pytest.mark.timeout(120)
@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("unshare"),
                    reason="needs root and unshare for a private /dev/shm")
def test_tiny_dev_shm(tmp_path):
    def in_small_shm(cmd):
        inner = "mount -t tmpfs -o size=1m tmpfs /dev/shm && exec " + " ".join(cmd)
        return ["unshare", "-m", "--propagation", "private", "sh", "-c", inner]

    rc, report, out = _check(["--probe", "env", "--probe", "dataloader"], tmp_path,
                             wrap=in_small_shm)
    assert rc == 1, out
    assert _ids(report) == [("ENV_SHM_TOO_SMALL", [0, 1])]
    also = report["findings"][0]["evidence"]["also_seen_by"]
    assert also[0]["check"] == "dataloader"  # the workers really failed, not just a number
    assert report["probes"]["dataloader"]["status"] == "error"


@pytest.mark.timeout(60)
def test_busy_rendezvous_port(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        rc, report, out = _check(["--probe", "rendezvous", "--master-addr", "127.0.0.1",
                                  "--master-port", str(port)], tmp_path)
    assert rc == 1, out
    assert _ids(report) == [("ENV_PORT_IN_USE", [])]
    assert report["findings"][0]["evidence"]["owner"]["pid"] == os.getpid()


@pytest.mark.timeout(120)
def test_gloo_socket_ifname_that_does_not_exist(tmp_path):
    rc, report, out = _check(["--probe", "env", "--probe", "connectivity"], tmp_path,
                             env={"GLOO_SOCKET_IFNAME": "nosuchif0"})
    assert rc == 1, out
    assert _ids(report) == [("ENV_NCCL_CONFIG", [0, 1])]
    # the process group could not even start, and the report says why
    assert "Unable to find address for: nosuchif0" in report["probes"]["connectivity"]["summary"]


@pytest.mark.timeout(200)
def test_one_rank_with_a_different_env_var():
    # a 60 s deadline ran out on a loaded host before rank 1 was through start-up: a
    # finding about the deadline, not about the variable
    report = run_check(2, ["env"], "gloo", 150, rank_env={1: {"NCCL_DEBUG": "INFO"}})
    assert [(f.id, f.ranks) for f in report.findings] == [("ENV_VAR_MISMATCH", [1])]
    assert report.findings[0].evidence["variable"] == "NCCL_DEBUG"


def _check_with_rank1_frozen(out: Path, deadline: int) -> tuple[int, str, int, float]:
    """One `check` whose rank 1 is sent SIGSTOP the moment its process shows: (exit code,
    output, the frozen pid, seconds taken)."""
    proc = subprocess.Popen(ddpdoctor_cmd() + ["check", "--nproc", "2", "--probe", "connectivity",
                                               "--deadline", str(deadline), "--json", str(out)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    start = time.monotonic()
    stopped = None
    try:
        # The launcher starts rank 0, then rank 1: the second rank process is rank 1 (the
        # report's pids confirm it).
        while stopped is None and time.monotonic() - start < 60:
            ranks = _ranks_of(proc.pid)
            if len(ranks) >= 2:
                ranks[1].send_signal(signal.SIGSTOP)
                stopped = ranks[1].pid
            time.sleep(0.005)
        assert stopped, "rank 1 never started"
        stdout, _ = proc.communicate(timeout=deadline + 40)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    return proc.returncode, stdout, stopped, time.monotonic() - start


@pytest.mark.timeout(400)
def test_a_rank_that_never_answers_sigstop(tmp_path):
    deadline = 30
    out = tmp_path / "report.json"
    # Ranks forked from the warm zygote finish the connectivity probe in milliseconds: on a
    # loaded machine this poll can see rank 1 only after it has answered, and the check is
    # then rightly clean (the fault came too late to plant). Up to three tries to plant it.
    for _ in range(3):
        rc, stdout, stopped, elapsed = _check_with_rank1_frozen(out, deadline)
        if rc != 0 or "No issues found" not in stdout:
            break
    assert elapsed < deadline + 20, f"check took {elapsed:.0f} s for a {deadline} s deadline"
    assert rc == 1, stdout
    report = json.loads(out.read_text())
    evidence = report["findings"][0]["evidence"]
    # Frozen before the rendezvous (no step: not a collective), or, where load let the rank
    # run ahead of the poll, in one of the launcher's own collective steps. A deadline
    # overrun is named by the step it hit (check/analysis/launch.py); rank 1 is the
    # culprit either way.
    step = evidence["last_step"]["1"]
    assert _ids(report) == [(LAUNCHER_STEPS.get(step, "RANK_UNRESPONSIVE"), [1])], \
        report["findings"]
    assert evidence["pids"]["1"] == stopped
    assert evidence["process_state"]["1"] == "stopped"
    assert evidence["waiting_for_it"] == [0]
    assert not psutil.pid_exists(stopped) or psutil.Process(stopped).status() == "zombie"
