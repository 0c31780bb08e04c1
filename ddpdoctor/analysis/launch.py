"""A launch's per-rank outcomes -> findings about ranks that never answered or died."""

from __future__ import annotations

from ddpdoctor.findings import Finding, format_ranks
from ddpdoctor.launcher import (
    STATUS_DIED,
    STATUS_ERROR,
    STATUS_TIMEOUT,
    LaunchResult,
)


def analyze_launch(result: LaunchResult) -> list[Finding]:
    """Findings for ranks that did not finish their probes.

    A rank stuck at the deadline is named as the culprit only if it is behind the other
    stuck ranks: ranks that wait in a collective for it are fallout, not causes.
    """
    findings: list[Finding] = []
    dead = [o for o in result.outcomes if o.status == STATUS_DIED]
    for o in dead:
        findings.append(Finding(
            "RANK_CRASHED", f"rank {o.rank} died during the check: {o.error}",
            ranks=[o.rank],
            evidence={"exitcode": o.exitcode, "pid": o.pid, "last_step": o.last_step,
                      "stderr_tail": o.stderr_tail[-10:]},
        ))
    stuck = [o for o in result.outcomes if o.status == STATUS_TIMEOUT]
    if stuck:
        culprits = result.culprits() if not dead else []
        if culprits:
            waiting = [o.rank for o in stuck if o.rank not in culprits]
            title = (f"rank {format_ranks(culprits)} did not answer within the "
                     f"{result.deadline_s:g} s deadline (stuck, stopped or unreachable)")
            findings.append(Finding(
                "COMM_CONNECTIVITY", title, ranks=culprits,
                evidence={
                    "last_step": {o.rank: o.last_step or "(nothing)" for o in stuck},
                    "waiting_for_it": waiting,
                    "pids": {o.rank: o.pid for o in stuck},
                },
            ))
    return findings


def probe_errors(result: LaunchResult) -> dict[int, str]:
    """Ranks whose probe function raised, with the one-line error."""
    return {o.rank: o.error for o in result.outcomes if o.status == STATUS_ERROR}
