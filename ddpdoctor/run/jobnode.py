"""run as one node of a job view (ddpdoctor/jobview): the glue to the supervision loop.

run's loop stays the one owner of the job: it feeds this node's progress to the view,
answers the leader's stack requests with its own ranks' stacks (attach's analysis) and
CPU, reports its first failing rank, and applies the leader's verdict. Also here: the
step times the adaptive hang threshold is computed from (one node or many).
"""

from __future__ import annotations

import socket
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from ddpdoctor.jobview.agent import INTERVAL_S  # noqa: F401 - run's loop paces itself by it
from ddpdoctor.jobview.keys import Endpoint, endpoint_from_command
from ddpdoctor.jobview.leader import Policy, root_cause, threshold
from ddpdoctor.jobview.snapshot import Failure, RankSnap, StackReply, Verdict

if TYPE_CHECKING:
    from collections.abc import Callable

    from ddpdoctor.core.findings import Finding
    from ddpdoctor.jobview.agent import JobView
    from ddpdoctor.jobview.snapshot import JobSummary, Request
    from ddpdoctor.run.busy import Recheck
    from ddpdoctor.run.hang import HangDiagnosis, RankState
    from ddpdoctor.run.process import Job
    from ddpdoctor.run.progress import Heartbeat, Identity, ProgressTracker

FINAL_WAIT_S = 4.0
LOST_MARGIN_S = 1.5  # after the job ended: how long to wait for the other nodes' causes
_STEP_SIGNALS = ("heartbeat", "output")  # CPU samples are not steps
STARTUP_EVENTS = 3  # the first intervals are startup (rendezvous, imports), not steps
STEPS_PER_INTERVAL = 32  # at most this many step times from one interval between polls


# A quiet spell that was looked at and found no hang (a long evaluation, a checkpoint) is
# not a step time while such spells are rare: one 40 s evaluation among 1 s steps made the
# adaptive threshold 5 x 42 s (measured, tests/functional/test_multinode_run.py). When long
# looked-at spells are at least a quarter of the recent intervals (and 4 or more), they are
# the job's pace and count. Short ones (the steps a look's py-spy read slowed) never matter.
PACE_SHARE = 0.25
PACE_REPEATS = 4


class NodeOptions(Protocol):
    """What this glue reads of run's options (run/options.RunOptions, which names the
    job view's types through here: it cannot be imported back). Read-only: the options
    are frozen."""

    @property
    def hang_timeout(self) -> float: ...
    @property
    def hang_fixed(self) -> bool: ...
    @property
    def hang_min(self) -> float: ...
    @property
    def job_endpoint(self) -> Endpoint | None: ...
    @property
    def native(self) -> bool: ...
    @property
    def attach_timeout(self) -> float: ...


@dataclass
class StepTimes:
    """Seconds between progress events (a step's heartbeat, a line of output)."""

    last_seen: float = 0.0  # tracker.last_progress seen last
    last_event: float | None = None
    progress: int = 0
    raw: list[float] = field(default_factory=list)
    looked_at: list[bool] = field(default_factory=list)  # per raw interval
    events: int = 0
    _looking: bool = False  # the current interval was looked at (and not stopped)
    _look_open: bool = False  # a look is under way: every interval it overlaps is flagged
    _last_step: int | None = None  # the ranks' highest heartbeat step at the last event

    def observe(self, tracker: ProgressTracker) -> None:
        if tracker.last_progress == self.last_seen:
            return
        self.last_seen = tracker.last_progress
        self.progress += 1
        if not tracker.last_what.startswith(_STEP_SIGNALS):
            return
        self.events += 1
        # past start-up: after its first events, or from the first step a rank counted
        started = self.events > STARTUP_EVENTS or bool(self._last_step)
        if self.last_event is not None and started:
            n = self._steps_since(tracker.step)
            dt = (tracker.last_progress - self.last_event) / n
            self.raw.extend([dt] * n)
            self.looked_at.extend([self._looking] * n)
            del self.raw[:-256], self.looked_at[:-256]
        self._last_step = tracker.step
        self._looking = self._look_open
        self.last_event = tracker.last_progress

    def _steps_since(self, step: int) -> int:
        """How many steps one interval between two observed events holds (the ranks'
        heartbeats count them): a poll sees a fast job many steps on (0.15 s steps, one
        poll a second), and counted as one step each, the first five step times took ten
        seconds of training to gather (a hang after 15 steps kept the 300 s start-up
        threshold). An interval with no step counted (output lines only) is one."""
        if self._last_step is None:
            return 1
        return max(1, min(step - self._last_step, STEPS_PER_INTERVAL))

    def look_began(self) -> None:
        """The leader asked for this node's stacks: py-spy pauses the ranks while it reads
        them, so the intervals until the verdict are not the job's own pace either."""
        self._looking = self._look_open = True

    def looked(self) -> None:
        """A look (this node's, or the leader's) found no hang: the quiet interval under
        way, and any the look overlapped, are flagged."""
        self._looking, self._look_open = True, False

    @property
    def times(self) -> list[float]:
        """The step times the adaptive threshold is computed from."""
        plain = [t for t, looked in zip(self.raw, self.looked_at) if not looked]
        if len(plain) == len(self.raw):
            return list(self.raw)
        usual = max(plain, default=0.0)
        long_looked = sum(1 for t, looked in zip(self.raw, self.looked_at)
                          if looked and t > usual)
        if long_looked >= max(PACE_REPEATS, PACE_SHARE * len(self.raw)):
            return list(self.raw)
        return [t for t, looked in zip(self.raw, self.looked_at) if not looked or t <= usual]


