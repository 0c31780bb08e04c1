"""Every command with --help and with obviously bad input: a one-line reason and the
documented exit code, never a traceback (also with stdin closed and stdout full)."""

import os
import subprocess
import sys

import pytest
from jobs import ddpdoctor_cmd

COMMANDS = ["check", "attach", "run", "diagnose", "train", "playbook"]

# (argv, exit code): 2 = usage error, before anything runs.
BAD_INPUT = [
    (["check", "--deadline", "nan"], 2),
    (["check", "--deadline", "inf"], 2),
    (["check", "--deadline", "0"], 2),
    (["check", "--master-port", "70000"], 2),
    (["check", "--master-port", "nan"], 2),
    (["check", "--expect-busbw", "nan"], 2),
    (["check", "--expect-busbw", "-1"], 2),
    (["check", "--max-bytes", "inf"], 2),
    (["check", "--max-bytes", "nan"], 2),
    (["check", "--max-bytes", "1e400"], 2),
    (["check", "--nproc", "0"], 2),
    (["check", "--shm-min-mb", "nan"], 2),
    (["check", "--probe", "nosuch"], 2),
    (["check", "--nnodes", "2", "--node-rank", "2", "--rdzv-endpoint", "h:1"], 2),
    (["attach", "--", "-5"], 2),
    (["attach", "0"], 2),
    (["attach", "nan"], 2),
    (["attach", "99999999999"], 2),
    (["attach", "--timeout", "nan", "1"], 2),
    (["attach", "--timeout", "inf", "1"], 2),
    (["attach", "--timeout", "-1", "1"], 2),
    (["attach"], 2),
    (["train", "--steps", "nan"], 2),
    (["train", "--lr", "nan"], 2),
    (["train", "--lr", "inf"], 2),
    (["train", "--pg-timeout", "inf"], 2),
    (["train", "--clip", "-1"], 2),
    (["train", "--batch-size", "0"], 2),
    (["train", "--nproc", "0"], 2),
    (["train", "--inject", "nan@-1"], 2),
    (["train", "--inject", "nan@1:99", "--steps", "5"], 2),
    (["train", "--inject", "nosuchfault"], 2),
    (["playbook", "A" * 5000], 2),
    (["playbook", "../../../etc/passwd"], 2),
    (["playbook", "OOM\x01"], 2),
    (["diagnose", "/nonexistent/log.txt"], 2),
    (["diagnose", "/"], 2),
    (["nosuchcommand"], 2),
]


def _run(args, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, env=None, pass_fds=()):
    return subprocess.run(ddpdoctor_cmd() + args, stdin=stdin, stdout=stdout,
                          stderr=subprocess.PIPE, text=True, timeout=60,
                          env={**os.environ, **(env or {})}, pass_fds=pass_fds)


def _no_traceback(proc):
    both = (proc.stdout or "") + proc.stderr
    assert "Traceback" not in both, both[-3000:]


@pytest.mark.slow  # starts a process (tests/lib/spawn_report.py)
@pytest.mark.parametrize("command", [[]] + [[c] for c in COMMANDS])
def test_help_of_every_command(command):
    proc = _run(command + ["--help"])
    _no_traceback(proc)
    assert proc.returncode == 0
    assert "Usage:" in proc.stdout


@pytest.mark.slow  # starts a process (tests/lib/spawn_report.py)
@pytest.mark.parametrize("args,code", BAD_INPUT, ids=[" ".join(a)[:40] for a, _ in BAD_INPUT])
def test_bad_input_is_one_line_and_the_documented_code(args, code):
    proc = _run(args)
    _no_traceback(proc)
    assert proc.returncode == code, proc.stderr
    assert proc.stderr.strip(), "no reason given"


@pytest.mark.slow  # starts a process (tests/lib/spawn_report.py)
def test_train_resume_without_a_checkpoint_is_refused_before_launch(tmp_path):
    proc = _run(["train", "--resume", "--checkpoint-dir", str(tmp_path)])
    _no_traceback(proc)
    assert proc.returncode == 2
    assert "--resume: no complete checkpoint for ddp" in proc.stderr
    assert "torch.distributed.run" not in proc.stdout  # nothing launched


@pytest.mark.slow  # starts a process (tests/lib/spawn_report.py)
def test_check_nccl_without_a_gpu_is_a_usage_error():
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    proc = _run(["check", "--backend", "nccl", "--probe", "connectivity"])
    _no_traceback(proc)
    assert proc.returncode == 2
    assert "nccl needs one GPU per rank" in proc.stderr


def _closed_stdin(args):
    """``ddpdoctor ARGS 0<&-``: the child starts with fd 0 closed."""
    code = ("import os, subprocess, sys\n"
            "os.close(0)\n"
            "r = subprocess.run(sys.argv[1:], stdin=None, capture_output=True, text=True)\n"
            "sys.stdout.write(r.stdout); sys.stderr.write(r.stderr); sys.exit(r.returncode)\n")
    return subprocess.run([sys.executable, "-c", code] + ddpdoctor_cmd() + args,
                          stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60)


@pytest.mark.slow  # starts a process (tests/lib/spawn_report.py)
@pytest.mark.parametrize("args,code", [(["--help"], 0), (["playbook", "OOM"], 0),
                                       (["playbook", "NOPE"], 2), (["attach", "--", "-5"], 2),
                                       (["diagnose", "/nonexistent"], 2),
                                       (["train", "--dry-run"], 0)])
def test_closed_stdin(args, code):
    proc = _closed_stdin(args)
    _no_traceback(proc)
    assert proc.returncode == code, proc.stderr


@pytest.mark.slow  # starts a process (tests/lib/spawn_report.py)
@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
@pytest.mark.parametrize("args", [["playbook", "OOM"], ["playbook"], ["playbook", "--json", "-"],
                                  ["--help"], ["check", "--help"]])
def test_stdout_on_a_full_device(args):
    with open("/dev/full", "w") as full:
        proc = _run(args, stdout=full)
    _no_traceback(proc)
    assert proc.returncode == 3
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "No space left on device" in lines[0], proc.stderr


@pytest.mark.slow  # starts a process (tests/lib/spawn_report.py)
def test_check_worker_refuses_a_nan_deadline_and_a_missing_launcher():
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE")}
    for args, needle in ((["--deadline", "nan"], "--deadline"), ([], "torchrun")):
        proc = subprocess.run([sys.executable, "-m", "ddpdoctor.check.worker", *args],
                              capture_output=True, text=True, timeout=120, env=env)
        _no_traceback(proc)
        assert proc.returncode == 2
        assert needle in proc.stderr
