"""Pure: the evidence of a hang (HangEvidence) -> hang findings, culprit first.

Stacks alone are weak: every healthy rank is parked in the same wait. So the analysis looks
for the odd ones out (ranks not in the collective the others wait in, ranks in another
collective, a rank inside its DataLoader, a dead or stopped rank) and names them as the
culprits: one small rule per finding (``_STACK_RULES``). Where the ranks split evenly,
the attribution rules (``attribution``: Flight Recorder, stacks, source, steps) decide
which side is the culprit, or say "undecided" and what to look at.
"""

from __future__ import annotations

import os
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass

from ddpdoctor.attach.attribution import attribute
from ddpdoctor.attach.classify import (
    COLLECTIVE,
    DATALOADER,
    EXTENSION_LOCK,
    GONE,
    P2P,
    WAITING,
    RankState,
    is_building_extension,
)
from ddpdoctor.attach.evidence import HangEvidence, of_states
from ddpdoctor.attach.flight_recorder import PgVerdict
from ddpdoctor.attach.fr_findings import apply_flight_recorder
from ddpdoctor.attach.stacks import STOPPED
from ddpdoctor.attach.wording import (  # noqa: F401 - StackGroup, group_stacks, ranks_text: API
    StackGroup,
    culprit_line,
    culprit_phrase,
    evidence_of,
    group_stacks,
    majority,
    ranks_text,
    waiting_phrase,
)
from ddpdoctor.core.findings import Finding


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
        op, where, tie = majority(waiting)
        waiters = [s for s in waiting if s.op == op]
        return cls(ev, gone, live, waiting, elsewhere, op, where, tie, waiters,
                   waiting_phrase([s.rank for s in waiters], op, where))


def analyze(states: list[RankState], fr: list[PgVerdict] | None = None) -> list[Finding]:
    """The hang findings from stacks (and FR verdicts) alone; see analyze_evidence."""
    return analyze_evidence(of_states(states, fr))


def analyze_evidence(ev: HangEvidence) -> list[Finding]:
    """The hang findings for one snapshot of every rank, culprit first."""
    scene = _Scene.of(ev)
    findings: list[Finding] = []
    for rule in _STACK_RULES:
        findings += rule(scene)
    apply_flight_recorder(findings, ev)
    _add_rank_guards(findings, ev)
    return findings


def _crashed(sc: _Scene) -> list[Finding]:
    if not (sc.gone and sc.live):
        return []
    others = sc.head or culprit_phrase(sc.live)
    return [Finding(
        "RANK_CRASHED", f"{culprit_phrase(sc.gone)} while {others}",
        ranks=[s.rank for s in sc.gone],
        evidence={**evidence_of(sc.waiters, sc.gone, sc.op, sc.where),
                  "culprits": [culprit_line(s) + (f": {s.detail}" if s.detail else "")
                               for s in sc.gone]})]


def _stopped_while_none_waits(sc: _Scene) -> list[Finding]:
    """A stopped rank is never healthy: with nobody in a collective it is still the cause
    (whatever it was waiting in, it cannot finish while stopped)."""
    stopped = [s for s in sc.elsewhere if s.kind == STOPPED]
    if not stopped or sc.waiting:
        return []
    rest = [s for s in sc.live if s.kind != STOPPED]
    title = culprit_phrase(stopped) + (f" while {culprit_phrase(rest)}" if rest else "")
    ev = evidence_of([], stopped, "", "")
    ev["why"] = ("a stopped process (SIGSTOP, Ctrl-Z, a debugger) runs no step and joins "
                 "no collective: every peer that needs it waits; `kill -CONT PID` resumes it")
    return [Finding("HANG_RANK_MISSING_COLLECTIVE", title, ranks=[s.rank for s in stopped],
                    evidence=ev)]


def _p2p_deadlock(sc: _Scene) -> list[Finding]:
    if not _is_p2p_deadlock(sc):
        return []
    ops = sorted({s.op for s in sc.waiting})
    title = ("every rank waits in point-to-point " + "/".join(ops) + ": "
             + culprit_phrase(sc.waiting) + " — no rank is sending what the others receive"
             if ops != ["send"] else "every rank waits in send: no rank receives")
    return [Finding("HANG_P2P_DEADLOCK", title, ranks=[s.rank for s in sc.waiting],
                    evidence=evidence_of([], sc.waiting, "", ""))]


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
                        f"{sc.head}; {culprit_phrase(mismatched)}",
                        ranks=[s.rank for s in mismatched],
                        evidence=evidence_of(sc.waiters, mismatched, sc.op, sc.where))]
    usual, culprits, extra = _split(sc, lambda s: s.op, sc.waiting)
    return [_tie_finding(usual, culprits, extra)]


