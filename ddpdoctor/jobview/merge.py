"""Pure: every node's stack reply -> one job-wide hang analysis and verdict.

Each node classifies its own ranks' stacks (attach's classify, where the source files
are); the classified states cross the store, and the leader runs attach's analysis once
over all of them, so the odd one out is found even when it is the only rank on its node.
The safety rule is hang/verdict.judge's: confirmed only when the stacks show a hang
and the culprits did not work (CPU, I/O) while each node watched them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ddpdoctor.attach.classify import RankState
from ddpdoctor.attach.stacks import Frame
from ddpdoctor.core.findings import Finding
from ddpdoctor.jobview.snapshot import MAX_FRAMES, Culprit, StackReply, Verdict

if TYPE_CHECKING:
    from ddpdoctor.attach.flight_recorder import FrTrace


def _frame_to_list(f: Frame) -> list:
    return [f.name, f.filename, f.line, f.code, f.native]


# Any: a record from another node's JSON, read as trusted: int()/str() and unpacking raise
# the TypeError/ValueError/KeyError that drop a malformed one (narrowing would change which)
def _frame_of(x: Any) -> Frame:
    name, filename, line, *rest = x
    return Frame(str(name), str(filename), int(line), str(rest[0]) if rest else "",
                 bool(rest[1]) if len(rest) > 1 else False)


def state_to_dict(s: RankState) -> dict[str, object]:
    return {"rank": s.rank, "pid": s.pid, "kind": s.kind, "op": s.op,
            "site": _frame_to_list(s.site) if s.site else None, "detail": s.detail,
            "thread": s.thread, "frames": [_frame_to_list(f) for f in s.frames[:MAX_FRAMES]],
            "notes": list(s.notes), "gpu_wait": s.gpu_wait}


def state_of(d: dict[str, Any]) -> RankState:
    """ValueError/TypeError/KeyError on a malformed record (the caller drops it)."""
    return RankState(int(d["rank"]), int(d["pid"]), str(d["kind"]), str(d.get("op", "")),
                     _frame_of(d["site"]) if d.get("site") else None, str(d.get("detail", "")),
                     str(d.get("thread", "")),
                     tuple(_frame_of(f) for f in d.get("frames", ())[:MAX_FRAMES]),
                     [str(n) for n in d.get("notes", ())], str(d.get("gpu_wait", "")))


@dataclass
class JobDiagnosis:
    """Duck-types attach's HangDiagnosis for hang/verdict.judge."""

    states: list[RankState]
    findings: list[Finding]
    headline: str
    groups: list = field(default_factory=list)
    hosts: dict[int, str] = field(default_factory=dict)  # rank -> host
    fr_verdicts: list = field(default_factory=list)

    @property
    def culprits(self) -> list[int]:
        return sorted({r for f in self.findings for r in f.ranks})


def merge_traces(replies: list[StackReply]) -> dict[int, FrTrace]:
    """Every node's Flight Recorder traces, by rank (a malformed record is dropped)."""
    from ddpdoctor.attach.flight_recorder import FrParseError, trace_of

    traces = {}
    for reply in replies:
        for d in reply.traces:
            try:
                t = trace_of(d)
            except FrParseError:
                continue
            traces[t.rank] = t
    return traces


def merge_replies(replies: list[StackReply]) -> JobDiagnosis:
    from ddpdoctor.attach.analyze import analyze_evidence, group_stacks, headline
    from ddpdoctor.attach.evidence import collect_evidence
    from ddpdoctor.attach.flight_recorder import compare_traces

    states: list[RankState] = []
    hosts: dict[int, str] = {}
    for reply in replies:
        for d in reply.states:
            try:
                s = state_of(d)
            except (KeyError, TypeError, ValueError):
                continue
            states.append(s)
            hosts[s.rank] = reply.host
    states.sort(key=lambda s: s.rank)
    # one comparison of every node's dumps: a rank behind on another node is seen too
    traces = merge_traces(replies)
    verdicts = compare_traces(traces) if traces else []
    # rank guards are read from the source where the leader has it (same code everywhere)
    findings = analyze_evidence(collect_evidence(states, verdicts, traces or None))
    return JobDiagnosis(states, findings, headline(states, findings), group_stacks(states),
                        hosts, verdicts)


def culprits_of(diag: JobDiagnosis, ranks: tuple[int, ...]) -> tuple[Culprit, ...]:
    by_rank = {s.rank: s for s in diag.states}
    out = []
    for r in ranks:
        s = by_rank.get(r)
        if s is None:
            out.append(Culprit(r, diag.hosts.get(r, "?"), 0, "", "not seen"))
            continue
        out.append(Culprit(r, diag.hosts.get(r, "?"), s.pid, s.where, s.describe()))
    return tuple(out)


def group_lines(diag: JobDiagnosis) -> tuple[str, ...]:
    lines = []
    for g in diag.groups:
        hosts = sorted({diag.hosts.get(r, "?") for r in g.ranks})
        lines.append(f"ranks {g.ranks} on {', '.join(hosts)}: {g.state.describe()}")
    return tuple(lines)


def decide(request_id: str, replies: list[StackReply], missing: list[str],
           moved: bool) -> Verdict:
    """One verdict for the job; ``moved``: the job made progress during the look."""
    from ddpdoctor.hang.verdict import judge

    diag = merge_replies(replies)
    busy = {r for reply in replies for r in reply.busy}
    traced = {p for reply in replies for p in reply.traced}
    errors = [f"{r.host}: {r.error}" for r in replies if r.error and not r.states]
    if not diag.states:
        v = judge(None, "; ".join(errors) or "no node sent stacks", busy)
    else:
        v = judge(diag, "", busy, traced)
    confirmed, reason = _second_opinion(v.confirmed, v.reason, set(v.culprits), replies,
                                        moved)
    if confirmed and missing:
        reason = f"{reason} (node(s) {', '.join(missing)} did not answer)"
    return Verdict(request_id, confirmed, reason, culprits_of(diag, v.culprits),
                   tuple(f.to_dict() for f in diag.findings), group_lines(diag),
                   tuple(sorted({r.host for r in replies})), tuple(missing),
                   working=tuple(sorted(set(v.culprits) & busy)))


def _second_opinion(confirmed: bool, reason: str, culprits: set[int],
                    replies: list[StackReply], moved: bool) -> tuple[bool, str]:
    """What the nodes saw while they rechecked: progress, or a culprit they could not
    measure, is no confirmed hang; otherwise the reason says what each culprit did."""
    said = [line for reply in replies for line in reply.rechecked
            if any(line.startswith(f"rank {r} ") for r in culprits)]
    unmeasured = sorted(culprits & {r for reply in replies for r in reply.unmeasured})
    if confirmed and (moved or any(r.moved for r in replies)):
        return False, "the job made progress while its stacks were read"
    if confirmed and unmeasured:  # not known to be idle: never a confirmed hang
        return False, (f"{reason}; but rank(s) {', '.join(map(str, unmeasured))} could not "
                       "be measured: not confirmed")
    return confirmed, f"{reason} ({'; '.join(said)})" if said else reason
