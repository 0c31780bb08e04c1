"""Page assembly: one Report (+ the series found beside it) -> one self-contained HTML file.

The verdict first, then each finding with its evidence and its playbook, then the charts
of the report's kind, then the checks. Bokeh's JavaScript is inlined from its wheel: the
page needs no network.
"""

from __future__ import annotations

from functools import lru_cache
from typing import TYPE_CHECKING

from markupsafe import Markup, escape

from ddpdoctor import __version__
from ddpdoctor.core import redact
from ddpdoctor.core.report import SCHEMA, Report
from ddpdoctor.report import charts_check, charts_hang, charts_scale, charts_training, diagnose_view
from ddpdoctor.report.blocks import Chart, Section
from ddpdoctor.report.markdown import playbook_html
from ddpdoctor.report.series import RunSeries
from ddpdoctor.report.templating import environment
from ddpdoctor.report.verdict import verdict

if TYPE_CHECKING:
    from ddpdoctor.core.findings import Finding

_SKIP_EVIDENCE = {"check"}


def sections_for(report: Report, series: RunSeries) -> list[Section]:
    """The charts of this report's kind; a report may be several kinds (a run that hung)."""
    out: list[Section] = []
    out += diagnose_view.sections(report)
    out += charts_hang.sections(report, series.fr, series.heartbeats)
    culprits = sorted({r for f in report.findings for r in f.ranks})
    out += charts_training.sections(series, culprits)
    if report.command == "check":
        out += charts_check.section(report)
    if report.command == "scale":
        out += charts_scale.section(report)
    return [s for s in out if s]


def _finding_views(findings: list[Finding]) -> list[dict[str, object]]:
    """Each finding's view; a playbook is written out in full once per page (thousands of
    findings with one playbook made a page of hundreds of MB)."""
    views, shown = [], set()
    for f in findings:
        view = _finding_view(f)
        if f.playbook in shown:
            view["playbook_html"] = Markup(f"<p>The same playbook as the first "
                                           f"{escape(f.playbook)} finding above.</p>")
        shown.add(f.playbook)
        views.append(view)
    return views


def _finding_view(f: Finding) -> dict[str, object]:
    title, fix, body = playbook_html(f.playbook)
    items = [(k, v) for k, v in f.evidence.items() if k not in _SKIP_EVIDENCE]
    return {"id": f.id, "severity": f.severity, "title": f.title, "ranks": f.ranks,
            "playbook": f.playbook, "playbook_title": title, "playbook_html": Markup(body),
            "fix_html": Markup(fix),
            "evidence_items": items}


@lru_cache(maxsize=1)
def _bokeh_js() -> str:
    from bokeh.resources import Resources

    js = "\n".join(Resources(mode="inline", components=["bokeh"]).js_raw)
    # "</script" inside inlined code would end the tag early
    return "<script>" + js.replace("</script", "<\\/script") + "</script>"


def _css() -> str:
    from importlib import resources

    return (resources.files("ddpdoctor.report") / "templates" / "page.css").read_text()


def render_page(report: Report, series: RunSeries | None = None) -> str:
    series = series or RunSeries()
    # The page is one more view of the report: the same scrub as the terminal and the JSON.
    report = report.finish().redacted()
    sections = sections_for(report, series)
    charts = [item for s in sections for item in s.items if isinstance(item, Chart)]
    bokeh_js = bokeh_script = ""
    divs: dict[str, Markup] = {}
    if charts:
        from bokeh.embed import components

        script, div_list = components([c.model for c in charts])
        divs = {c.model.id: Markup(d) for c, d in zip(charts, div_list)}
        bokeh_js, bokeh_script = _bokeh_js(), script
    world = report.world
    head = [f"{world['world_size']} ranks" if world.get("world_size") else "",
            str(world.get("backend") or ""), f"{report.duration_s or 0:.1f} s",
            str(report.to_dict()["started"])[:19].replace("T", " ") + " UTC"]
    checks = [{"name": c.name, "summary": c.summary, "group": c.group,
               "status": report.check_status(c)} for c in report.checks]
    return environment().get_template("page.html.j2").render(
        report=report, v=verdict(report), head=" · ".join(h for h in head if h),
        findings=_finding_views(report.sorted_findings()), sections=sections,
        checks=checks, notes=[redact.text(n) for n in series.notes], divs=divs, css=Markup(_css()),
        bokeh_js=Markup(bokeh_js), bokeh_script=Markup(bokeh_script),
        version=__version__, schema=SCHEMA)
