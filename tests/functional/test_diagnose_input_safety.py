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

from ddpdoctor.diagnose import LogInput, diagnose_logs

LOGS = Path(__file__).parents[1] / "fixtures" / "logs"
ROOT = Path(__file__).parents[2]
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


@pytest.mark.slow  # starts a process (tests/lib/spawn_report.py)
def test_fifo_without_writer_is_refused_not_waited_on(tmp_path):
    fifo = tmp_path / "train.log"
    os.mkfifo(fifo)
    t = time.time()
    code, report = cli(str(fifo))
    assert code == 2 and b"FIFO" in report["stderr"]
    assert time.time() - t < 20
    with pytest.raises(OSError, match="FIFO"):
        diagnose_logs([LogInput(str(fifo))])  # the API refuses it too, without blocking


@pytest.mark.slow  # starts a process (tests/lib/spawn_report.py)
def test_truncated_gzip_with_the_crash_in_the_last_mib(tmp_path):
    log = tmp_path / "train.log.gz"
    data = gzip.compress(ORDINARY + ORDINARY + CRASH + ORDINARY[:200_000])
    log.write_bytes(data[:-2000])  # the copy was cut: no trailer, the end is missing
    code, report = cli("--json", "-", str(log))
    assert code == 1
    assert [(f["id"], f["ranks"]) for f in report["findings"]] == [("RANK_CRASHED", [1])]
    check = report["probes"][str(log)]
    assert check["status"] == "warning" and "truncated gzip" in check["summary"]


