"""The report of one supervised run: how the job ended, what run saw, what it ended.

Everything run records goes through secrets.scrub_report before it is shown or written;
a copy of the report is always written to ``RUN_DIR/report.json`` (a terminal that went
away with SIGHUP still leaves a report behind).
"""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import TYPE_CHECKING

from ddpdoctor.core.contract import REPORT_FILE
from ddpdoctor.core.report import EXIT_FINDINGS, Check, CheckStatus, Report
from ddpdoctor.run import triage as triage_mod
from ddpdoctor.run.hang import GROUP
from ddpdoctor.run.process import Job
from ddpdoctor.run.redirected import rank_logs as redirected_logs
from ddpdoctor.run.secrets import scrub_report
from ddpdoctor.run.tree import killed_summary
from ddpdoctor.run.watch_events import merge, watch_findings

if TYPE_CHECKING:
    from ddpdoctor.core.findings import Finding
    from ddpdoctor.run.env import JobEnv
    from ddpdoctor.run.hang import HangOutcome
    from ddpdoctor.run.options import RunOptions
    from ddpdoctor.run.progress import ProgressTracker, RankExit
    from ddpdoctor.run.result import RunResult

REPORT_NAME = REPORT_FILE
_MEMORY_IDS = ("RANK_CRASHED", "OOM")


def job_exit_code(returncode: int) -> int:
    """What a shell would report: a signal death becomes 128 + the signal number."""
    return 128 - returncode if returncode < 0 else returncode


def _attached(events_path: str, since: float) -> str:
    """What the watch watched (never a silent "nothing found" over no model), and what
    it could not compare."""
    from ddpdoctor.core.attachment import read_all
    from ddpdoctor.run.watch_events import describe_attachments, watch_notes

    attached = read_all(os.path.dirname(os.path.abspath(events_path)), since)
    text = "; " + describe_attachments(attached)
    return text + "".join(f"; note: {n}" for n in watch_notes(events_path, since))


def build_report(result: RunResult, job: Job, jenv: JobEnv, opts: RunOptions, took: float,
                 wall0: float) -> None:
    report = result.report
    tracker = result.tracker
    assert tracker is not None  # the loop leaves it behind whenever the job ran
    rank_paths = job.copy.rank_paths()
    ranks_seen = sorted({e.rank for e in tracker.exits} | set(tracker.rank_last))
    if ranks_seen:
        report.world.setdefault("ranks_seen", ranks_seen)
    watched = watch_findings(jenv.events_path, since=wall0) if jenv.events_path else []
    _watch_check(report, jenv, opts, watched, wall0)
    _output_check(report, job, rank_paths)
    _stall_check(report, result, opts)

    _restarts(result, job, result.returncode)
    _job_outcome(result, job, opts, took, wall0)
    _memory_evidence(report, result)
    # After the outcome's own findings: the root cause of a crash or hang leads.
    for f in merge(report.findings, watched):
        report.add(f, check="watch")
    _per_rank_views(report, jenv, tracker)
    _cleanup_check(report, result)
    if result.job_end is not None:
        from ddpdoctor.jobview.report import add_to as add_job_view

        add_job_view(report, result.job_end)  # the job-wide root cause leads
    if (opts.fail_on_findings and result.exit_code == 0
            and any(f.severity == "error" for f in report.findings)):
        result.exit_code = EXIT_FINDINGS  # e.g. NaN losses in a job that "succeeded"
    report.exit_override = result.exit_code  # the job's code is passed on
    scrub_report(report, result.secrets)
    _write_copy(report, result.run_dir)


def _watch_check(report: Report, jenv: JobEnv, opts: RunOptions, watched: list[Finding],
                 wall0: float) -> None:
    if jenv.watch:
        found = (f"; found {', '.join(sorted({f.id for f in watched}))}" if watched
                 else "; nothing found")
        summary = ("in-training checks on (ddpdoctor.watch bootstrap, DDPDOCTOR_WATCH=1)"
                   + (found if jenv.events_path else "") + "".join(f"; {n}" for n in jenv.notes)
                   + (_attached(jenv.events_path, wall0) if jenv.events_path else ""))
    else:
        summary = "off" if not opts.watch else "; ".join(jenv.notes)
    report.checks.append(Check(
        "watch", summary, status="ok" if jenv.watch or not opts.watch else "skipped",
        group=GROUP, data={"fr_dir": jenv.fr_dir, "heartbeat_dir": jenv.heartbeat_dir,
                           "events": jenv.events_path}))


