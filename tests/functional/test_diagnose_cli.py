"""`ddpdoctor diagnose` as a user runs it: exit codes, stdin, JSON, odd files, a huge log."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

LOGS = Path(__file__).parents[1] / "fixtures" / "logs"
ROOT = Path(__file__).parents[2]




def run_cli(*args: str, stdin: bytes | None = None, timeout: float = 60):
    code = ("import sys; from ddpdoctor.cli import main; "
            "sys.argv=['ddpdoctor', 'diagnose', *sys.argv[1:]]; main()")
    return subprocess.run([sys.executable, "-c", code, *args], input=stdin,
                          capture_output=True, timeout=timeout, cwd=ROOT,
                          env={**os.environ, "COLUMNS": "200"})


@pytest.mark.slow  # starts a process (tests/lib/spawn_report.py)
def test_error_findings_exit_1_and_json(tmp_path):
    out = tmp_path / "r.json"
    p = run_cli("--json", str(out), str(LOGS / "exception.log"))
    assert p.returncode == 1, p.stderr
    assert b"RANK_CRASHED" in p.stdout and b"faults.py:68" in p.stdout
    report = json.loads(out.read_text())
    assert report["schema"] == "ddpdoctor.report/1" and report["exit_code"] == 1
    f = report["findings"][0]
    assert (f["id"], f["ranks"], f["playbook"]) == ("RANK_CRASHED", [1], "RANK_CRASHED")


@pytest.mark.slow  # starts a process (tests/lib/spawn_report.py)
def test_stdin_dash_and_no_file():
    data = (LOGS / "unused_params_info.log").read_bytes()
    for args in (["-"], [], ["--json", "-"]):
        p = run_cli(*args, stdin=data)
        assert p.returncode == 1, (args, p.stderr)
    report = json.loads(p.stdout)
    assert [f["id"] for f in report["findings"]] == ["DDP_UNUSED_PARAMETERS",
                                                     "DDP_REDUCTION_NOT_FINISHED"]


@pytest.mark.slow  # starts a process (tests/lib/spawn_report.py)
def test_clean_empty_binary_inputs_exit_0(tmp_path):
    clean = tmp_path / "clean.log"
    clean.write_text("epoch 1 loss 0.5\nepoch 2 loss 0.4\n")
    empty = tmp_path / "empty.log"
    empty.write_bytes(b"")
    nul = tmp_path / "nul.log"
    nul.write_bytes(b"\x00" * 10000)
    p = run_cli("--json", "-", str(clean), str(empty), shutil.which("ls"), str(nul))
    assert p.returncode == 0, p.stderr
    report = json.loads(p.stdout)
    assert report["findings"] == []
    status = {name: v["status"] for name, v in report["probes"].items()}
    assert status[str(clean)] == "ok"
    assert status[str(empty)] == "skipped" and status[shutil.which("ls")] == "skipped"
    assert status[str(nul)] == "skipped"
    assert "ELF executable" in report["probes"][shutil.which("ls")]["summary"]


@pytest.mark.slow  # starts a process (tests/lib/spawn_report.py)
def test_nothing_readable_is_never_healthy(tmp_path):
    # An empty log, a binary, only NULs, a closed stdin: no evidence of health either.
    empty = tmp_path / "empty.log"
    empty.write_bytes(b"")
    nul = tmp_path / "nul.log"
    nul.write_bytes(b"\x00" * 100)
    p = run_cli(str(empty), str(nul))
    assert p.returncode == 3, p.stdout
    assert b"nothing to diagnose" in p.stdout
    code = ("import sys; from ddpdoctor.cli import main; "
            "sys.argv=['ddpdoctor', 'diagnose', '-']; main()")
    closed = subprocess.run(f"{sys.executable} -c \"{code}\" <&-", shell=True, cwd=ROOT,
                            capture_output=True, text=True, timeout=60)
    assert closed.returncode == 3, closed.stdout + closed.stderr


@pytest.mark.slow  # starts a process (tests/lib/spawn_report.py)
def test_usage_errors_exit_2_with_one_line(tmp_path):
    for args, text in ((["/nonexistent/train.log"], b"no such file: /nonexistent/train.log"),
                       ([str(tmp_path)], b"is a directory"),
                       (["-", "-"], b"only once")):
        p = run_cli(*args, stdin=b"")
        assert p.returncode == 2, args
        assert text in p.stderr and p.stderr.count(b"\n") == 1 and b"Traceback" not in p.stderr


@pytest.mark.slow  # starts a process (tests/lib/spawn_report.py)
def test_diagnose_does_not_import_torch():
    code = ("import sys\nfrom ddpdoctor.cli import main\n"
            f"sys.argv = ['ddpdoctor', 'diagnose', '--json', '-', {str(LOGS / 'sigkill.log')!r}]\n"
            "try:\n    main()\nexcept SystemExit as e:\n    code = e.code\n"
            "sys.stderr.write(f'exit={code} torch={\"torch\" in sys.modules}\\n')\n")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=60, cwd=ROOT)
    assert b"exit=1 torch=False" in p.stderr, p.stderr


def test_internal_failure_exits_3_with_a_reason(monkeypatch, tmp_path):
    from click.testing import CliRunner

    import ddpdoctor.diagnose as diagnose_mod
    from ddpdoctor.commands.diagnose import command

    def broken(inputs, on_read=None):
        raise RuntimeError("rule table corrupt")

    monkeypatch.setattr(diagnose_mod, "diagnose_logs", broken)
    log = tmp_path / "a.log"
    log.write_text("x\n")
    result = CliRunner().invoke(command, ["--json", "-", str(log)])
    assert result.exit_code == 3
    report = json.loads(result.output)
    assert report["doctor_error"] == "log triage failed: RuntimeError: rule table corrupt"


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_huge_log_streams_in_bounded_memory_and_time(tmp_path):
    big = tmp_path / "huge.log"
    line = b"step 1234 | loss 2.345678 | lr 0.0001 | tokens/s 123456.7 | grad_norm 0.98\n"
    block = line * ((1 << 20) // len(line) + 1)
    with open(big, "wb") as f:
        for i in range(200):
            f.write(block)
            if i == 100:  # a 30 MB line with no newline, NUL bytes and the real error
                f.write(b"x" * (30 << 20) + b"\x00\n")
                f.write(b"[rank3]: ValueError: the real error\n")
        f.write(RESET_LINES)
    size = big.stat().st_size
    assert size > 200 << 20
    # VmHWM, not ru_maxrss: the latter keeps the peak of the forked pytest process.
    code = ("import json, sys, time\n"
            "from ddpdoctor.diagnose import LogInput, diagnose_logs\n"
            "t = time.time()\n"
            "findings, scan = diagnose_logs([LogInput(sys.argv[1])])\n"
            "hwm = [ln for ln in open('/proc/self/status') if ln.startswith('VmHWM')][0]\n"
            "print(json.dumps([time.time() - t, int(hwm.split()[1]),"
            " [[f.id, f.ranks] for f in findings], scan.stats[0].lines,"
            " findings[0].evidence.get('fallout')]))\n")
    t = time.time()
    p = subprocess.run([sys.executable, "-c", code, str(big)], capture_output=True,
                       timeout=110, cwd=ROOT)
    assert p.returncode == 0, p.stderr
    elapsed, maxrss_kb, ids, lines, fallout = json.loads(p.stdout)
    assert ids == [["RANK_CRASHED", [3]]]
    assert fallout[0].startswith("3 'Connection reset by peer' on rank 0-2")
    assert lines == 200 * ((1 << 20) // len(line) + 1) + 2 + 3
    print(f"{size >> 20} MB in {elapsed:.1f} s, peak RSS {maxrss_kb >> 10} MB")
    assert maxrss_kb < 80_000, f"peak RSS {maxrss_kb} kB"  # python + imports: ~17 MB
    assert elapsed < 30, f"{elapsed:.1f} s for {size >> 20} MB"
    assert time.time() - t < 60


RESET_LINES = b"".join(
    b"[rank%d]: RuntimeError: [pair.cc:534] Read error [10.0.0.1]:2345: Connection reset by "
    b"peer\n" % r for r in (0, 1, 2))


def test_a_log_with_no_failure_is_not_called_healthy(tmp_path):
    """A job hung before any timeout writes no error: the last lines are NCCL's init
    (tests/fixtures/reallogs/G2_broadcast_rank0_only_hang_no_timeout.log, pytorch#88000).
    diagnose says what it did not find and what to do, not "No issues found!"."""
    import json

    from click.testing import CliRunner

    from ddpdoctor.cli import main

    log = "tests/fixtures/reallogs/G2_broadcast_rank0_only_hang_no_timeout.log"
    result = CliRunner().invoke(main, ["diagnose", log])
    assert result.exit_code == 0, result.output
    assert "No issues found" not in result.output
    assert "No failure found in the log. A hang or a slowdown writes none" in result.output
    assert "ddpdoctor attach" in result.output
    out = tmp_path / "r.json"
    CliRunner().invoke(main, ["diagnose", log, "--json", str(out)])
    data = json.loads(out.read_text())
    assert data["findings"] == [] and data["clear"].startswith("No failure found in the log")
