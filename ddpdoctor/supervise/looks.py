"""Looking at a quiet job: every rank's stack (attach), each rank's CPU, one verdict.

A quiet spell is only a reason to look; supervise/verdict.py decides whether what was
seen is a hang. Each look is kept (bounded) for the report's ``stall`` check.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from typing import Any

from ddpdoctor.supervise import hang as hang_mod
from ddpdoctor.supervise.progress import ProgressTracker, sample_tree
from ddpdoctor.supervise.verdict import HangVerdict, judge


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

    def to_dict(self) -> dict:
        return {"at_s": round(self.at_s, 1), "quiet_s": round(self.quiet_s, 1),
                "last_progress": self.last_progress, "confirmed": self.verdict.confirmed,
                "reason": self.verdict.reason, "stacks": self.headline,
                "culprits": list(self.verdict.culprits),
                "working_ranks": [r for r in self.verdict.active if r >= 0]}


def look(job: Any, tracker: ProgressTracker, stalled: float, opts: Any,
         rank_cache: dict, at_s: float, heartbeats: Any,
         announce: bool = True) -> tuple[Look | None, Any]:
    """Read every rank's stack and judge: a hang is stopped only when confirmed."""
    if announce:  # once per quiet spell: a long evaluation is not worth a line a minute
        say(f"ddpdoctor run: no output or step for {stalled:.1f} s (last progress: "
            f"{tracker.last_what}); looking at the stacks...")
    outcome = hang_mod.diagnose(job.pid, stalled, tracker.last_what, opts.native,
                                opts.attach_timeout)
    if job.poll() is not None:
        say("ddpdoctor run: the job ended while it was being looked at; no hang")
        return None, outcome
    # what moved while the stacks were read counts too
    now = time.monotonic()
    tracker.update(now, job.copy.lines, sample_tree(job.pid, now, rank_cache), heartbeats())
    active = tracker.active_ranks(now, opts.cpu_window_s + outcome.timings.get(
        "diagnose_s", 0.0))
    verdict = judge(outcome.diagnosis, outcome.error, active, _traced(outcome.diagnosis))
    if verdict.confirmed and tracker.stalled_for(now) < stalled:
        verdict = HangVerdict(False, "the job made progress while its stacks were read",
                              verdict.culprits, verdict.active)
    headline = outcome.diagnosis.headline if outcome.diagnosis is not None else outcome.error
    return Look(at_s, stalled, tracker.last_what, verdict, headline), outcome


def _traced(diagnosis: Any) -> set[int]:
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
