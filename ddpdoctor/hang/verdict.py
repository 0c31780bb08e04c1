"""Pure: is a quiet job hung? run stops a job only on a confirmed hang.

A quiet spell (no output, no heartbeat step for --hang-timeout) is only a reason to look:
a long evaluation, a checkpoint save or a first compile is quiet too. What run saw when it
looked (every rank's stack, Flight Recorder where served, each rank's CPU time) decides:

- confirmed: ranks wait in a collective (or p2p op, or on their DataLoader) that the
  odd ones out never reach, and those odd ones are not working (no CPU); a rank stopped
  by SIGSTOP while others are not; a rank that is gone while the live ones sit idle;
- to be checked (``busy``): the odd ones out burn CPU while the others wait in a
  collective: CPU alone does not prove work (a busy-wait), so run reads their stacks a
  few more times (run/spinning.py): the same lines every time is a hang;
- anything else ("no hang visible", every rank computing, every rank in the same
  collective, stacks unreadable) is not: run says what it saw once and keeps watching.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from collections.abc import Sequence

    from ddpdoctor.core.findings import Finding

# attach.classify's kinds, spelled here so this module imports nothing heavy
_STOPPED = "stopped"
GONE_KINDS = ("dead", "zombie", "missing")
WAITING_KINDS = ("collective", "p2p")


class _State(Protocol):
    """What is read of one rank's classified stack (attach.classify.RankState)."""

    @property
    def rank(self) -> int: ...
    @property
    def pid(self) -> int: ...
    @property
    def kind(self) -> str: ...


class Stacks(Protocol):
    """What is read of a look's stacks: attach's HangDiagnosis on one node, the job view's
    merged JobDiagnosis (jobview/merge.py) across nodes."""

    @property
    def states(self) -> Sequence[_State]: ...
    @property
    def findings(self) -> Sequence[Finding]: ...
    @property
    def headline(self) -> str: ...


@dataclass(frozen=True)
class HangVerdict:
    confirmed: bool
    reason: str  # one line: why run stops the job, or why it does not
    culprits: tuple[int, ...] = ()
    active: tuple[int, ...] = field(default=())  # ranks working (CPU) when looked at
    # culprits that burned CPU while others wait in a collective: working or spinning?
    # The recheck reads their stacks again (looks.py) before saying either
    busy: tuple[int, ...] = ()
    spins: tuple[str, ...] = ()  # "rank 1 spins at x.py:12 in f: ..." when that confirmed it
    working: tuple[int, ...] = ()  # busy culprits the recheck found working


def _ranks(ranks: list[int] | set[int]) -> str:
    ranks = sorted(ranks)
    return f"rank {ranks[0]}" if len(ranks) == 1 else f"ranks {ranks}"


@dataclass(frozen=True)
class _Seen:
    """What a look saw, sorted once for the rules below."""

    diagnosis: Stacks
    active: set[int]
    act: tuple[int, ...]
    live: list[_State]
    stopped: list[_State]
    debugged: list[_State]
    gone: list[_State]

    @classmethod
    def of(cls, diagnosis: Stacks, active: set[int], traced: set[int]) -> _Seen:
        states = list(diagnosis.states)
        live = [s for s in states if s.kind not in GONE_KINDS]
        return cls(diagnosis, active, tuple(sorted(active)), live,
                   [s for s in live if s.kind == _STOPPED and s.pid not in traced],
                   [s for s in live if s.kind == _STOPPED and s.pid in traced],
                   [s for s in states if s.kind in GONE_KINDS])

    def waiting(self) -> bool:
        return any(s.kind in WAITING_KINDS for s in self.live)


def _debugged(x: _Seen) -> HangVerdict | None:
    if not x.debugged:
        return None
    return HangVerdict(False, f"{_ranks([s.rank for s in x.debugged])} stopped in a "
                       "debugger (tracing stop): not a hang", active=x.act)


def _stopped(x: _Seen) -> HangVerdict | None:
    if not x.stopped:
        return None
    if len(x.stopped) < len(x.live):
        return HangVerdict(True, f"{_ranks([s.rank for s in x.stopped])} stopped (SIGSTOP) "
                           "while the others wait", tuple(s.rank for s in x.stopped), x.act)
    return HangVerdict(False, "every rank is stopped (SIGSTOP): a suspended job, "
                       "not a hang", active=x.act)


