"""Shared look of every chart: sizes, tools, palettes, rank colours."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from bokeh.models import ColorMapper, CustomJSTickFormatter
    from bokeh.models.annotations import ColorBar
    from bokeh.models.axes import Axis
    from bokeh.plotting import figure as Figure

HEIGHT = 300
TOOLS = "pan,box_zoom,wheel_zoom,reset,save"
# slow = red: a low value (a slow link, a slow rank) is the one that should stand out
SLOW_IS_RED = ("#a50026", "#d73027", "#f46d43", "#fdae61", "#fee08b", "#ffffbf", "#d9ef8b",
               "#a6d96a", "#66bd63", "#1a9850", "#006837")


# kw: Any, the options of bokeh's figure(), each typed by its own parameter there
def figure(**kw: Any) -> Figure:
    from bokeh.models.annotations import Title
    from bokeh.plotting import figure as bk_figure

    kw.setdefault("height", HEIGHT)
    kw.setdefault("sizing_mode", "stretch_width")
    kw.setdefault("tools", TOOLS)
    kw.setdefault("toolbar_location", "right")
    p = bk_figure(**kw)
    if isinstance(p.title, Title):  # always, on a figure: its title is a model
        p.title.text_font_size = "13px"
    p.xaxis.axis_label_text_font_style = "normal"
    p.yaxis.axis_label_text_font_style = "normal"
    return p


def y_from_zero(p: Figure) -> None:
    """Start the y axis at 0 (bars)."""
    from bokeh.models import DataRange1d

    if isinstance(p.y_range, DataRange1d):  # always: the bar charts give no y_range
        p.y_range.start = 0


def rank_colors(n: int) -> list[str]:
    from bokeh.palettes import Category10, Turbo256

    if n <= 10:
        return list(Category10[10][:n])
    return [Turbo256[int(i * 255 / max(n - 1, 1))] for i in range(n)]


def color_bar(mapper: ColorMapper, title: str) -> ColorBar:
    from bokeh.models.annotations import ColorBar

    return ColorBar(color_mapper=mapper, title=title, label_standoff=6, width=10)


def bytes_tick_formatter() -> CustomJSTickFormatter:
    """Message sizes as nccl-tests prints them (8 B, 4 KiB, 16 MiB)."""
    from bokeh.models import CustomJSTickFormatter

    return CustomJSTickFormatter(code="""
        const u = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
        let v = tick, i = 0;
        while (v >= 1024 && i < u.length - 1) { v /= 1024; i++; }
        return (Number.isInteger(v) ? v : v.toFixed(1)) + ' ' + u[i];
    """)


def integer_rank_axis(axis: Axis, n: int) -> None:
    """Ranks are integers: tick each one on small jobs, let bokeh thin them on big ones."""
    from bokeh.models import SingleIntervalTicker

    axis.ticker = SingleIntervalTicker(interval=1 if n <= 32 else max(1, n // 16))