def _per_rank_views(report: Report, jenv: JobEnv, tracker: ProgressTracker | None) -> None:
    """The ranks' profile windows (run --profile) and their environments compared."""
    if jenv.events_path:
        from ddpdoctor.run.profile_view import add_profile

        add_profile(report, os.path.dirname(os.path.abspath(jenv.events_path)), GROUP)
    if tracker is not None:
        from ddpdoctor.run.rank_env import name_odd_ranks

        name_odd_ranks(report, tracker.rank_env, GROUP)


def _output_check(report: Report, job: Job, rank_paths: dict[int, Path]) -> None:
    copy = job.copy
    lost = copy.incomplete()
    summary = (f"{copy.lines} lines kept in {copy.combined_path}"
               + (f"; per rank: {', '.join(str(p) for p in rank_paths.values())}"
                  if rank_paths else ""))
    data: dict[str, object] = {"combined": str(copy.combined_path),
                            "ranks": {str(r): str(p) for r, p in rank_paths.items()},
                            "complete": not lost}
    if lost:
        first = lost[0]
        summary = (f"the kept log is INCOMPLETE: writing {first.path.name} failed: "
                   f"{first.error}; {first.lost_lines} of {copy.lines} lines "
                   f"({first.lost_bytes} bytes) not kept there (the terminal got them all)")
        data["incomplete"] = [{"file": str(f.path), "error": f.error,
                               "lines_kept": f.lines, "lines_lost": f.lost_lines,
                               "bytes_lost": f.lost_bytes} for f in lost]
    report.checks.append(Check("output", summary, status="error" if lost else "ok",
                               group=GROUP, data=data))


def _stall_check(report: Report, result: RunResult, opts: RunOptions) -> None:
    if not result.watched.looks:
        return
    last = result.watched.looks[-1]
    longest = max(lk.quiet_s for lk in result.watched.looks)
    report.checks.append(Check(
        "stall", f"quiet (no output, no step) for up to {longest:.0f} s (--hang-timeout "
        f"{opts.hang_timeout:g}); looked {len(result.watched.looks)} time(s), no hang confirmed: "
        f"{last.verdict.reason}; the job was left running", status="warning", group=GROUP,
        data={"looks": [lk.to_dict() for lk in result.watched.looks],
              "rule": "run stops a job only on a confirmed hang (docs/run.md)"}))


def _cleanup_check(report: Report, result: RunResult) -> None:
    killed = result.killed
    status: CheckStatus
    data = {"ended_by": result.ended_by, "killed": [k.to_dict() for k in killed]}
    if not killed:
        summary, status = f"{result.ended_by}; no process of the job was left", "ok"
    else:
        summary = (f"{result.ended_by}; ended {len(killed)} process(es) of the job: "
                   + killed_summary(killed))
        survived = [k for k in killed if k.how == "survived SIGKILL"]
        status = "error" if survived else "warning"
    report.checks.append(Check("cleanup", summary, status=status, group=GROUP, data=data))


def _memory_evidence(report: Report, result: RunResult) -> None:
    """A rank that died gets its RSS history up to its death."""
    if result.memory is None:
        return
    for f in report.findings:
        if f.id in _MEMORY_IDS and len(f.ranks) == 1:
            ev = result.memory.evidence(f.ranks[0])
            if ev is not None:
                f.evidence.setdefault("memory", ev)