def _gone(x: _Seen) -> HangVerdict | None:
    if not x.gone:
        return None
    gone = _ranks([s.rank for s in x.gone])
    busy = [s.rank for s in x.live if s.rank in x.active]
    if x.live and busy:
        return HangVerdict(False, f"{gone} gone, but {_ranks(busy)} still working (CPU): "
                           "not stopped", active=x.act)
    if x.live and not x.waiting():
        # a finished rank and one still uploading or syncing (network, no CPU) is
        # a job winding down, not a hang: only ranks waiting for the gone one are
        return HangVerdict(False, f"{gone} gone, but no live rank waits in a collective "
                           "for it", active=x.act)
    return HangVerdict(True, f"{gone} gone while the others wait in a collective",
                       tuple(s.rank for s in x.gone), x.act)


def _stacks(x: _Seen) -> HangVerdict:
    findings = list(x.diagnosis.findings)
    if not findings:
        return HangVerdict(False, x.diagnosis.headline or "no hang visible in the stacks",
                           active=x.act)
    culprits = sorted({r for f in findings for r in f.ranks})
    # a culprit inside a collective / p2p wait (a mismatch, a deadlock) is waiting,
    # whatever its CPU says (a spin-wait, its DataLoader workers still prefetching)
    waiting = {s.rank for s in x.live if s.kind in WAITING_KINDS}
    busy = [r for r in culprits if r in x.active and r not in waiting]
    if busy:
        return HangVerdict(False, f"{findings[0].title}; but {_ranks(busy)} is still "
                           "working (CPU): slow, not hung", tuple(culprits), x.act,
                           busy=tuple(busy) if x.waiting() else ())
    if not x.waiting() and not _flight_recorder(x.diagnosis):
        return HangVerdict(False, f"{findings[0].title}; but no rank waits in a "
                           "collective", tuple(culprits), x.act)
    return HangVerdict(True, findings[0].title, tuple(culprits), x.act)


@dataclass
class SpellMemory:
    """Where each blamed rank was found working, in the current quiet spell.

    Two looks that disagree about one rank at one place (working at the last look, idle
    or spinning now, its stack on the same line) are noise in one of them: a healthy
    evaluation read on a host loaded past its cores was called idle once (CI). A hang is
    then confirmed only by one more look; a rank that really stopped there is stopped one
    look later, and a rank that keeps working is never stopped."""

    spell: float = -1.0  # when the quiet spell began (its last progress)
    working_at: dict[int, str] = field(default_factory=dict)

    def look_again(self, spell: float, confirmed: bool, culprits: Sequence[tuple[int, str]],
                   working: Sequence[int]) -> list[int]:
        """The culprits (rank, where) whose hang waits for one more look; remembers the
        working ones of an unconfirmed look."""
        if spell != self.spell:
            self.spell, self.working_at = spell, {}
        if not confirmed:
            self.working_at.update((r, where) for r, where in culprits
                                   if r in working and where)
            return []
        again = [r for r, where in culprits if where and self.working_at.get(r) == where]
        for r in again:
            del self.working_at[r]
        return again


def looking_again(reason: str, ranks: Sequence[int], where: str) -> str:
    return (f"{reason}; but {_ranks(list(ranks))} was working at {where} at the last look: "
            "looking once more before calling it hung")


_RULES = (_debugged, _stopped, _gone)  # in order; the stacks' findings decide the rest


def judge(diagnosis: Stacks | None, error: str, active: set[int], traced: set[int] | None = None
          ) -> HangVerdict:
    """``diagnosis``: attach's HangDiagnosis (None when it could not be made, ``error``
    says why); ``active``: ranks that used CPU in the last seconds; ``traced``: pids in a
    debugger's tracing stop (state ``t``: a person is looking, not a hang)."""
    if diagnosis is None:
        return HangVerdict(False, f"no stacks to confirm a hang ({error or 'unknown'})",
                           active=tuple(sorted(active)))
    seen = _Seen.of(diagnosis, active, traced or set())
    for rule in _RULES:
        v = rule(seen)
        if v is not None:
            return v
    return _stacks(seen)


def _flight_recorder(diagnosis: Stacks) -> bool:
    return any(getattr(v, "behind", None) or getattr(v, "mismatch", False)
               for v in getattr(diagnosis, "fr_verdicts", []) or [])
