"""diagnose says how far a slow read has come, on a terminal only; the count is of the
file as it lies on disk (a .gz by its compressed bytes), and it changes no finding."""

from __future__ import annotations

import gzip
from pathlib import Path

from click.testing import CliRunner

from ddpdoctor.cli import main
from ddpdoctor.commands import diagnose as command
from ddpdoctor.diagnose import LogInput, ReadProgress, diagnose_logs
from ddpdoctor.diagnose.reader import CHUNK_BYTES

CRASH = (Path(__file__).parents[1] / "fixtures" / "logs" / "exception.log").read_bytes()


def _log(tmp_path: Path, mb: int = 3) -> Path:
    """``mb`` MiB of loss lines, then a real crash: several of the reader's chunks."""
    line = b"2024-06-01 12:00:00,000 INFO trainer: step 10 | loss 2.301 | lr 3.0e-04\n"
    path = tmp_path / "train.log"
    path.write_bytes(line * (mb * 2**20 // len(line)) + CRASH)
    return path


def test_every_read_is_counted_up_to_the_files_size_and_the_findings_stay(tmp_path):
    path = _log(tmp_path)
    seen: list[ReadProgress] = []
    findings, _ = diagnose_logs([LogInput(str(path))], seen.append)
    assert len(seen) >= path.stat().st_size // CHUNK_BYTES
    assert [p.done for p in seen] == sorted(p.done for p in seen)
    assert seen[-1] == ReadProgress(str(path), path.stat().st_size, path.stat().st_size)
    plain, _ = diagnose_logs([LogInput(str(path))])
    assert [(f.id, f.ranks) for f in findings] == [(f.id, f.ranks) for f in plain]
    assert findings[0].id == "RANK_CRASHED" and findings[0].ranks == [1]


def test_a_gzip_log_is_counted_in_its_compressed_bytes(tmp_path):
    path = tmp_path / "train.log.gz"
    path.write_bytes(gzip.compress(_log(tmp_path).read_bytes()))
    seen: list[ReadProgress] = []
    findings, _ = diagnose_logs([LogInput(str(path))], seen.append)
    assert seen[-1].done == seen[-1].size == path.stat().st_size
    assert findings[0].id == "RANK_CRASHED"


def test_the_line_reads_as_a_user_wants_it():
    assert str(ReadProgress("train.log", 312_000_000, 1_024_000_000)) == \
        "reading train.log: 312.0 MB of 1.0 GB (30%)"
    assert str(ReadProgress("<stdin>", 5_500_000, None)) == "reading <stdin>: 5.5 MB"


def test_a_terminal_sees_the_progress_line_a_pipe_does_not(tmp_path, monkeypatch):
    path = _log(tmp_path)
    monkeypatch.setattr(command, "PROGRESS_AFTER_S", 0.0)  # this log reads in well under 1 s
    monkeypatch.setenv("FORCE_COLOR", "1")  # set by many CI systems: still a pipe
    piped = CliRunner().invoke(main, ["diagnose", str(path)])
    assert piped.exit_code == 1 and "reading" not in piped.stderr, piped.stderr
    monkeypatch.setattr(command, "_stderr_is_terminal", lambda: True)
    monkeypatch.setenv("COLUMNS", "300")
    tty = CliRunner().invoke(main, ["diagnose", str(path)])
    assert tty.exit_code == 1, tty.output
    assert f"reading {path}: " in tty.stderr and "(100%)" in tty.stderr, tty.stderr
    monkeypatch.setenv("COLUMNS", "40")  # a narrow terminal: one line, cut, never wrapped
    narrow = CliRunner().invoke(main, ["diagnose", str(path)])
    shown = [ln for ln in narrow.stderr.split("\n") if "reading" in ln]
    assert shown and all("…" in ln for ln in shown), narrow.stderr
    assert "RANK_CRASHED" in tty.stdout and "reading" not in tty.stdout