def _job_outcome(result: RunResult, job: Job, opts: RunOptions, took: float,
                 wall0: float) -> None:
    report = result.report
    rc = result.returncode
    tracker = result.tracker
    if result.hang is not None:
        _hang_cause(report, result.hang, job.copy.combined_path, _last_attempt_line(result))
        result.hang.add_to(report, opts.hang_timeout)
        if result.hang.stopped:
            report.checks.append(Check("job", f"stopped by ddpdoctor after {took:.1f} s "
                                       "(confirmed hang)", status="error", group=GROUP,
                                       data={"returncode": rc}))
            result.exit_code = EXIT_FINDINGS
            return

    if rc is None:  # cannot happen after wait; never report a made-up code
        rc = -signal.SIGKILL
    how = triage_mod.exit_description(rc)
    if result.interrupted or result.teardown:
        what = (f"ended by ddpdoctor run ({result.teardown})" if result.teardown
                else "interrupted (Ctrl-C forwarded)")
        report.checks.append(Check("job", f"{what}; {how} after {took:.1f} s",
                                   status="warning", group=GROUP,
                                   data={"returncode": rc, "signal": result.teardown
                                         or "SIGINT"}))
        _stop_cause(report, result, job.copy.combined_path)
        result.exit_code = job_exit_code(rc)
        return
    log_path, exits = _triage_input(result, job)
    redirected = (redirected_logs(result.redirect, wall0) if result.redirect is not None
                  else [])
    in_paths = result.redirect is not None and result.redirect.paths_name_ranks
    if rc == 0:
        hidden = triage_mod.hidden_failure(log_path, redirected, ranks_in_paths=in_paths,
                                           endpoints=getattr(tracker, "endpoints", None))
        if hidden:
            _hidden(report, hidden, took)
            result.exit_code = 0  # passed on: --fail-on-findings makes it 1
            return
        report.checks.append(Check("job", f"exited with code 0 after {took:.1f} s",
                                   group=GROUP, data={"returncode": 0}))
        result.exit_code = EXIT_FINDINGS if result.hang is not None else 0
        return

    findings, info = triage_mod.triage_output(
        log_path, exits, rc, getattr(tracker, "endpoints", None),
        rank_files=redirected, ranks_in_paths=in_paths)
    _spawn_culprit(findings, result, log_path)
    info["returncode"] = rc
    if job.copy.incomplete():
        info["log_incomplete"] = True
    report.checks.append(Check("job", f"failed: {how} after {took:.1f} s", status="error",
                               group=GROUP, data={"returncode": rc}))
    if findings:
        summary = f"first failure: {_who(findings[0])}: {findings[0].id}"
    else:
        summary = "no known error in the output; see the kept logs"
    if job.copy.incomplete():
        summary += " (the kept log is incomplete: the cause may be in what was lost)"
    report.checks.append(Check(triage_mod.CHECK, summary, group=GROUP, data=info))
    for f in findings:
        report.add(f, check=triage_mod.CHECK)
    result.exit_code = job_exit_code(rc)


def _last_attempt_line(result: RunResult) -> int:
    """Where the last attempt's output starts: what came before was another attempt's."""
    attempts = result.attempts
    return attempts.attempts[-1].first_line if attempts.restarted else 0


def _hang_cause(report: Report, hang: HangOutcome, output_log: Path, from_line: int) -> None:
    """What the hung attempt printed before its hang, when that is a failure: it leads the
    hang's own findings (a limit, a crash the launch did not end the job for)."""
    if hang.output_bytes is None:
        return
    cause = triage_mod.before_stop(output_log, hang.output_bytes, hang=True,
                                   from_line=from_line)
    if not cause:
        return
    lead = cause[0]
    diagnosis = hang.diagnosis
    culprits = diagnosis.culprits if diagnosis is not None else []
    same = [f for f in diagnosis.findings if f.id == lead.id] if diagnosis is not None else []
    if not lead.ranks and len(same) == 1 and same[0].ranks:
        # one failure seen twice: the output says why, the stacks whose (a usage error
        # printed unprefixed; rank 1 gone while rank 0 waits for it)
        lead.ranks = list(same[0].ranks)
        lead.evidence["rank_from"] = f"run's look at the hang: {same[0].title}"
    named = (f" (the stacks name {'rank' if len(culprits) == 1 else 'ranks'} "
             f"{', '.join(map(str, culprits))})" if culprits else "")
    report.checks.append(Check(
        HANG_CAUSE, f"before the hang, the output shows {_who(lead)}: {lead.id}: the likely "
        f"cause of the hang; the stacks show where each rank waits{named}", group=GROUP,
        data={"log": str(output_log), "bytes_read": hang.output_bytes,
              "hang_culprits": culprits}))
    for f in cause:
        report.add(f, check=HANG_CAUSE)


HANG_CAUSE = "hang cause"


def _stop_cause(report: Report, result: RunResult, output_log: Path) -> None:
    """A job ended by a signal to run is not healthy for that: what it printed before the
    signal, when that is a failure (a rank's usage error while the other waits for it in
    its rendezvous, until someone gives up and ends the job)."""
    if result.signalled_at_bytes is None:
        return
    cause = triage_mod.before_stop(output_log, result.signalled_at_bytes,
                                   from_line=_last_attempt_line(result))
    if not cause:
        return
    lead = cause[0]
    report.checks.append(Check(
        triage_mod.CHECK, f"before the job was ended, its output shows {_who(lead)}: "
        f"{lead.id}", group=GROUP,
        data={"log": str(output_log), "bytes_read": result.signalled_at_bytes}))
    for f in cause:
        report.add(f, check=triage_mod.CHECK)


