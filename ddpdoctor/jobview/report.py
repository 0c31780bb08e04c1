"""Pure: what the job view adds to one node's run report.

- a ``job view`` check: the store, the nodes seen, the leader's threshold, nodes lost (or
  the view itself lost);
- a confirmed job-wide hang: the merged findings, each culprit named by rank, host, pid
  and line, first in the report;
- a crash whose root cause is on another node: that rank's failure leads, and this node's
  own (a reset connection, a SIGTERM) is marked as its fallout.
"""

from __future__ import annotations

from typing import Protocol

from ddpdoctor.core.findings import Finding
from ddpdoctor.core.report import Check, CheckStatus, Report
from ddpdoctor.jobview.leader import root_cause
from ddpdoctor.jobview.snapshot import Culprit, Failure, JobSummary, Verdict

CHECK = "job view"
GROUP = "run"


class NodeEndView(Protocol):
    """What the job view knew when this node's job ended: run/jobnode.NodeEnd (run hosts
    the job view; this module reads it without importing run)."""

    @property
    def endpoint(self) -> str: ...
    @property
    def leader(self) -> bool: ...
    @property
    def index(self) -> int: ...
    @property
    def lost(self) -> str: ...
    @property
    def nodes(self) -> dict[int, str]: ...
    @property
    def failures(self) -> list[Failure]: ...
    @property
    def own(self) -> Failure | None: ...
    @property
    def summary(self) -> JobSummary | None: ...
    @property
    def verdicts(self) -> list[Verdict]: ...
    @property
    def unaccounted(self) -> list[str]: ...


def culprit_text(c: Culprit) -> str:
    step = f", after step {c.step}" if c.step >= 0 else ""
    return f"rank {c.rank} on {c.host} (pid {c.pid}{', ' + c.where if c.where else ''}{step})"


def steps_summary(steps: tuple[tuple[int, int], ...]) -> dict[str, list[int]]:
    """Ranks by their last finished step ({"41": [0, 1, 2], "40": [3]}), highest first:
    a rank a step behind the others is the one that stopped first."""
    by: dict[int, list[int]] = {}
    for rank, step in steps:
        by.setdefault(step, []).append(rank)
    return {str(k): sorted(by[k]) for k in sorted(by, reverse=True)}


def hang_findings(v: Verdict) -> list[Finding]:
    out = []
    named = ", ".join(culprit_text(c) for c in v.culprits)
    for i, d in enumerate(v.findings):
        try:
            f = Finding.from_dict(d)
        except (KeyError, TypeError, ValueError):
            continue
        f.evidence["culprits"] = [{"rank": c.rank, "host": c.host, "pid": c.pid,
                                   "where": c.where, "state": c.what, "step": c.step}
                                  for c in v.culprits]
        f.evidence["job_view"] = {"nodes": list(v.nodes), "groups": list(v.groups),
                                  "no_progress_s": v.no_progress_s,
                                  "threshold": v.threshold_how,
                                  "ranks_by_last_step": steps_summary(v.steps)}
        if i == 0 and named:
            f.title = f"{f.title}: {named}"
        out.append(f)
    return out


def _failure_line(f: Failure) -> str:
    who = f"rank {f.rank}" if f.rank is not None else "a process"
    return f"{who} on {f.host}: {f.finding_id}: {f.title}"


def crash_finding(end: NodeEndView) -> Finding | None:
    """The root cause when it is on another node than this one."""
    cause = root_cause(end.failures + ([end.own] if end.own else []))
    if cause is None or cause.fallout or cause.node == end.index:
        return None
    title = f"rank {cause.rank} on {cause.host} failed first: {cause.title}"
    if end.own is not None:
        title += f"; this node's failure ({_failure_line(end.own)}) is its fallout"
    return Finding(cause.finding_id, title,
                   ranks=[cause.rank] if cause.rank is not None else [],
                   evidence={"host": cause.host, "node": cause.node, "pid": cause.pid,
                             "source": "job view (the other node's output triage)"})


def _summary_parts(end: NodeEndView) -> tuple[list[str], list[str]]:
    """The leader's threshold and the nodes it lost or found silent; and those lines."""
    summary = end.summary
    if summary is None:
        return [], []
    parts = [f"hang threshold: {summary.threshold_how}"]
    if summary.lost:
        parts.append("lost: " + "; ".join(summary.lost))
        return parts, summary.lost
    if summary.silent and end.own is not None:
        parts.append("silent before this node's job ended (supervisor dead or store "
                     "lost there; the cause is likely on that node): "
                     + "; ".join(summary.silent))
        return parts, summary.silent
    return parts, []


def summary_line(end: NodeEndView) -> tuple[str, CheckStatus]:
    nodes = ", ".join(f"{h} (node {n})" for n, h in sorted(end.nodes.items()))
    role = "leader" if end.leader else "member"
    parts = [f"job's store {end.endpoint}; this node: {role}, node {end.index}"]
    if nodes:
        parts.append(f"nodes seen: {nodes}")
    more, named = _summary_parts(end)
    parts += more
    told = [n for n in end.unaccounted if not any(line.startswith(n) for line in named)]
    if told:
        parts.append("no failure came from " + ", ".join(told)
                     + " before the job view closed (its supervisor died, or its report did "
                     "not cross in time): the cause is likely there")
    others = [f for f in end.failures if f.node != end.index]
    if others:
        parts.append("failures elsewhere: " + "; ".join(_failure_line(f) for f in others[:4]))
    if end.lost:
        parts.append(f"the job view was lost: {end.lost}; this report has this node's "
                     "view only")
    warn = bool(end.lost or end.unaccounted or named)
    return "; ".join(parts), "warning" if warn else "ok"


def add_to(report: Report, end: NodeEndView) -> None:
    summary, status = summary_line(end)
    report.checks.append(Check(CHECK, summary, status=status, group=GROUP, data={
        "endpoint": end.endpoint, "leader": end.leader, "node": end.index,
        "nodes": {str(n): h for n, h in end.nodes.items()}, "lost": end.lost,
        "unaccounted": list(end.unaccounted),
        "failures": [f.__dict__ for f in end.failures],
        "looks": [{"id": v.id, "confirmed": v.confirmed, "reason": v.reason}
                  for v in end.verdicts]}))
    lead: list[Finding] = []
    confirmed = [v for v in end.verdicts if v.confirmed]
    if confirmed:
        lead = hang_findings(confirmed[-1])
    else:
        f = crash_finding(end)
        if f is not None:
            lead = [f]
    for f in reversed(lead):
        f.evidence.setdefault("check", CHECK)
        report.findings.insert(0, f)