def local_threshold(steps: StepTimes, opts: NodeOptions) -> float:
    return threshold(steps.times, policy_of(opts))[0]


def policy_of(opts: NodeOptions) -> Policy:
    return Policy(fixed_s=opts.hang_timeout if opts.hang_fixed else None,
                  hang_min_s=opts.hang_min)


def is_local_address(host: str) -> bool:
    """True when ``host`` names an address of this machine (its network namespace)."""
    try:
        infos = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
    except OSError:
        return False
    for family, _, _, _, addr in infos:
        try:
            with socket.socket(family, socket.SOCK_STREAM) as s:
                s.bind((addr[0], 0))
            return True
        except OSError:
            continue
    return False


def start(cmd: list[str], opts: NodeOptions) -> JobView | None:
    """The job view for this launch command, or None (no endpoint: one node)."""
    endpoint: Endpoint | None = opts.job_endpoint or endpoint_from_command(cmd)
    if endpoint is None:
        return None
    from ddpdoctor.jobview.agent import JobView

    return JobView(endpoint, socket.gethostname(), is_local_address(endpoint.host),
                   policy_of(opts), reply_timeout_s=opts.attach_timeout + 15).start()


def rank_snaps(tracker: ProgressTracker, heartbeats: dict[int, Heartbeat] | None = None
               ) -> tuple[RankSnap, ...]:
    """Per rank: pid and state from the process sampling; step, phase and last progress
    from its watch heartbeat (run.progress.Heartbeat) when it writes one."""
    gone = {e.rank for e in tracker.exits}
    pids = tracker.rank_pids
    heartbeats = heartbeats or {}
    out = []
    for r in sorted(set(pids) | set(heartbeats)):
        hb = heartbeats.get(r)
        out.append(RankSnap(r, pids.get(r, 0),
                            hb.step if hb is not None else -1,
                            hb.phase if hb is not None else "",
                            "exited" if r in gone else "running",
                            hb.last_progress if hb is not None else 0.0))
    return tuple(out)


# ---- a stack request: this node's ranks, then whether the ones not waiting still work

def answer(job: Job, tracker: ProgressTracker, request: Request, opts: NodeOptions,
           rank_cache: dict[tuple[int, float], Identity],
           heartbeats: Callable[[], dict[int, Heartbeat]]) -> StackReply:
    from ddpdoctor.jobview.merge import state_to_dict
    from ddpdoctor.run import hang as hang_mod
    from ddpdoctor.run.progress import sample_tree

    host = socket.gethostname()
    now = time.monotonic()
    before = tracker.stalled_for(now)
    outcome = hang_mod.diagnose(job.pid, before, tracker.last_what, opts.native,
                                opts.attach_timeout)
    d = outcome.diagnosis
    if d is None:
        return StackReply(-1, host, (), error=outcome.error or "no stacks")
    seen = _recheck(job, d.states, request.recheck_s, d)
    now = time.monotonic()
    tracker.update(now, job.copy.moving_lines, sample_tree(job.pid, now, rank_cache), heartbeats(),
                   looping=job.copy.looping_ranks())
    moved = tracker.stalled_for(now) < before
    from ddpdoctor.attach.flight_recorder import trace_to_dict
    from ddpdoctor.run.looks import traced_pids

    traces = tuple(trace_to_dict(t) for _, t in sorted(d.fr_traces.items()))
    return StackReply(-1, host, tuple(state_to_dict(s) for s in d.states),
                      tuple(sorted(seen.working)), moved, traces=traces,
                      traced=tuple(sorted(traced_pids(d))), unmeasured=seen.unmeasured,
                      rechecked=seen.lines())


