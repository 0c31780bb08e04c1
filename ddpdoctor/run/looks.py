"""Looking at a quiet job: every rank's stack (attach), each rank's CPU, one verdict.

A quiet spell is only a reason to look; hang/verdict.py decides whether what was
seen is a hang, and the recheck here confirms it: the blamed ranks are watched a few
seconds more (CPU, storage I/O, their stacks read again). A blamed rank that burns CPU
on the same lines in every read, with no I/O, spins (run/spinning.py): hung. Each
look is kept (bounded) for the report's ``stall`` check.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from ddpdoctor.hang.verdict import GONE_KINDS, WAITING_KINDS, HangVerdict, judge
from ddpdoctor.run import hang as hang_mod
from ddpdoctor.run.busy import Recheck
from ddpdoctor.run.progress import ProgressTracker, sample_tree
from ddpdoctor.run.stack_reads import SPIN_WINDOW_S
from ddpdoctor.run.watch_ranks import watch_ranks

if TYPE_CHECKING:
    from collections.abc import Callable

    from ddpdoctor.run.hang import HangDiagnosis
    from ddpdoctor.run.process import Job
    from ddpdoctor.run.progress import Heartbeat, Identity


class LookOptions(Protocol):
    """What a look reads of run's options (run/options.RunOptions, which names the job
    view's types through run/jobnode.py: that module looks with this one)."""

    @property
    def native(self) -> bool: ...
    @property
    def attach_timeout(self) -> float: ...
    @property
    def cpu_window_s(self) -> float: ...
    @property
    def recheck_s(self) -> float: ...


def say(line: str) -> None:
    """run's own one-liners: a terminal that went away (SIGHUP: EIO; a closed pipe:
    EPIPE) must never stop run before it has cleaned up."""
    try:
        print(line, file=sys.stderr, flush=True)
    except (OSError, ValueError):
        pass


@dataclass
class Look:
    """One look at a quiet job: what the stacks showed and what run made of it."""

    at_s: float  # since the job started
    quiet_s: float
    last_progress: str
    verdict: HangVerdict
    headline: str = ""

    def to_dict(self) -> dict[str, object]:
        return {"at_s": round(self.at_s, 1), "quiet_s": round(self.quiet_s, 1),
                "last_progress": self.last_progress, "confirmed": self.verdict.confirmed,
                "reason": self.verdict.reason, "stacks": self.headline,
                "culprits": list(self.verdict.culprits),
                "working_ranks": [r for r in self.verdict.active if r >= 0]}


def look(job: Job, tracker: ProgressTracker, stalled: float, opts: LookOptions,
         rank_cache: dict[tuple[int, float], Identity], at_s: float,
         heartbeats: Callable[[], dict[int, Heartbeat]],
         announce: bool = True) -> tuple[Look | None, hang_mod.HangOutcome]:
    """Read every rank's stack and judge: a hang is stopped only when confirmed."""
    if announce:  # once per quiet spell: a long evaluation is not worth a line a minute
        say(f"ddpdoctor run: no output or step for {stalled:.1f} s (last progress: "
            f"{tracker.last_what}); looking at the stacks...")
    now = time.monotonic()
    gone = {e.rank: f"pid {e.pid} exited {now - (e.died or e.time):.0f} s before (run saw it go)"
            for e in tracker.exits}
    outcome = hang_mod.diagnose(job.pid, stalled, tracker.last_what, opts.native,
                                opts.attach_timeout, gone=gone)
    if job.poll() is not None:
        say("ddpdoctor run: the job ended while it was being looked at; no hang")
        return None, outcome
    # what moved while the stacks were read counts too
    now = time.monotonic()
    tracker.update(now, job.copy.moving_lines, sample_tree(job.pid, now, rank_cache), heartbeats(),
                   looping=job.copy.looping_ranks())
    active = tracker.active_ranks(now, opts.cpu_window_s + outcome.timings.get(
        "diagnose_s", 0.0))
    verdict = judge(outcome.diagnosis, outcome.error, active, traced_pids(outcome.diagnosis))
    suspect = verdict.confirmed or bool(verdict.busy)
    if suspect and tracker.stalled_for(now) < stalled:
        verdict = HangVerdict(False, "the job made progress while its stacks were read",
                              verdict.culprits, verdict.active)
    elif suspect:
        # a busy culprit: long enough for its stacks to show whether it moves
        seconds = max(opts.recheck_s, SPIN_WINDOW_S) if verdict.busy else opts.recheck_s
        rechecked = _recheck(job, tracker, verdict, outcome.diagnosis, seconds,
                             rank_cache, heartbeats)
        if rechecked is None:
            say("ddpdoctor run: the job ended while it was being looked at; no hang")
            return None, outcome
        verdict = rechecked
        if verdict.confirmed and verdict.spins:
            _add_spins(outcome.diagnosis, verdict)
    headline = outcome.diagnosis.headline if outcome.diagnosis is not None else outcome.error
    return Look(at_s, stalled, tracker.last_what, verdict, headline), outcome


