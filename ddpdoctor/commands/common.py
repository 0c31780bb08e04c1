"""What every command shares: the --json/--html options and how a report ends the process."""

from __future__ import annotations

import math
import sys
from collections.abc import Callable
from typing import Any

import click

from ddpdoctor.report import EXIT_DOCTOR_FAILED, Report


class FiniteFloat(click.ParamType):
    """A float option that refuses NaN and inf (exit 2), with optional bounds.

    ``float("nan")`` parses, and a NaN timeout compares false with everything: detection
    silently off. Every numeric option of every command goes through this type.
    """

    name = "float"

    def __init__(self, min: float | None = None, max: float | None = None,
                 min_open: bool = False) -> None:
        self.min, self.max, self.min_open = min, max, min_open

    def convert(self, value: Any, param: click.Parameter | None,
                ctx: click.Context | None) -> float:
        if isinstance(value, float) and math.isfinite(value):
            number = value
        else:
            try:
                number = float(value)
            except (TypeError, ValueError):
                self.fail(f"{value!r} is not a number", param, ctx)
        if not math.isfinite(number):
            self.fail(f"{value!r} is not a finite number", param, ctx)
        if self.min is not None and (number < self.min or (self.min_open and number == self.min)):
            self.fail(f"{value!r} must be {'>' if self.min_open else '>='} {self.min:g}",
                      param, ctx)
        if self.max is not None and number > self.max:
            self.fail(f"{value!r} must be <= {self.max:g}", param, ctx)
        return number


def json_option(f: Callable[..., Any]) -> Callable[..., Any]:
    return click.option(
        "--json", "json_path", metavar="PATH", default=None,
        help="Also write the machine-readable report (schema ddpdoctor.report/1) to PATH; "
             "'-' writes it to stdout instead of the terminal view.",
    )(f)


def html_option(f: Callable[..., Any]) -> Callable[..., Any]:
    return click.option(
        "--html", "html_path", metavar="PATH", default=None,
        help="Also write the report as one self-contained HTML page with charts to PATH "
             "(opens from disk in any browser, no network).",
    )(f)


def write_html_or_exit(report: Report, html_path: str, **sources: Any) -> None:
    """Write the HTML page; a page that cannot be written is exit 3 with one line."""
    from ddpdoctor.html import write_html

    try:
        size = write_html(report, html_path, **sources)
    except OSError as e:
        click.echo(f"ddpdoctor: cannot write HTML report to {html_path}: "
                   f"{e.strerror or e}", err=True)
        sys.exit(EXIT_DOCTOR_FAILED)
    click.echo(f"ddpdoctor: HTML report written to {html_path} ({size / 1e6:.1f} MB)",
               err=True)


def finish(report: Report, json_path: str | None, verbose: bool = False,
           after: Callable[[Report], None] | None = None, html_path: str | None = None) -> None:
    """Render ``report``, write its JSON and HTML if asked, and exit with its exit code.

    ``after`` prints command-specific detail (e.g. check's bandwidth table) after the view.
    """
    from ddpdoctor.render import render

    report.finish()
    if json_path != "-":
        render(report, verbose=verbose)
        if after is not None:
            after(report)
    if json_path:
        try:
            report.write_json(json_path)
        except OSError as e:
            click.echo(f"ddpdoctor: cannot write JSON report to {json_path}: {e.strerror}",
                       err=True)
            sys.exit(EXIT_DOCTOR_FAILED)
    if html_path:
        write_html_or_exit(report, html_path)
    sys.exit(report.exit_code)


def not_implemented(name: str) -> click.Command:
    """A command that is wired in but not built yet: says so and exits 3, never pretends."""

    @click.command(name=name, context_settings={"ignore_unknown_options": True},
                   add_help_option=True)
    @click.argument("args", nargs=-1, type=click.UNPROCESSED)
    def _cmd(args: tuple[str, ...]) -> None:
        click.echo(f"ddpdoctor {name}: not implemented yet", err=True)
        sys.exit(EXIT_DOCTOR_FAILED)

    _cmd.help = f"(not implemented yet) {name}"
    return _cmd
