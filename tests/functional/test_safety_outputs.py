"""One output path for every command: a --json/--html target that cannot take the report is
refused before any work (exit 2) or, when only the write shows it (/dev/full), said in one
line with exit 3; never "written". `run` keeps the job's failure as its exit code."""

from __future__ import annotations

import subprocess
import sys

import pytest
from click.testing import CliRunner

from ddpdoctor.cli import main

LOG = "[rank1]: RuntimeError: DataLoader timed out after 3 seconds\n"


def _log(tmp_path):
    p = tmp_path / "crash.log"
    p.write_text(LOG)
    return str(p)


@pytest.mark.parametrize("args", [
    ["diagnose", "--html", "/dev/full", "{log}"],
    ["diagnose", "--json", "/dev/full", "{log}"],
    ["plan", "--params", "7e9", "--nproc", "8", "--gpu-mem", "80G", "--json", "/dev/full"],
    ["plan", "--params", "7e9", "--nproc", "8", "--gpu-mem", "80G", "--html", "/dev/full"],
    ["playbook", "OOM", "--json", "/dev/full"],
    ["playbook", "OOM", "--html", "/dev/full"],
])
def test_a_write_that_fails_is_one_line_and_exit_3(tmp_path, args):
    args = [a.replace("{log}", _log(tmp_path)) for a in args]
    res = CliRunner().invoke(main, args)
    assert res.exit_code == 3, res.output
    assert "No space left on device" in res.output
    assert "written" not in res.output


@pytest.mark.parametrize("target,why", [
    ("", "the path is empty"),
    ("{dir}", "is a directory"),
    ("{dir}/missing/r.json", "does not exist"),
])
@pytest.mark.parametrize("option", ["--json", "--html"])
def test_a_bad_target_is_refused_before_any_work(tmp_path, target, why, option):
    target = target.replace("{dir}", str(tmp_path))
    res = CliRunner().invoke(main, ["diagnose", option, target, _log(tmp_path)])
    assert res.exit_code == 2, res.output
    assert why in res.output
    assert "RuntimeError" not in res.output  # nothing was diagnosed


def test_every_command_that_makes_a_report_takes_json_and_html():
    import importlib

    from ddpdoctor.cli import COMMANDS

    for name, (module, _) in COMMANDS.items():
        cmd = importlib.import_module(module).command
        opts = {o for p in cmd.params for o in getattr(p, "opts", [])}
        if name == "train":  # its per-step log is --json-log; the run's page is --html
            assert "--html" in opts and "--json-log" in opts
        elif name == "report":  # it renders a --json file (or a run dir) as --html
            assert "--html" in opts
        else:
            assert {"--json", "--html"} <= opts, name


def _run(tmp_path, *args, timeout=60):
    return subprocess.run([sys.executable, "-m", "ddpdoctor", "run", "--run-dir",
                           str(tmp_path / "rd"), *args], capture_output=True, text=True,
                          timeout=timeout)


@pytest.mark.slow  # starts a process (tests/lib/spawn_report.py)
@pytest.mark.timeout(90)
def test_run_keeps_a_failed_jobs_code_when_its_report_cannot_be_written(tmp_path):
    proc = _run(tmp_path, "--json", "/dev/full", "--", "sh", "-c", "exit 4")
    assert proc.returncode == 4, proc.stderr
    assert "cannot write the JSON report to /dev/full" in proc.stderr
    assert '"exit_code": 4' in (tmp_path / "rd" / "report.json").read_text()


@pytest.mark.slow  # starts a process (tests/lib/spawn_report.py)
@pytest.mark.timeout(90)
def test_run_of_a_healthy_job_whose_report_cannot_be_written_is_3(tmp_path):
    proc = _run(tmp_path, "--html", "/dev/full", "--", "sh", "-c", "exit 0")
    assert proc.returncode == 3, proc.stderr
    assert "cannot write the HTML report to /dev/full" in proc.stderr


@pytest.mark.slow  # starts a process (tests/lib/spawn_report.py)
@pytest.mark.timeout(90)
def test_run_refuses_a_bad_target_before_starting_the_job(tmp_path):
    marker = tmp_path / "started"
    proc = _run(tmp_path, "--json", str(tmp_path / "no" / "r.json"), "--", "touch",
                str(marker))
    assert proc.returncode == 2, proc.stderr
    assert "does not exist" in proc.stderr
    assert not marker.exists()


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_train_whose_page_cannot_be_written_is_3(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "ddpdoctor", "train", "--steps", "2",
                           "--json-log", str(tmp_path / "t.jsonl"), "--html", "/dev/full"],
                          capture_output=True, text=True, timeout=170, cwd=tmp_path,
                          env={**__import__("os").environ, "TMPDIR": str(tmp_path)})
    assert proc.returncode == 3, proc.stderr[-2000:]
    assert "cannot write the HTML report to /dev/full" in proc.stderr
    assert "written" not in proc.stderr
