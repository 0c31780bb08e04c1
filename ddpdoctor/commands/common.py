"""What every command shares: the --json/--html options and the one way a command ends."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, NoReturn, TypeVar

import click

from ddpdoctor.core import outputs
from ddpdoctor.core.errors import DoctorError
from ddpdoctor.core.report import Report

# a click command's function (or the command), as click.option takes and returns it
F = TypeVar("F", bound=Callable[..., object])
# a click callback that checks a PATH option's value
PathCallback = Callable[[click.Context, click.Parameter, str | None], str | None]


class FiniteFloat(click.ParamType):
    """A float option that refuses NaN and inf (exit 2), with optional bounds.

    ``float("nan")`` parses, and a NaN timeout compares false with everything: detection
    silently off. Every numeric option of every command goes through this type.
    """

    name = "float"

    def __init__(self, min: float | None = None, max: float | None = None,
                 min_open: bool = False) -> None:
        self.min, self.max, self.min_open = min, max, min_open

    # value: Any, as click.ParamType has it: a default or the command line's text; float()
    # decides what is a number
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


def _target_checker(option: str, stdout_ok: bool) -> PathCallback:
    """A click callback: the path is checked when it is parsed, before any work starts."""

    def check(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
        try:
            outputs.check(option, value, stdout_ok=stdout_ok)
            if option == "--html" and value is not None:
                from ddpdoctor.report.deps import require_html

                require_html()
        except DoctorError as e:
            reason = str(e).removeprefix(f"{option}: ").removeprefix(f"{option} ")
            raise click.BadParameter(reason, ctx, param) from None
        return value

    return check


def json_option(f: F) -> F:
    return click.option(
        "--json", "json_path", metavar="PATH", default=None,
        callback=_target_checker("--json", stdout_ok=True),
        help="Also write the machine-readable report (schema ddpdoctor.report/1) to PATH; "
             "'-' writes it to stdout instead of the terminal view.",
    )(f)


def html_option(f: F) -> F:
    return click.option(
        "--html", "html_path", metavar="PATH", default=None,
        callback=_target_checker("--html", stdout_ok=False),
        help="Also write the report as one self-contained HTML page with charts to PATH "
             "(opens from disk in any browser, no network).",
    )(f)


class DoctorCommand(click.Command):
    """The one way a command ends: its callback returns the exit code (None is 0) or raises
    DoctorError, whose reason is printed as one line; no command exits the process itself."""

    def invoke(self, ctx: click.Context) -> NoReturn:
        try:
            code = super().invoke(ctx)
        except DoctorError as e:
            click.echo(f"ddpdoctor {self.name}: {e}", err=True)
            ctx.exit(e.exit_code)
        ctx.exit(int(code or 0))


def write_html(report: Report, html_path: str, *, run_dir: str | None = None,
               json_logs: list[str] | None = None) -> None:
    """Write the HTML page; a page that cannot be written raises DoctorError (exit 3)."""
    from ddpdoctor.report import render_html

    target = outputs.check("--html", html_path, stdout_ok=False)
    assert target is not None
    data = render_html(report, run_dir=run_dir, json_logs=json_logs)
    outputs.write(target, data)
    click.echo(f"ddpdoctor: HTML report written to {html_path} ({len(data) / 1e6:.1f} MB)",
               err=True)


def finish(report: Report, json_path: str | None, verbose: bool = False,
           after: Callable[[Report], None] | None = None, html_path: str | None = None,
           *, run_dir: str | None = None, json_logs: list[str] | None = None) -> int:
    """Render ``report``, write its JSON and HTML if asked; returns the exit code.

    ``after`` prints command-specific detail (e.g. check's bandwidth table) after the view.
    A report that cannot be written raises DoctorError (exit 3).
    """
    from ddpdoctor.core.render import render

    report.finish()
    if json_path != outputs.STDOUT:
        render(report, verbose=verbose)
        if after is not None:
            after(report)
    if json_path:
        report.write_json(json_path)
    if html_path:
        write_html(report, html_path, run_dir=run_dir, json_logs=json_logs)
    return report.exit_code


def reject_unknown_option(cmd: tuple[str, ...]) -> None:
    """A command that passes what follows ``--`` unprocessed also gets its own misspelt
    options there: no launch command starts with a dash, so say it is no such option."""
    if cmd and cmd[0].startswith("-"):
        ctx = click.get_current_context()
        known = [o for p in ctx.command.params for o in p.opts if o.startswith("--")]
        raise click.NoSuchOption(cmd[0].split("=", 1)[0], possibilities=known, ctx=ctx)


def not_implemented(name: str) -> click.Command:
    """A command that is wired in but not built yet: says so and exits 3, never pretends."""

    @click.command(name=name, cls=DoctorCommand,
                   context_settings={"ignore_unknown_options": True}, add_help_option=True)
    @click.argument("args", nargs=-1, type=click.UNPROCESSED)
    def _cmd(args: tuple[str, ...]) -> None:
        raise DoctorError("not implemented yet")

    _cmd.help = f"(not implemented yet) {name}"
    return _cmd
