"""`ddpdoctor run -- CMD...`: run a launch command supervised; catch hangs, triage crashes."""

from __future__ import annotations

import sys

import click

from ddpdoctor.commands.common import finish, html_option, json_option
from ddpdoctor.report import EXIT_DOCTOR_FAILED


@click.command(name="run", context_settings={"ignore_unknown_options": True,
                                             "allow_interspersed_args": False})
@click.option("--hang-timeout", type=click.FloatRange(min=1.0), default=300.0,
              show_default=True, metavar="S",
              help="Declare a hang when no rank makes progress (output, CPU time, "
                   "heartbeats) for S seconds.")
@click.option("--kill/--no-kill", default=True, show_default=True,
              help="Stop a hung job after diagnosing it (SIGTERM, then SIGKILL).")
@click.option("--kill-grace", type=click.FloatRange(min=0.0), default=10.0,
              show_default=True, metavar="S", help="Seconds between SIGTERM and SIGKILL.")
@click.option("--watch/--no-watch", default=True, show_default=True,
              help="Switch on ddpdoctor.watch's in-training checks in every rank "
                   "(environment + import hook; no code change); their findings join "
                   "the report.")
@click.option("--fail-on-findings", is_flag=True,
              help="Exit 1 when the job exits 0 but an error was found (NaN losses, "
                   "desynced replicas...). Off: the job's code is passed on.")
@click.option("--native", is_flag=True, help="Add native frames to the hang diagnosis.")
@click.option("--run-dir", type=click.Path(file_okay=False), default=None, metavar="DIR",
              help="Where the output copy, heartbeats and Flight Recorder dumps go "
                   "(default: a new ddpdoctor-run-* directory under $TMPDIR).")
@json_option
@html_option
@click.argument("cmd", nargs=-1, type=click.UNPROCESSED, metavar="-- CMD...")
def command(hang_timeout: float, kill: bool, kill_grace: float, watch: bool,
            fail_on_findings: bool, native: bool, run_dir: str | None, json_path: str | None,
            html_path: str | None, cmd: tuple[str, ...]) -> None:
    """Run any launch command unchanged, supervised: catch hangs, triage crashes.

    \b
    ddpdoctor run -- torchrun --nproc-per-node 8 train.py --lr 3e-4
    ddpdoctor run --hang-timeout 120 --json run.json -- python train.py

    Output passes through as it comes and a copy is kept (per rank where lines carry
    torchrun's [rankN]: prefix). When no rank makes progress for --hang-timeout seconds,
    every rank's stack is read (as `ddpdoctor attach`), the culprit is named and the job
    is stopped (exit 1). When the job fails, its output is triaged: the first rank that
    failed and why. What the in-training checks found (NaN, stragglers, a slow link,
    desynced replicas, memory growth...) is added to the report. Otherwise the job's own
    exit code is passed on (with --fail-on-findings, a job that exits 0 with an error
    finding exits 1).
    """
    from ddpdoctor.supervise.process import JobStartError
    from ddpdoctor.supervise.runner import RunOptions, supervise

    if not cmd:
        raise click.UsageError("no command given: ddpdoctor run [OPTIONS] -- CMD...")
    opts = RunOptions(hang_timeout=hang_timeout, kill=kill, watch=watch, run_dir=run_dir,
                      native=native, grace=kill_grace, fail_on_findings=fail_on_findings)
    try:
        result = supervise(list(cmd), opts)
    except JobStartError as e:
        click.echo(f"ddpdoctor run: {e}", err=True)
        sys.exit(e.exit_code)
    except OSError as e:
        click.echo(f"ddpdoctor run: {e.strerror or e}"
                   + (f": {e.filename}" if getattr(e, "filename", None) else ""), err=True)
        sys.exit(EXIT_DOCTOR_FAILED)
    _finish(result, json_path, html_path)


def _finish(result, json_path: str | None, html_path: str | None = None) -> None:  # noqa: ANN001
    report = result.report
    report.exit_override = result.exit_code  # the job's code is passed on
    hang = result.hang
    after = None
    if hang is not None and hang.stopped and hang.diagnosis is not None \
            and hang.diagnosis.groups:
        def after(_report) -> None:  # noqa: ANN001
            from ddpdoctor.attach.view import render_stack_groups

            render_stack_groups(hang.diagnosis.groups, hang.diagnosis.culprits)
    finish(report, json_path, after=after, html_path=html_path)
