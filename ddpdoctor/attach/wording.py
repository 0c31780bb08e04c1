"""The words of the hang report: rank sets, culprit phrases, the evidence of a finding.

Shared by the stack rules (analyze) and the Flight Recorder findings (fr_findings).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass

from ddpdoctor.attach.classify import RankState, signature

_MAX_STACK_LINES = 12
_MAX_NAMED = 3  # culprit places spelled out in a title; the rest are in the evidence


@dataclass
class StackGroup:
    """Ranks whose stacks are identical, shown once (the merged view)."""

    ranks: list[int]
    state: RankState  # the first rank's, standing for all of them


def ranks_text(ranks: list[int]) -> str:
    """``rank 1``, ``ranks [0,2,3]``, ``ranks [0-511]``; long irregular sets are cut."""
    from ddpdoctor.core.findings import format_ranks

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


def culprit_phrase(states: list[RankState]) -> str:
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


def waiting_phrase(ranks: list[int], op: str, where: str) -> str:
    verb = "waits" if len(ranks) == 1 else "wait"
    at = f" at {where}" if where else ""
    return f"{ranks_text(ranks)} {verb} in {op}{at}"


def stack_lines(state: RankState) -> list[str]:
    lines = [str(f) for f in state.frames[:_MAX_STACK_LINES]]
    if len(state.frames) > _MAX_STACK_LINES:
        lines.append(f"... {len(state.frames) - _MAX_STACK_LINES} outer frames")
    return lines


def evidence_of(waiting: list[RankState], culprits: list[RankState], op: str,
              where: str) -> dict:
    ev: dict = {}
    if waiting:
        ev["waiting"] = {"ranks": sorted(s.rank for s in waiting), "op": op, "at": where}
    ev["culprits"] = [culprit_line(s) for s in culprits]
    first = min(culprits, key=lambda s: s.rank)
    if first.frames:
        ev[f"stack of rank {first.rank}"] = stack_lines(first)
    notes = [n for s in culprits for n in s.notes]
    if notes:
        ev["notes"] = sorted(set(notes))
    return ev


def culprit_line(s: RankState) -> str:
    pid = f" (pid {s.pid})" if s.pid else ""
    return f"rank {s.rank}{pid} {s.describe()}"


def majority(waiting: list[RankState]) -> tuple[str, str, bool]:
    """The op most waiting ranks are in, its most common call site, and whether it's a tie."""
    counts = Counter(s.op for s in waiting).most_common()
    op = counts[0][0]
    tie = len(counts) > 1 and counts[1][1] == counts[0][1]
    sites = Counter(s.where for s in waiting if s.op == op).most_common(1)
    return op, sites[0][0], tie


