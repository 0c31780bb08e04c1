"""Log triage: read a crashed job's logs, find the first root cause and fold the cascade.

Used by ``ddpdoctor diagnose LOGFILE...`` and by ``ddpdoctor run`` on the logs it collects:

    from ddpdoctor.diagnose import LogInput, diagnose_logs
    findings, scan = diagnose_logs([LogInput("rank0.log"), LogInput("-")])

    # or, with streams and ranks you already know (run keeps one copy per rank):
    scan = scan_inputs([LogInput(path, rank=1)])
    findings = triage(scan.events)

Pipeline: reader (bytes -> picked lines, bounded memory) -> scanner + knowledge base (lines
-> events) -> triage rules (events -> findings). Nothing here imports torch.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from typing import BinaryIO

from ddpdoctor.core.findings import Finding
from ddpdoctor.diagnose import floor
from ddpdoctor.diagnose.events import Event, EventKind
from ddpdoctor.diagnose.kb import needles
from ddpdoctor.diagnose.metered import Metered, ReadProgress
from ddpdoctor.diagnose.reader import (
    ReadStats,
    iter_picked,
    open_input,
    rank_from_path,
)
from ddpdoctor.diagnose.scanner import SCANNER_NEEDLES, LineScanner
from ddpdoctor.diagnose.triage import triage

KEYWORDS: tuple[bytes, ...] = tuple(sorted({n.encode() for n in needles() + SCANNER_NEEDLES
                                             + floor.NEEDLES}))

__all__ = ["KEYWORDS", "Event", "EventKind", "LogInput", "ReadProgress", "ReadStats",
           "ScanResult", "diagnose_logs", "scan_inputs", "scan_stream", "triage"]


@dataclass
class LogInput:
    """One log to read: a path (``-`` is stdin) or an open binary stream.

    ``rank`` is the rank whose output the whole input is (a per-rank file); by default it is
    read from the path (``rank1.log``, ``attempt_0/1/stderr.log``). Lines with a
    ``[rankN]:`` prefix always count for rank N.
    """

    path: str
    rank: int | None = None
    stream: BinaryIO | None = None
    name: str = ""
    rank_from_path: bool = True  # False: the file name is not a per-rank name


@dataclass
class ScanResult:
    events: list[Event] = field(default_factory=list)
    stats: list[ReadStats] = field(default_factory=list)


def scan_stream(stream: BinaryIO, name: str, rank: int | None = None) -> tuple[list[Event],
                                                                             ReadStats]:
    """Events of one input stream, and what reading it found (binary, NUL bytes, size)."""
    stats = ReadStats(name=name)
    scanner = LineScanner(name, rank)
    for line in iter_picked(stream, KEYWORDS, stats):
        # told by the input's first lines, before its first line comes
        scanner.tasks_are_nodes = stats.tasks_are_nodes
        scanner.feed(line)
    return _with_tail(scanner.finish(), stats.lines), stats


def _with_tail(events: list[Event], lines: int) -> list[Event]:
    """Each start-up census line, and each record a library logged as a warning, gets how
    many lines of its input follow it: a census at the very end of a log is a start-up that
    never finished (rules_census); a retried connect the log ends on may have failed, one
    the job printed on after did not (triage)."""
    return [replace(e, data={**e.data, "tail": lines - e.lineno})
            if e.kind is EventKind.RANK_ANNOUNCE or e.data.get("level") == "W" else e
            for e in events]


def scan_inputs(inputs: Iterable[LogInput],
                on_read: Callable[[ReadProgress], None] | None = None) -> ScanResult:
    """Read every input in order; raises OSError (with the path) for one that cannot open.
    ``on_read``: called after each read of a file or stdin with how far it is read."""
    result = ScanResult()
    for inp in inputs:
        rank = inp.rank if inp.rank is not None else (
            rank_from_path(inp.path) if inp.path != "-" and inp.rank_from_path else None)
        if inp.stream is not None:
            events, stats = scan_stream(inp.stream, inp.name or inp.path, rank)
        else:
            stream, name = open_input(inp.path)
            if on_read is not None:
                size = os.stat(inp.path).st_size if inp.path != "-" else None
                stream = Metered(stream, inp.name or name, size,  # type: ignore[assignment]
                                 on_read)
            try:
                events, stats = scan_stream(stream, inp.name or name, rank)
            finally:
                if inp.path != "-":
                    stream.close()
            if inp.path != "-" and any(e.kind is EventKind.STACK_HEADER for e in events):
                events.extend(_stack_dump(inp.path, inp.name or name, rank))
        result.events.extend(events)
        result.stats.append(stats)
    return result


def _stack_dump(path: str, name: str, rank: int | None) -> list[Event]:
    """The file read again for the py-spy dumps its thread headers announced: one event
    with where each dumped process was (a stream cannot be read twice: stdin is not)."""
    from ddpdoctor.diagnose import stackdump

    stream, _ = open_input(path)
    try:
        # as the scanner reads a line: a collector's or remote shell's envelope off
        lines = [(ln.lineno, ln.printed) for ln in
                 iter_picked(stream, stackdump.KEYWORDS, ReadStats(name=name))]
    finally:
        stream.close()
    dumped = stackdump.parse(lines)
    procs = stackdump.classify(dumped)
    judged = stackdump.judge(procs)
    if judged is None:  # stacks that show no hang (computing, idle): not a failure
        return []
    return [Event(EventKind.STACK_DUMP, name, procs[0].lineno, rank, judged[1], {
                      "finding": judged[0],
                      "processes": [p.to_dict() for p in procs],
                      "described": [p.describe() for p in procs]})]


def diagnose_logs(inputs: Iterable[LogInput],
                  on_read: Callable[[ReadProgress], None] | None = None,
                  ) -> tuple[list[Finding], ScanResult]:
    """Findings for a set of logs (root cause first) and what was read (``on_read``: see
    ``scan_inputs``)."""
    scan = scan_inputs(inputs, on_read)
    return triage(scan.events), scan