def _recheck(job: Job, states: list[RankState], seconds: float,
             diagnosis: HangDiagnosis | None = None) -> Recheck:
    """What the ranks not waiting did while this node watched them ``seconds`` (at least
    SPIN_WINDOW_S: their stacks are read meanwhile; run/busy.py sorts them). CPU alone is
    not work: a rank that burned it on the same lines in every read, with no storage I/O
    and no native work, spins (run/spinning.py), so the leader can name it."""
    from ddpdoctor.hang.verdict import GONE_KINDS, WAITING_KINDS
    from ddpdoctor.run.stack_reads import SPIN_WINDOW_S
    from ddpdoctor.run.watch_ranks import watch_ranks

    pids = {s.rank: s.pid for s in states
            if s.pid and s.kind not in GONE_KINDS and s.kind not in WAITING_KINDS}
    seconds = max(seconds, SPIN_WINDOW_S) if pids else seconds
    return watch_ranks(job, sorted(pids), pids, diagnosis, seconds)


# ---- failures: this node's first failing rank, and the job's root cause

def local_failure(job: Job, tracker: ProgressTracker, returncode: int | None
                  ) -> Failure | None:
    from ddpdoctor.run.triage import BY_SAMPLING, triage_output

    first = tracker.exits[0] if tracker.exits else None
    if first is None and not returncode:
        return None
    findings, _ = triage_output(job.copy.combined_path, tracker.exits, returncode or 1,
                                getattr(tracker, "endpoints", None))
    host = socket.gethostname()
    if not findings:
        return None
    lead = findings[0]
    if returncode is None and str(lead.evidence.get("source", "")).startswith(BY_SAMPLING):
        return None  # a rank exited while the job runs and its output names no error yet:
        # a rank that finished, not a failure (the job's exit code decides at the end)
    rank = lead.ranks[0] if lead.ranks else (first.rank if first else None)
    pid = first.pid if first and first.rank == rank else 0
    return Failure(-1, host, rank, pid, lead.id, lead.title[:300], _is_fallout(lead),
                   time.time())


def raised_failure(job: Job, tracker: ProgressTracker) -> Failure | None:
    """The failure a rank's uncaught exception names, while that rank still lives (the
    output so far; torchrun's summary is not written yet). None: no rank is named."""
    from ddpdoctor.run.triage import triage_output

    findings, _ = triage_output(job.copy.combined_path, [], 1,
                                getattr(tracker, "endpoints", None))
    lead = next((f for f in findings if f.ranks), None)
    if lead is None:
        return None
    rank = lead.ranks[0]
    return Failure(-1, socket.gethostname(), rank, tracker.rank_pids.get(rank, 0), lead.id,
                   lead.title[:300], _is_fallout(lead), time.time())


def _is_fallout(finding: Finding) -> bool:
    """Another rank's failure felt here: a reset connection, a SIGTERM from the launcher."""
    title = finding.title
    return (not finding.ranks or "went away" in title or "SIGTERM" in title
            or "Connection reset" in title or "Connection closed" in title)


@dataclass
class NodeEnd:
    """What the job view knew when this node's job ended (for the report)."""

    endpoint: str
    leader: bool
    index: int
    lost: str
    nodes: dict[int, str]
    failures: list[Failure]
    own: Failure | None
    summary: JobSummary | None
    verdicts: list[Verdict]
    # nodes seen that sent no failure although the job failed and no root cause came:
    # their supervisor died, or their report did not cross before the store closed
    unaccounted: list[str] = field(default_factory=list)


def finish(view: JobView, own: Failure | None, steps: StepTimes, verdicts: list[Verdict],
           stopping_at: float, failed: bool) -> NodeEnd:
    """Say the job ended; when it failed, wait (bounded) for the root cause from another
    node; stop. ``stopping_at``: when run began to end the job (monotonic)."""
    view.update(steps.progress, "the job ended", steps.times, ended=True)
    if failed:
        deadline = time.monotonic() + FINAL_WAIT_S
        time.sleep(min(1.0, view.interval * 2))  # one publish: ours reaches the others
        while view.active and time.monotonic() < deadline and (own is None or own.fallout):
            cause = root_cause(view.failures())
            if cause is not None and not cause.fallout:
                break
            time.sleep(view.interval)
    view.stop()
    # the store going away with the job (torchrun on the node that hosts it ends after
    # its ranks) once this node's ranks began to exit, or run began to end them, is no loss
    # (less a margin: the sampler sees a rank gone up to a loop turn after it exited)
    lost = view.lost if view.lost_at is None or view.lost_at < stopping_at - LOST_MARGIN_S \
        else ""
    failures, nodes = view.failures(), view.nodes_seen()
    return NodeEnd(str(view.endpoint), view.leader, view.index, lost, nodes, failures, own,
                   view.summary(), verdicts,
                   unaccounted(nodes, view.index, failures, own) if failed else [])


def unaccounted(nodes: dict[int, str], me: int, failures: list[Failure],
                own: Failure | None) -> list[str]:
    """The other nodes that sent no failure, when no root cause (a failure that is not
    fallout) is known: where the cause most likely is."""
    cause = root_cause(failures + ([own] if own else []))
    if cause is not None and not cause.fallout:
        return []
    told = {f.node for f in failures}
    return [f"{h} (node {n})" for n, h in sorted(nodes.items()) if n != me and n not in told]
