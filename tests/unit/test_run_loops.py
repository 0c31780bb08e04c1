"""run/loops.py: the innermost loop of a source around the lines a rank's reads found."""

from __future__ import annotations

from pathlib import Path

from ddpdoctor.run.loops import Loop, enclosing_loop

SPIN_JOB = Path(__file__).parents[1] / "fixtures" / "run_jobs" / "spin_job.py"

SOURCE = '''\
import os, time

def vocab(words):
    counts = {}
    for w in words: counts[w] = counts.get(w, 0) + 1
    return counts

def wait(flag):
    while not os.path.exists(flag):
        pass

def poll_all(procs, data):
    while True:
        for p in procs:
            p.poll()
        lens = [len(x) for x in data]

def straight():
    return 1

for attempt in range(3):
    def inner():
        x = check()
        return x

def count(words, d, g):
    for w in words: d[w] = d.get(w, 0) + 1; f = lambda: 0
    for w in words: g.setdefault(w, defaultdict(lambda: 0))[w] += 1
    while not [p for p in words if os.path.exists(p)]:
        pass
'''


def test_a_for_loop_or_a_comprehension_is_data_a_while_loop_a_condition():
    assert enclosing_loop(SOURCE, [5]) == (Loop.FOR, 5)
    assert enclosing_loop(SOURCE, [9, 10]) == (Loop.WHILE, 9)
    assert enclosing_loop(SOURCE, [16]) == (Loop.FOR, 16)  # the comprehension, not the while


def test_the_innermost_loop_that_holds_every_line_decides():
    assert enclosing_loop(SOURCE, [14, 15]) == (Loop.FOR, 14)
    assert enclosing_loop(SOURCE, [13, 15]) == (Loop.WHILE, 13)  # the for's header is not
    assert enclosing_loop(SOURCE, [15, 16]) == (Loop.WHILE, 13)


def test_no_loop_or_no_source_says_nothing():
    assert enclosing_loop(SOURCE, [19]) is None
    # a function defined in a loop: its frame does not run that loop
    assert enclosing_loop(SOURCE, [23, 24]) is None
    assert enclosing_loop(SOURCE, [23, 24], "inner") is None
    assert enclosing_loop(SOURCE, [21]) == (Loop.FOR, 21)
    assert enclosing_loop(SOURCE, []) is None
    assert enclosing_loop("def f(:\n", [1]) is None
    assert enclosing_loop("x = 1\x00\n", [1]) is None


def test_the_fixture_jobs_loops_read_as_they_are_written():
    """The three busy-waits of tests/fixtures/run_jobs/spin_job.py are while loops; its
    vocabulary count, a for loop."""
    source = SPIN_JOB.read_text()
    lines = source.splitlines()

    def at(text: str) -> int:
        return next(i + 1 for i, ln in enumerate(lines) if ln.strip().startswith(text))

    for spin in ("while not os.path.exists(flag):", "while True: n += 1",
                 "while time.time() < deadline: pass"):
        assert enclosing_loop(source, [at(spin)]) == (Loop.WHILE, at(spin)), spin
    count = at("for w in words:")
    assert enclosing_loop(source, [count]) == (Loop.FOR, count)


def test_the_frames_function_decides_not_a_lambda_on_its_line():
    assert enclosing_loop(SOURCE, [27], "count") == (Loop.FOR, 27)
    assert enclosing_loop(SOURCE, [28], "count") == (Loop.FOR, 28)
    assert enclosing_loop(SOURCE, [28], "<lambda>") is None  # the lambda's own frame
    assert enclosing_loop(SOURCE, [5], "vocab") == (Loop.FOR, 5)
    assert enclosing_loop(SOURCE, [16], "<listcomp>") == (Loop.FOR, 16)  # Python < 3.12
    assert enclosing_loop(SOURCE, [21], "<module>") == (Loop.FOR, 21)


def test_a_comprehension_in_a_while_condition_polls():
    assert enclosing_loop(SOURCE, [29], "count") == (Loop.WHILE, 29)
    assert enclosing_loop(SOURCE, [29, 30], "count") == (Loop.WHILE, 29)


def test_a_source_the_parser_cannot_take_says_nothing():
    assert enclosing_loop("x = " + "1+" * 200_000 + "1\n", [1]) is None
