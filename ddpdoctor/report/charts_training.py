"""run / watch / train: per-rank step times, data wait, memory, loss, findings on the steps."""

from __future__ import annotations

import math
import statistics
from typing import TYPE_CHECKING, cast

from ddpdoctor.core.contract import SERIES_GLOB
from ddpdoctor.report import charts_common as cc
from ddpdoctor.report.blocks import Chart, Section
from ddpdoctor.report.series import WATCH_STRATEGY, RunSeries, StepSeries, WatchEvent

if TYPE_CHECKING:
    from bokeh.models.glyph import Glyph
    from bokeh.models.renderers import GlyphRenderer
    from bokeh.plotting import figure as Figure

_SEVERITY_COLOR = {"error": "#c62828", "warning": "#ef6c00", "info": "#1565c0"}


def _mark_events(p: Figure, events: list[WatchEvent], y_top: bool = True) -> None:
    """A dashed line at the step each finding was raised, labelled with its id."""
    from bokeh.models.annotations import Label, Span

    for i, ev in enumerate(events[:12]):
        color = _SEVERITY_COLOR.get(ev.severity, "#555")
        p.add_layout(Span(location=ev.step, dimension="height", line_color=color,
                          line_dash="dashed", line_width=2))
        ranks = f" r{','.join(map(str, ev.ranks[:4]))}" if ev.ranks else ""
        p.add_layout(Label(x=ev.step, y=6 + 14 * (i % 3), x_units="data", y_units="screen",
                           text=f" {ev.id}{ranks}", text_font_size="11px", text_color=color,
                           background_fill_color="white", background_fill_alpha=0.8))


def step_heatmap(s: StepSeries, events: list[WatchEvent]) -> Chart:
    """Ranks down, steps across, colour = time to the step's gather: a slow rank is a stripe."""
    import numpy as np
    from bokeh.models import HoverTool, LinearColorMapper

    busy = np.array(s.rank_busy_s, dtype=np.float32).T  # [rank][step]
    finite = busy[np.isfinite(busy)]
    lo, hi = (float(finite.min()), float(finite.max())) if finite.size else (0.0, 1.0)
    mapper = LinearColorMapper(palette="Magma256", low=lo, high=hi if hi > lo else lo + 1e-6,
                               nan_color="#dddddd")
    first, last = s.steps[0], s.steps[-1]
    width = (last - first) / max(len(s.steps) - 1, 1)
    p = cc.figure(title="per-rank time to the step's gather (data + forward), seconds",
                  x_axis_label="step", y_axis_label="rank",
                  x_range=(first - width / 2, last + width / 2), y_range=(-0.5, s.world - 0.5),
                  height=max(220, min(560, 60 + 14 * s.world)))
    p.image(image=[busy], x=first - width / 2, y=-0.5, dw=last - first + width, dh=s.world,
            color_mapper=mapper)
    p.add_tools(HoverTool(tooltips=[("step", "$x{0}"), ("rank", "$y{0}"),
                                    ("seconds", "@image{0.000}")]))
    p.add_layout(cc.color_bar(mapper, "s"), "right")
    p.grid.visible = False
    cc.integer_rank_axis(p.yaxis, s.world)
    _mark_events(p, events)
    med = [statistics.median(r for r in row if math.isfinite(r)) if any(map(math.isfinite, row))
           else float("nan") for row in busy.tolist()]
    slowest = max(range(s.world), key=lambda r: med[r] if math.isfinite(med[r]) else -1)
    note = (f"Median per rank: slowest is rank {slowest} at {med[slowest]:.3f} s; the median "
            f"rank takes {statistics.median(m for m in med if math.isfinite(m)):.3f} s.")
    return Chart("step time per rank", p, note)


def data_share_chart(s: StepSeries) -> Chart:
    """Each rank's median share of the step spent waiting for its batch."""
    from bokeh.models import ColumnDataSource, HoverTool

    shares = []
    for r in range(s.world):
        vals = [row[r] / t for row, t in zip(s.rank_data_s, s.step_time_s)
                if t and math.isfinite(t) and math.isfinite(row[r])]
        shares.append(statistics.median(vals) if vals else float("nan"))
    src = ColumnDataSource({"rank": list(range(s.world)), "share": shares,
                            "pct": [v * 100 if math.isfinite(v) else v for v in shares]})
    p = cc.figure(title="share of the step spent waiting for data (median over steps)",
                  x_axis_label="rank", y_axis_label="data wait (% of step)", height=240)
    p.vbar(x="rank", top="pct", width=0.8, source=src, color="#1565c0")
    p.add_tools(HoverTool(tooltips=[("rank", "@rank"), ("data wait", "@pct{0.0} %")]))
    cc.y_from_zero(p)
    cc.integer_rank_axis(p.xaxis, s.world)
    return Chart("data-wait share per rank", p)


