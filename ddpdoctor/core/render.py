"""Terminal view of a Report, in the style of ``flutter doctor``.

One line per check with a mark, the findings under the check that produced them with a hint
that names the playbook, then one summary line. Findings that belong to no check (attach,
diagnose, run) are listed under "Findings".
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Iterator

from rich.console import Console, ConsoleOptions, ConsoleRenderable, RenderableType, RenderHook
from rich.markup import escape
from rich.segment import Segment
from rich.text import Text

from ddpdoctor.core.findings import Finding, format_ranks
from ddpdoctor.core.report import Report

MARKS = {
    "ok": ("[✓]", "green"),
    "warning": ("[!]", "yellow"),
    "error": ("[✗]", "red"),
    "skipped": ("[-]", "dim"),
}
FINDING_MARKS = {"error": ("✗", "red"), "warning": ("!", "yellow"), "info": ("•", "cyan")}

# Evidence longer than this is cut in the terminal unless -v; --json always has it whole.
_MAX_EVIDENCE_CHARS = 400
_MAX_EVIDENCE_LINES = 12


# Characters a terminal acts on instead of showing: C0 controls but tab and newline (ESC
# starts CSI/OSC sequences: clear the screen, set the title, fake colours), DEL, C1
# controls (U+009B is a one-character CSI), and the bidi and line-separator characters that
# reorder or split what is shown (Trojan Source). A log line, a file name or a process's
# argv can hold any of them; the view shows them as escapes.
_UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029"
                     "\u202a-\u202e\u2066-\u2069]")


def printable(s: str) -> str:
    """``s`` with every character a terminal would act on shown as its escape."""
    return _UNSAFE.sub(lambda m: (f"\\x{ord(m[0]):02x}" if ord(m[0]) < 0x100
                                  else f"\\u{ord(m[0]):04x}"), s)


class _Printable:
    """A renderable whose text segments went through ``printable`` (rich's own control
    segments, its colours, are kept)."""

    def __init__(self, renderable: RenderableType) -> None:
        self.renderable = renderable

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> Iterator[Segment]:
        for seg in console.render(self.renderable, options):
            yield seg if seg.control else Segment(printable(seg.text), seg.style)


class _PrintableHook(RenderHook):
    """Every renderable printed on the console goes through ``_Printable``."""

    def process_renderables(
            self, renderables: list[ConsoleRenderable]) -> list[ConsoleRenderable]:
        return [_Printable(r) for r in renderables]


def safe_console(console: Console | None = None) -> Console:
    """``console`` (or a new one for stdout) that shows control characters as escapes."""
    if console is None:
        _tolerant_stdout()
        # Piped into a log: keep each line whole instead of wrapping at 80 columns.
        console = Console(highlight=False)
        console.soft_wrap = not console.is_terminal
    if not getattr(console, "_ddpdoctor_printable", False):
        console.push_render_hook(_PrintableHook())
        console._ddpdoctor_printable = True  # type: ignore[attr-defined]
    return console


def _tolerant_stdout() -> None:
    """A stdout that cannot encode the view's marks (PYTHONIOENCODING=ascii) shows them as
    escapes instead of failing the command with UnicodeEncodeError."""
    encoding = (getattr(sys.stdout, "encoding", "") or "").lower().replace("-", "")
    if encoding not in ("utf8", "utf16", "utf32") and hasattr(sys.stdout, "reconfigure"):
        try:
            sys.stdout.reconfigure(errors="backslashreplace")
        except (ValueError, OSError):
            pass


def _evidence_lines(finding: Finding, verbose: bool) -> list[str]:
    max_lines = None if verbose else _MAX_EVIDENCE_LINES
    max_chars = None if verbose else _MAX_EVIDENCE_CHARS
    lines = []
    for key, value in finding.evidence.items():
        if isinstance(value, list) and value and all(isinstance(v, str) for v in value):
            shown = value[:max_lines]
            lines.append(f"{key}:")
            lines.extend(f"  {v}" for v in shown)
            if len(value) > len(shown):
                lines.append(f"  ... {len(value) - len(shown)} more (see --json)")
            continue
        text = value if isinstance(value, str) else json.dumps(value, default=str)
        if max_chars is not None and len(text) > max_chars:
            text = text[:max_chars] + " ..."
        lines.append(f"{key}: {text}")
    return lines


def _render_finding(console: Console, finding: Finding, indent: str, verbose: bool) -> None:
    mark, style = FINDING_MARKS[finding.severity]
    line = Text(indent)
    line.append(f"{mark} {finding.id}", style=f"bold {style}")
    line.append(f"  {finding.title}")
    if finding.ranks:
        word = "rank" if len(finding.ranks) == 1 else "ranks"
        line.append(f"  ({word} {format_ranks(finding.ranks)})", style="bold")
    console.print(line)
    for ev in _evidence_lines(finding, verbose):
        console.print(Text(f"{indent}    {ev}", style="dim"))
    console.print(f"{indent}    [cyan]→ ddpdoctor playbook {escape(finding.playbook)}[/cyan]")


def render(report: Report, console: Console | None = None, verbose: bool = False) -> None:
    console = safe_console(console)  # a log line's ESC[2J is shown, not obeyed
    report.finish()
    report = report.redacted()  # secrets never reach the terminal (report.scrub)
    _render_head(console, report)
    placed = _render_checks(console, report, verbose)
    loose = [f for f in report.sorted_findings() if id(f) not in placed]
    if loose:
        console.print(Text("Findings", style="bold underline"))
        for f in loose:
            _render_finding(console, f, "  ", verbose)
    console.print()
    step = report.next_step()
    if step.finding:  # before the verdict: the verdict stays the last line scripts read
        console.print(Text(f"→ next step: {step.action.says} ({step.finding}: {step.reason})",
                           style="bold"))
    console.print(_verdict_line(report))


def _render_head(console: Console, report: Report) -> None:
    world = report.world
    head = [f"ddpdoctor {report.command}"]
    if world.get("world_size"):
        head.append(f"{world['world_size']} ranks")
    if world.get("backend"):
        head.append(str(world["backend"]))
    head.append(f"{report.duration_s:.1f} s")
    console.print(Text(" · ".join(head), style="bold"))
    if world.get("store_listen"):
        console.print(Text(f"doctor's rendezvous store listened on {world['store_listen']} only",
                           style="dim"))


def _render_checks(console: Console, report: Report, verbose: bool) -> set[int]:
    """One line per check under its group heading, its findings under it; returns the ids
    of the findings placed."""
    placed: set[int] = set()
    current_group = None
    for check in report.checks:
        if check.group and check.group != current_group:
            current_group = check.group
            console.print(Text(check.group, style="bold underline"))
        status = report.check_status(check)
        mark, style = MARKS[status]
        line = Text()
        line.append(mark, style=f"bold {style}")
        line.append(f" {check.name}: ", style="bold")
        line.append(check.summary, style="dim" if status == "skipped" else "")
        console.print(line)
        for f in report.sorted_findings():
            if f.check == check.name:
                placed.add(id(f))
                _render_finding(console, f, "    ", verbose)
    return placed


def _verdict_line(report: Report) -> Text:
    if report.doctor_error:
        return Text(f"✗ ddpdoctor could not run: {report.doctor_error}", style="bold red")
    errors = sum(f.severity == "error" for f in report.findings)
    warnings = sum(f.severity == "warning" for f in report.findings)
    failed = [c.name for c in report.checks if report.check_status(c) == "error"
              and not any(f.check == c.name for f in report.findings)]
    if failed and not errors:
        # A check that failed without a finding (e.g. a job that hung with no readable
        # stacks) is not "no issues".
        return Text(f"! {len(failed)} check(s) failed without a diagnosis: "
                    f"{', '.join(failed)}", style="bold red")
    if errors or warnings:
        return Text(f"! {errors} error(s), {warnings} warning(s). "
                    "Fix the first error first: later ones are often its fallout.",
                    style="bold red" if errors else "bold yellow")
    notes = sum(f.severity == "info" for f in report.findings)
    above = f" ({notes} note(s) above, for information)" if notes else ""
    if report.clear:
        return Text(f"• {report.clear}{above}", style="bold")
    if notes:  # advice the job printed or a fact worth knowing: not a problem
        return Text(f"• No issues found{above}", style="bold green")
    return Text("• No issues found!", style="bold green")
