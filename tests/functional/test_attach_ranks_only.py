"""attach touches only ranks (issue #27): a shell, a sleeping program, an unrelated Python
process, ddpdoctor itself and its parent are no ranks. attach says so (exit 3, one line,
the reason), reads no stack, reports no hang and asks nobody for a Flight Recorder dump;
a process with the rank variables still works, numbered by its RANK."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import pytest

from ddpdoctor.attach import rankproof as rp
from ddpdoctor.attach.discover import discover

PY = sys.executable
DDPDOCTOR = [PY, "-m", "ddpdoctor"]
ROOT = str(Path(__file__).resolve().parents[2])
ALL_RANK_VARS = {*rp.RANK_VARS, *rp.LOCAL_RANK_VARS, *rp.WORLD_SIZE_VARS,
                 *rp.LOCAL_WORLD_SIZE_VARS}
SLEEP_PY = "import time; time.sleep(100)"
NO_PROOF = "RANK, LOCAL_RANK or WORLD_SIZE"


def env_with(**extra: str) -> dict[str, str]:
    """The test's environment without any rank variable (the test may run inside a job),
    plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if k not in ALL_RANK_VARS}
    env.update(extra)
    return env


def wait_exec(pid: int, argv: list[str]) -> None:
    """Until the child has exec'd ``argv``: between fork and exec it is still a copy of
    pytest (its command line and environment), and a test discovering it then would read
    pytest's (a flake seen on a loaded machine)."""
    want = "\0".join(argv) + "\0"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            if Path(f"/proc/{pid}/cmdline").read_text() == want:
                return
        except OSError:
            pass
        time.sleep(0.01)
    raise AssertionError(f"process {pid} did not exec {argv} in 30 s")


@contextmanager
def started(argv: list[str], **env: str):
    proc = subprocess.Popen(argv, env=env_with(**env), stdout=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        wait_exec(proc.pid, argv)
        yield proc
    finally:
        proc.kill()
        proc.wait()


def attach(tmp_path: Path, *pids: int, argv: list[str] | None = None,
           env: dict[str, str] | None = None) -> tuple[subprocess.CompletedProcess, dict]:
    out = tmp_path / "report.json"
    cmd = argv or DDPDOCTOR + ["attach", "--timeout", "1", "--json", str(out),
                               *map(str, pids)]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=60, cwd=ROOT,
                         env=env or env_with())
    report = json.loads(out.read_text()) if out.exists() else {}
    return res, report


def described(pid: int) -> str:
    """How attach names a process in its reason: its name and command line."""
    import psutil

    proc = psutil.Process(pid)
    return f"{proc.name()}: {' '.join(proc.cmdline())[:80]}"


def assert_no_ranks(res: subprocess.CompletedProcess, report: dict, reason: str) -> None:
    """Exit 3, the reason in one line, no stack read, no hang reported."""
    said = " ".join((res.stdout + res.stderr).split())  # the view may wrap long lines
    assert res.returncode == 3, res.stdout + res.stderr
    assert reason in said, said
    assert "HANG_" not in said
    if report:  # the JSON, where the command writes one
        assert report["doctor_error"] == reason
        assert report["findings"] == [] and "stacks" not in report["probes"]


# --- targets that are no rank ---------------------------------------------------------


@pytest.mark.slow  # starts a process (tests/lib/spawn_report.py)
@pytest.mark.timeout(60)
def test_attach_on_sleep_is_no_rank(tmp_path):
    with started(["sleep", "1000"]) as p:
        res, report = attach(tmp_path, p.pid)
    assert_no_ranks(res, report, (
        f"no training ranks found at PID {p.pid} (sleep: sleep 1000): it is not a Python "
        f"process and has no {NO_PROOF} in its environment; no processes run under it"))


@pytest.mark.slow  # starts a process (tests/lib/spawn_report.py)
@pytest.mark.timeout(60)
def test_attach_on_a_plain_python_program_is_no_rank(tmp_path):
    """The old attach read its one stack, called it rank 0 and exited 0 (or HANG_*)."""
    with started([PY, "-c", SLEEP_PY]) as p:
        who = described(p.pid)
        res, report = attach(tmp_path, p.pid)
    assert_no_ranks(res, report, (
        f"no training ranks found at PID {p.pid} ({who}): it has no {NO_PROOF} in its "
        "environment; no processes run under it"))


@pytest.mark.slow  # starts a process (tests/lib/spawn_report.py)
@pytest.mark.timeout(60)
def test_attach_on_a_non_python_process_with_rank_set_is_no_rank(tmp_path):
    with started(["sleep", "1000"], RANK="0", WORLD_SIZE="2") as p:
        res, report = attach(tmp_path, p.pid)
    assert_no_ranks(res, report, (
        f"no training ranks found at PID {p.pid} (sleep: sleep 1000): it is not a Python "
        "process (RANK is set); no processes run under it"))


