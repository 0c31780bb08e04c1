"""`ddpdoctor attach PID...`: diagnose a hung job from its launcher's or ranks' PIDs."""

from __future__ import annotations

import click

from ddpdoctor.commands.common import DoctorCommand, FiniteFloat, finish, html_option, json_option
from ddpdoctor.core.errors import DoctorError
from ddpdoctor.core.report import EXIT_DOCTOR_FAILED, Report


@click.command(name="attach", cls=DoctorCommand)
# A PID below 1 would address a process group (kill(-5)) or every process: refused.
@click.argument("pids", nargs=-1, type=click.IntRange(1, 2**31 - 1), metavar="PID...")
@click.option("--job", "job", default=None, metavar="HOST:PORT",
              help="The whole job, every node: ask each `ddpdoctor run` of the job through "
                   "its TCPStore (the --rdzv-endpoint) for its ranks' stacks; nothing is "
                   "stopped (docs/multinode.md).")
@click.option("--native", is_flag=True,
              help="Add native (C/C++) frames to the stacks (slower: ~1 s per rank).")
@click.option("--timeout", type=FiniteFloat(min=0.1, max=3600), default=5.0, show_default=True,
              metavar="S", help="Deadline for reading each rank's stack (and FR dumps).")
@json_option
@html_option
def command(pids: tuple[int, ...], job: str | None, native: bool, timeout: float,
            json_path: str | None, html_path: str | None) -> int:
    """Diagnose a hung job: every rank's stack, the culprit rank and why the others wait.

    \b
    PID is a launcher (torchrun), any parent of the ranks, or the rank processes.
    ddpdoctor attach $(pgrep -f torchrun)
    ddpdoctor attach --json hang.json 4711 4712
    ddpdoctor attach --job head-node:29400
    """
    if job is not None:
        if pids:
            raise click.UsageError("give PIDs or --job, not both")
        return _attach_job(job, timeout, json_path, html_path)
    if not pids:
        raise click.UsageError("missing PID... (or --job HOST:PORT)")
    from ddpdoctor.attach.diagnosis import diagnose_hang
    from ddpdoctor.attach.discover import AttachError
    from ddpdoctor.attach.stacks import StackError

    report = Report(command="attach")
    diagnosis = None
    try:
        diagnosis = diagnose_hang(list(pids), native=native, timeout=timeout)
    except AttachError as e:
        if e.exit_code != EXIT_DOCTOR_FAILED:
            raise DoctorError(str(e), e.exit_code) from None
        report.doctor_error = str(e)
    except StackError as e:
        report.doctor_error = str(e)
    if diagnosis is not None:
        diagnosis.add_to(report)
    return finish(report, json_path, after=_stack_view(diagnosis), html_path=html_path)


def _attach_job(text: str, timeout: float, json_path: str | None,
                html_path: str | None) -> int:
    from ddpdoctor.jobview.keys import parse_endpoint

    try:
        endpoint = parse_endpoint(text, source="--job")
    except ValueError as e:
        raise click.BadParameter(str(e), param_hint="--job") from e
    from ddpdoctor.jobview.observe import ObserveError, add_to, observe

    report = Report(command="attach")
    try:
        verdict, nodes = observe(endpoint, timeout)
    except ObserveError as e:
        raise DoctorError(str(e), EXIT_DOCTOR_FAILED) from None
    add_to(report, verdict, nodes, endpoint)
    return finish(report, json_path, html_path=html_path)


def _stack_view(diagnosis):
    """The merged stack view, printed after the report when there are stacks."""
    if diagnosis is None or not diagnosis.groups:
        return None

    def show(_report: Report) -> None:
        from ddpdoctor.attach.view import render_stack_groups

        render_stack_groups(diagnosis.groups, diagnosis.culprits)

    return show
