"""What every command shares: the --json option and how a report ends the process."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import click

from ddpdoctor.report import EXIT_DOCTOR_FAILED, Report


def json_option(f: Callable[..., Any]) -> Callable[..., Any]:
    return click.option(
        "--json", "json_path", metavar="PATH", default=None,
        help="Also write the machine-readable report (schema ddpdoctor.report/1) to PATH; "
             "'-' writes it to stdout instead of the terminal view.",
    )(f)


def finish(report: Report, json_path: str | None, verbose: bool = False,
           after: Callable[[Report], None] | None = None) -> None:
    """Render ``report``, write its JSON if asked, and exit with its exit code.

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
