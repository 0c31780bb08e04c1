"""Flight Recorder in the hang findings: evidence for the stack findings, a finding of
its own when every stack looks the same, and the regular-sequence verdicts (attribution).
"""

from __future__ import annotations

from ddpdoctor.attach.attribution import attribute, parameter_order
from ddpdoctor.attach.evidence import HangEvidence
from ddpdoctor.attach.flight_recorder import PgVerdict
from ddpdoctor.attach.wording import culprit_phrase, ranks_text
from ddpdoctor.core.findings import Finding


def apply_flight_recorder(findings: list[Finding], ev: HangEvidence) -> None:
    """FR sequence numbers: evidence for the stack findings, or the finding when the
    stacks all look the same."""
    verdicts = list(ev.fr_verdicts)
    lines = [line for v in verdicts for line in v.describe()]
    lines += [v.describe() for v in ev.sequences]
    if not lines:
        return
    for f in findings:
        f.evidence["flight_recorder"] = lines
    order = parameter_order(ev)
    if order:
        for f in findings:
            f.evidence["parameter order"] = order
    if findings:
        _fr_reclassify(findings, verdicts)
        return
    finding = _fr_behind(ev, verdicts, lines) or _fr_mismatch(ev, verdicts, lines)
    if finding is not None:
        findings.append(finding)


def _fr_reclassify(findings: list[Finding], verdicts: list[PgVerdict]) -> None:
    if not verdicts or any(v.mismatch for v in verdicts):
        return
    # Stacks showed the odd ranks in another collective; the sequence numbers show no
    # group where ranks disagree, only ranks behind: the odd ranks are in a collective
    # of a group of their own (a rank-conditional collective) and never entered the
    # one the others wait in. That is a missing collective, not a mismatch.
    behind = {r for v in verdicts for r in v.behind}
    for i, f in enumerate(findings):
        if f.id == "HANG_COLLECTIVE_MISMATCH" and f.ranks and set(f.ranks) <= behind:
            findings[i] = Finding(
                "HANG_RANK_MISSING_COLLECTIVE", f.title, ranks=f.ranks,
                evidence={**f.evidence, "why": "Flight Recorder: no process group where "
                          "ranks disagree; these ranks are behind on the others' group "
                          "and wait in a collective the others never entered"})


def _fr_behind(ev: HangEvidence, verdicts: list[PgVerdict], lines: list[str]) -> Finding | None:
    behind = sorted({r for v in verdicts for r in v.behind})
    if not behind:
        return None
    v = next(v for v in verdicts if v.behind)
    culprits = [s for s in (ev.state(r) for r in behind) if s is not None]
    where = f"; {culprit_phrase(culprits)}" if culprits else ""
    front = sorted(r for rs in v.pending.values() for r in rs)
    return Finding(
        "HANG_RANK_MISSING_COLLECTIVE",
        f"{ranks_text(front)} enqueued collective #{v.front_seq} ({v.front_op}) on "
        f"pg {v.pg}; {ranks_text(behind)} did not{where}",
        ranks=behind, evidence={"flight_recorder": lines})


def _fr_mismatch(ev: HangEvidence, verdicts: list[PgVerdict],
                 lines: list[str]) -> Finding | None:
    v = next((v for v in verdicts if v.mismatch), None)
    if v is None:
        return None
    groups = sorted(v.pending.items(), key=lambda kv: (-len(kv[1]), kv[1]))
    tie = len(groups[0][1]) == len(groups[1][1])
    evidence: dict = {"flight_recorder": lines}
    if tie:
        att = attribute(ev, [rs for _, rs in groups])
        odd = list(att.culprits)
        evidence["attribution"] = att.evidence()
    else:
        odd = sorted(r for _, rs in groups[1:] for r in rs)
    title = "; ".join(f"{ranks_text(rs)} run {key} as collective #{v.front_seq}"
                      for key, rs in groups)
    order = parameter_order(ev)
    if order:
        title += " — parameter order differs between ranks"
        evidence["parameter order"] = order
    return Finding("HANG_COLLECTIVE_MISMATCH", title, ranks=sorted(odd), evidence=evidence)
