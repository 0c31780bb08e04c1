"""Pure: the evidence of a hang (HangEvidence) -> hang findings, culprit first.

Stacks alone are weak: every healthy rank is parked in the same wait. So the analysis looks
for the odd ones out (ranks not in the collective the others wait in, ranks in another
collective, a rank inside its DataLoader, a dead or stopped rank) and names them as the
culprits: one small rule per finding (``_STACK_RULES``). Where the ranks split evenly,
the attribution rules (``attribution``: Flight Recorder, stacks, source, steps) decide
which side is the culprit, or say "undecided" and what to look at.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass

from ddpdoctor.attach.attribution import attribute, parameter_order
from ddpdoctor.attach.classify import (
    COLLECTIVE,
    DATALOADER,
    GONE,
    P2P,
    WAITING,
    RankState,
    signature,
)
from ddpdoctor.attach.evidence import HangEvidence, of_states
from ddpdoctor.attach.flight_recorder import PgVerdict
from ddpdoctor.attach.stacks import STOPPED
from ddpdoctor.findings import Finding

_MAX_STACK_LINES = 12
_MAX_NAMED = 3  # culprit places spelled out in a title; the rest are in the evidence


@dataclass
class StackGroup:
    """Ranks whose stacks are identical, shown once (the merged view)."""

    ranks: list[int]
    state: RankState  # the first rank's, standing for all of them


def ranks_text(ranks: list[int]) -> str:
    """``rank 1``, ``ranks [0,2,3]``, ``ranks [0-511]``; long irregular sets are cut."""
    from ddpdoctor.findings import format_ranks

    ranks = sorted(ranks)
    if len(ranks) == 1:
        return f"rank {ranks[0]}"
    inner = ",".join(map(str, ranks)) if len(ranks) <= 8 else format_ranks(ranks)
    if len(inner) > 48:
        inner = inner[:40].rsplit(",", 1)[0] + f",... ({len(ranks)} ranks)"
    return f"ranks [{inner}]"


def group_stacks(states: list[RankState]) -> list[StackGroup]:
    """Identical stacks once each, the biggest group first."""
    groups: dict[tuple, StackGroup] = {}
    for s in states:
        key = signature(s)
        g = groups.get(key)
        if g is None:
            groups[key] = StackGroup([s.rank], s)
        else:
            g.ranks.append(s.rank)
    return sorted(groups.values(), key=lambda g: (-len(g.ranks), g.ranks[0]))


def _by_place(states: list[RankState]) -> dict[str, list[RankState]]:
    """Group culprits by what they do and where, so 1,000 stuck ranks read as one line."""
    places: dict[str, list[RankState]] = defaultdict(list)
    for s in states:
        places[s.describe()].append(s)
    return places


def _culprit_phrase(states: list[RankState]) -> str:
    places = sorted(_by_place(states).items(), key=lambda kv: kv[1][0].rank)
    parts = []
    for text, members in places[:_MAX_NAMED]:
        verb = text.replace("is ", "are ", 1) if len(members) > 1 and text.startswith("is ") \
            else text
        verb = verb.replace("waits ", "wait ", 1) if len(members) > 1 else verb
        verb = verb.replace("has ", "have ", 1) if len(members) > 1 else verb
        parts.append(f"{ranks_text([m.rank for m in members])} {verb}")
    if len(places) > _MAX_NAMED:
        parts.append(f"{len(places) - _MAX_NAMED} more places (see evidence)")
    return "; ".join(parts)


def _waiting_phrase(ranks: list[int], op: str, where: str) -> str:
    verb = "waits" if len(ranks) == 1 else "wait"
    at = f" at {where}" if where else ""
    return f"{ranks_text(ranks)} {verb} in {op}{at}"


def _stack_lines(state: RankState) -> list[str]:
    lines = [str(f) for f in state.frames[:_MAX_STACK_LINES]]
    if len(state.frames) > _MAX_STACK_LINES:
        lines.append(f"... {len(state.frames) - _MAX_STACK_LINES} outer frames")
    return lines


def _evidence(waiting: list[RankState], culprits: list[RankState], op: str,
              where: str) -> dict:
    ev: dict = {}
    if waiting:
        ev["waiting"] = {"ranks": sorted(s.rank for s in waiting), "op": op, "at": where}
    ev["culprits"] = [_culprit_line(s) for s in culprits]
    first = min(culprits, key=lambda s: s.rank)
    if first.frames:
        ev[f"stack of rank {first.rank}"] = _stack_lines(first)
    notes = [n for s in culprits for n in s.notes]
    if notes:
        ev["notes"] = sorted(set(notes))
    return ev


def _culprit_line(s: RankState) -> str:
    pid = f" (pid {s.pid})" if s.pid else ""
    return f"rank {s.rank}{pid} {s.describe()}"


def _majority(waiting: list[RankState]) -> tuple[str, str, bool]:
    """The op most waiting ranks are in, its most common call site, and whether it's a tie."""
    counts = Counter(s.op for s in waiting).most_common()
    op = counts[0][0]
    tie = len(counts) > 1 and counts[1][1] == counts[0][1]
    sites = Counter(s.where for s in waiting if s.op == op).most_common(1)
    return op, sites[0][0], tie


