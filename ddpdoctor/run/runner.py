"""The supervision loop: start, watch progress, look at a quiet job, end it, report.

Every way run can end goes through one cleanup path (``_end_job``): the job exited, a
confirmed hang, Ctrl-C twice, SIGTERM/SIGHUP/SIGQUIT to run. It ends every process of the
job's tree still alive (run/tree.py) and lists them in the report. run killed by
SIGKILL runs no code: the launcher's parent-death signal and the reaper (reaper.py)
cover that.
"""

from __future__ import annotations

import os
import shlex
import signal
import tempfile
import time
from pathlib import Path

from ddpdoctor.core import redact
from ddpdoctor.core.proctree import HostProcs
from ddpdoctor.core.report import Report
from ddpdoctor.run import jobnode
from ddpdoctor.run.attempts import observe_sample
from ddpdoctor.run.env import RUN_ID, JobEnv, job_environment, watch_bootstrap_dir
from ddpdoctor.run.exit_watch import ExitWatch
from ddpdoctor.run.loop import Loop, Node
from ddpdoctor.run.memory import MemoryHistory
from ddpdoctor.run.options import RunOptions as RunOptions  # its old home's name
from ddpdoctor.run.outcome import build_report
from ddpdoctor.run.outcome import job_exit_code as job_exit_code  # its old home's name
from ddpdoctor.run.process import Job, JobStartError
from ddpdoctor.run.progress import ProgressTracker, TreeSample, sample_tree
from ddpdoctor.run.reaper import Reaper
from ddpdoctor.run.redirected import redirect_of
from ddpdoctor.run.result import RunResult as RunResult  # its old home's name
from ddpdoctor.run.result import Watched
from ddpdoctor.run.signals import RunSignals
from ddpdoctor.run.tree import JobTree, set_subreaper

# variables worth seeing in a report about a distributed job (values of secret-looking
# names masked)
_ENV_PREFIXES = ("DDPDOCTOR_", "NCCL_", "GLOO_", "TORCH_", "TORCHELASTIC_", "MASTER_",
                 "CUDA_", "OMP_", "PYTORCH_", "WORLD_SIZE", "RANK", "LOCAL_RANK", "HF_",
                 "WANDB_")


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
    from ddpdoctor.run.secrets import secret_values

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
    result = RunResult(report, 0, Watched(opts), run_dir=run_dir, notes=list(jenv.notes),
                       secrets=secret_values(jenv.env, cmd),
                       redirect=redirect_of(cmd, Path.cwd()))
    wall0 = time.time()

    marker = (RUN_ID, jenv.env[RUN_ID])
    node = Node(jobnode.start(cmd, opts) if opts.job_view else None)
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
    build_report(result, job, jenv, result.options, time.monotonic() - job.started, wall0)
    return result


def _supervise(job: Job, sigs: RunSignals, result: RunResult, jenv: JobEnv, opts: RunOptions,
               reaper: Reaper | None, wall0: float, subreaper: bool,
               marker: tuple[str, str], node: Node | None = None) -> None:
    tree = job_tree(job, reaper, subreaper, marker)
    tracker = ProgressTracker(time.monotonic())
    result.memory = memory = MemoryHistory(time.monotonic())
    node = node or Node(None)
    loop = Loop(job, sigs, result, jenv, opts, tracker, node, wall0)
    restart_counts: dict[int, tuple[int | None, int | None]] = {}
    exit_watch = ExitWatch()
    try:
        while True:
            if job.poll() is not None or sigs.teardown:
                if job.poll() and not sigs.teardown:
                    _last_sample(job, loop, exit_watch, result, tracker, restart_counts)
                break
            now = time.monotonic()
            host = HostProcs.read()  # one walk of the host's processes a poll
            # ranks no launcher numbered (mp.spawn): their real rank, before the sample
            result.spawn.fill(job.pid, host, loop.rank_cache)
            sample = sample_tree(job.pid, now, loop.rank_cache, host)
            _stamp_deaths(exit_watch, sample)
            observe_sample(result.attempts, sample, now, job.copy.lines, restart_counts)
            tree.scan(host)
            tree.reap(job.pid)
            memory.add(sample)
            beats = loop.heartbeats()
            tracker.update(now, job.copy.moving_lines, sample, beats,
                           looping=job.copy.looping_ranks())
            node.steps.observe(tracker)
            if not opts.hang_fixed:
                loop.adapt(jobnode.local_threshold(node.steps, loop.opts))
            node.publish(job, tracker, beats)
            if loop.job_view_turn() or loop.local_turn(now):
                break
            poll_s = loop.opts.poll_s
            pause = min(poll_s, jobnode.INTERVAL_S) if node.view else poll_s
            if job.copy.rank_raised.wait(pause):
                job.copy.rank_raised.clear()
                node.publish_raised(job, tracker)
    finally:
        # the one cleanup path, whatever ended the loop (an error in run included)
        node.stopping_at = time.monotonic()
        exit_watch.close()
        _end_job(job, tree, sigs, result, opts)
    result.interrupted = sigs.interrupts
    result.teardown = sigs.teardown
    result.signalled_at_bytes = sigs.output_bytes
    result.tracker = tracker


def job_tree(job: Job, reaper: Reaper | None, subreaper: bool,
             marker: tuple[str, str]) -> JobTree:
    """The tree of the job's processes, dated from the launcher's start, not from now."""
    import psutil

    try:
        launcher_created: float | None = psutil.Process(job.pid).create_time()
    except psutil.Error:
        launcher_created = None  # gone already: its children are older than "now"
    job_began = time.time() - (time.monotonic() - job.started)
    tree = JobTree(job.pid, exclude={reaper.pid} if reaper else set(),
                   started=min(job_began, launcher_created or job_began))
    tree.own_children = subreaper
    tree.marker = marker
    if reaper is not None:
        tree.on_new = reaper.track
    if launcher_created is not None:
        tree.add(job.pid, launcher_created)
    return tree


def _stamp_deaths(exit_watch: ExitWatch, sample: TreeSample) -> None:
    """Watch each rank process from its first sample on; hand the sample the deaths seen."""
    for p in sample.procs:
        if p.rank is not None and p.top and not p.zombie:
            exit_watch.watch(p.pid, p.created)
    sample.died = exit_watch.deaths()


def _last_sample(job: Job, loop: Loop, exit_watch: ExitWatch, result: RunResult,
                 tracker: ProgressTracker, restart_counts: dict) -> None:
    """The job failed between two polls: its ranks' exits, with the times they died, so
    triage can name the rank that went first though the sampler saw them all go at once."""
    exit_watch.settle(3.0)
    if exit_watch.pending or not exit_watch.active:
        return  # a rank outlived its launcher (or deaths are not seen): no exits made up
    now = time.monotonic()
    sample = sample_tree(job.pid, now, loop.rank_cache)
    _stamp_deaths(exit_watch, sample)
    observe_sample(result.attempts, sample, now, job.copy.lines, restart_counts)
    tracker.update(now, job.copy.moving_lines, sample, looping=job.copy.looping_ranks())


def _end_job(job: Job, tree: JobTree, sigs: RunSignals, result: RunResult,
             opts: RunOptions) -> None:
    """The one cleanup path: whatever of the job's tree still lives ends here."""
    t0 = time.monotonic()
    if result.watched.stopped_for_hang:
        result.ended_by = "a confirmed hang"
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
