"""The supervision loop's decisions as small steps over frozen values (NVRx ``inprocess/``).

Each poll of a quiet job goes observe -> decide to look -> look -> judge -> end:
``Quiet`` is what one poll observed, ``Spell`` what the loop remembers of the current quiet
spell, and the functions here decide from them alone, without a process, a clock or a
terminal: the loop (loop.py) gathers the observation, does the look (stacks, CPU) and
prints; these say whether to look, what a look that found no hang changes, and how a
confirmed hang ends. tests/unit/test_run_steps.py holds them without processes.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, replace


@dataclass(frozen=True)
class Quiet:
    """One poll's view of the job, as the decision to look needs it."""

    now: float  # monotonic
    stalled_s: float  # seconds since the last progress (output, step, CPU)
    spell: float  # when the current quiet spell began (the last progress, monotonic)
    job_alive: bool
    signalled: bool  # run itself got Ctrl-C / SIGTERM: no look now
    hang_known: bool  # a hang was already confirmed (--no-kill keeps the job)
    leader_looks: bool  # a connected job view: the leader looks at the whole job


@dataclass(frozen=True)
class Spell:
    """What the loop remembers of the current quiet spell."""

    next_look: float = 0.0  # monotonic: no look before
    warned_for: float = -1.0  # the spell (its start) already said "still watching" for
    looks: int = 0  # looks in this spell that found no hang


class Skip(enum.Enum):
    """Why a poll does not look (None from ``decide``: look now)."""

    LEADER = "the job view's leader looks at the whole job"
    SAID = "a hang was already confirmed"
    SIGNALLED = "run is being stopped"
    MOVING = "the job moved within the hang timeout"
    TOO_SOON = "the last look found no hang; the next is not due"
    ENDED = "the job ended"


def decide(q: Quiet, s: Spell, hang_timeout: float) -> Skip | None:
    """Whether this poll looks at the job's stacks: None to look, else why not."""
    if q.leader_looks:
        return Skip.LEADER
    if q.hang_known:
        return Skip.SAID
    if q.signalled:
        return Skip.SIGNALLED
    if q.stalled_s < hang_timeout:
        return Skip.MOVING
    if q.now < s.next_look:
        return Skip.TOO_SOON
    if not q.job_alive:
        return Skip.ENDED
    return None


def relook_after(hang_timeout: float, looks: int) -> float:
    """Seconds until the next look in a quiet spell that ``looks`` looks found no hang:
    a quarter of the timeout after the first, half after the second, then the timeout.
    One look can miss (a CPU sample that lagged on a loaded host made a sleeping culprit
    "still working" in CI); a long evaluation still gets one look per timeout."""
    return hang_timeout * min(1.0, 0.25 * 2 ** (looks - 1))


@dataclass(frozen=True)
class NoHang:
    """What a look that found no hang changes: the spell, and whether to say so (once a
    spell, not once a look)."""

    spell: Spell
    announce: bool


def no_hang(s: Spell, q: Quiet, hang_timeout: float, looked_at: float) -> NoHang:
    """The spell after a look at ``looked_at`` (monotonic, after the look) found no hang."""
    announce = s.warned_for != q.spell
    looks = 1 if announce else s.looks + 1
    return NoHang(replace(s, warned_for=q.spell, looks=looks,
                          next_look=looked_at + relook_after(hang_timeout, looks)), announce)


class Ending(enum.Enum):
    """What a confirmed hang does to the job."""

    STOP = "stop the job (SIGTERM, SIGKILL after the grace)"
    KEEP = "keep it running and show the diagnosis (--no-kill)"


def on_hang(kill: bool) -> Ending:
    return Ending.STOP if kill else Ending.KEEP