@pytest.mark.slow  # starts a process (tests/lib/spawn_report.py)
def test_truncated_gzip_showing_no_failure_is_not_healthy(tmp_path):
    log = tmp_path / "train.log.gz"
    data = gzip.compress(ORDINARY + CRASH)
    log.write_bytes(data[:len(data) // 3])  # the crash is in the part that is lost
    code, report = cli("--json", "-", str(log))
    assert code == 3 and report["findings"] == []
    assert "could not read all of" in report["doctor_error"]


@pytest.mark.slow  # starts a process (tests/lib/spawn_report.py)
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


@pytest.mark.slow  # starts a process (tests/lib/spawn_report.py)
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


# --- every read has a deadline (diagnose/deadline.py) -------------------------------------

def _kmsg_or_skip() -> None:
    try:
        os.close(os.open("/proc/kmsg", os.O_RDONLY | os.O_NONBLOCK))
    except OSError as e:
        pytest.skip(f"/proc/kmsg cannot be opened here ({e.strerror}); the pipe tests below "
                    "cover the mechanism")


def _start(*args: str, stdin=subprocess.DEVNULL) -> subprocess.Popen:
    code = ("import sys; from ddpdoctor.cli import main; "
            "sys.argv=['ddpdoctor', 'diagnose', *sys.argv[1:]]; main()")
    return subprocess.Popen([sys.executable, "-c", code, *args], cwd=ROOT, stdin=stdin,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def _result(p: subprocess.Popen) -> tuple[int, dict]:
    try:
        out, err = p.communicate(timeout=90)  # the deadline is 10 s: 90 is "it hung"
    except subprocess.TimeoutExpired:
        p.kill()
        p.communicate()
        raise AssertionError("diagnose hung on a blocking input") from None
    return p.returncode, json.loads(out) if out.startswith(b"{") else {"stderr": err}


@pytest.mark.slow  # starts a process (tests/lib/spawn_report.py)
def test_proc_kmsg_stats_as_a_file_and_is_given_up_at_the_deadline():
    """/proc/kmsg is a regular file to stat() and waits forever for the next kernel message:
    it gets the 10 s deadline, a one-line reason, and the other inputs are diagnosed."""
    _kmsg_or_skip()
    # The three runs wait out their deadline side by side, not one after another.
    with open("/proc/kmsg", "rb") as kmsg_stdin:
        runs = [_start("--json", "-", "/proc/kmsg", str(LOGS / "exception.log")),
                _start("--json", "-", "/proc/kmsg"),
                _start("--json", "-", stdin=kmsg_stdin)]  # `diagnose < /proc/kmsg`
        (with_log, r1), (alone, r2), (stdin, r3) = [_result(p) for p in runs]
    assert with_log == 1, r1
    assert [(f["id"], f["ranks"]) for f in r1["findings"]] == [("RANK_CRASHED", [1])]
    kmsg = r1["probes"]["/proc/kmsg"]
    # "no data within 10 s"; on a host that logs a kernel message meanwhile, the cap on a
    # pseudo-file that keeps giving data ("still giving data after 10 s") is what ends it.
    assert kmsg["status"] == "warning" and "10 s" in kmsg["summary"], kmsg
    assert alone == 3 and "10 s" in r2["doctor_error"], r2
    assert stdin == 3 and "10 s" in r3["doctor_error"], r3
    assert r3["probes"]["<stdin>"]["status"] == "warning"


def _pipe() -> tuple[int, int]:
    r, w = os.pipe()
    os.set_blocking(r, False)
    return r, w


def test_a_read_that_gives_nothing_raises_at_the_deadline():
    from ddpdoctor.diagnose.deadline import DeadlineReader, ReadDeadlineExceeded

    r, w = _pipe()  # a writer that never writes: what /proc/kmsg is to a quiet kernel
    try:
        reader = DeadlineReader(r, deadline_s=0.3)
        with pytest.raises(ReadDeadlineExceeded, match=r"no data within 0\.3 s"):
            reader.read(4096)
        with pytest.raises(ReadDeadlineExceeded):  # it stays failed: no second wait
            reader.read(4096)
        reader.close()
        os.write(w, b"late\n")  # after the deadline nothing more is read
    finally:
        os.close(w)


def test_a_read_that_ignores_nonblocking_is_abandoned_not_waited_on():
    """A hung mount blocks in read() whatever O_NONBLOCK says: the worker thread blocks,
    the caller does not; the thread closes the fd when the read finally returns."""
    from ddpdoctor.diagnose.deadline import DeadlineReader, ReadDeadlineExceeded

    r, w = os.pipe()  # left blocking on purpose
    reader = DeadlineReader(r, deadline_s=0.3)
    with pytest.raises(ReadDeadlineExceeded, match="the read blocks"):
        reader.read(4096)
    assert reader._thread.is_alive()  # still inside os.read
    os.close(w)  # the "mount" comes back: read returns EOF
    reader._thread.join(timeout=30)
    assert not reader._thread.is_alive()
    reader.close()


def test_a_pseudo_file_that_keeps_giving_data_is_capped():
    from ddpdoctor.diagnose.deadline import DeadlineReader, ReadDeadlineExceeded

    r, w = _pipe()
    try:
        reader = DeadlineReader(r, deadline_s=30, total_s=0.3)
        os.write(w, b"kernel: line\n")
        assert reader.read(4096) == b"kernel: line\n"
        with pytest.raises(ReadDeadlineExceeded, match=r"still giving data after 0\.3 s"):
            reader.read(4096)
        reader.close()
    finally:
        os.close(w)


def test_a_blocked_input_is_one_line_and_the_others_are_diagnosed():
    from ddpdoctor.diagnose.deadline import DeadlineReader

    r, w = _pipe()
    try:
        stuck = LogInput("stuck.log", stream=DeadlineReader(r, deadline_s=0.3))
        findings, scan = diagnose_logs([stuck, LogInput(str(LOGS / "exception.log"))])
    finally:
        os.close(w)
    assert [(f.id, f.ranks) for f in findings] == [("RANK_CRASHED", [1])]
    assert scan.stats[0].incomplete and scan.stats[0].bytes_read == 0
    assert scan.stats[0].notes == ["stopped reading: no data within 0.3 s: the read blocks "
                                   "(a /proc or /sys file, or a hung mount)"]
    assert not scan.stats[1].incomplete


def test_regular_files_are_read_to_the_end_and_their_reader_thread_ends(tmp_path):
    from ddpdoctor.diagnose.reader import open_input

    log = tmp_path / "train.log"
    log.write_bytes(ORDINARY + CRASH)
    findings, scan = diagnose_logs([LogInput(str(log))])
    assert [(f.id, f.ranks) for f in findings] == [("RANK_CRASHED", [1])]
    assert not scan.stats[0].incomplete and scan.stats[0].bytes_read == len(ORDINARY + CRASH)
    stream, _ = open_input(str(log))
    assert stream.read(5) == ORDINARY[:5]
    stream.close()
    assert not stream._thread.is_alive()  # closing ends the worker (and its fd)