def _who(lead: Finding) -> str:
    """Whom the crash triage's lead finding names, as its check line says it."""
    if len(lead.ranks) == 1:
        return f"rank {lead.ranks[0]}"
    return f"ranks {lead.ranks}" if lead.ranks else "the job"


def _hidden(report: Report, findings: list[Finding], took: float) -> None:
    """A job that exited 0 while its output shows a rank's failure: never "healthy"."""
    lead = findings[0]
    who = _who(lead)
    report.checks.append(Check(
        "job", f"exited with code 0 after {took:.1f} s, but its output shows a failure "
        f"({who}: {lead.id}): the launch hid it (a shell's `wait` with no argument, "
        "`|| true`, a wrapper that drops its children's exit status)", status="error",
        group=GROUP, data={"returncode": 0, "hidden_failure": True}))
    report.checks.append(Check(triage_mod.CHECK, f"first failure: {who}: {lead.id}",
                               group=GROUP, data={"returncode": 0}))
    for f in findings:
        report.add(f, check=triage_mod.CHECK)


def _triage_input(result: RunResult, job: Job) -> tuple[Path, list[RankExit]]:
    """The log and rank exits the job's triage reads: its last attempt's after restarts
    (an earlier attempt's failure is in its own section, not the job's cause)."""
    sections = result.attempt_ends
    if sections and sections[-1].log:
        return Path(sections[-1].log), result.attempts.attempts[-1].exits
    assert result.tracker is not None  # the loop leaves it behind whenever the job ran
    return job.copy.combined_path, result.tracker.exits


def _spawn_culprit(findings: list[Finding], result: RunResult, log_path: Path) -> None:
    """mp.spawn names the failed child by its process index: the rank run read."""
    spawn = result.spawn
    if not spawn.children:
        return
    from ddpdoctor.run.spawn_ranks import name_spawn_culprit

    try:
        with open(log_path, "rb") as f:
            text = f.read(1 << 24).decode("utf-8", "replace")
    except OSError:
        return
    name_spawn_culprit(findings, text, spawn.index_to_rank(), spawn.claims())


def _restarts(result: RunResult, job: Job, rc: int | None) -> None:
    """One section per attempt of a job that restarted (run/attempt_report.py)."""
    attempts = result.attempts
    if not attempts.restarted:
        return
    from ddpdoctor.run import attempt_report as ar

    try:
        with open(job.copy.combined_path, "rb") as f:
            lines = f.read().decode("utf-8", "replace").splitlines(keepends=True)
    except OSError:
        return
    atts = attempts.attempts
    parts = ar.slice_lines(lines, atts)
    logs = ar.write_logs(result.run_dir, parts, atts)
    found, ends = [], []
    stop = _stopped_by_run(result)
    for i, (att, part, log) in enumerate(zip(atts, parts, logs, strict=True)):
        last = i == len(atts) - 1
        if last and stop is not None:  # run ended it: the ranks' exits are run's doing
            why, fs = stop
            found.append(fs)
            ends.append(ar.stopped(att, why, fs, log))
            continue
        fs = (triage_mod.triage_output(Path(log), att.exits, rc or 1)[0]
              if log and not (last and rc == 0) else [])
        found.append(fs)
        ends.append(ar.ending(att, part, fs, last, rc if rc is not None else 1, log))
    result.attempt_ends = ends
    for check in ar.attempt_checks(ends, atts, found, GROUP):
        result.report.checks.append(check)


def _stopped_by_run(result: RunResult) -> tuple[str, list[Finding]] | None:
    """Why run itself ended the job's last attempt, and the findings that say why."""
    hang = result.hang
    if hang is not None and hang.stopped:
        return "a confirmed hang", list(getattr(hang.diagnosis, "findings", None) or [])
    if result.teardown:
        return result.teardown, []
    if result.interrupted:
        return "interrupted: Ctrl-C forwarded", []
    return None


def _write_copy(report: Report, run_dir: str) -> None:
    from ddpdoctor.core.safefile import write_atomic

    try:
        write_atomic(os.path.join(run_dir, REPORT_NAME), report.to_json() + "\n", 0o600)
    except OSError as e:
        report.checks.append(Check("report copy", f"cannot write {REPORT_NAME} in the run "
                                   f"dir: {e.strerror or e}", status="warning", group=GROUP))
