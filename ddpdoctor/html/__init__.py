"""HTML report: one self-contained page per Report, with the charts people read.

Imported only when ``--html`` is given or ``ddpdoctor report`` runs: bokeh, Jinja2 and
markdown-it-py are not loaded by any other command.
"""

from __future__ import annotations

import os

from ddpdoctor.report import Report


def write_html(report: Report, path: str | os.PathLike, run_dir: str | None = None,
               json_logs: list[str] | None = None) -> int:
    """Render ``report`` (and the series beside it) to ``path``; returns the size in bytes."""
    from ddpdoctor.html.page import render_page
    from ddpdoctor.html.sources import collect_series
    from ddpdoctor.safefile import write_atomic

    series = collect_series(report, run_dir=run_dir, json_logs=json_logs)
    data = render_page(report, series).encode("utf-8")
    write_atomic(path, data, mode=0o644)
    return len(data)
