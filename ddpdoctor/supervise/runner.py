"""The supervision loop: start, watch progress, catch a hang, triage a failure, report."""

from __future__ import annotations

import os
import shlex
import signal
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ddpdoctor.report import EXIT_FINDINGS, Check, Report
from ddpdoctor.supervise import hang as hang_mod
from ddpdoctor.supervise import triage as triage_mod
from ddpdoctor.supervise.env import job_environment, watch_bootstrap_dir
from ddpdoctor.supervise.process import Job
from ddpdoctor.supervise.progress import ProgressTracker, read_heartbeats, sample_tree
from ddpdoctor.supervise.watch_events import merge, watch_findings

GROUP = "run"


@dataclass
class RunOptions:
    hang_timeout: float = 300.0
    kill: bool = True
    watch: bool = True
    run_dir: str | None = None
    native: bool = False
    grace: float = 10.0  # SIGTERM -> SIGKILL when stopping a hung job
    attach_timeout: float = 5.0
    # exit 1 when the job exited 0 but an error was found (NaN losses): opt-in, as a
    # heuristic check must not fail a pipeline that used to pass
    fail_on_findings: bool = False

    @property
    def poll_s(self) -> float:
        return max(0.2, min(1.0, self.hang_timeout / 5))


@dataclass
class RunResult:
    report: Report
    exit_code: int
    returncode: int | None = None
    hang: hang_mod.HangOutcome | None = None
    interrupted: int = 0
    run_dir: str = ""
    notes: list[str] = field(default_factory=list)


def job_exit_code(returncode: int) -> int:
    """What a shell would report: a signal death becomes 128 + the signal number."""
    return 128 - returncode if returncode < 0 else returncode


class _Interrupts:
    """Forward SIGINT/SIGTERM to the job's process group; a 2nd SIGINT kills it."""

    def __init__(self) -> None:
        self.job: Job | None = None
        self.count = 0
        self._saved: dict[int, Any] = {}

    def __enter__(self) -> _Interrupts:
        for sig in (signal.SIGINT, signal.SIGTERM):
            try:
                self._saved[sig] = signal.signal(sig, self._handle)
            except ValueError:  # not the main thread (tests): no forwarding
                pass
        return self

    def __exit__(self, *exc: object) -> None:
        for sig, old in self._saved.items():
            signal.signal(sig, old)

    def _handle(self, signum: int, frame: Any) -> None:
        self.count += 1
        if self.job is None:
            return
        if signum == signal.SIGINT and self.count > 1:
            self.job.signal_group(signal.SIGKILL)
        else:
            self.job.signal_group(signum)


def supervise(cmd: list[str], opts: RunOptions) -> RunResult:
    """Run ``cmd`` to its end (or stop it hung). Raises process.JobStartError."""
    run_dir = opts.run_dir or tempfile.mkdtemp(prefix="ddpdoctor-run-")
    os.makedirs(run_dir, exist_ok=True)
    jenv = job_environment(os.environ, run_dir, opts.watch,
                           watch_bootstrap_dir() if opts.watch else None)
    for d in (jenv.fr_dir, jenv.heartbeat_dir):
        os.makedirs(d, exist_ok=True)  # the ranks expect them (attach/watch contracts)
    report = Report(command="run")
    report.world.update({"command": shlex.join(cmd), "run_dir": run_dir})
    result = RunResult(report, 0, run_dir=run_dir, notes=list(jenv.notes))
    wall0 = time.time()

    with _Interrupts() as interrupts:
        job = Job.start(cmd, jenv.env, Path(run_dir))
        interrupts.job = job
        tracker = ProgressTracker(time.monotonic())
        rank_cache: dict[tuple[int, float], int | None] = {}
        while True:
            rc = job.poll()
            if rc is not None:
                break
            now = time.monotonic()
            sample = sample_tree(job.pid, now, rank_cache)
            for p in sample.procs:
                if p.pid != job.pid:
                    job.known.setdefault(p.pid, p.created)
            tracker.update(now, job.copy.lines, sample,
                           read_heartbeats(jenv.heartbeat_dir, wall0))
            stalled = tracker.stalled_for(now)
            if (result.hang is None and not interrupts.count
                    and stalled >= opts.hang_timeout and job.poll() is None):
                result.hang = _on_hang(job, tracker, stalled, opts)
                if result.hang is None:  # it ended by itself while being diagnosed
                    continue
                if result.hang.stopped:
                    rc = job.poll()
                    break
            time.sleep(opts.poll_s)
        job.drain(timeout=5.0)
        job.copy.close()
        if rc is None:
            rc = job.poll()
        result.returncode = rc
        result.interrupted = interrupts.count

    _build_report(result, job, tracker, jenv, opts, time.monotonic() - job.started, wall0)
    return result


