"""The supervision loop: start, watch progress, look at a quiet job, end it, report.

Every way run can end goes through one cleanup path (``_end_job``): the job exited, a
confirmed hang, Ctrl-C twice, SIGTERM/SIGHUP/SIGQUIT to run. It ends every process of the
job's tree still alive (supervise/tree.py) and lists them in the report. run killed by
SIGKILL runs no code: the launcher's parent-death signal and the reaper (reaper.py)
cover that.
"""

from __future__ import annotations

import os
import shlex
import signal
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ddpdoctor import redact
from ddpdoctor.report import Report
from ddpdoctor.supervise import hang as hang_mod
from ddpdoctor.supervise import jobnode
from ddpdoctor.supervise.env import RUN_ID, job_environment, watch_bootstrap_dir
from ddpdoctor.supervise.looks import Look, look, say
from ddpdoctor.supervise.memory import MemoryHistory
from ddpdoctor.supervise.process import Job, JobStartError
from ddpdoctor.supervise.progress import ProgressTracker, read_heartbeats, sample_tree
from ddpdoctor.supervise.reaper import Reaper
from ddpdoctor.supervise.secrets import scrub_report
from ddpdoctor.supervise.signals import RunSignals
from ddpdoctor.supervise.tree import JobTree, Killed, set_subreaper

# variables worth seeing in a report about a distributed job (values of secret-looking
# names masked)
_ENV_PREFIXES = ("DDPDOCTOR_", "NCCL_", "GLOO_", "TORCH_", "TORCHELASTIC_", "MASTER_",
                 "CUDA_", "OMP_", "PYTORCH_", "WORLD_SIZE", "RANK", "LOCAL_RANK", "HF_",
                 "WANDB_")


@dataclass
class RunOptions:
    # the quiet that makes run look; with hang_fixed False it adapts to the job's step
    # times (jobview/leader.threshold) and this field holds the current value
    hang_timeout: float = 300.0
    hang_fixed: bool = True
    hang_min: float = 10.0
    job_endpoint: Any = None  # jobview.keys.Endpoint; None: the launch command's, if any
    job_view: bool = True
    kill: bool = True
    watch: bool = True
    run_dir: str | None = None
    native: bool = False
    grace: float = 10.0  # SIGTERM -> SIGKILL when ending the job
    attach_timeout: float = 5.0
    # exit 1 when the job exited 0 but an error was found (NaN losses): opt-in, as a
    # heuristic check must not fail a pipeline that used to pass
    fail_on_findings: bool = False

    @property
    def poll_s(self) -> float:
        return max(0.2, min(1.0, self.hang_timeout / 5))

    @property
    def cpu_window_s(self) -> float:
        # "working now": CPU in the last few samples, not earlier in the quiet spell
        return max(2.0, 3 * self.poll_s)

    @property
    def recheck_s(self) -> float:
        # a hang the stacks show is confirmed by watching the culprits this long more
        return max(1.0, min(10.0, self.hang_timeout / 4))


@dataclass
class RunResult:
    report: Report
    exit_code: int
    returncode: int | None = None
    hang: hang_mod.HangOutcome | None = None
    interrupted: int = 0
    run_dir: str = ""
    notes: list[str] = field(default_factory=list)
    looks: list[Look] = field(default_factory=list)  # quiet spells that were no hang
    killed: list[Killed] = field(default_factory=list)
    ended_by: str = "the job exited"  # why run ended the job's tree
    teardown: str = ""  # the signal run got, if one ended it
    terminal_gone: bool = False
    memory: MemoryHistory | None = None
    secrets: list[str] = field(default_factory=list)
    tracker: ProgressTracker | None = None
    job_verdicts: list[Any] = field(default_factory=list)  # jobview.snapshot.Verdict
    job_end: Any = None  # supervise.jobnode.NodeEnd: what the job view knew at the end


