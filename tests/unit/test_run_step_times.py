"""The adaptive hang threshold's step times from a fast job's heartbeats (a blind trial:
0.15 s steps, a hang after 15 of them, and run kept its 300 s start-up threshold: one
poll a second counted each poll's dozen steps as one)."""

from __future__ import annotations

from dataclasses import dataclass

from ddpdoctor.jobview.leader import Policy, threshold
from ddpdoctor.run.jobnode import STARTUP_EVENTS, STEPS_PER_INTERVAL, StepTimes


@dataclass
class Tracker:
    last_progress: float = 0.0
    last_what: str = "heartbeat of rank 0 (step 0)"
    step: int = 0


def _polls(steps: StepTimes, every_s: float, per_poll: int, polls: int,
           what: str = "heartbeat") -> Tracker:
    t = Tracker(last_what=f"{what} of rank 0")
    for _ in range(polls):
        t.last_progress += every_s
        t.step += per_poll
        steps.observe(t)
    return t


def test_a_poll_that_saw_many_steps_counts_each_of_them():
    steps = StepTimes()
    _polls(steps, 1.0, 7, 3)  # two intervals between three polls: 14 steps
    assert len(steps.times) == 14
    assert abs(steps.times[0] - 1 / 7) < 1e-9
    # five step times known after three polls: the threshold is the job's, not 300 s
    assert threshold(steps.times, Policy(hang_min_s=10))[0] == 10.0


def test_one_interval_gives_at_most_its_cap_and_lines_with_no_step_one_each():
    steps = StepTimes()
    _polls(steps, 10.0, 1000, 2)
    assert len(steps.times) == STEPS_PER_INTERVAL
    steps = StepTimes()
    _polls(steps, 1.0, 0, STARTUP_EVENTS + 2, what="output")  # no heartbeat moved on
    assert steps.times == [1.0, 1.0]


def test_steps_between_two_events_of_any_kind_are_counted():
    # a line each step, a heartbeat each second: whichever the poll saw last, the steps
    # since the last event are the interval's
    steps = StepTimes()
    t = _polls(steps, 1.0, 7, 2)
    t.last_what, t.last_progress, t.step = "output", t.last_progress + 1.0, t.step + 7
    steps.observe(t)
    assert len(steps.times) == 14 and abs(steps.times[-1] - 1 / 7) < 1e-9


def test_intervals_between_counted_steps_are_no_start_up():
    # three heartbeats a second apart, 6 and 2 steps on from the first counted step (the
    # trial's job hung after its 15th step): those are step times, not start-up
    steps = StepTimes()
    t = Tracker()
    for step in (7, 13, 15):
        t.last_progress += 1.0
        t.step = step
        steps.observe(t)
    assert len(steps.times) == 8
    assert threshold(steps.times, Policy(hang_min_s=10))[0] == 10.0
