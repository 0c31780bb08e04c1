"""diagnose on hostile or damaged inputs, each planted for real: it never hangs, never
throws away what it could read, and never calls a failed job healthy."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ddpdoctor.logscan import LogInput, diagnose_logs

LOGS = Path(__file__).parent / "fixtures" / "logs"
ROOT = Path(__file__).parent.parent
CRASH = (LOGS / "exception.log").read_bytes()  # ValueError on rank 1 + torchrun summary
ORDINARY = b"".join(b"step %d | loss %.4f | lr 0.0001 | tokens/s 1234.5\n" % (i, 1 / (i + 1))
                    for i in range(40000))  # ~2 MB of progress


def cli(*args: str, timeout: float = 30) -> tuple[int, dict]:
    code = ("import sys; from ddpdoctor.cli import main; "
            "sys.argv=['ddpdoctor', 'diagnose', *sys.argv[1:]]; main()")
    p = subprocess.run([sys.executable, "-c", code, *args], capture_output=True,
                       timeout=timeout, cwd=ROOT, stdin=subprocess.DEVNULL)
    report = json.loads(p.stdout) if p.stdout.startswith(b"{") else {"stderr": p.stderr}
    return p.returncode, report


def test_fifo_without_writer_is_refused_not_waited_on(tmp_path):
    fifo = tmp_path / "train.log"
    os.mkfifo(fifo)
    t = time.time()
    code, report = cli(str(fifo))
    assert code == 2 and b"FIFO" in report["stderr"]
    assert time.time() - t < 20
    with pytest.raises(OSError, match="FIFO"):
        diagnose_logs([LogInput(str(fifo))])  # the API refuses it too, without blocking


def test_truncated_gzip_with_the_crash_in_the_last_mib(tmp_path):
    log = tmp_path / "train.log.gz"
    data = gzip.compress(ORDINARY + ORDINARY + CRASH + ORDINARY[:200_000])
    log.write_bytes(data[:-2000])  # the copy was cut: no trailer, the end is missing
    code, report = cli("--json", "-", str(log))
    assert code == 1
    assert [(f["id"], f["ranks"]) for f in report["findings"]] == [("RANK_CRASHED", [1])]
    check = report["probes"][str(log)]
    assert check["status"] == "warning" and "truncated gzip" in check["summary"]


def test_truncated_gzip_showing_no_failure_is_not_healthy(tmp_path):
    log = tmp_path / "train.log.gz"
    data = gzip.compress(ORDINARY + CRASH)
    log.write_bytes(data[:len(data) // 3])  # the crash is in the part that is lost
    code, report = cli("--json", "-", str(log))
    assert code == 3 and report["findings"] == []
    assert "could not read all of" in report["doctor_error"]


def test_corrupt_gzip_next_to_a_good_log_keeps_the_good_diagnosis(tmp_path):
    bad = tmp_path / "rank0.log.gz"
    data = bytearray(gzip.compress(ORDINARY * 2))
    data[len(data) // 2:len(data) // 2 + 64] = b"\xff" * 64
    bad.write_bytes(bytes(data))
    code, report = cli("--json", "-", str(bad), str(LOGS / "exception.log"))
    assert code == 1
    assert report["findings"][0]["id"] == "RANK_CRASHED" and report["findings"][0]["ranks"] == [1]
    check = report["probes"][str(bad)]
    assert check["status"] == "warning" and "corrupt gzip" in check["summary"]


def test_log_that_starts_with_nul_bytes_is_read(tmp_path):
    log = tmp_path / "train.log"
    log.write_bytes(b"\x00" * (3 << 20) + ORDINARY + CRASH)  # logrotate copytruncate's hole
    code, report = cli("--json", "-", str(log))
    assert code == 1
    assert [(f["id"], f["ranks"]) for f in report["findings"]] == [("RANK_CRASHED", [1])]
    assert "leading NUL bytes skipped" in report["probes"][str(log)]["summary"]


def test_multi_member_gzip_is_read_to_the_end(tmp_path):
    log = tmp_path / "train.log.gz"
    log.write_bytes(gzip.compress(ORDINARY) + gzip.compress(CRASH))  # cat a.gz b.gz
    findings, scan = diagnose_logs([LogInput(str(log))])
    assert findings[0].id == "RANK_CRASHED" and not scan.stats[0].incomplete
