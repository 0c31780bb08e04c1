"""The first thing on a page: the verdict, the culprit rank and the first line to look at.

Pure: a Report in, a Verdict out, with the same wording as the terminal's summary line.
"""

from __future__ import annotations

from dataclasses import dataclass

from ddpdoctor.core.findings import Finding, format_ranks
from ddpdoctor.core.report import Report


@dataclass
class Verdict:
    level: str  # "error" | "warning" | "ok": the colour of the banner
    headline: str
    culprit: str  # "rank 1", "ranks 0-3" or "" when the problem is the whole job's
    first_line: str  # a quoted log line, the user's stack line, or the first finding's title
    errors: int
    warnings: int
    next_step: str = ""  # "fix the config: smaller batch, ..." (next_step.decide)


def _first_line(f: Finding) -> str:
    ev = f.evidence
    lines = ev.get("lines")
    if isinstance(lines, list) and lines and isinstance(lines[0], str):
        return lines[0]
    culprits = ev.get("culprits")  # attach: "rank 1 (pid 4711) waits in ... at file:line"
    if isinstance(culprits, list) and culprits and isinstance(culprits[0], str):
        return culprits[0]
    for key in ("where", "site", "location", "at"):
        if isinstance(ev.get(key), str) and ev[key]:
            return ev[key]
    stack = ev.get("stack")
    if isinstance(stack, list) and stack and isinstance(stack[0], str):
        return stack[0]
    return f.title


def verdict(report: Report) -> Verdict:
    v = _verdict(report)
    step = report.next_step()
    if step.finding:
        v.next_step = f"{step.action.says}: {step.reason}"
    return v


def _verdict(report: Report) -> Verdict:
    findings = report.sorted_findings()
    errors = sum(f.severity == "error" for f in findings)
    warnings = sum(f.severity == "warning" for f in findings)
    first = findings[0] if findings else None
    culprit = ""
    if first is not None and first.ranks:
        culprit = ("rank " if len(first.ranks) == 1 else "ranks ") + format_ranks(first.ranks)
    line = _first_line(first) if first is not None else ""
    failed = [c.name for c in report.checks if report.check_status(c) == "error"
              and not any(f.check == c.name for f in report.findings)]
    if report.doctor_error:
        return Verdict("error", f"ddpdoctor could not run: {report.doctor_error}", culprit,
                       line, errors, warnings)
    if failed and not errors:
        return Verdict("error", f"{len(failed)} check(s) failed without a diagnosis: "
                       + ", ".join(failed), culprit, line, errors, warnings)
    if errors or warnings:
        lead = first.title if first is not None else ""
        return Verdict("error" if errors else "warning",
                       f"{errors} error(s), {warnings} warning(s): {lead}", culprit, line,
                       errors, warnings)
    return Verdict("ok", report.clear or "No issues found", "", "", 0, 0)