@pytest.mark.slow  # starts a process (tests/lib/spawn_report.py)
@pytest.mark.timeout(60)
def test_attach_on_itself_is_no_rank_even_with_rank_set(tmp_path):
    """`exec` keeps the shell's pid: attach is given its own PID; its environment has the
    rank variables, and it still never counts itself."""
    out = tmp_path / "report.json"
    cmd = ["sh", "-c", f'exec "$0" -m ddpdoctor attach --json {out} $$', PY]
    res, report = attach(tmp_path, argv=cmd, env=env_with(RANK="0", WORLD_SIZE="1"))
    said = " ".join((res.stdout + res.stderr).split())
    assert res.returncode == 3, said
    assert ": it is this ddpdoctor process itself; no processes run under it" in said, said
    assert "no training ranks found at PID " in said and "HANG_" not in said


@pytest.mark.slow  # starts a process (tests/lib/spawn_report.py)
@pytest.mark.timeout(60)
def test_attach_on_its_parent_is_no_rank(tmp_path):
    """Its parent is a Python process with RANK and WORLD_SIZE set (as a rank would be):
    an ancestor of ddpdoctor is never a target, nor is ddpdoctor under it."""
    out = tmp_path / "report.json"
    parent = ("import os, subprocess, sys\n"
              f"cmd = [sys.executable, '-m', 'ddpdoctor', 'attach', '--json', {str(out)!r},"
              " str(os.getpid())]\n"
              "child = subprocess.Popen(cmd)\n"
              "print(os.getpid(), child.pid, flush=True)\n"
              "sys.exit(child.wait())\n")
    res, report = attach(tmp_path, argv=[PY, "-c", parent],
                         env=env_with(RANK="0", WORLD_SIZE="1"))
    parent_pid, child_pid = map(int, res.stdout.split()[:2])
    assert res.returncode == 3, res.stdout + res.stderr
    reason = report["doctor_error"]
    assert reason.startswith(f"no training ranks found at PID {parent_pid} (python"), reason
    assert reason.endswith(
        "): it is an ancestor of this ddpdoctor process (ddpdoctor never targets itself); "
        f"the one process under it (PID {child_pid}) is not a rank: it is this ddpdoctor "
        "process itself"), reason
    assert report["findings"] == [] and "stacks" not in report["probes"]


@pytest.mark.slow  # starts a process (tests/lib/spawn_report.py)
@pytest.mark.timeout(60)
def test_a_python_parent_without_rank_children_is_no_rank(tmp_path):
    code = ("import subprocess, sys\n"
            f"subprocess.Popen([sys.executable, '-c', {SLEEP_PY!r}])\n"
            "print('ready', flush=True)\n"
            "import time; time.sleep(100)\n")
    with started([PY, "-c", code]) as p:
        assert p.stdout.readline().strip() == "ready"
        res, report = attach(tmp_path, p.pid)
    reason = report.get("doctor_error", "")
    assert res.returncode == 3, res.stdout + res.stderr
    assert reason.startswith(f"no training ranks found at PID {p.pid} "), reason
    assert f"it has no {NO_PROOF} in its environment; the one process under it (PID " in reason
    assert reason.endswith(f"is not a rank: it has no {NO_PROOF} in its environment"), reason


@pytest.mark.slow  # starts a process (tests/lib/spawn_report.py)
@pytest.mark.timeout(60)
def test_no_flight_recorder_request_for_a_non_rank(tmp_path):
    """A process that looks like it serves dumps (DDPDOCTOR_FR_DIR, a ready file with its
    pid) but has no rank variable is never asked; with RANK set the same process is."""
    fr = tmp_path / "fr"
    fr.mkdir()
    request = fr / "ddpdoctor-fr.request"
    with started([PY, "-c", SLEEP_PY], DDPDOCTOR_FR_DIR=str(fr)) as p:
        (fr / "ddpdoctor-fr-rank0.ready").write_text(json.dumps({"pid": p.pid}))
        res, report = attach(tmp_path, p.pid)
    assert res.returncode == 3, res.stdout + res.stderr
    assert not request.exists()

    with started([PY, "-c", SLEEP_PY], DDPDOCTOR_FR_DIR=str(fr), RANK="0",
                 WORLD_SIZE="1") as p:
        (fr / "ddpdoctor-fr-rank0.ready").write_text(json.dumps({"pid": p.pid}))
        res, report = attach(tmp_path, p.pid)
    assert request.exists(), res.stdout + res.stderr
    assert report["world"]["ranks_found"] == [0]


# --- real ranks still work ------------------------------------------------------------


@pytest.mark.slow  # starts a process (tests/lib/spawn_report.py)
@pytest.mark.timeout(60)
def test_a_rank_next_to_a_non_rank_target(tmp_path):
    """Given a rank and a `sleep`: the rank is diagnosed, the sleep left out with why."""
    with started([PY, "-c", SLEEP_PY], RANK="3", WORLD_SIZE="4", LOCAL_RANK="3") as rank, \
            started(["sleep", "1000"]) as other:
        res, report = attach(tmp_path, other.pid, rank.pid)
    ranks = report["probes"]["ranks"]["data"]
    assert res.returncode == 0, res.stdout + res.stderr
    assert [(r["rank"], r["pid"]) for r in ranks["ranks"]] == [(3, rank.pid)]
    assert ranks["left_out"] == {str(other.pid): (
        f"it is not a Python process and has no {NO_PROOF} in its environment; "
        "no processes run under it")}
    assert list(report["probes"]["stacks"]["data"]["states"]) == ["3"]
    assert report["findings"] == []