def _on_hang(job: Job, tracker: ProgressTracker, stalled: float,
             opts: RunOptions) -> hang_mod.HangOutcome | None:
    print(f"ddpdoctor run: no rank made progress for {stalled:.1f} s (last: "
          f"{tracker.last_what}); diagnosing the hang...", file=sys.stderr, flush=True)
    outcome = hang_mod.diagnose(job.pid, stalled, tracker.last_what, opts.native,
                                opts.attach_timeout)
    if job.poll() is not None:
        print("ddpdoctor run: the job ended while it was being diagnosed; no hang",
              file=sys.stderr, flush=True)
        return None
    if opts.kill:
        print("ddpdoctor run: stopping the job (SIGTERM, SIGKILL after "
              f"{opts.grace:g} s; --no-kill keeps it running)", file=sys.stderr, flush=True)
        hang_mod.stop(job, outcome, opts.grace)
    else:
        view = Report(command="run")
        outcome.add_to(view, opts.hang_timeout)
        hang_mod.print_diagnosis(view, outcome)
    return outcome


def _build_report(result: RunResult, job: Job, tracker: ProgressTracker, jenv: Any,
                  opts: RunOptions, took: float, wall0: float) -> None:
    report = result.report
    rank_paths = job.copy.rank_paths()
    ranks_seen = sorted({e.rank for e in tracker.exits} | set(tracker.rank_last))
    if ranks_seen:
        report.world.setdefault("ranks_seen", ranks_seen)
    watched = watch_findings(jenv.events_path, since=wall0) if jenv.events_path else []
    if jenv.watch:
        found = (f"; found {', '.join(sorted({f.id for f in watched}))}" if watched
                 else "; nothing found")
        summary = ("in-training checks on (ddpdoctor.watch bootstrap, DDPDOCTOR_WATCH=1)"
                   + (found if jenv.events_path else "") + "".join(f"; {n}" for n in jenv.notes))
    else:
        summary = "off" if not opts.watch else "; ".join(jenv.notes)
    report.checks.append(Check(
        "watch", summary, status="ok" if jenv.watch or not opts.watch else "skipped",
        group=GROUP, data={"fr_dir": jenv.fr_dir, "heartbeat_dir": jenv.heartbeat_dir,
                           "events": jenv.events_path}))
    report.checks.append(Check(
        "output", f"{job.copy.lines} lines kept in {job.copy.combined_path}"
        + (f"; per rank: {', '.join(str(p) for p in rank_paths.values())}"
           if rank_paths else ""), group=GROUP,
        data={"combined": str(job.copy.combined_path),
              "ranks": {str(r): str(p) for r, p in rank_paths.items()}}))

    _job_outcome(result, job, tracker, opts, took)
    # After the outcome's own findings: the root cause of a crash or hang leads.
    for f in merge(report.findings, watched):
        report.add(f, check="watch")
    if (opts.fail_on_findings and result.exit_code == 0
            and any(f.severity == "error" for f in report.findings)):
        result.exit_code = EXIT_FINDINGS  # e.g. NaN losses in a job that "succeeded"


def _job_outcome(result: RunResult, job: Job, tracker: ProgressTracker, opts: RunOptions,
                 took: float) -> None:
    report = result.report
    rc = result.returncode
    if result.hang is not None:
        result.hang.add_to(report, opts.hang_timeout)
        if result.hang.stopped:
            report.checks.append(Check("job", f"stopped by ddpdoctor after {took:.1f} s "
                                       "(no progress)", status="error", group=GROUP,
                                       data={"returncode": rc}))
            result.exit_code = EXIT_FINDINGS
            return

    if rc is None:  # cannot happen after wait; never report a made-up code
        rc = -signal.SIGKILL
    how = triage_mod.exit_description(rc)
    if result.interrupted:
        report.checks.append(Check("job", f"interrupted (signal forwarded); {how} after "
                                   f"{took:.1f} s", status="warning", group=GROUP,
                                   data={"returncode": rc}))
        result.exit_code = job_exit_code(rc)
        return
    if rc == 0:
        report.checks.append(Check("job", f"exited with code 0 after {took:.1f} s",
                                   group=GROUP, data={"returncode": 0}))
        result.exit_code = EXIT_FINDINGS if result.hang is not None else 0
        return

    findings, info = triage_mod.triage_output(job.copy.combined_path, tracker.exits, rc)
    info["returncode"] = rc
    report.checks.append(Check("job", f"failed: {how} after {took:.1f} s", status="error",
                               group=GROUP, data={"returncode": rc}))
    if findings:
        lead = findings[0]
        who = f"rank {lead.ranks[0]}" if len(lead.ranks) == 1 else (
            f"ranks {lead.ranks}" if lead.ranks else "the job")
        summary = f"first failure: {who}: {lead.id}"
    else:
        summary = "no known error in the output; see the kept logs"
    report.checks.append(Check(triage_mod.CHECK, summary, group=GROUP, data=info))
    for f in findings:
        report.add(f, check=triage_mod.CHECK)
    result.exit_code = job_exit_code(rc)
