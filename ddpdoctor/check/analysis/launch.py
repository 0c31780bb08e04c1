"""A launch's per-rank outcomes -> findings about ranks that never answered, raised or died.

Every rank that did not return its result gives an error finding: a check in which a rank
did not report is never healthy. A deadline overrun is named by what was running when it
hit (the step each culprit rank had last reached), not always "connectivity": a rank stopped
inside the DataLoader probe is a DataLoader problem, a rank stuck before it ever reached
the rendezvous is an unresponsive rank.
"""

from __future__ import annotations

from ddpdoctor.check.launcher import (
    STATUS_DIED,
    STATUS_ERROR,
    STATUS_TIMEOUT,
    LaunchResult,
    RankOutcome,
)
from ddpdoctor.core.findings import Finding, format_ranks

COLLECTIVE = "COMM_CONNECTIVITY"
UNRESPONSIVE = "RANK_UNRESPONSIVE"

# The launcher's own steps (RankContext.progress labels in launcher.rank.rank_entry): waiting
# in them is waiting for the other ranks through the store or the process group.
LAUNCHER_STEPS: dict[str, str] = {"init_process_group": COLLECTIVE, "pre_init done": COLLECTIVE}


def step_probe(label: str) -> str:
    """The step a progress label belongs to: probes mark sub-steps as ``"probe: detail"``
    (``"bandwidth: all_reduce"``)."""
    return label.split(":", 1)[0].strip()


def _stage_name(label: str) -> str:
    return label or "start-up (before the rendezvous)"


def _why(o: RankOutcome) -> str:
    if o.process_state == "stopped":
        return f"process {o.pid} is stopped (SIGSTOP/SIGTSTP)"
    if o.stopped_children:
        return f"its child process(es) {', '.join(map(str, o.stopped_children))} are stopped"
    return "stuck or unreachable"


def _split_others(stuck: list[RankOutcome], culprits: list[int],
                  stall_findings: dict[str, str]) -> tuple[list[int], list[int]]:
    """(waiting, unfinished) among the stuck ranks that are not culprits: ranks inside a
    collective (or the store barrier), or past the culprits, wait for them; the others
    were merely not done yet either."""
    by_rank = {o.rank: o for o in stuck}
    others = [o for o in stuck if o.rank not in culprits]
    behind = min(by_rank[r].progress for r in culprits)
    waiting = [o.rank for o in others
               if stall_findings.get(step_probe(o.last_step)) == COLLECTIVE
               or o.progress > behind]
    return waiting, [o.rank for o in others if o.rank not in waiting]


def _stuck_evidence(result: LaunchResult, stuck: list[RankOutcome], waiting: list[int],
                    unfinished: list[int]) -> dict[str, object]:
    evidence: dict[str, object] = {
        "deadline_s": result.deadline_s,
        "running": {o.rank: _stage_name(o.last_step) for o in stuck},
        "last_step": {o.rank: o.last_step or "(nothing)" for o in stuck},
        "waiting_for_it": waiting,
        "pids": {o.rank: o.pid for o in stuck},
        "process_state": {o.rank: o.process_state or "unknown" for o in stuck},
    }
    if unfinished:
        evidence["also_unfinished"] = unfinished
    stopped = {o.rank: o.stopped_children for o in stuck if o.stopped_children}
    if stopped:
        evidence["stopped_children"] = stopped
    return evidence


def _deadline_findings(result: LaunchResult, stuck: list[RankOutcome], culprits: list[int],
                       stall_findings: dict[str, str]) -> list[Finding]:
    """One finding per kind of step the culprit ranks were in when the deadline hit."""
    by_rank = {o.rank: o for o in stuck}
    waiting, unfinished = _split_others(stuck, culprits, stall_findings)
    groups: dict[str, list[int]] = {}
    for r in culprits:
        fid = stall_findings.get(step_probe(by_rank[r].last_step), UNRESPONSIVE)
        groups.setdefault(fid, []).append(r)
    findings = []
    for fid, ranks in groups.items():
        stages = sorted({_stage_name(by_rank[r].last_step) for r in ranks})
        kind = " (a collective)" if fid == COLLECTIVE else ""
        title = (f"rank {format_ranks(ranks)} did not finish {' / '.join(stages)}{kind} "
                 f"within the {result.deadline_s:g} s deadline: {_why(by_rank[ranks[0]])}")
        # One evidence dict per finding: a later merge may add to it.
        findings.append(Finding(fid, title, ranks=ranks,
                                evidence=_stuck_evidence(result, stuck, waiting, unfinished)))
    return findings


def analyze_launch(result: LaunchResult,
                   stall_findings: dict[str, str] | None = None) -> list[Finding]:
    """Findings for ranks that did not finish.

    ``stall_findings`` maps a progress label (the step a rank was in) to the finding id a
    deadline overrun there means; unknown steps give RANK_UNRESPONSIVE. A rank stuck at the
    deadline is named as the culprit only if it is stopped or behind the other stuck ranks:
    ranks that wait in a collective for it are fallout, not causes.
    """
    stall = {**LAUNCHER_STEPS, **(stall_findings or {})}
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
    # A rank that raised is the cause (its own RANK_CRASHED finding names it); the ranks
    # still stuck at the deadline were waiting for it in a collective: fallout.
    raised = [o for o in result.outcomes if o.status == STATUS_ERROR]
    if stuck and not dead and not raised:
        culprits = result.culprits() or [o.rank for o in stuck]
        findings += _deadline_findings(result, stuck, culprits, stall)
    return findings


def raised_findings(result: LaunchResult, explained: set[int]) -> list[Finding]:
    """Ranks whose function raised and that no other finding names: never a silent pass.

    A failed process group init is a connectivity failure; any other exception is the rank
    failing the check.
    """
    findings = []
    for o in result.outcomes:
        if o.status != STATUS_ERROR or o.rank in explained:
            continue
        if o.last_step == "init_process_group":
            findings.append(Finding(COLLECTIVE, f"rank {o.rank} could not join the process "
                                                f"group: {o.error}", ranks=[o.rank],
                                    evidence={"error": o.error, "last_step": o.last_step}))
        else:
            findings.append(Finding("RANK_CRASHED", f"rank {o.rank} failed during "
                                                    f"{_stage_name(o.last_step)}: {o.error}",
                                    ranks=[o.rank],
                                    evidence={"error": o.error, "last_step": o.last_step,
                                              "traceback": o.traceback.splitlines()[-8:]}))
    return findings


def probe_errors(result: LaunchResult) -> dict[int, str]:
    """Ranks whose probe function raised, with the one-line error."""
    return {o.rank: o.error for o in result.outcomes if o.status == STATUS_ERROR}