def job_exit_code(returncode: int) -> int:
    """What a shell would report: a signal death becomes 128 + the signal number."""
    return 128 - returncode if returncode < 0 else returncode


def _prepare_run_dir(path: str | None) -> tuple[str, list[str]]:
    """The run directory and the directories created for it (removed again if the job
    cannot start: a failed start leaves nothing behind)."""
    if path is None:
        d = tempfile.mkdtemp(prefix="ddpdoctor-run-")
        return d, [d]
    created: list[str] = []
    missing = []
    p = os.path.abspath(path)
    while not os.path.exists(p):
        missing.append(p)
        p = os.path.dirname(p)
    os.makedirs(path, exist_ok=True)
    created += list(reversed(missing))
    return path, created


def _remove_created(created: list[str], inner: list[str]) -> None:
    for d in [*inner, *reversed(created)]:
        try:
            os.rmdir(d)  # only ever an empty directory: nothing of the user's goes
        except OSError:
            pass


def env_snapshot(env: dict[str, str]) -> dict[str, str]:
    return redact.environ({k: v for k, v in sorted(env.items())
                           if k.startswith(_ENV_PREFIXES)})


def supervise(cmd: list[str], opts: RunOptions) -> RunResult:
    """Run ``cmd`` to its end (or end it). Raises process.JobStartError."""
    from ddpdoctor.supervise.outcome import build_report
    from ddpdoctor.supervise.secrets import secret_values

    run_dir, created = _prepare_run_dir(opts.run_dir)
    jenv = job_environment(os.environ, run_dir, opts.watch,
                           watch_bootstrap_dir() if opts.watch else None)
    inner = []
    for d in (jenv.fr_dir, jenv.heartbeat_dir):
        if not os.path.isdir(d):
            inner.append(d)
        os.makedirs(d, exist_ok=True)  # the ranks expect them (attach/watch contracts)
    report = Report(command="run")
    report.world.update({"command": shlex.join(redact.argv(cmd)), "run_dir": run_dir,
                         "env": env_snapshot(jenv.env)})
    result = RunResult(report, 0, run_dir=run_dir, notes=list(jenv.notes),
                       secrets=secret_values(jenv.env, cmd))
    wall0 = time.time()

    marker = (RUN_ID, jenv.env[RUN_ID])
    node = _Node(jobnode.start(cmd, opts) if opts.job_view else None)
    reaper = Reaper.start(run_dir, opts.grace, marker)
    subreaper = set_subreaper(True)
    try:
        with RunSignals() as sigs:
            try:
                job = Job.start(cmd, jenv.env, Path(run_dir))
            except JobStartError:
                _remove_created(created, inner)
                raise
            sigs.attach(job)
            _supervise(job, sigs, result, jenv, opts, reaper, wall0, subreaper, marker, node)
    finally:
        if node.view is not None and result.tracker is not None:
            result.job_end = node.end(job, result)
        if reaper is not None:
            reaper.done()
        if subreaper:
            set_subreaper(False)
    result.terminal_gone = sigs.terminal_gone
    if reaper is None:
        result.notes.append("the reaper could not start: if run is SIGKILLed, only the "
                            "launcher dies with it")
    build_report(result, job, jenv, opts, time.monotonic() - job.started, wall0)
    return result


