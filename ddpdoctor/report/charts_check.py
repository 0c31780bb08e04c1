"""check: busbw vs message size per collective, the link matrix, the env differences."""

from __future__ import annotations

import math
import re
from typing import TypedDict

from ddpdoctor.core.report import Report
from ddpdoctor.report import charts_common as cc
from ddpdoctor.report.blocks import Chart, Section, fragment

_LINK = re.compile(r"^(\d+)->(\d+)$")
_ENV_IDS = ("ENV_VAR_MISMATCH", "ENV_VERSION_MISMATCH")


class TableRow(TypedDict, total=False):
    """One row of the bandwidth check's ``data["table"]`` (check's TableRow, as in the JSON)."""

    collective: str
    size: int
    time_us: float
    algbw_gbps: float
    busbw_gbps: float


class EnvRow(TypedDict):
    """One (variable, value) row of the environment table."""

    what: str
    value: str
    ranks: str
    odd: bool  # the value of the odd rank(s)
    id: str


def busbw_chart(rows: list[TableRow]) -> Chart | None:
    """nccl-tests' picture: bus bandwidth against message size, log x, one line each."""
    from bokeh.models import ColumnDataSource, HoverTool

    by_coll: dict[str, list[TableRow]] = {}
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
    """Rank-by-rank point-to-point bandwidth: a slow link is a red cell, a slow rank a cross.

    One image (not a glyph per cell): 4,032 links of 64 ranks draw in one call.
    """
    import numpy as np
    from bokeh.models import HoverTool, LinearColorMapper

    cells = []
    for key, gbps in links.items():
        m = _LINK.match(key)
        if m and isinstance(gbps, (int, float)) and math.isfinite(gbps):
            cells.append((int(m.group(1)), int(m.group(2)), float(gbps)))
    if not cells:
        return None
    n = max(max(c[0], c[1]) for c in cells) + 1
    grid = np.full((n, n), np.nan, dtype=np.float32)  # [from][to]
    for src, dst, gbps in cells:
        grid[src, dst] = gbps
    values = [c[2] for c in cells]
    hi = max(values)
    # from 0, not from the slowest link: loopback jitter of a few percent must not paint
    # one healthy link red; a link 4x slower than the rest is red on this scale
    mapper = LinearColorMapper(palette=cc.SLOW_IS_RED, low=0.0, high=hi if hi > 0 else 1.0,
                               nan_color="#ffffff")
    side = min(640, 200 + 8 * n)
    p = cc.figure(x_range=(-0.5, n - 0.5), y_range=(n - 0.5, -0.5), height=side,
                  sizing_mode="fixed", width=side + 90, x_axis_label="to rank",
                  y_axis_label="from rank", title="link bandwidth (GB/s)",
                  tools="save,reset,box_zoom", toolbar_location="right")
    # image rows go up the y axis; with the y range flipped, row r is drawn at "from rank" r
    p.image(image=[grid], x=-0.5, y=-0.5, dw=n, dh=n, color_mapper=mapper)
    p.add_tools(HoverTool(tooltips=[("to", "$x{0}"), ("from", "$y{0}"),
                                    ("GB/s", "@image{0.000}")]))
    p.add_layout(cc.color_bar(mapper, "GB/s"), "right")
    cc.integer_rank_axis(p.xaxis, n)
    cc.integer_rank_axis(p.yaxis, n)
    p.grid.visible = False
    slowest = min(cells, key=lambda c: c[2])
    note = (f"Slowest link {slowest[0]} -> {slowest[1]}: {slowest[2]:.3f} GB/s "
            f"(fastest {hi:.3f} GB/s).")
    if slow_ranks:
        note += " Findings name rank(s) " + ", ".join(map(str, slow_ranks)) + "."
    return Chart("link bandwidth matrix", p, note)


def env_difference_rows(report: Report) -> list[EnvRow]:
    """One row per (variable, value) from the mismatch findings; ``odd``: the odd rank(s)."""
    rows: list[EnvRow] = []
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
