"""`ddpdoctor diagnose LOGFILE...`: map the error lines of a crashed job to findings."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, NoReturn

import click

from ddpdoctor.commands.common import DoctorCommand, finish, html_option, json_option
from ddpdoctor.core.errors import DoctorError
from ddpdoctor.core.findings import Finding
from ddpdoctor.core.report import EXIT_USAGE, Check, Report
from ddpdoctor.diagnose.metered import ReadProgress
from ddpdoctor.diagnose.reader import ReadStats

if TYPE_CHECKING:
    from rich.status import Status


@click.command(name="diagnose", cls=DoctorCommand)
@click.argument("logfiles", nargs=-1, metavar="[LOGFILE]...")
@click.option("-v", "--verbose", is_flag=True, help="Show every evidence line.")
@json_option
@html_option
def command(logfiles: tuple[str, ...], verbose: bool, json_path: str | None,
            html_path: str | None) -> int:
    """Find the first root cause in a crashed job's logs.

    \b
    ddpdoctor diagnose train.log                      one combined torchrun log
    ddpdoctor diagnose logs/*/attempt_0/*/stderr.log  per-rank files (rank from the path)
    torchrun ... 2>&1 | ddpdoctor diagnose            stdin ('-' or no file)
    ddpdoctor diagnose train.log dmesg.txt            add the kernel log: host OOM kills

    Reads PyTorch, gloo, NCCL, DataLoader, CUDA and torchrun error texts; reports the rank
    that failed first with file:line, and counts the fallout on the other ranks (timeouts,
    connection resets) instead of listing it. A failure no known text explains is reported
    as UNRECOGNIZED_FAILURE, never as healthy. Any size of log; .gz is read as a stream
    (a damaged archive: what precedes the damage); binary files are skipped; a FIFO is
    refused (pipe it instead). On a terminal, a slow read shows its progress on stderr.
    """
    from ddpdoctor.diagnose import LogInput, diagnose_logs

    paths = _inputs(logfiles)
    report = Report(command="diagnose", clear=NO_FAILURE_IN_LOG)
    try:
        with _progress_line() as on_read:
            findings, scan = diagnose_logs((LogInput(p) for p in paths), on_read)
    except OSError as e:
        _usage(f"cannot read {e.filename or 'input'}: {e.strerror or e}")
    except Exception as e:  # the doctor never crashes on input: says why and exits 3
        report.doctor_error = f"log triage failed: {type(e).__name__}: {e}"
        return finish(report, json_path, verbose, html_path=html_path)
    for stats in scan.stats:
        report.checks.append(_check_for(stats, findings))
    for f in findings:
        report.add(f)
    report.doctor_error = _why_incomplete(report, scan.stats, findings)
    ranks = sorted({e.rank for e in scan.events if e.rank is not None})
    report.world = {"logs": [s.name for s in scan.stats], "ranks_seen": ranks}
    return finish(report, json_path, verbose, html_path=html_path)


# A log is evidence of what it shows: a job hung in a collective, or slowed down, writes
# no error (a third of the failed jobs in the corpus that diagnose finds nothing in are
# such logs). So a clean log is not called healthy.
NO_FAILURE_IN_LOG = ("No failure found in the log. A hang or a slowdown writes none: if the "
                     "job is still running with no new output, `ddpdoctor attach` reads "
                     "its stacks")


# a log read in under this shows no progress line (it would only flash)
PROGRESS_AFTER_S = 1.0


def _stderr_is_terminal() -> bool:
    """stderr itself, not rich's guess: FORCE_COLOR (set by many CI systems) makes rich
    call a pipe a terminal, and a spinner in `--json - 2>&1` would corrupt it."""
    try:
        return sys.stderr.isatty() and os.environ.get("TERM") != "dumb"
    except (AttributeError, ValueError):  # no stderr, or a closed one
        return False


@contextmanager
def _progress_line() -> Iterator[Callable[[ReadProgress], None] | None]:
    """On a terminal, a transient line on stderr saying how far a slow read has come
    ("reading train.log: 312 of 1,024 MB (30%)"); elsewhere (a pipe, CI, --json
    consumers) nothing at all."""
    if not _stderr_is_terminal():
        yield None
        return
    from rich.console import Console
    from rich.text import Text

    console = Console(stderr=True, force_terminal=True)
    start = time.monotonic()
    status: Status | None = None

    def show(p: ReadProgress) -> None:
        nonlocal status
        line = Text(str(p))
        line.truncate(console.width - 2, overflow="ellipsis")  # the spinner's 2 columns
        if status is None:
            if time.monotonic() - start < PROGRESS_AFTER_S:
                return
            status = console.status(line)
            status.start()
        status.update(line)

    try:
        yield show
    finally:
        if status is not None:
            status.stop()


def _inputs(logfiles: tuple[str, ...]) -> list[str]:
    """The inputs to read ('-' is stdin); a usage error (exit 2) for one that cannot be."""
    paths = list(logfiles) or ["-"]
    if paths.count("-") > 1:
        _usage("stdin ('-') can be given only once")
    for p in paths:
        if p != "-":
            _check_readable(p)
    if paths == ["-"] and sys.stdin.isatty():
        _usage("no LOGFILE given and stdin is a terminal; pass a log file or pipe one in "
               "(see --help)")
    return paths


def _why_incomplete(report: Report, stats: list[ReadStats],
                    findings: list[Finding]) -> str:
    """Why the diagnosis could not be completed (exit 3), or the report's ('' if none)."""
    why = report.doctor_error
    unread = [s for s in stats if s.incomplete]
    if unread and not any(f.severity == "error" for f in findings):
        # What could be read shows no failure, but part of the input is missing: that is
        # not a healthy job, it is a diagnosis that could not be completed.
        why = "; ".join(f"could not read all of {s.name}: {s.notes[-1]}" for s in unread)
    broken = next((f.evidence["rule_errors"] for f in findings if f.evidence.get("rule_errors")),
                  None)
    if broken and not any(f.severity == "error" for f in findings):
        # a rule of ours raised and no other found a failure: not a clean log, an
        # incomplete diagnosis (exit 3)
        why = f"a rule of ddpdoctor failed on this log ({broken[0]}): please report it"
    if not findings and stats and all(s.lines == 0 for s in stats):
        # Nothing was read (empty, binary, only NULs, a closed stdin): no evidence of
        # health either. Saying "No issues found!" here would call an unread log healthy.
        why = ("nothing to diagnose: no input had a line to read ("
               + ", ".join(c.summary for c in report.checks) + ")")
    return why


