"""The supervision loop's two ways to decide on a quiet job, and its part in a job view.

``Loop.job_view_turn``: this node answers the job view's stack requests and applies the
leader's verdict (ddpdoctor/jobview). ``Loop.local_turn``: one node looks at its own
ranks (no job view, or the view was lost). Either stops the job only on a confirmed hang.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from ddpdoctor.core import redact
from ddpdoctor.core.report import Report
from ddpdoctor.hang.verdict import SpellMemory, looking_again
from ddpdoctor.run import hang as hang_mod
from ddpdoctor.run import jobnode, steps
from ddpdoctor.run.looks import Look, look, say
from ddpdoctor.run.progress import ProgressTracker, read_heartbeats
from ddpdoctor.run.secrets import scrub_report

if TYPE_CHECKING:
    from ddpdoctor.run.env import JobEnv
    from ddpdoctor.run.options import RunOptions
    from ddpdoctor.run.process import Job
    from ddpdoctor.run.progress import Heartbeat, Identity
    from ddpdoctor.run.result import RunResult
    from ddpdoctor.run.signals import RunSignals


@dataclass
class Node:
    """This run's part in a job view (None: one node) and what it already said."""

    view: jobnode.JobView | None
    steps: jobnode.StepTimes = field(default_factory=jobnode.StepTimes)
    sent: jobnode.Failure | None = None  # the Failure published
    stopping_at: float = 0.0  # when the loop ended (monotonic): the job ends from here
    said: str = ""  # the last "no hang" reason printed

    def publish(self, job: Job, tracker: ProgressTracker,
                heartbeats: dict[int, Heartbeat] | None = None) -> None:
        if self.view is None:
            return
        self.view.update(self.steps.progress, tracker.last_what, self.steps.times,
                         jobnode.rank_snaps(tracker, heartbeats))
        if tracker.exits and self.sent is None:
            self.sent = jobnode.local_failure(job, tracker, None)
            if self.sent is not None:
                self.view.report_failure(self.sent)

    def publish_raised(self, job: Job, tracker: ProgressTracker) -> None:
        """A rank printed an uncaught exception: publish it now, while the rank still
        lives. Its peers (and the store's host with them) feel its death only when it
        exits; a failure published at exit often loses that race."""
        if self.view is None or self.sent is not None:
            return
        self.sent = jobnode.raised_failure(job, tracker)
        if self.sent is not None:
            self.view.report_failure(self.sent)

    def end(self, job: Job, result: RunResult) -> jobnode.NodeEnd:
        view, tracker = self.view, result.tracker
        # supervise ends only a view it started, after the loop left its tracker behind
        assert view is not None and tracker is not None
        rc = result.returncode
        own = self.sent
        if rc not in (0, None) and not result.watched.hang:
            own = jobnode.local_failure(job, tracker, rc) or own
            if own is not None and (self.sent is None or (own.rank, own.finding_id) != (
                    self.sent.rank, self.sent.finding_id)):
                view.report_failure(own)
        exits = tracker.exits
        ending = min(self.stopping_at or time.monotonic(),
                     exits[0].time if exits else float("inf"))
        return jobnode.finish(view, own, self.steps, result.watched.job_verdicts, ending,
                              failed=rc not in (0, None) and not result.watched.hang)


