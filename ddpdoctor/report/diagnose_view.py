"""diagnose: the root cause with its quoted log lines first, then the folded cascade."""

from __future__ import annotations

from ddpdoctor.core.report import Report
from ddpdoctor.report.blocks import Section, fragment


def sections(report: Report) -> list[Section]:
    quoted = [f for f in report.sorted_findings() if isinstance(f.evidence.get("lines"), list)]
    if not quoted:
        return []
    # the triage orders root causes as they happened and folds the cascade into the first
    root = next((f for f in report.findings if f in quoted), quoted[0])
    lines = [str(line) for line in root.evidence.get("lines", [])]
    fallout = [str(x) for x in root.evidence.get("fallout") or []]
    others = [f for f in quoted if f is not root]
    return [Section("Root cause in the logs", [fragment(
        "diagnose.html.j2", root=root, lines=lines, fallout=fallout, others=others)])]
