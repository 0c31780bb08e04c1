"""`ddpdoctor report RUN_DIR|REPORT.json --html PATH`: render a page after the fact."""

from __future__ import annotations

import os

import click

from ddpdoctor.commands.common import DoctorCommand, write_html
from ddpdoctor.core import outputs
from ddpdoctor.core.errors import DoctorError
from ddpdoctor.core.report import EXIT_USAGE


@click.command(name="report", cls=DoctorCommand)
@click.argument("source", metavar="RUN_DIR|REPORT.json")
@click.option("--html", "html_path", metavar="PATH", required=True,
              callback=lambda ctx, param, value: _checked(value),
              help="Where to write the self-contained HTML page.")
@click.option("--json-log", "json_logs", multiple=True, metavar="PATH",
              help="The reference trainer's --json-log (per-rank step times, memory, "
                   "losses) to draw; RUN_DIR/train.jsonl is read without it.")
@click.option("--run-dir", default=None, metavar="DIR",
              help="Read the watch events, Flight Recorder dumps and heartbeats from DIR "
                   "[default: the run directory the report names].")
def command(source: str, html_path: str, json_logs: tuple[str, ...],
            run_dir: str | None) -> int:
    """Render a report as one self-contained HTML page, later, from its --json file or
    from `ddpdoctor run`'s run directory.

    \b
    ddpdoctor report check.json --html check.html
    ddpdoctor report /tmp/ddpdoctor-run-abc123 --html run.html
    ddpdoctor report run.json --json-log train.jsonl --html run.html

    Exit code: 0 when the page was written, 2 when SOURCE is not a report or a run
    directory, 3 when the page cannot be written.
    """
    from ddpdoctor.report.sources import SourceError, load_report

    try:
        report = load_report(source)
    except SourceError as e:
        raise DoctorError(str(e), EXIT_USAGE) from None
    if run_dir is None and os.path.isdir(source):
        run_dir = source
    write_html(report, html_path, run_dir=run_dir, json_logs=list(json_logs))
    return 0


def _checked(value: str) -> str:
    from ddpdoctor.report.deps import require_html

    try:
        outputs.check("--html", value, stdout_ok=False)
        require_html()
    except DoctorError as e:
        raise click.BadParameter(str(e).removeprefix("--html ")) from None
    return value