@dataclass
class _Node:
    """This run's part in a job view (None: one node) and what it already said."""

    view: Any
    steps: jobnode.StepTimes = field(default_factory=jobnode.StepTimes)
    sent: Any = None  # the Failure published
    stopping_at: float = 0.0  # when the loop ended (monotonic): the job ends from here
    said: str = ""  # the last "no hang" reason printed

    def publish(self, job: Job, tracker: ProgressTracker) -> None:
        if self.view is None:
            return
        self.view.update(self.steps.progress, tracker.last_what, self.steps.times,
                         jobnode.rank_snaps(tracker))
        if tracker.exits and self.sent is None:
            self.sent = jobnode.local_failure(job, tracker, None)
            if self.sent is not None:
                self.view.report_failure(self.sent)

    def end(self, job: Job, result: RunResult) -> Any:
        rc = result.returncode
        own = self.sent
        if rc not in (0, None) and not result.hang:
            own = jobnode.local_failure(job, result.tracker, rc) or own
            if own is not None and (self.sent is None or (own.rank, own.finding_id) != (
                    self.sent.rank, self.sent.finding_id)):
                self.view.report_failure(own)
        exits = result.tracker.exits
        ending = min(self.stopping_at or time.monotonic(),
                     exits[0].time if exits else float("inf"))
        return jobnode.finish(self.view, own, self.steps, result.job_verdicts, ending,
                              failed=rc not in (0, None) and not result.hang)


def _supervise(job: Job, sigs: RunSignals, result: RunResult, jenv: Any, opts: RunOptions,
               reaper: Reaper | None, wall0: float, subreaper: bool,
               marker: tuple[str, str], node: _Node | None = None) -> None:
    import psutil

    tree = JobTree(job.pid, exclude={reaper.pid} if reaper else set())
    tree.own_children = subreaper
    tree.marker = marker
    if reaper is not None:
        tree.on_new = reaper.track
    try:
        tree.add(job.pid, psutil.Process(job.pid).create_time())
    except psutil.Error:
        pass
    tracker = ProgressTracker(time.monotonic())
    result.memory = memory = MemoryHistory(time.monotonic())
    node = node or _Node(None)
    loop = _Loop(job, sigs, result, jenv, opts, tracker, node, wall0)
    try:
        while True:
            if job.poll() is not None or sigs.teardown:
                break
            now = time.monotonic()
            sample = sample_tree(job.pid, now, loop.rank_cache)
            tree.scan()
            tree.reap(job.pid)
            memory.add(sample)
            tracker.update(now, job.copy.lines, sample, loop.heartbeats())
            node.steps.observe(tracker)
            if not opts.hang_fixed:
                opts.hang_timeout = jobnode.local_threshold(node.steps, opts)
            node.publish(job, tracker)
            if loop.job_view_turn() or loop.local_turn(now):
                break
            time.sleep(min(opts.poll_s, jobnode.INTERVAL_S) if node.view else opts.poll_s)
    finally:
        # the one cleanup path, whatever ended the loop (an error in run included)
        node.stopping_at = time.monotonic()
        _end_job(job, tree, sigs, result, opts)
    result.interrupted = sigs.interrupts
    result.teardown = sigs.teardown
    result.tracker = tracker


