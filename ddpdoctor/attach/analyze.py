"""Pure: every rank's state (+ Flight Recorder verdicts) -> hang findings, culprit first.

Stacks alone are weak: every healthy rank is parked in the same wait. So the analysis looks
for the odd ones out (ranks not in the collective the others wait in, ranks in another
collective, a rank inside its DataLoader, a dead rank) and names them as the culprits.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass

from ddpdoctor.attach.classify import (
    COLLECTIVE,
    DATALOADER,
    GONE,
    P2P,
    WAITING,
    RankState,
    signature,
)
from ddpdoctor.attach.flight_recorder import PgVerdict
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


def analyze(states: list[RankState], fr: list[PgVerdict] | None = None) -> list[Finding]:
    """The hang findings for one snapshot of every rank; culprits are the odd ones out."""
    findings: list[Finding] = []
    gone = [s for s in states if s.kind in GONE]
    live = [s for s in states if s.kind not in GONE]
    waiting = [s for s in live if s.kind in WAITING]
    elsewhere = [s for s in live if s.kind not in WAITING]

    if waiting:
        op, where, tie = _majority(waiting)
        waiters = [s for s in waiting if s.op == op]
        head = _waiting_phrase([s.rank for s in waiters], op, where)
    else:
        op = where = head = ""
        tie = False
        waiters = []

    if gone and live:
        others = head or _culprit_phrase(live)
        findings.append(Finding(
            "RANK_CRASHED", f"{_culprit_phrase(gone)} while {others}",
            ranks=[s.rank for s in gone],
            evidence={**_evidence(waiters, gone, op, where),
                      "culprits": [_culprit_line(s) + (f": {s.detail}" if s.detail else "")
                                   for s in gone]}))

    if waiting and not elsewhere and not gone and all(s.kind == P2P for s in waiting):
        ops = sorted({s.op for s in waiting})
        title = ("every rank waits in point-to-point " + "/".join(ops) + ": "
                 + _culprit_phrase(waiting) + " — no rank is sending what the others receive"
                 if ops != ["send"] else "every rank waits in send: no rank receives")
        findings.append(Finding("HANG_P2P_DEADLOCK", title, ranks=[s.rank for s in waiting],
                                evidence=_evidence([], waiting, "", "")))
    elif waiting:
        mismatched = [s for s in waiting if s.op != op]
        if mismatched:
            culprits = waiting if tie else mismatched
            title = (_culprit_phrase(waiting) if tie
                     else f"{head}; {_culprit_phrase(mismatched)}")
            ev = _evidence([] if tie else waiters, culprits, op, where)
            if tie:
                ev["why these ranks"] = ("as many ranks wait in one collective as in the "
                                         "other: the stacks cannot tell which side is wrong")
            findings.append(Finding("HANG_COLLECTIVE_MISMATCH", title,
                                    ranks=[s.rank for s in culprits], evidence=ev))
        elif len({s.where for s in waiters}) > 1 and not elsewhere and not gone:
            # Same collective from different lines: two code paths, each waiting for the other.
            odd = [s for s in waiters if s.where != where]
            findings.append(Finding(
                "HANG_COLLECTIVE_MISMATCH",
                f"{_waiting_phrase([s.rank for s in waiters if s.where == where], op, where)}"
                f"; {_culprit_phrase(odd)}",
                ranks=[s.rank for s in odd], evidence=_evidence(waiters, odd, op, where)))
        in_data = [s for s in elsewhere if s.kind == DATALOADER]
        missing = [s for s in elsewhere if s.kind != DATALOADER]
        if in_data:
            findings.append(Finding("HANG_DATALOADER", f"{head}; {_culprit_phrase(in_data)}",
                                    ranks=[s.rank for s in in_data],
                                    evidence=_evidence(waiters, in_data, op, where)))
        if missing:
            findings.append(Finding(
                "HANG_RANK_MISSING_COLLECTIVE", f"{head}; {_culprit_phrase(missing)}",
                ranks=[s.rank for s in missing],
                evidence=_evidence(waiters, missing, op, where)))

    _apply_flight_recorder(findings, states, fr or [])
    return findings


def _apply_flight_recorder(findings: list[Finding], states: list[RankState],
                           verdicts: list[PgVerdict]) -> None:
    """FR sequence numbers: evidence for the stack findings, or the finding when the
    stacks all look the same."""
    if not verdicts:
        return
    lines = [line for v in verdicts for line in v.describe()]
    for f in findings:
        f.evidence["flight_recorder"] = lines
    if not any(v.mismatch for v in verdicts):
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
    if findings:
        return
    by_rank = {s.rank: s for s in states}
    behind = sorted({r for v in verdicts for r in v.behind})
    if behind:
        v = next(v for v in verdicts if v.behind)
        culprits = [by_rank[r] for r in behind if r in by_rank]
        where = f"; {_culprit_phrase(culprits)}" if culprits else ""
        front = sorted(r for rs in v.pending.values() for r in rs)
        findings.append(Finding(
            "HANG_RANK_MISSING_COLLECTIVE",
            f"{ranks_text(front)} enqueued collective #{v.front_seq} ({v.front_op}) on "
            f"pg {v.pg}; {ranks_text(behind)} did not{where}",
            ranks=behind, evidence={"flight_recorder": lines}))
        return
    for v in verdicts:
        if v.mismatch:
            groups = sorted(v.pending.items(), key=lambda kv: (-len(kv[1]), kv[1]))
            tie = len(groups[0][1]) == len(groups[1][1])
            odd = sorted(r for _, rs in (groups if tie else groups[1:]) for r in rs)
            findings.append(Finding(
                "HANG_COLLECTIVE_MISMATCH",
                "; ".join(f"{ranks_text(rs)} run {key} as collective #{v.front_seq}"
                          for key, rs in groups),
                ranks=odd, evidence={"flight_recorder": lines}))
            return


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
