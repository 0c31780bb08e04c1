"""scale: efficiency against world size, and each world's step time by where it went."""

from __future__ import annotations

from typing import Any

from ddpdoctor.core.report import Report
from ddpdoctor.report import charts_common as cc
from ddpdoctor.report.blocks import Chart, Section

# (data key, label); the stacked parts of a step, in the order they happen
_PARTS = (("data_s", "data"), ("compute_s", "forward"), ("straggler_s", "straggler"),
          ("backward_s", "backward + optimizer (est.)"), ("comm_s", "communication (est.)"))


# Any: a world's check data as scale writes it (WorldResult.to_dict(), numbers and a nested
# breakdown); the parts below are looked up by a key from _PARTS, which no TypedDict types
def _worlds(report: Report) -> list[dict[str, Any]]:
    rows = [c.data for c in report.checks if "efficiency" in c.data and "world" in c.data]
    return sorted(rows, key=lambda d: d["world"])


def efficiency_chart(rows: list[dict[str, Any]]) -> Chart:
    from bokeh.models import ColumnDataSource, HoverTool

    worlds = [r["world"] for r in rows]
    src = ColumnDataSource({"world": worlds, "eff": [100 * r["efficiency"] for r in rows],
                            "tput": [r["throughput"] for r in rows]})
    p = cc.figure(x_axis_type="log", x_axis_label="ranks", y_axis_label="efficiency (%)",
                  title="scaling efficiency against the smallest world")
    p.xaxis.ticker = worlds
    p.line([worlds[0], worlds[-1]], [100, 100], color="#888", line_dash="dashed",
           legend_label="linear")
    p.line("world", "eff", source=src, line_width=2)
    p.scatter("world", "eff", source=src, size=8)
    p.add_tools(HoverTool(tooltips=[("ranks", "@world"), ("efficiency", "@eff{0.0} %"),
                                    ("throughput", "@tput{0,0}")]))
    p.legend.location = "bottom_left"
    return Chart("scaling efficiency", p, "100% is linear: W ranks do W times the work of one.")


def breakdown_chart(rows: list[dict[str, Any]]) -> Chart | None:
    from bokeh.models import ColumnDataSource, HoverTool

    timed = [r for r in rows if r["breakdown"].get("compute_s") is not None]
    if not timed:
        return None
    names = [str(r["world"]) for r in timed]
    cols: dict[str, list[str] | list[float]] = {"world": names}
    for key, _ in _PARTS:
        cols[key] = [1000 * ((r["breakdown"].get(key) if key in r["breakdown"] else r.get(key))
                             or 0.0) for r in timed]
    p = cc.figure(x_range=names, x_axis_label="ranks", y_axis_label="ms per step",
                  title="where each step's time went (medians)")
    keys = [k for k, _ in _PARTS]
    p.vbar_stack(keys, x="world", width=0.6, source=ColumnDataSource(cols),
                 color=cc.rank_colors(len(keys)), legend_label=[label for _, label in _PARTS])
    p.add_tools(HoverTool(tooltips=[(label, f"@{key}{{0.0}} ms") for key, label in _PARTS]))
    p.legend.location = "top_left"
    return Chart("step time by part", p, "data and forward: the typical rank's; straggler: "
                 "the slowest rank's extra time; the last two are estimated (docs/scale.md).")


def section(report: Report) -> list[Section]:
    rows = _worlds(report)
    sec = Section("Scaling")
    if len(rows) < 2:
        sec.note = "Fewer than two world sizes were measured: nothing to compare."
        return [sec]
    sec.items.append(efficiency_chart(rows))
    chart = breakdown_chart(rows)
    if chart:
        sec.items.append(chart)
    else:
        sec.note = "The runs reported no per-rank times: no breakdown of the step."
    return [sec]