@dataclass(frozen=True)
class _Scene:
    """What every finding rule looks at: the evidence, and the ranks sorted by place."""

    ev: HangEvidence
    gone: list[RankState]
    live: list[RankState]
    waiting: list[RankState]
    elsewhere: list[RankState]
    op: str  # the collective most waiting ranks are in
    where: str  # its most common call site
    tie: bool  # as many ranks in another collective
    waiters: list[RankState]  # the ranks in ``op``
    head: str  # "ranks [0,2] wait in all_reduce at train.py:88 in step"

    @classmethod
    def of(cls, ev: HangEvidence) -> _Scene:
        gone = [s for s in ev.states if s.kind in GONE]
        live = [s for s in ev.states if s.kind not in GONE]
        waiting = [s for s in live if s.kind in WAITING]
        elsewhere = [s for s in live if s.kind not in WAITING]
        if not waiting:
            return cls(ev, gone, live, waiting, elsewhere, "", "", False, [], "")
        op, where, tie = _majority(waiting)
        waiters = [s for s in waiting if s.op == op]
        return cls(ev, gone, live, waiting, elsewhere, op, where, tie, waiters,
                   _waiting_phrase([s.rank for s in waiters], op, where))


def analyze(states: list[RankState], fr: list[PgVerdict] | None = None) -> list[Finding]:
    """The hang findings from stacks (and FR verdicts) alone; see analyze_evidence."""
    return analyze_evidence(of_states(states, fr))


def analyze_evidence(ev: HangEvidence) -> list[Finding]:
    """The hang findings for one snapshot of every rank, culprit first."""
    scene = _Scene.of(ev)
    findings: list[Finding] = []
    for rule in _STACK_RULES:
        findings += rule(scene)
    _apply_flight_recorder(findings, ev)
    _add_rank_guards(findings, ev)
    return findings


def _crashed(sc: _Scene) -> list[Finding]:
    if not (sc.gone and sc.live):
        return []
    others = sc.head or _culprit_phrase(sc.live)
    return [Finding(
        "RANK_CRASHED", f"{_culprit_phrase(sc.gone)} while {others}",
        ranks=[s.rank for s in sc.gone],
        evidence={**_evidence(sc.waiters, sc.gone, sc.op, sc.where),
                  "culprits": [_culprit_line(s) + (f": {s.detail}" if s.detail else "")
                               for s in sc.gone]})]


def _stopped_while_none_waits(sc: _Scene) -> list[Finding]:
    """A stopped rank is never healthy: with nobody in a collective it is still the cause
    (whatever it was waiting in, it cannot finish while stopped)."""
    stopped = [s for s in sc.elsewhere if s.kind == STOPPED]
    if not stopped or sc.waiting:
        return []
    rest = [s for s in sc.live if s.kind != STOPPED]
    title = _culprit_phrase(stopped) + (f" while {_culprit_phrase(rest)}" if rest else "")
    ev = _evidence([], stopped, "", "")
    ev["why"] = ("a stopped process (SIGSTOP, Ctrl-Z, a debugger) runs no step and joins "
                 "no collective: every peer that needs it waits; `kill -CONT PID` resumes it")
    return [Finding("HANG_RANK_MISSING_COLLECTIVE", title, ranks=[s.rank for s in stopped],
                    evidence=ev)]


def _p2p_deadlock(sc: _Scene) -> list[Finding]:
    if not _is_p2p_deadlock(sc):
        return []
    ops = sorted({s.op for s in sc.waiting})
    title = ("every rank waits in point-to-point " + "/".join(ops) + ": "
             + _culprit_phrase(sc.waiting) + " — no rank is sending what the others receive"
             if ops != ["send"] else "every rank waits in send: no rank receives")
    return [Finding("HANG_P2P_DEADLOCK", title, ranks=[s.rank for s in sc.waiting],
                    evidence=_evidence([], sc.waiting, "", ""))]


def _is_p2p_deadlock(sc: _Scene) -> bool:
    return bool(sc.waiting) and not sc.elsewhere and not sc.gone \
        and all(s.kind == P2P for s in sc.waiting)


def _split(sc: _Scene, key: Callable[[RankState], str],
           ranks: list[RankState]) -> tuple[list[RankState], list[RankState], dict]:
    """(the usual side, the culprits, evidence) of ranks that disagree on ``key``;
    a tie goes to the attribution rules, which may leave it undecided."""
    sides: dict[str, list[RankState]] = defaultdict(list)
    for s in ranks:
        sides[key(s)].append(s)
    att = attribute(sc.ev, [[s.rank for s in side] for side in sides.values()])
    culprits = [s for s in ranks if s.rank in att.culprits]
    usual = [s for s in ranks if s.rank not in att.culprits]
    return usual, culprits, {"attribution": att.evidence()}


