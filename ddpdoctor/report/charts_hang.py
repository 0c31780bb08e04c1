"""attach / run hang: the merged stack tree and the Flight Recorder sequence numbers."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TypedDict

from ddpdoctor.core.report import Report
from ddpdoctor.report import charts_common as cc
from ddpdoctor.report.blocks import Chart, Section, fragment
from ddpdoctor.report.series import FrSeqs, Heartbeat


class StackGroup(TypedDict, total=False):
    """One group of the "stacks" check's data, as attach writes it (the keys read here)."""

    ranks: list[int]
    state: str
    frames: list[str]


class RankWhere(TypedDict, total=False):
    """One rank of the "stacks" check's ``states`` (the key read here)."""

    where: str


@dataclass
class StackNode:
    """One frame shared by every group below it (outermost at the root)."""

    frame: str
    ranks: list[int] = field(default_factory=list)
    children: list[StackNode] = field(default_factory=list)
    culprit: bool = False  # on a culprit rank's branch
    user_line: bool = False  # the line that matters for this group (attach's "where")
    leaf_state: str = ""  # at a group's innermost frame: "waits in all_reduce at ..."


def stack_tree(groups: list[StackGroup], states: dict[str, RankWhere],
               culprits: list[int]) -> list[StackNode]:
    """Merge the stack groups into one tree: common outer frames once, branches where ranks
    part ways. Pure, so the 64-rank case is tested without processes."""
    roots: list[StackNode] = []
    for g in groups:
        ranks = sorted(int(r) for r in g.get("ranks") or ())
        frames = [str(f) for f in g.get("frames") or ()][::-1]  # outermost first
        where = str((states.get(str(ranks[0])) or {}).get("where") or "") if ranks else ""
        user_short = where.split(" in ", 1)[0]
        is_culprit = bool(set(ranks) & set(culprits))
        level = roots
        node = None
        for frame in frames or ["(no Python frames)"]:
            node = next((n for n in level if n.frame == frame), None)
            if node is None:
                node = StackNode(frame)
                level.append(node)
            node.ranks = sorted(set(node.ranks) | set(ranks))
            node.culprit = node.culprit or is_culprit
            if user_short and frame.endswith(f"({user_short})"):
                node.user_line = True
            level = node.children
        if node is not None:
            state = str(g.get("state") or "")
            node.leaf_state = f"{node.leaf_state}; {state}" if node.leaf_state else state
    return roots


def fr_chart(pg: str, seqs: dict[int, int], culprits: list[int]) -> Chart:
    """The last collective each rank enqueued on one group: the rank behind is the short bar."""
    from bokeh.models import ColumnDataSource, HoverTool

    ranks = sorted(seqs)
    front = max(seqs.values())
    colors = ["#c62828" if seqs[r] < front else "#607d8b" for r in ranks]
    src = ColumnDataSource({"rank": ranks, "seq": [seqs[r] for r in ranks], "color": colors})
    p = cc.figure(title=f"process group {pg}: last collective enqueued (Flight Recorder)",
                  x_axis_label="rank", y_axis_label="collective seq #", height=240)
    p.vbar(x="rank", top="seq", width=0.8, color="color", source=src)
    p.add_tools(HoverTool(tooltips=[("rank", "@rank"), ("last enqueued", "#@seq")]))
    cc.y_from_zero(p)
    cc.integer_rank_axis(p.xaxis, len(ranks))
    behind = [r for r in ranks if seqs[r] < front]
    if len(behind) == 1:
        note = f"Rank {behind[0]} is behind collective #{front}."
    elif behind:
        note = f"Ranks {', '.join(map(str, behind))} are behind collective #{front}."
    else:
        note = f"Every rank enqueued collective #{front}."
    return Chart(f"Flight Recorder, group {pg}", p, note)


def heartbeat_chart(beats: list[Heartbeat]) -> Chart:
    from bokeh.models import ColumnDataSource, HoverTool

    src = ColumnDataSource({"rank": [b.rank for b in beats], "step": [b.step for b in beats],
                            "phase": [b.phase for b in beats]})
    p = cc.figure(title="last step each rank reported (watch heartbeats)",
                  x_axis_label="rank", y_axis_label="step", height=220)
    p.vbar(x="rank", top="step", width=0.8, source=src, color="#00897b")
    p.add_tools(HoverTool(tooltips=[("rank", "@rank"), ("step", "@step"), ("phase", "@phase")]))
    cc.y_from_zero(p)
    cc.integer_rank_axis(p.xaxis, len(beats))
    return Chart("heartbeats", p)


def sections(report: Report, fr: FrSeqs, beats: list[Heartbeat]) -> list[Section]:
    probes = {c.name: c for c in report.checks}
    stacks = probes.get("stacks")
    if stacks is None or not stacks.data.get("groups"):
        return []
    culprits = sorted({r for f in report.findings for r in f.ranks
                       if f.id.startswith("HANG_") or f.id == "RANK_CRASHED"})
    tree = stack_tree(stacks.data["groups"], stacks.data.get("states") or {}, culprits)
    sec = Section("Stacks of every rank, merged")
    sec.items.append(fragment("stack_tree.html.j2", roots=tree, culprits=culprits,
                              groups=len(stacks.data["groups"]), summary=stacks.summary))
    out = [sec]
    fr_sec = Section("Flight Recorder")
    for pg, seqs in sorted(fr.by_group.items())[:8]:
        if seqs:
            fr_sec.items.append(fr_chart(pg, seqs, culprits))
    if not fr_sec.items:
        check = probes.get("flight recorder")
        lines = (check.data.get("verdicts") if check else None) or []
        fr_sec.note = ("; ".join(lines) if lines else
                       (check.summary if check else "no Flight Recorder dumps"))
        if lines:
            fr_sec.note += (" (per-rank sequence numbers are drawn when the dumps are in the "
                            "run directory: ddpdoctor report RUN_DIR)")
    out.append(fr_sec)
    if beats:
        out.append(Section("Heartbeats", [heartbeat_chart(beats)]))
    return out
