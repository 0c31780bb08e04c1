"""The report of a job that restarted: one section per attempt, and whether it helped.

Each attempt's part of the kept output (from the line where its ranks appeared to the next
attempt's) is written to ``RUN_DIR/attempt{N}.log`` and goes through the same crash
triage as a whole job's log. What ended an attempt: the rank torchrun's agent logged as
failed (its exit code or signal), else the rank whose process went away first, and the
triage's lead finding. Restarting helped when the last attempt succeeded; it did not when
every failed attempt ended with the same finding on the same rank.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ddpdoctor.core.report import Check, CheckStatus
from ddpdoctor.core.signames import killed_by
from ddpdoctor.run.attempts import Attempt, agent_exits
from ddpdoctor.run.triage import first_exit

if TYPE_CHECKING:
    from ddpdoctor.core.findings import Finding

CHECK = "restarts"


@dataclass(frozen=True)
class AttemptEnd:
    """What ended one attempt (None fields: not known)."""

    number: int
    succeeded: bool
    rank: int | None = None
    exit_code: int | None = None  # negative: the signal that killed the rank
    finding: str = ""  # the lead finding's id
    title: str = ""
    log: str = ""
    # run itself ended the attempt ("a confirmed hang", "SIGTERM received"): its ranks'
    # exits are run's doing, not the attempt's failure
    stopped_by: str = ""

    @property
    def how(self) -> str:
        if self.exit_code is None:
            return "exit status unknown"
        name = killed_by(self.exit_code)
        return f"killed by {name}" if name else f"exit code {self.exit_code}"

    @property
    def signature(self) -> tuple[str, int | None]:
        return self.finding, self.rank

    def summary(self) -> str:
        if self.succeeded:
            return f"attempt {self.number}: succeeded"
        who = f"rank {self.rank}" if self.rank is not None else "no rank named"
        what = f": {self.finding}" if self.finding else ""
        if self.stopped_by:
            on = f" on {who}" if self.rank is not None else ""
            return f"attempt {self.number}: stopped by ddpdoctor run ({self.stopped_by}){what}{on}"
        return f"attempt {self.number}: ended by {who} ({self.how}){what}"


def slice_lines(lines: list[str], attempts: list[Attempt]) -> list[list[str]]:
    """Each attempt's lines of the whole output (pure)."""
    starts = [a.first_line for a in attempts] + [len(lines)]
    starts[0] = 0  # launcher lines before the first rank belong to the first attempt
    return [lines[starts[i]:starts[i + 1]] for i in range(len(attempts))]


def ending(att: Attempt, lines: list[str], findings: list[Finding], last: bool,
           job_rc: int, log: str) -> AttemptEnd:
    """What ended ``att`` (pure): the agent's failure line names the rank and its code."""
    if last and job_rc == 0:
        return AttemptEnd(att.number, True, log=log)
    lead = findings[0] if findings else None
    failed = agent_exits(lines)
    rank, code = None, None
    if failed:
        rank, code = att.rank_of_pid(failed[0].pid), failed[0].exit_code
    if rank is None and lead is not None and len(lead.ranks) == 1:
        rank = lead.ranks[0]
    if rank is None and att.exits:
        rank = (first_exit(att.exits) or att.exits[0]).rank
    if code is None and last:
        code = job_rc
    return AttemptEnd(att.number, False, rank, code, lead.id if lead else "",
                      lead.title if lead else "", log)


def stopped(att: Attempt, why: str, findings: list[Finding], log: str) -> AttemptEnd:
    """The attempt run itself ended (pure): its lead finding is why (a confirmed hang's),
    not the signal run sent its ranks."""
    lead = findings[0] if findings else None
    rank = lead.ranks[0] if lead is not None and len(lead.ranks) == 1 else None
    return AttemptEnd(att.number, False, rank, None, lead.id if lead else "",
                      lead.title if lead else "", log, stopped_by=why)


def verdict(ends: list[AttemptEnd]) -> tuple[str, CheckStatus]:
    """(one line, status) on whether restarting helped (pure)."""
    restarts = len(ends) - 1
    first = ends[0]
    if ends[-1].succeeded:
        return (f"the job restarted {restarts} time(s); restarting helped: attempt "
                f"{ends[-1].number} succeeded after {first.summary()}", "warning")
    failed = [e for e in ends if not e.succeeded]
    if len({e.signature for e in failed}) == 1:
        return (f"the job restarted {restarts} time(s) and every attempt failed the same "
                f"way ({first.summary().split(': ', 1)[1]}): restarting did not help; fix "
                "the cause", "error")
    return (f"the job restarted {restarts} time(s) and no attempt succeeded; the attempts "
            "ended differently: " + "; ".join(e.summary() for e in ends), "error")


def write_logs(run_dir: str, parts: list[list[str]], attempts: list[Attempt]) -> list[str]:
    """``attempt{N}.log`` per attempt; the paths ("" where one could not be written)."""
    from ddpdoctor.core.safefile import write_atomic

    paths = []
    for att, part in zip(attempts, parts, strict=True):
        path = os.path.join(run_dir, f"attempt{att.number}.log")
        try:
            write_atomic(path, "".join(part).encode(), 0o644)
        except OSError:
            path = ""
        paths.append(path)
    return paths


def attempt_checks(ends: list[AttemptEnd], attempts: list[Attempt],
                   findings: list[list[Finding]], group: str) -> list[Check]:
    """One check per attempt, then the restarts verdict."""
    out = []
    for end, att, found in zip(ends, attempts, findings, strict=True):
        data = {"attempt": end.number, "succeeded": end.succeeded, "rank": end.rank,
                "exit_code": end.exit_code, "finding": end.finding, "log": end.log,
                "ranks": {str(r): p for r, p in sorted(att.pids.items())},
                "exits": [{"rank": e.rank, "pid": e.pid} for e in att.exits],
                "findings": [{"id": f.id, "ranks": f.ranks, "title": f.title}
                             for f in found[:5]]}
        summary = end.summary() + (f": {end.title}" if end.title else "")
        out.append(Check(f"attempt {end.number}", summary, group=group, data=data,
                         status="ok" if end.succeeded else "error"))
    line, status = verdict(ends)
    max_restarts = attempts[0].max_restarts
    out.append(Check(CHECK, line, status=status, group=group, data={
        "attempts": len(ends), "restarts": len(ends) - 1, "max_restarts": max_restarts,
        "helped": ends[-1].succeeded,
        "same_failure": len({e.signature for e in ends if not e.succeeded}) == 1
        and not ends[-1].succeeded}))
    return out