@pytest.mark.slow  # starts a process (tests/lib/spawn_report.py)
@pytest.mark.timeout(60)
def test_rank_numbers_come_from_the_environment_not_pid_order(tmp_path):
    with started([PY, "-c", SLEEP_PY], RANK="1", WORLD_SIZE="2") as first, \
            started([PY, "-c", SLEEP_PY], RANK="0", WORLD_SIZE="2") as second, \
            started([PY, "-c", SLEEP_PY], LOCAL_RANK="5") as local, \
            started([PY, "-c", SLEEP_PY], WORLD_SIZE="9") as unnumbered:
        d = discover([first.pid, second.pid, local.pid, unnumbered.pid])
    got = [(r.rank, r.pid, r.rank_source) for r in d.ranks]
    assert got == [(0, second.pid, "env"), (1, first.pid, "env"),
                   (2, unnumbered.pid, "order"), (5, local.pid, "local_rank")]
    assert d.left_out == {}


# --- units: the proof itself (no processes) -------------------------------------------


def test_rank_mark_reads_torch_and_mpi_variables():
    assert rp.rank_mark({"PATH": "/bin", "HOME": "/root"}) is None
    assert rp.rank_mark({"RANK": "x"}) is None  # not a number: no proof
    m = rp.rank_mark({"RANK": "7", "LOCAL_RANK": "3", "WORLD_SIZE": "16",
                      "LOCAL_WORLD_SIZE": "4"})
    assert (m.number, m.local_rank, m.world_size, m.local_world_size, m.source) == \
        (7, 3, 16, 4, "RANK")
    m = rp.rank_mark({"OMPI_COMM_WORLD_RANK": "2", "OMPI_COMM_WORLD_SIZE": "4"})
    assert (m.number, m.world_size, m.source) == (2, 4, "OMPI_COMM_WORLD_RANK")
    m = rp.rank_mark({"LOCAL_RANK": "1"})
    assert (m.number, m.source) == (1, "LOCAL_RANK")
    m = rp.rank_mark({"WORLD_SIZE": "2"})
    assert (m.number, m.source) == (None, "")


@pytest.mark.parametrize("cmdline,name", [
    (["/usr/bin/torchrun", "--nproc-per-node", "2", "train.py"], "torchrun"),
    (["/venv/bin/python3.11", "/venv/bin/torchrun", "train.py"], "torchrun"),
    (["python", "-u", "-m", "torch.distributed.run", "train.py"], "torch.distributed.run"),
    (["python", "-mtorch.distributed.launch", "train.py"], "torch.distributed.launch"),
    (["python", "-m", "deepspeed.launcher.launch", "--world_info=x"],
     "deepspeed.launcher.launch"),
    (["mpirun", "-np", "4", "python", "train.py"], "mpirun"),
    (["srun", "python", "train.py"], "srun"),
    (["python", "train.py", "--launcher", "torchrun"], ""),
    (["python", "-c", "import torchrun"], ""),
    (["python", "-m", "http.server"], ""),
    (["bash", "-c", "torchrun x"], ""),
    ([], ""),
])
def test_launcher_name(cmdline, name):
    assert rp.launcher_name(cmdline) == name


def test_why_not_names_each_reason():
    mark = rp.rank_mark({"RANK": "0"})
    F = rp.ProcFacts
    assert F(5, lineage=rp.SELF).why_not() == "it is this ddpdoctor process itself"
    assert F(5, launcher="torchrun", python=True, mark=mark).why_not() == \
        "it is a launcher (torchrun), not a rank"
    assert F(5, python=True, env="denied").why_not() == (
        "no permission to read /proc/5/environ, so nothing proves it is a rank (run "
        "ddpdoctor as the job's user or as root)")
    assert F(5, python=True, env="zombie").why_not() == "it has exited (a zombie, not reaped)"
    assert F(5, python=True).why_not() == f"it has no {NO_PROOF} in its environment"
    assert F(5, python=False, mark=mark).why_not() == "it is not a Python process (RANK is set)"
    assert F(5, python=True, mark=mark).is_rank
    assert not F(5, lineage=rp.ANCESTOR, python=True, mark=mark).is_rank
    assert not F(5, launcher="torchrun", python=True, mark=mark).is_rank
    below = [F(7, python=True), F(8, python=True, env="denied")]
    assert rp.why_no_ranks_under(below) == (
        f"none of the 2 processes under it is a Python process with {NO_PROOF} in its "
        "environment (1 of them could not be read: no permission to read /proc/8/environ; "
        "run ddpdoctor as the job's user or as root)")