def _tie_finding(usual: list[RankState], culprits: list[RankState], extra: dict) -> Finding:
    if usual:
        op, where, _ = majority(usual)
        title = (f"{waiting_phrase([s.rank for s in usual], op, where)}; "
                 f"{culprit_phrase(culprits)}")
        ev = {**evidence_of(usual, culprits, op, where), **extra}
    else:
        title = (culprit_phrase(culprits) + " — undecided: the evidence does not say "
                 "which side left the job's sequence")
        ev = {**evidence_of([], culprits, "", ""), **extra}
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
        said = waiting_phrase([s.rank for s in sc.waiters if s.where == sc.where], sc.op,
                              sc.where)
        return [Finding(
            "HANG_COLLECTIVE_MISMATCH", f"{said}; {culprit_phrase(odd)}",
            ranks=[s.rank for s in odd],
            evidence=evidence_of(sc.waiters, odd, sc.op, sc.where))]
    usual, culprits, extra = _split(sc, lambda s: s.where, sc.waiters)
    return [_tie_finding(usual, culprits, extra)]


def _dataloader(sc: _Scene) -> list[Finding]:
    in_data = [s for s in sc.elsewhere if s.kind == DATALOADER]
    if not sc.waiting or _is_p2p_deadlock(sc) or not in_data:
        return []
    return [Finding("HANG_DATALOADER", f"{sc.head}; {culprit_phrase(in_data)}",
                    ranks=[s.rank for s in in_data],
                    evidence=evidence_of(sc.waiters, in_data, sc.op, sc.where))]


def _missing(sc: _Scene) -> list[Finding]:
    missing = [s for s in sc.elsewhere if s.kind != DATALOADER]
    if not sc.waiting or _is_p2p_deadlock(sc) or not missing:
        return []
    return [Finding("HANG_RANK_MISSING_COLLECTIVE", f"{sc.head}; {culprit_phrase(missing)}",
                    ranks=[s.rank for s in missing],
                    evidence=evidence_of(sc.waiters, missing, sc.op, sc.where))]


def _stale_extension_lock(sc: _Scene) -> list[Finding]:
    """Ranks waiting for torch's extension build lock while no rank builds: the lock is
    a file left by a process killed while building (an earlier run), and they wait for
    it forever. A rank that builds holds the lock: the others wait for it, rightly."""
    locked = [s for s in sc.live if s.op == EXTENSION_LOCK]
    if not locked or sc.waiting or any(is_building_extension(s.frames) for s in sc.live):
        return []
    ev = evidence_of([], locked, "", "")
    ev["fix"] = ("if no other job on this host is building the same extension, delete its "
                 "`lock` file under TORCH_EXTENSIONS_DIR (default ~/.cache/torch_extensions/"
                 "<python>_<cuda>/<extension>/lock) and start again")
    return [Finding("RANK_UNRESPONSIVE",
                    f"{culprit_phrase(locked)}: waiting for torch's C++ extension build lock "
                    "while no rank builds the extension: a stale lock file, left by a process "
                    "that died while building", ranks=[s.rank for s in locked], evidence=ev)]


_STACK_RULES = (_crashed, _stopped_while_none_waits, _p2p_deadlock, _collective_mismatch,
                _same_op_other_lines, _dataloader, _missing, _stale_extension_lock)


def _add_rank_guards(findings: list[Finding], ev: HangEvidence) -> None:
    """Name the rank guard a culprit runs under, with its line (the source rule)."""
    for f in findings:
        lines = [f"rank {r}: {ev.guards[r].describe()}" for r in f.ranks if r in ev.guards]
        if lines:
            f.evidence["rank guard"] = lines
        guards = {(g.filename, g.line, g.text) for r, g in ev.guards.items() if r in f.ranks}
        if len(guards) == 1 and all(r in ev.guards for r in f.ranks):
            filename, line, text = guards.pop()
            f.title += f", under `if {text}` ({os.path.basename(filename)}:{line})"


def headline(states: list[RankState], findings: list[Finding]) -> str:
    """The one line the report leads with."""
    if findings:
        return findings[0].title
    waiting = [s for s in states if s.kind in WAITING]
    if waiting and len(waiting) == len(states):
        op, where, _ = majority(waiting)
        return (f"{waiting_phrase([s.rank for s in waiting], op, where)}: no odd one out "
                "in the stacks (slow rather than hung, or the culprit is on another node)")
    if not any(s.kind == COLLECTIVE for s in states):
        on_gpu = [s for s in states if s.gpu_wait]
        if on_gpu and len(on_gpu) == len(states):
            # NCCL's collectives return once queued: a hung one shows as every host
            # waiting on the GPU, as a busy step does for a moment
            return (f"every rank waits on the GPU ({on_gpu[0].gpu_wait} at "
                    f"{on_gpu[0].where}): no collective visible in Python; a hung NCCL "
                    "collective looks so, as does a busy step: attach again, the same "
                    "stacks a minute later are a hang")
        return "no rank waits in a collective: no hang visible in the stacks"
    return culprit_phrase(states)