def _check_for(stats: ReadStats, findings: list[Finding]) -> Check:
    """One line per input: what was read, or why it was skipped."""
    data = {"bytes": stats.bytes_read, "lines": stats.lines, "lines_examined": stats.picked}
    if stats.binary:
        return Check(stats.name, f"skipped: not a text log ({stats.binary})", "skipped",
                     "logs", data)
    if stats.bytes_read == 0 and stats.incomplete:  # e.g. a read that hit its deadline
        why = stats.notes[-1].removeprefix("stopped reading: ")
        return Check(stats.name, f"not read: {why}", "warning", "logs", data)
    if stats.bytes_read == 0:
        return Check(stats.name, "skipped: empty", "skipped", "logs", data)
    if stats.bytes_read == stats.leading_nul:
        return Check(stats.name, "skipped: only NUL bytes", "skipped", "logs", data)
    mine = sum(1 for f in findings for q in f.evidence.get("lines", [])
               if q.startswith(stats.name + ":"))
    notes = []
    if stats.compressed:
        notes.append("gzip")
    if stats.nul_bytes:
        notes.append("NUL bytes ignored")
    if stats.truncated_lines:
        notes.append(f"{stats.truncated_lines} over-long line(s) cut")
    notes += stats.notes
    summary = f"{stats.lines} lines, {stats.picked} examined"
    if mine:
        summary += f", {mine} quoted below"
    if notes:
        summary += f" ({'; '.join(notes)})"
    return Check(stats.name, summary, "warning" if stats.incomplete else "ok", "logs", data)


def _check_readable(path: str) -> None:
    import os
    import stat

    if not os.path.exists(path):
        _usage(f"no such file: {path}")
    if os.path.isdir(path):
        _usage(f"{path} is a directory; pass the log files in it (e.g. {path}/*.log)")
    mode = os.stat(path).st_mode
    if not stat.S_ISREG(mode):
        # A FIFO with no writer would block the read forever; a device never ends.
        kind = "a FIFO" if stat.S_ISFIFO(mode) else "not a regular file"
        _usage(f"{path} is {kind}; diagnose reads log files: pipe it instead "
               f"(cat {path} | ddpdoctor diagnose)")
    if not os.access(path, os.R_OK):
        _usage(f"permission denied: {path}")


def _usage(message: str) -> NoReturn:
    raise DoctorError(message, EXIT_USAGE)

