"""`ddpdoctor run -- CMD...`: run a launch command supervised; catch hangs, triage crashes."""

from __future__ import annotations

import os
import sys

import click

from ddpdoctor.commands.common import (
    DoctorCommand,
    FiniteFloat,
    finish,
    html_option,
    json_option,
    reject_unknown_option,
    write_html,
)
from ddpdoctor.core.errors import DoctorError
from ddpdoctor.core.report import EXIT_DOCTOR_FAILED, EXIT_USAGE


@click.command(name="run", cls=DoctorCommand, context_settings={"ignore_unknown_options": True,
                                             "allow_interspersed_args": False})
@click.option("--hang-timeout", type=FiniteFloat(min=1.0), default=None, metavar="S",
              help="Look at the job's stacks when no rank prints or steps for S seconds; "
                   "stop it only if the stacks confirm a hang (see above). Default: "
                   "adaptive, max(--hang-min, 5 x the job's p99 step time) once 5 steps "
                   "are seen (300 s before).")
@click.option("--hang-min", type=FiniteFloat(min=1.0), default=10.0, show_default=True,
              metavar="S", help="The adaptive hang threshold is never below S seconds.")
@click.option("--job-endpoint", default=None, metavar="HOST:PORT",
              help="The job's TCPStore for the whole-job view (default: the launch "
                   "command's --rdzv-endpoint or --master-addr/--master-port, when it "
                   "spans nodes).")
@click.option("--job-view/--no-job-view", default=True, show_default=True,
              help="Join the other nodes' `ddpdoctor run` through the job's store "
                   "(docs/multinode.md).")
@click.option("--kill/--no-kill", default=True, show_default=True,
              help="Stop a confirmed hang (SIGTERM, then SIGKILL, to every process of "
                   "the job).")
@click.option("--kill-grace", type=FiniteFloat(min=0.0, min_open=True), default=10.0,
              show_default=True, metavar="S",
              help="Seconds between SIGTERM and SIGKILL whenever run ends the job.")
@click.option("--watch/--no-watch", default=True, show_default=True,
              help="Switch on ddpdoctor.watch's in-training checks in every rank "
                   "(environment + import hook; no code change); their findings join "
                   "the report.")
@click.option("--metrics-port", type=click.IntRange(0, 65535), default=None, metavar="N",
              help="Serve each rank's watch metrics and finding counters for Prometheus on "
                   "port N + LOCAL_RANK (needs --watch; docs/integrations.md).")
@click.option("--metrics-host", default=None, metavar="ADDR",
              help="Address the metrics endpoints bind to (default 127.0.0.1).")
@click.option("--profile", default=None, metavar="START:STEPS",
              help="Profile optimizer steps START..START+STEPS-1 on every rank with "
                   "torch.profiler (needs --watch; no code change): the top operators and "
                   "where the steps went join the report, each rank's trace goes to the "
                   "run directory (profile-rank{R}.json, for Perfetto). E.g. 20:5.")
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
def command(hang_timeout: float | None, hang_min: float, job_endpoint: str | None,
            job_view: bool, kill: bool, kill_grace: float, watch: bool,
            metrics_port: int | None, metrics_host: str | None, profile: str | None,
            fail_on_findings: bool, native: bool, run_dir: str | None, json_path: str | None,
            html_path: str | None, cmd: tuple[str, ...]) -> int:
    """Run any launch command unchanged, supervised: catch hangs, triage crashes.

    \b
    ddpdoctor run -- torchrun --nproc-per-node 8 train.py --lr 3e-4
    ddpdoctor run --hang-timeout 120 --json run.json -- python train.py
    ddpdoctor run -- torchrun --nnodes 4 --rdzv-endpoint head:29400 ... (every node)

    Output passes through as it comes; a copy is kept, line by line (per rank where lines
    carry torchrun's [rankN]: prefix). When no rank prints or steps for --hang-timeout
    seconds, every rank's stack is read (as `ddpdoctor attach`). The job is stopped
    (exit 1) only on a CONFIRMED hang: ranks wait in a collective that an idle rank never
    reaches, a rank is stopped (SIGSTOP) or gone while the others sit idle. Otherwise
    (no hang visible, ranks computing: an evaluation, a checkpoint save, a long step)
    run says once what it saw and keeps watching. When the job fails, its output is
    triaged: the first rank that failed and why. The job's own exit code is passed on.

    On many nodes (the launch command names a --rdzv-endpoint or --master-addr of a
    multi-node job, or --job-endpoint), every node's run joins one job view through the
    job's own TCPStore: the store's host decides for the whole job and every node's
    report names the culprit's rank, host, pid and line (docs/multinode.md).

    \b
    However run ends (the job exits, a confirmed hang, Ctrl-C twice, SIGTERM, SIGHUP,
    SIGQUIT), it ends every process the job started that is still alive (ranks, their
    workers, daemons that left the process group): SIGTERM, SIGKILL after --kill-grace,
    listed in the report. If run itself is SIGKILLed, the launcher dies with it and a
    reaper process ends the rest. A single Ctrl-C is passed to the job.

    \b
    Exit code: the job's own. A --json/--html target that cannot be written is said in
    one line; run then exits with the job's code when the job failed, 3 when it succeeded.
    """
    from ddpdoctor.run.process import JobStartError
    from ddpdoctor.run.runner import RunOptions, supervise

    if not cmd:
        raise click.UsageError("no command given: ddpdoctor run [OPTIONS] -- CMD...")
    reject_unknown_option(cmd)
    _metrics_environment(metrics_port, metrics_host)
    _profile_environment(profile, watch)
    _check_watch_environment()
    opts = RunOptions(hang_timeout=hang_timeout or 300.0, hang_fixed=hang_timeout is not None,
                      hang_min=hang_min, job_endpoint=_endpoint(job_endpoint),
                      job_view=job_view, kill=kill, watch=watch, run_dir=run_dir,
                      native=native, grace=kill_grace, fail_on_findings=fail_on_findings)
    try:
        result = supervise(list(cmd), opts)
    except JobStartError as e:
        raise DoctorError(str(e), e.exit_code) from None
    except OSError as e:
        raise DoctorError(f"{e.strerror or e}"
                          + (f": {e.filename}" if getattr(e, "filename", None) else ""),
                          EXIT_DOCTOR_FAILED) from None
    return _finish(result, json_path, html_path)