def _watched(verdict: HangVerdict, diagnosis: HangDiagnosis | None
             ) -> tuple[list[int], dict[int, int]]:
    """The ranks to watch (the culprits not inside a wait, else every rank not waiting)
    and their pids: a rank inside a collective / p2p wait is waiting by definition (its
    CPU may be a spin-wait); the question is whether the others are working."""
    states = getattr(diagnosis, "states", [])
    live = {s.rank for s in states if s.kind not in GONE_KINDS}
    not_waiting = {s.rank for s in states if s.kind not in WAITING_KINDS} & live
    watched = sorted(set(verdict.culprits) & not_waiting) if set(verdict.culprits) & live \
        else sorted(not_waiting)
    return watched, {s.rank: s.pid for s in states if s.rank in watched and s.pid}


def _recheck(job: Job, tracker: ProgressTracker, verdict: HangVerdict,
             diagnosis: HangDiagnosis | None, seconds: float,
             rank_cache: dict[tuple[int, float], Identity],
             heartbeats: Callable[[], dict[int, Heartbeat]]) -> HangVerdict | None:
    """Watch the ranks the stacks blame for ``seconds`` more, reading their stacks again
    meanwhile: a hang is confirmed only if none of them worked (CPU with a stack that
    moves, or storage I/O) and nothing else moved. None: the job ended meanwhile."""
    watched, pids = _watched(verdict, diagnosis)
    reason = _title(verdict, diagnosis)
    # a rank mostly inside a native call with the GIL released (a tight loop of tensor
    # ops) is working, not spinning: never stop a healthy job for it (spinning.py)
    seen = watch_ranks(job, watched, pids, diagnosis, seconds)
    if job.poll() is not None:
        return None
    now = time.monotonic()
    quiet_before = tracker.stalled_for(now)
    tracker.update(now, job.copy.moving_lines, sample_tree(job.pid, now, rank_cache), heartbeats(),
                   looping=job.copy.looping_ranks())
    if tracker.stalled_for(now) < quiet_before:
        return HangVerdict(False, f"the job made progress ({tracker.last_what}) while run "
                           "watched it", verdict.culprits, verdict.active)
    if seen.working:
        return HangVerdict(False, f"{reason}; but {'; '.join(seen.working.values())}: "
                           "working, not hung", verdict.culprits, verdict.active,
                           working=tuple(seen.working))
    if seen.unmeasured:  # a rank that could not be looked at is not known to be idle
        return HangVerdict(False, f"{reason}; but rank(s) "
                           f"{', '.join(map(str, seen.unmeasured))} could not be measured: "
                           "not confirmed", verdict.culprits, verdict.active)
    return confirmed_by(verdict, reason, seen)


def confirmed_by(verdict: HangVerdict, reason: str, seen: Recheck) -> HangVerdict:
    """The recheck found every blamed rank idle or spinning: say which was which."""
    idle = sorted(seen.idle)
    still = (f" (rank(s) {', '.join(map(str, idle))} idle for {seen.took_s:.1f} s more)"
             if idle else "" if seen.spinning else f" (unchanged for {seen.took_s:.1f} s more)")
    said = "".join(f"; {line}" for line in seen.spinning.values())
    return HangVerdict(True, reason + still + said, verdict.culprits, verdict.active,
                       spins=tuple(seen.spinning.values()))


def _title(verdict: HangVerdict, diagnosis: HangDiagnosis | None) -> str:
    """What the stacks showed, without the "but still working" a busy verdict adds."""
    findings = getattr(diagnosis, "findings", None)
    if verdict.busy and findings:
        return findings[0].title
    return verdict.reason


def _add_spins(diagnosis: HangDiagnosis | None, verdict: HangVerdict) -> None:
    """The findings that name a spinning rank say how run knew (the stacks it compared)."""
    for f in getattr(diagnosis, "findings", []) or []:
        lines = [line for line in verdict.spins
                 if any(line.startswith(f"rank {r} ") for r in f.ranks)]
        if lines:
            f.evidence["spinning"] = lines


def traced_pids(diagnosis: HangDiagnosis | None) -> set[int]:
    """Pids in a debugger's tracing stop (psutil 'tracing-stop'), not a SIGSTOP."""
    if diagnosis is None:
        return set()
    import psutil

    out = set()
    for s in diagnosis.states:
        if s.kind != "stopped" or not s.pid:
            continue
        try:
            if psutil.Process(s.pid).status() == getattr(psutil, "STATUS_TRACING_STOP",
                                                          "tracing-stop"):
                out.add(s.pid)
        except psutil.Error:
            pass
    return out