@dataclass
class _Loop:
    """The supervision loop's state, and its two ways to decide on a quiet job."""

    job: Job
    sigs: RunSignals
    result: RunResult
    jenv: Any
    opts: RunOptions
    tracker: ProgressTracker
    node: _Node
    wall0: float
    rank_cache: dict = field(default_factory=dict)
    next_look: float = 0.0
    warned_for: float = -1.0  # the quiet spell (its start) already warned about

    def heartbeats(self) -> dict:
        return read_heartbeats(self.jenv.heartbeat_dir, self.wall0)

    def job_view_turn(self) -> bool:
        """Answer the leader's stack request; apply its verdict. True: stop the job."""
        view = self.node.view
        if view is None:
            return False
        req = view.take_request()
        if req is not None and self.job.poll() is None:
            say(f"ddpdoctor run: the job view asks for this node's stacks ({req.reason})")
            view.put_reply(req.id, jobnode.answer(self.job, self.tracker, req, self.opts,
                                                  self.rank_cache, self.heartbeats))
        v = view.take_verdict()
        if v is None:
            return False
        self.result.job_verdicts.append(v)
        del self.result.job_verdicts[:-20]
        if not v.confirmed:
            if v.reason != self.node.said:
                self.node.said = v.reason
                say(f"ddpdoctor run: the job view looked at every node: no hang: "
                    f"{redact.text(v.reason)}; still watching")
            return False
        return self._job_hang(v)

    def _job_hang(self, v: Any) -> bool:
        from ddpdoctor.jobview.report import culprit_text

        if self.result.hang is not None:
            return False  # --no-kill: said once already
        self.result.hang = hang_mod.HangOutcome(v.no_progress_s, self.tracker.last_what)
        if not self.opts.hang_fixed:
            self.opts.hang_timeout = v.threshold_s  # the job's, as the leader judged it
        named = ", ".join(culprit_text(c) for c in v.culprits)
        say("ddpdoctor run: hang confirmed across the job: " + redact.text(v.reason)
            + (f"; culprit: {named}" if named else ""))
        for line in v.groups:
            say(f"  {redact.text(line)}")
        if not self.opts.kill:
            return False
        say(f"ddpdoctor run: stopping this node's part of the job (SIGTERM, SIGKILL after "
            f"{self.opts.grace:g} s; --no-kill keeps it running)")
        self.result.ended_by = "a confirmed hang"
        return True

    def local_turn(self, now: float) -> bool:
        """One node's own look (no job view, or the view was lost). True: stop the job."""
        opts, result, tracker, job = self.opts, self.result, self.tracker, self.job
        if self.node.view is not None and not self.node.view.lost \
                and self.node.view.connected_at is not None:
            return False  # the leader looks at the whole job
        stalled = tracker.stalled_for(now)
        if (result.hang is not None or self.sigs.received or stalled < opts.hang_timeout
                or now < self.next_look or job.poll() is not None):
            return False
        spell = tracker.last_progress
        seen, outcome = look(job, tracker, stalled, opts, self.rank_cache,
                             now - job.started, self.heartbeats,
                             announce=self.warned_for != spell)
        if seen is None:
            return False  # it ended by itself while being looked at
        if seen.verdict.confirmed:
            return self._local_hang(seen, outcome)
        result.looks.append(seen)
        del result.looks[:-20]
        if self.warned_for != spell:
            self.warned_for = spell
            say(f"ddpdoctor run: no output or step for {stalled:.0f} s, but no "
                f"hang: {redact.text(seen.verdict.reason)}; still watching")
        self.next_look = time.monotonic() + opts.hang_timeout
        return False

    def _local_hang(self, seen: Look, outcome: Any) -> bool:
        opts, result = self.opts, self.result
        result.hang = outcome
        if opts.kill:
            say("ddpdoctor run: hang confirmed: " + redact.text(seen.verdict.reason)
                + f"; stopping the job (SIGTERM, SIGKILL after {opts.grace:g} "
                "s; --no-kill keeps it running)")
            result.ended_by = "a confirmed hang"
            return True
        view = Report(command="run")
        outcome.add_to(view, opts.hang_timeout)
        scrub_report(view, result.secrets)
        try:
            hang_mod.print_diagnosis(view, outcome)
        except (OSError, ValueError):
            pass  # no terminal to show it on; the final report has it
        return False


def _end_job(job: Job, tree: JobTree, sigs: RunSignals, result: RunResult,
             opts: RunOptions) -> None:
    """The one cleanup path: whatever of the job's tree still lives ends here."""
    t0 = time.monotonic()
    if sigs.teardown:
        result.ended_by = sigs.teardown
    first = signal.SIGKILL if sigs.hurry else signal.SIGTERM
    result.killed = tree.end_all(opts.grace, first, should_hurry=lambda: sigs.hurry)
    rc = job._wait(5.0)
    if result.hang is not None and result.ended_by == "a confirmed hang":
        result.hang.stopped = True
        result.hang.stop_status = rc
        result.hang.timings["stop_s"] = round(time.monotonic() - t0, 3)
    job.drain(timeout=5.0)
    job.copy.close()
    result.returncode = rc if rc is not None else job.poll()