def per_rank_lines(s: StepSeries, matrix: list[list[float]], title: str, y_label: str,
                   events: list[WatchEvent], highlight: list[int]) -> Figure:
    """One line per rank over the steps; the culprit ranks drawn thick, the rest thin.

    All ranks are one multi_line of float32 arrays (sent base64, drawn as one renderer):
    64 separate renderers take seconds to lay out in the browser.
    """
    import numpy as np
    from bokeh.models import ColumnDataSource, HoverTool

    p = cc.figure(title=title, x_axis_label="step", y_axis_label=y_label, height=260)
    colors = cc.rank_colors(s.world)
    values = np.array(matrix, dtype=np.float32).T  # [rank][step]
    steps = np.array(s.steps, dtype=np.float32)
    strong = set(highlight) if highlight and len(highlight) < s.world else set()
    ranks = list(range(s.world))
    src = ColumnDataSource({
        "xs": [steps] * s.world, "ys": list(values), "rank": ranks, "color": colors,
        "width": [2.5 if r in strong else 1.2 for r in ranks],
        "alpha": [1.0 if r in strong or not strong else 0.45 for r in ranks]})
    lines = p.multi_line("xs", "ys", source=src, color="color", line_width="width", alpha="alpha")
    p.add_tools(HoverTool(tooltips=[("rank", "@rank"), ("step", "$data_x{0}"),
                                    (y_label, "$data_y{0.000}")]))
    if s.world <= 10:
        from bokeh.models.annotations import Legend, LegendItem

        # cast: bokeh's stubs want GlyphRenderer[Glyph], invariant in the glyph's type
        drawn = cast("GlyphRenderer[Glyph]", lines)
        p.add_layout(Legend(items=[LegendItem(label=f"rank {r}", renderers=[drawn], index=r)
                                   for r in ranks], location="top_left"))
    _mark_events(p, events)
    return p


def grad_norm_chart(s: StepSeries, events: list[WatchEvent]) -> Chart:
    from bokeh.models import ColumnDataSource, HoverTool

    p = cc.figure(title="gradient norm (after all-reduce; one value per step)",
                  x_axis_label="step", y_axis_label="grad norm", height=220)
    src = ColumnDataSource({"step": s.steps, "y": s.grad_norm})
    p.line("step", "y", source=src, color="#6a1b9a", line_width=2)
    p.add_tools(HoverTool(tooltips=[("step", "@step"), ("grad norm", "@y{0.0000}")]))
    _mark_events(p, events)
    return Chart("grad norm", p, "The trainer logs the global norm only: a per-rank grad "
                 "norm is not written by any part of ddpdoctor yet.")


def _drawn(matrix: list[list[float]]) -> bool:
    """Whether a chart of ``matrix`` would show anything (the watch knows no loss)."""
    return any(math.isfinite(v) for row in matrix for v in row)


def sections(series: RunSeries, culprits: list[int]) -> list[Section]:
    out = []
    for s in series.steps:
        if not s.steps:
            continue
        label = f" ({s.strategy})" if len(series.steps) > 1 else ""
        sec = Section(f"Training{label}: {s.downsampled_from or len(s.steps)} steps, "
                      f"{s.world} ranks")
        if s.downsampled_from:
            sec.note = (f"{s.downsampled_from} steps shown as {len(s.steps)} columns: each "
                        "keeps its slowest step's times and its last step's values.")
        watch = s.strategy == WATCH_STRATEGY
        if watch:
            sec = Section(f"Training: to step {s.steps[-1]}, {s.world} ranks", note=(
                f"From the watch's series files ({SERIES_GLOB}): each column is "
                "the per-step mean over an interval of steps (about a second). The time to "
                "the gather is known on the steps the watch times (those before a check "
                "step) and blank elsewhere."))
        if _drawn(s.rank_busy_s):
            sec.items.append(step_heatmap(s, series.events))
        if _drawn(s.rank_data_s):
            sec.items.append(data_share_chart(s))
        sec.items.append(Chart("memory per rank", per_rank_lines(
            s, s.rank_rss_mb, "memory per rank (RSS on CPU, MB)", "MB", series.events,
            culprits), "Host RSS sampled by the watch's heartbeat thread." if watch
            else "Host RSS sampled each step by the trainer."))
        if _drawn(s.rank_loss):
            sec.items.append(Chart("loss per rank", per_rank_lines(
                s, s.rank_loss, "loss per rank (before the all-reduce)", "loss",
                series.events, culprits)))
        if _drawn([s.grad_norm]):
            sec.items.append(grad_norm_chart(s, series.events))
        out.append(sec)
    if not out and series.events:
        out.append(Section("Training", note=(
            "Findings were raised at steps " + ", ".join(
                f"{e.id} at step {e.step}" for e in series.events[:8])
            + f", but no per-step series was found to draw them on (no {SERIES_GLOB} "
              "beside the events file, no trainer --json-log).")))
    return out
