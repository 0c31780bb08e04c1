"""check: busbw vs message size per collective, the link matrix, the env differences."""

from __future__ import annotations

import math
import re
from typing import Any

from ddpdoctor.html import charts_common as cc
from ddpdoctor.html.blocks import Chart, Section, fragment
from ddpdoctor.report import Report

_LINK = re.compile(r"^(\d+)->(\d+)$")
_ENV_IDS = ("ENV_VAR_MISMATCH", "ENV_VERSION_MISMATCH")


def busbw_chart(rows: list[dict[str, Any]]) -> Chart | None:
    """nccl-tests' picture: bus bandwidth against message size, log x, one line each."""
    from bokeh.models import ColumnDataSource, HoverTool

    by_coll: dict[str, list[dict]] = {}
    for row in rows:
        if row.get("size") and isinstance(row.get("busbw_gbps"), (int, float)):
            by_coll.setdefault(str(row["collective"]), []).append(row)
    if not by_coll:
        return None
    p = cc.figure(x_axis_type="log", x_axis_label="message size",
                  y_axis_label="busbw (GB/s)", title="bus bandwidth vs message size")
    p.xaxis.formatter = cc.bytes_tick_formatter()
    for (name, pts), color in zip(sorted(by_coll.items()), cc.rank_colors(len(by_coll))):
        pts = sorted(pts, key=lambda r: r["size"])
        src = ColumnDataSource({"size": [r["size"] for r in pts],
                                "busbw": [r["busbw_gbps"] for r in pts],
                                "algbw": [r.get("algbw_gbps") for r in pts],
                                "time_us": [r.get("time_us") for r in pts],
                                "collective": [name] * len(pts)})
        p.line("size", "busbw", source=src, color=color, line_width=2, legend_label=name)
        p.scatter("size", "busbw", source=src, color=color, size=6, legend_label=name)
    p.add_tools(HoverTool(tooltips=[("", "@collective"), ("size", "@size{0,0} B"),
                                    ("busbw", "@busbw{0.000} GB/s"),
                                    ("algbw", "@algbw{0.000} GB/s"),
                                    ("time", "@time_us{0.0} us")]))
    p.legend.location = "top_left"
    p.legend.click_policy = "hide"
    return Chart("busbw vs message size", p,
                 "The slowest rank's median per size, as nccl-tests prints it. Click a "
                 "legend entry to hide a collective.")


def link_matrix_chart(links: dict[str, float], slow_ranks: list[int]) -> Chart | None:
    """Rank-by-rank point-to-point bandwidth: a slow link is a red cell, a slow rank a cross."""
    from bokeh.models import ColumnDataSource, HoverTool, LinearColorMapper

    cells = []
    for key, gbps in links.items():
        m = _LINK.match(key)
        if m and isinstance(gbps, (int, float)) and math.isfinite(gbps):
            cells.append((int(m.group(1)), int(m.group(2)), float(gbps)))
    if not cells:
        return None
    ranks = sorted({c[0] for c in cells} | {c[1] for c in cells})
    names = [str(r) for r in ranks]
    values = [c[2] for c in cells]
    mapper = LinearColorMapper(palette=cc.SLOW_IS_RED, low=min(values),
                               high=max(values) if max(values) > min(values) else min(values) + 1)
    src = ColumnDataSource({"src": [str(c[0]) for c in cells], "dst": [str(c[1]) for c in cells],
                            "gbps": values})
    side = min(640, 160 + 18 * len(ranks))
    p = cc.figure(x_range=names, y_range=list(reversed(names)), height=side,
                  sizing_mode="fixed", width=side + 90, x_axis_label="to rank",
                  y_axis_label="from rank", title="link bandwidth (GB/s)",
                  tools="hover,save,reset", toolbar_location="right")
    p.rect("dst", "src", 1, 1, source=src, line_color="white",
           fill_color={"field": "gbps", "transform": mapper})
    p.select_one(HoverTool).tooltips = [("link", "@src -> @dst"),
                                        ("bandwidth", "@gbps{0.000} GB/s")]
    p.add_layout(cc.color_bar(mapper, "GB/s"), "right")
    p.xaxis.major_label_orientation = 0 if len(ranks) <= 16 else math.pi / 2
    p.grid.visible = False
    slowest = min(cells, key=lambda c: c[2])
    note = (f"Slowest link {slowest[0]} -> {slowest[1]}: {slowest[2]:.3f} GB/s "
            f"(fastest {max(values):.3f} GB/s).")
    if slow_ranks:
        note += " Findings name rank(s) " + ", ".join(map(str, slow_ranks)) + "."
    return Chart("link bandwidth matrix", p, note)


def env_difference_rows(report: Report) -> list[dict[str, Any]]:
    """One row per (variable, value) from the mismatch findings; ``odd``: the odd rank(s)."""
    rows = []
    for f in report.sorted_findings():
        if f.id not in _ENV_IDS:
            continue
        what = str(f.evidence.get("variable") or f.evidence.get("what") or f.title)
        by_value = f.evidence.get("ranks_by_value")
        if not isinstance(by_value, dict):
            continue
        for value, ranks in by_value.items():
            odd = _overlaps(str(ranks), f.ranks)
            rows.append({"what": what, "value": str(value), "ranks": str(ranks), "odd": odd,
                         "id": f.id})
    return rows


def _overlaps(ranks_text: str, culprits: list[int]) -> bool:
    wanted = set(culprits)
    for part in ranks_text.split(","):
        lo, _, hi = part.partition("-")
        try:
            a, b = int(lo), int(hi or lo)
        except ValueError:
            continue
        if any(a <= r <= b for r in wanted):
            return True
    return False


def section(report: Report) -> list[Section]:
    probes = {c.name: c for c in report.checks}
    out = []
    bw = probes.get("bandwidth")
    comm = Section("Bandwidth")
    if bw is None:
        comm.note = "The bandwidth probe did not run (see --probe)."
    elif bw.status == "skipped":
        comm.note = bw.summary
    else:
        chart = busbw_chart(bw.data.get("table") or [])
        if chart:
            comm.items.append(chart)
        slow = sorted({r for f in report.findings
                       if f.id in ("COMM_BANDWIDTH_LOW", "COMM_SLOW_RANK") for r in f.ranks})
        matrix = link_matrix_chart(bw.data.get("links_gbps") or {}, slow)
        if matrix:
            comm.items.append(matrix)
        elif not comm.items:
            comm.note = "The bandwidth probe measured nothing: " + bw.summary
        else:
            comm.note = "No point-to-point links were measured (one rank?)."
    out.append(comm)
    env = Section("Environment across ranks")
    rows = env_difference_rows(report)
    checked = [probes[n] for n in ("versions", "env vars") if n in probes]
    env.items.append(fragment("env_table.html.j2", rows=rows, checked=checked))
    out.append(env)
    return out