def _collective_mismatch(sc: _Scene) -> list[Finding]:
    if not sc.waiting or _is_p2p_deadlock(sc):
        return []
    mismatched = [s for s in sc.waiting if s.op != sc.op]
    if not mismatched:
        return []
    if not sc.tie:
        return [Finding("HANG_COLLECTIVE_MISMATCH",
                        f"{sc.head}; {_culprit_phrase(mismatched)}",
                        ranks=[s.rank for s in mismatched],
                        evidence=_evidence(sc.waiters, mismatched, sc.op, sc.where))]
    usual, culprits, extra = _split(sc, lambda s: s.op, sc.waiting)
    return [_tie_finding(usual, culprits, extra)]


def _tie_finding(usual: list[RankState], culprits: list[RankState], extra: dict) -> Finding:
    if usual:
        op, where, _ = _majority(usual)
        title = (f"{_waiting_phrase([s.rank for s in usual], op, where)}; "
                 f"{_culprit_phrase(culprits)}")
        ev = {**_evidence(usual, culprits, op, where), **extra}
    else:
        title = (_culprit_phrase(culprits) + " — undecided: the evidence does not say "
                 "which side left the job's sequence")
        ev = {**_evidence([], culprits, "", ""), **extra}
        ev["why these ranks"] = ("the ranks split evenly and no rule could tell which "
                                 "side is wrong: " + extra["attribution"]["undecided"])
    return Finding("HANG_COLLECTIVE_MISMATCH", title, ranks=[s.rank for s in culprits],
                   evidence=ev)


def _same_op_other_lines(sc: _Scene) -> list[Finding]:
    """Same collective from different lines: two code paths, each waiting for the other."""
    if (not sc.waiting or _is_p2p_deadlock(sc) or sc.elsewhere or sc.gone
            or any(s.op != sc.op for s in sc.waiting)
            or len({s.where for s in sc.waiters}) < 2):
        return []
    sites = Counter(s.where for s in sc.waiters).most_common()
    if sites[0][1] > sites[1][1]:
        odd = [s for s in sc.waiters if s.where != sc.where]
        usual = _waiting_phrase([s.rank for s in sc.waiters if s.where == sc.where], sc.op,
                                sc.where)
        return [Finding(
            "HANG_COLLECTIVE_MISMATCH", f"{usual}; {_culprit_phrase(odd)}",
            ranks=[s.rank for s in odd],
            evidence=_evidence(sc.waiters, odd, sc.op, sc.where))]
    usual, culprits, extra = _split(sc, lambda s: s.where, sc.waiters)
    return [_tie_finding(usual, culprits, extra)]


def _dataloader(sc: _Scene) -> list[Finding]:
    in_data = [s for s in sc.elsewhere if s.kind == DATALOADER]
    if not sc.waiting or _is_p2p_deadlock(sc) or not in_data:
        return []
    return [Finding("HANG_DATALOADER", f"{sc.head}; {_culprit_phrase(in_data)}",
                    ranks=[s.rank for s in in_data],
                    evidence=_evidence(sc.waiters, in_data, sc.op, sc.where))]


def _missing(sc: _Scene) -> list[Finding]:
    missing = [s for s in sc.elsewhere if s.kind != DATALOADER]
    if not sc.waiting or _is_p2p_deadlock(sc) or not missing:
        return []
    return [Finding("HANG_RANK_MISSING_COLLECTIVE", f"{sc.head}; {_culprit_phrase(missing)}",
                    ranks=[s.rank for s in missing],
                    evidence=_evidence(sc.waiters, missing, sc.op, sc.where))]


_STACK_RULES = (_crashed, _stopped_while_none_waits, _p2p_deadlock, _collective_mismatch,
                _same_op_other_lines, _dataloader, _missing)


def _add_rank_guards(findings: list[Finding], ev: HangEvidence) -> None:
    """Name the rank guard a culprit runs under, with its line (the source rule)."""
    for f in findings:
        lines = [f"rank {r}: {ev.guards[r].describe()}" for r in f.ranks if r in ev.guards]
        if lines:
            f.evidence["rank guard"] = lines


def _apply_flight_recorder(findings: list[Finding], ev: HangEvidence) -> None:
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
    where = f"; {_culprit_phrase(culprits)}" if culprits else ""
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


def headline(states: list[RankState], findings: list[Finding]) -> str:
    """The one line the report leads with."""
    if findings:
        return findings[0].title
    waiting = [s for s in states if s.kind in WAITING]
    if waiting and len(waiting) == len(states):
        op, where, _ = _majority(waiting)
        return (f"{_waiting_phrase([s.rank for s in waiting], op, where)}: no odd one out "
                "in the stacks (slow rather than hung, or the culprit is on another node)")
    if not any(s.kind == COLLECTIVE for s in states):
        return "no rank waits in a collective: no hang visible in the stacks"
    return _culprit_phrase(states)