@dataclass
class Loop:
    """The supervision loop's state, and its two ways to decide on a quiet job."""

    job: Job
    sigs: RunSignals
    result: RunResult
    jenv: JobEnv
    opts: RunOptions
    tracker: ProgressTracker
    node: Node
    wall0: float
    rank_cache: dict[tuple[int, float], Identity] = field(default_factory=dict)
    spell: steps.Spell = field(default_factory=steps.Spell)  # replaced, never changed
    spell_memory: SpellMemory = field(default_factory=SpellMemory)

    def adapt(self, threshold_s: float) -> None:
        """The adaptive hang threshold's new value: the loop's options are replaced, never
        changed in place, and the result keeps the last (the report says it). Called on
        every poll: a copy only when the value moved."""
        if threshold_s != self.opts.hang_timeout:
            self.opts = self.result.watched.options = replace(self.opts,
                                                              hang_timeout=threshold_s)

    def heartbeats(self) -> dict[int, Heartbeat]:
        return read_heartbeats(self.jenv.heartbeat_dir, self.wall0)

    def job_view_turn(self) -> bool:
        """Answer the leader's stack request; apply its verdict. True: stop the job."""
        view = self.node.view
        if view is None:
            return False
        req = view.take_request()
        if req is not None and self.job.poll() is None:
            # attach --job's look gets no verdict: it disturbs this interval only
            (self.node.steps.looked if req.observe_only else self.node.steps.look_began)()
            say(f"ddpdoctor run: the job view asks for this node's stacks ({req.reason})")
            view.put_reply(req.id, jobnode.answer(self.job, self.tracker, req, self.opts,
                                                  self.rank_cache, self.heartbeats))
        v = view.take_verdict()
        if v is None:
            return False
        watched = self.result.watched
        watched.job_verdicts.append(v)
        del watched.job_verdicts[:-20]
        if not v.confirmed:
            self.node.steps.looked()
            if v.reason != self.node.said:
                self.node.said = v.reason
                say(f"ddpdoctor run: the job view looked at every node: no hang: "
                    f"{redact.text(v.reason)}; still watching")
            return False
        return self._job_hang(v)

    def _job_hang(self, v: jobnode.Verdict) -> bool:
        from ddpdoctor.jobview.report import culprit_text

        watched = self.result.watched
        if watched.hang is not None:
            return False  # --no-kill: said once already
        watched.hang = hang_mod.HangOutcome(v.no_progress_s, self.tracker.last_what,
                                            output_bytes=self.job.copy.kept_bytes())
        if not self.opts.hang_fixed:
            self.adapt(v.threshold_s)  # the job's, as the leader judged it
        named = ", ".join(culprit_text(c) for c in v.culprits)
        say("ddpdoctor run: hang confirmed across the job: " + redact.text(v.reason)
            + (f"; culprit: {named}" if named else ""))
        for line in v.groups:
            say(f"  {redact.text(line)}")
        if steps.on_hang(self.opts.kill) is steps.Ending.KEEP:
            return False
        say(f"ddpdoctor run: stopping this node's part of the job (SIGTERM, SIGKILL after "
            f"{self.opts.grace:g} s; --no-kill keeps it running)")
        watched.stopped_for_hang = True
        return True

    def observe(self, now: float) -> steps.Quiet:
        """This poll's view of the job, for the decision to look."""
        view = self.node.view
        return steps.Quiet(
            now=now, stalled_s=self.tracker.stalled_for(now),
            spell=self.tracker.last_progress, job_alive=self.job.poll() is None,
            signalled=bool(self.sigs.received),
            hang_known=self.result.watched.hang is not None,
            leader_looks=view is not None and not view.lost and view.connected_at is not None)

    def local_turn(self, now: float) -> bool:
        """One node's own look (no job view, or the view was lost). True: stop the job."""
        opts, tracker, job = self.opts, self.tracker, self.job
        q = self.observe(now)
        if steps.decide(q, self.spell, opts.hang_timeout) is not None:
            return False
        seen, outcome = look(job, tracker, q.stalled_s, opts, self.rank_cache,
                             now - job.started, self.heartbeats,
                             announce=self.spell.warned_for != q.spell)
        if seen is None:
            return False  # it ended by itself while being looked at
        where = {s.rank: s.where for s in getattr(outcome.diagnosis, "states", [])}
        v = seen.verdict
        again = self.spell_memory.look_again(q.spell, v.confirmed,
                                             [(r, where.get(r, "")) for r in v.culprits],
                                             v.working)
        if again:
            seen.verdict = replace(v, confirmed=False,
                                   reason=looking_again(v.reason, again, where[again[0]]))
        if seen.verdict.confirmed:
            return self._local_hang(seen, outcome)
        looks = self.result.watched.looks
        looks.append(seen)
        del looks[:-20]
        self.node.steps.looked()
        after = steps.no_hang(self.spell, q, opts.hang_timeout, time.monotonic())
        self.spell = after.spell
        if after.announce:
            say(f"ddpdoctor run: no output or step for {q.stalled_s:.0f} s, but no "
                f"hang: {redact.text(seen.verdict.reason)}; still watching")
        return False

    def _local_hang(self, seen: Look, outcome: hang_mod.HangOutcome) -> bool:
        opts, result = self.opts, self.result
        outcome.output_bytes = self.job.copy.kept_bytes()
        result.watched.hang = outcome
        if steps.on_hang(opts.kill) is steps.Ending.STOP:
            say("ddpdoctor run: hang confirmed: " + redact.text(seen.verdict.reason)
                + f"; stopping the job (SIGTERM, SIGKILL after {opts.grace:g} "
                "s; --no-kill keeps it running)")
            result.watched.stopped_for_hang = True
            return True
        view = Report(command="run")
        outcome.add_to(view, opts.hang_timeout)
        scrub_report(view, result.secrets)
        try:
            hang_mod.print_diagnosis(view, outcome)
        except (OSError, ValueError):
            pass  # no terminal to show it on; the final report has it
        return False
