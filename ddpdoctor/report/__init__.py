"""HTML report: one self-contained page per Report, with the charts people read.

Imported only when ``--html`` is given or ``ddpdoctor report`` runs: bokeh, Jinja2 and
markdown-it-py are not loaded by any other command.
"""

from __future__ import annotations

import os

from ddpdoctor.core.report import Report


def render_html(report: Report, run_dir: str | None = None,
                json_logs: list[str] | None = None) -> bytes:
    """The page of ``report`` (and of the series found beside it), UTF-8."""
    from ddpdoctor.report.page import render_page
    from ddpdoctor.report.sources import collect_series

    series = collect_series(report, run_dir=run_dir, json_logs=json_logs)
    return render_page(report, series).encode("utf-8")


def write_html(report: Report, path: str | os.PathLike, run_dir: str | None = None,
               json_logs: list[str] | None = None) -> int:
    """Render ``report`` to ``path`` through the one output path; returns the size."""
    from ddpdoctor.core import outputs

    data = render_html(report, run_dir=run_dir, json_logs=json_logs)
    outputs.write(outputs.Target("--html", str(path)), data)
    return len(data)
