"""`ddpdoctor run` with a very long command line, and with a stdout nobody reads any more
(issue #27). Small shell jobs, no torch; a second or two each.

- a 100,000-character argument (and thousands of secret flags) start the job at once:
  start-up was quadratic in the command line (18.6 s for 10,000 characters);
- `run ... | head -1`: the reader closes run's stdout while the job still prints; run
  keeps the whole log, stops echoing and exits with the job's own code (it exited 1);
- a stdout closed before run prints its view: the same.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from run_helpers import kill_tree

PY = sys.executable
# The job counts to 200,000 (1.3 MB), says END and exits 7.
COUNT_JOB = ["sh", "-c", "seq 1 200000; echo END; exit 7"]


def _run_argv(rd: Path, *cmd: str, extra: tuple[str, ...] = ()) -> list[str]:
    return [PY, "-m", "ddpdoctor", "run", "--no-watch", "--run-dir", str(rd), *extra,
            "--", *cmd]


def _env(tmp_path: Path) -> dict[str, str]:
    return dict(os.environ, TMPDIR=str(tmp_path), PYTHONUNBUFFERED="1")


def _report(rd: Path) -> dict:
    return json.loads((rd / "report.json").read_text())


def _cleanup(proc: subprocess.Popen) -> None:
    if proc.poll() is None:  # only a run that did not end: its pid is still its own
        kill_tree(proc.pid)


def _assert_whole_log(rd: Path) -> None:
    lines = (rd / "output.log").read_text().splitlines()
    assert len(lines) == 200_001, len(lines)
    assert lines[0] == "1" and lines[-2] == "200000" and lines[-1] == "END"


def _assert_no_broken_pipe_noise(err: bytes) -> None:
    text = err.decode("utf-8", "replace")
    for noise in ("Traceback", "Exception ignored", "BrokenPipe", "Broken pipe"):
        assert noise not in text, text[-3000:]


@pytest.mark.slow  # starts a process (tests/lib/spawn_report.py)
@pytest.mark.timeout(120)
def test_a_100k_argument_starts_the_job_at_once(tmp_path):
    """One argument of 100,000 characters and 4,000 `--token` flags: the job starts (its
    marker file), ends, and run reports it well inside a generous bound. Before the fix
    10,000 characters cost 18.6 s (a regex retried at every character), 100,000 minutes;
    as many secret values as flags were masked one scan each (quadratic too)."""
    rd, marker = tmp_path / "run", tmp_path / "started"
    tokens = [x for i in range(4000) for x in ("--token", f"s{i:07d}")]
    argv = _run_argv(rd, "sh", "-c", f"touch {marker}; exit 0", "x" * 100_000, *tokens)
    t0 = time.monotonic()
    proc = subprocess.Popen(argv, cwd=tmp_path, env=_env(tmp_path), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=90)
    finally:
        _cleanup(proc)
    took = time.monotonic() - t0
    assert proc.returncode == 0, (out[-2000:], err[-2000:])
    assert marker.exists()  # the job ran
    assert took < 30, f"run took {took:.1f} s for a 130 kB command line"
    command = _report(rd)["world"]["command"]
    assert "x" * 100_000 in command
    assert "s0000001" not in command and command.count("--token ***") == 4000


@pytest.mark.slow  # starts a process (tests/lib/spawn_report.py)
@pytest.mark.timeout(120)
def test_head_closing_stdout_keeps_the_jobs_exit_code_and_whole_log(tmp_path):
    """`run -- sh -c 'seq 1 200000; echo END; exit 7' | head -1`: head reads one line and
    exits; run meets EPIPE on the job's echoed output, stops echoing, keeps logging to the
    run dir and exits 7, as its report says (it exited 1)."""
    rd = tmp_path / "run"
    run = subprocess.Popen(_run_argv(rd, *COUNT_JOB), cwd=tmp_path, env=_env(tmp_path),
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           start_new_session=True)
    head = subprocess.Popen(["head", "-1"], stdin=run.stdout, stdout=subprocess.PIPE)
    run.stdout.close()  # head holds the only read end: when it exits, the pipe is closed
    try:
        first, _ = head.communicate(timeout=60)
        _, err = run.communicate(timeout=60)
    finally:
        _cleanup(run)
        head.kill()
    assert first == b"1\n"
    assert run.returncode == 7, err[-3000:]
    assert _report(rd)["exit_code"] == 7
    _assert_whole_log(rd)
    _assert_no_broken_pipe_noise(err)


@pytest.mark.slow  # starts a process (tests/lib/spawn_report.py)
@pytest.mark.timeout(120)
@pytest.mark.parametrize("json_to", ["file", "stdout"])
def test_view_on_a_closed_stdout_keeps_the_jobs_exit_code(tmp_path, json_to):
    """stdout's reader is gone before run starts and the job prints only to stderr: the
    terminal view (or `--json -`) is the first write that fails. run still exits with
    the job's 7, writes `--json PATH`, and its stderr (the job's lines) stays
    untouched."""
    rd, js = tmp_path / "run", tmp_path / "out.json"
    r, w = os.pipe()
    os.close(r)
    target = str(js) if json_to == "file" else "-"
    try:
        proc = subprocess.Popen(
            _run_argv(rd, "sh", "-c", "echo to-stderr >&2; exit 7", extra=("--json", target)),
            cwd=tmp_path, env=_env(tmp_path), stdout=w, stderr=subprocess.PIPE,
            start_new_session=True)
    finally:
        os.close(w)
    try:
        _, err = proc.communicate(timeout=60)
    finally:
        _cleanup(proc)
    assert proc.returncode == 7, err[-3000:]
    assert b"to-stderr\n" in err
    _assert_no_broken_pipe_noise(err)
    if json_to == "file":
        assert json.loads(js.read_text())["exit_code"] == 7
    assert _report(rd)["exit_code"] == 7


@pytest.mark.slow  # starts a process (tests/lib/spawn_report.py)
@pytest.mark.timeout(120)
def test_both_streams_into_a_closed_pipe_keep_the_jobs_exit_code(tmp_path):
    """`run ... 2>&1 | head -1`: stdout and stderr are the same pipe, and the job prints on
    both: each echo stops on its own EPIPE; run exits 7 with the whole log kept."""
    rd = tmp_path / "run"
    run = subprocess.Popen(
        _run_argv(rd, "sh", "-c", "seq 1 100000 >&2; seq 100001 200000; echo END; exit 7"),
        cwd=tmp_path, env=_env(tmp_path), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        start_new_session=True)
    head = subprocess.Popen(["head", "-1"], stdin=run.stdout, stdout=subprocess.PIPE)
    run.stdout.close()
    try:
        first, _ = head.communicate(timeout=60)
        run.wait(timeout=60)
    finally:
        _cleanup(run)
        head.kill()
    assert first == b"1\n"
    assert run.returncode == 7
    assert _report(rd)["exit_code"] == 7
    _assert_whole_log(rd)
