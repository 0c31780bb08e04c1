"""run's loop decisions (ddpdoctor/run/steps.py) as pure functions: whether a poll looks at
a quiet job, what a look that found no hang changes, how a confirmed hang ends. No
process, no clock."""

from __future__ import annotations

from dataclasses import replace

import pytest

from ddpdoctor.run import steps
from ddpdoctor.run.steps import Ending, Quiet, Skip, Spell

TIMEOUT = 8.0
QUIET = Quiet(now=100.0, stalled_s=9.0, spell=91.0, job_alive=True, signalled=False,
              hang_known=False, leader_looks=False)


def test_a_job_quiet_past_the_timeout_is_looked_at() -> None:
    assert steps.decide(QUIET, Spell(), TIMEOUT) is None


@pytest.mark.parametrize(("change", "why"), [
    ({"leader_looks": True}, Skip.LEADER),
    ({"hang_known": True}, Skip.SAID),
    ({"signalled": True}, Skip.SIGNALLED),
    ({"stalled_s": TIMEOUT - 0.1}, Skip.MOVING),
    ({"job_alive": False}, Skip.ENDED),
])
def test_each_reason_not_to_look(change: dict, why: Skip) -> None:
    assert steps.decide(replace(QUIET, **change), Spell(), TIMEOUT) is why


def test_the_leader_decides_before_anything_else() -> None:
    # a node in a connected job view never looks on its own, even at a dead quiet job
    q = replace(QUIET, leader_looks=True, job_alive=False, stalled_s=1e6)
    assert steps.decide(q, Spell(), TIMEOUT) is Skip.LEADER


def test_after_a_look_that_found_no_hang_the_next_waits_and_backs_off() -> None:
    first = steps.no_hang(Spell(), QUIET, TIMEOUT, looked_at=101.0)
    assert first.announce  # said once for the spell
    assert first.spell == Spell(next_look=101.0 + 2.0, warned_for=QUIET.spell, looks=1)
    # before the next look is due: no look
    assert steps.decide(replace(QUIET, now=102.0), first.spell, TIMEOUT) is Skip.TOO_SOON
    assert steps.decide(replace(QUIET, now=103.0), first.spell, TIMEOUT) is None
    second = steps.no_hang(first.spell, QUIET, TIMEOUT, looked_at=103.5)
    third = steps.no_hang(second.spell, QUIET, TIMEOUT, looked_at=108.0)
    fourth = steps.no_hang(third.spell, QUIET, TIMEOUT, looked_at=117.0)
    assert not (second.announce or third.announce or fourth.announce)  # not once a look
    # a quarter of the timeout, a half, then the timeout (never more)
    assert [second.spell.next_look, third.spell.next_look, fourth.spell.next_look] == [
        103.5 + 4.0, 108.0 + 8.0, 117.0 + 8.0]
    assert fourth.spell.looks == 4


def test_a_new_quiet_spell_is_announced_and_counts_again() -> None:
    worn = Spell(next_look=150.0, warned_for=QUIET.spell, looks=5)
    later = replace(QUIET, spell=140.0, now=160.0)
    after = steps.no_hang(worn, later, TIMEOUT, looked_at=161.0)
    assert after.announce and after.spell.looks == 1
    assert after.spell.next_look == 161.0 + 2.0


def test_the_relook_schedule() -> None:
    assert [steps.relook_after(8.0, n) for n in (1, 2, 3, 4)] == [2.0, 4.0, 8.0, 8.0]


def test_values_are_frozen() -> None:
    with pytest.raises(AttributeError):
        QUIET.now = 1.0  # type: ignore[misc]
    with pytest.raises(AttributeError):
        Spell().looks = 2  # type: ignore[misc]


@pytest.mark.parametrize(("kill", "ending"), [(True, Ending.STOP), (False, Ending.KEEP)])
def test_a_confirmed_hang_stops_the_job_unless_no_kill(kill: bool, ending: Ending) -> None:
    assert steps.on_hang(kill) is ending