def _endpoint(text: str | None):  # jobview.keys.Endpoint | None
    if text is None:
        return None
    from ddpdoctor.jobview.keys import parse_endpoint

    try:
        return parse_endpoint(text)
    except ValueError as e:
        raise click.BadParameter(str(e), param_hint="--job-endpoint") from e


def _metrics_environment(port: int | None, host: str | None) -> None:
    """The ranks inherit run's environment: the watch in each reads these (watch/config.py)."""
    from ddpdoctor.core.contract import METRICS_HOST, METRICS_PORT

    if port is not None:
        os.environ[METRICS_PORT] = str(port)
    if host is not None:
        os.environ[METRICS_HOST] = host


def _profile_environment(window: str | None, watch: bool) -> None:
    """--profile reaches every rank's watch through the environment (watch/profile.py)."""
    if window is None:
        return
    from ddpdoctor.core.contract import PROFILE
    from ddpdoctor.core.profiled import parse_window

    if not watch:
        raise click.BadParameter("--profile needs --watch (the ranks' watch takes the "
                                 "profile)", param_hint="--profile")
    try:
        start, steps = parse_window(window)
    except ValueError as e:
        raise click.BadParameter(str(e), param_hint="--profile") from None
    os.environ[PROFILE] = f"{start}:{steps}"


def _check_watch_environment() -> None:
    """A bad DDPDOCTOR_WATCH_* value would switch the ranks' checks off (each rank's
    watch refuses it) while the report says they ran: refuse it here, before launch."""
    from ddpdoctor.watch.config import from_env

    try:
        from_env(dict(os.environ))
    except (ValueError, TypeError) as e:
        raise DoctorError(str(e), EXIT_USAGE) from None


def _finish(result, json_path: str | None, html_path: str | None = None) -> int:
    report = result.report
    hang = result.hang
    after = None
    if hang is not None and hang.stopped and hang.diagnosis is not None \
            and hang.diagnosis.groups:
        def after(_report) -> None:
            from ddpdoctor.attach.view import render_stack_groups

            render_stack_groups(hang.diagnosis.groups, hang.diagnosis.culprits)
    if result.terminal_gone and json_path != "-":
        # SIGHUP: the terminal is gone; the report is in RUN_DIR/report.json (and --json)
        _quiet_stdio()
    from ddpdoctor.run.process import reader_gone, silence

    if json_path == "-" and reader_gone(sys.stdout):
        silence(sys.stdout)  # nobody reads the JSON; RUN_DIR/report.json holds it
    try:
        code = finish(report, json_path, after=after, html_path=html_path)
    except DoctorError as e:  # a --json/--html target that cannot take the report
        return _output_failed(report, e)
    except (OSError, SystemExit) as e:
        # The view met a closed stdout (`| head -1`) or a gone terminal: the job's code
        # still stands. rich ends the process with SystemExit(1) on a broken pipe; any
        # other SystemExit is not ours to change.
        if isinstance(e, SystemExit) and not isinstance(e.__context__, BrokenPipeError):
            raise
        # the interpreter's last flush must not fail either (exit 120); stderr stays
        # where it still has a reader, for a one-line error that may follow
        silence(sys.stdout)
        if reader_gone(sys.stderr):
            silence(sys.stderr)
        try:
            if json_path and json_path != "-":
                report.write_json(json_path)  # what finish() would have written next
            if html_path:
                write_html(report, html_path)
        except DoctorError as err:
            return _output_failed(report, err)
        code = report.exit_code
    return code


def _output_failed(report, e: DoctorError) -> int:
    """The report could not be written where asked: said in one line. The job's failure
    stays the exit code; a job that succeeded ends 3 (what was asked for is missing)."""
    try:
        click.echo(f"ddpdoctor run: {e}", err=True)
    except OSError:
        pass
    return report.exit_code or e.exit_code


def _quiet_stdio() -> None:
    devnull = os.open(os.devnull, os.O_WRONLY)
    for fd in (1, 2):
        try:
            os.dup2(devnull, fd)
        except OSError:
            pass
