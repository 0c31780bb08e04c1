"""A rank that burns CPU while its peers wait in a collective: working or spinning?

Pure: run/spinning.py's rule on stacks built by hand (no processes), the verdict's
``busy`` premise, and how the recheck splits busy ranks (storage I/O, a moving stack, the
same lines every read). The real jobs are in tests/functional/test_run_spinning_e2e.py.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
from look_fakes import Diagnosis, State

from ddpdoctor.attach.stacks import Frame, RankStack, ThreadStack
from ddpdoctor.core.findings import Finding
from ddpdoctor.hang.verdict import judge
from ddpdoctor.run.busy import recheck_of
from ddpdoctor.run.spinning import (
    SpinVerdict,
    Spot,
    StackSample,
    sample_of,
    spin_verdict,
)

JOB = "/home/u/job/train.py"
MAIN = (Spot(JOB, "main", 111), Spot(JOB, "<module>", 119))
EXISTS = (("<frozen genericpath>", "exists"),)
SAVE = "/venv/lib/python3.11/site-packages/torch/serialization.py"


def _reads(*places: tuple, n: int = 8, every: float = 0.25) -> list[StackSample]:
    """``n`` samples ``every`` s apart, cycling through the (innermost user Spot, library
    calls inside it) places given."""
    return [StackSample(i * every, "compute", (spot, *MAIN), inner)
            for i, (spot, inner) in ((i, places[i % len(places)]) for i in range(n))]


def _at(line: int, name: str = "spin_on_flag", inner: tuple = ()) -> tuple:
    return Spot(JOB, name, line), inner


# --- the rule


def test_the_same_line_every_read_is_spinning_whatever_helper_it_polls():
    """``while not os.path.exists(flag): pass``: py-spy finds it on the loop's line, now
    and then inside ``exists``: one place."""
    v = spin_verdict(_reads(_at(67), _at(67, inner=EXISTS), _at(67)))
    assert v.spinning and v.where == "train.py:67 in spin_on_flag", v
    assert "the same place in 8 stacks over 1.8 s" in v.reason


def test_a_two_line_poll_loop_is_spinning():
    """``while time.time() < deadline:`` / ``n += 1``: the condition and the body."""
    v = spin_verdict(_reads(_at(78, "wait"), _at(79, "wait")))
    assert v.spinning and v.where == "train.py:78/79 in wait", v


def test_a_rank_whose_stack_moves_through_functions_is_working():
    """An evaluation: the model's forward (user code), the metric, the loop."""
    places = [_at(43, "Probe.forward"), _at(52, "accuracy"), _at(44, "Probe.forward"),
              _at(60, "evaluate")]
    v = spin_verdict([StackSample(i, "compute", (spot, Spot(JOB, "evaluate", 61), *MAIN)
                                  if spot.name != "evaluate" else (spot, *MAIN), inner)
                      for i, (spot, inner) in enumerate(places * 2)])
    assert not v.spinning and "callers changed" in v.reason, v


def test_a_rank_moving_between_functions_called_from_one_place_is_working():
    v = spin_verdict(_reads(_at(10, "phase_a"), _at(20, "phase_b"), _at(10, "phase_a")))
    assert not v.spinning and "moved through 2 functions" in v.reason, v


def test_many_lines_of_one_function_is_working():
    v = spin_verdict(_reads(*(_at(30 + i, "compute") for i in range(5))))
    assert not v.spinning and "5 lines" in v.reason, v


def test_a_models_forward_on_three_lines_is_working():
    """A forward of three layers that every read happened to land in: three lines, not a
    poll loop's one or two."""
    v = spin_verdict(_reads(*(_at(43 + i, "Probe.forward") for i in range(3))))
    assert not v.spinning and "3 lines" in v.reason, v


def test_changing_library_calls_below_one_user_line_is_working():
    """``torch.save(state, path)`` on one line: the pickler's calls change below it."""
    calls = [((SAVE, "save"),), ((SAVE, "_save"), (SAVE, "save")),
             ((SAVE, "persistent_id"), (SAVE, "_save"), (SAVE, "save")),
             ((SAVE, "_write"), (SAVE, "save"))]
    v = spin_verdict(_reads(*(_at(90, "checkpoint", c) for c in calls)))
    assert not v.spinning and "library calls changed" in v.reason, v


@pytest.mark.parametrize("kind", ["collective", "p2p", "dataloader", "stopped", "unknown"])
def test_a_read_outside_user_code_in_place_is_not_spinning(kind):
    """It reached a collective (or its data, or it stopped): it moved on, or it is some
    other case the other rules decide."""
    reads = _reads(_at(67))
    reads[1] = StackSample(0.25, kind, reads[1].user)
    v = spin_verdict(reads)
    assert not v.spinning and kind in v.reason, v


def test_too_few_reads_or_too_short_a_span_is_not_known():
    assert not spin_verdict(_reads(_at(67), n=5)).spinning
    bad = [*_reads(_at(67), n=5), StackSample(2.0, "unknown", error="py-spy timed out")]
    v = spin_verdict(bad)
    assert not v.spinning and "only 5 of its stacks" in v.reason and "py-spy" in v.reason
    v = spin_verdict(_reads(_at(67), every=0.05))
    assert not v.spinning and "span only 0.4 s" in v.reason, v
    assert not spin_verdict([]).spinning


def test_library_code_only_is_not_known_to_spin():
    v = spin_verdict([StackSample(i, "compute", (), EXISTS) for i in range(8)])
    assert not v.spinning and "library code only" in v.reason


# --- from attach's stacks to samples


def _frame(name: str, filename: str, line: int) -> Frame:
    return Frame(name, filename, line)


def test_sample_of_reads_the_main_thread_and_splits_library_from_user_frames():
    main = ThreadStack(1, "MainThread", True, [
        _frame("exists", "<frozen genericpath>", 19),
        _frame("spin_on_flag", JOB, 67), _frame("main", JOB, 111),
        _frame("_wrap", "/venv/lib/python3.11/site-packages/torch/x.py", 5),
        _frame("<module>", JOB, 119)], is_main=True)
    helper = ThreadStack(2, "prefetch", True, [_frame("load", JOB, 30)])
    s = sample_of(RankStack(1, 11, "running", [helper, main]), 3.0)
    assert s.at == 3.0 and s.kind == "compute" and not s.error
    assert s.user == (Spot(JOB, "spin_on_flag", 67), Spot(JOB, "main", 111),
                      Spot(JOB, "<module>", 119))
    assert s.inner == (("<frozen genericpath>", "exists"),)


LINEAR = [_frame("Linear.forward", "/venv/lib/python3.11/site-packages/torch/nn/modules/"
                 "linear.py", 134),
          _frame("Module._call_impl", "/venv/lib/python3.11/site-packages/torch/nn/modules/"
                 "module.py", 1790),
          _frame("Module._wrapped_call_impl", "/venv/lib/python3.11/site-packages/torch/nn/"
                 "modules/module.py", 1779)]
FORWARD = [_frame("Probe.forward", JOB, 43), _frame("evaluate", JOB, 60),
           _frame("main", JOB, 111)]


def _read(frames: list[Frame], owns_gil: bool, at: float = 0.0) -> StackSample:
    main = ThreadStack(1, "MainThread", True, frames, owns_gil=owns_gil, is_main=True)
    return sample_of(RankStack(1, 11, "running", [main]), at)


def test_a_read_with_the_gil_released_below_a_torch_layer_is_native_below_a_poll_not():
    """A model's ``self.a(x)``: py-spy finds nn.Linear's Python frames below the user's
    forward and the GIL released in its matmul: native work. ``os.path.exists``'s
    ``stat`` releases the GIL too, below a stdlib frame: a poll, not native."""
    assert _read(LINEAR + FORWARD, owns_gil=False).native
    assert not _read(LINEAR + FORWARD, owns_gil=True).native
    assert _read(FORWARD, owns_gil=False).native  # torch.relu: no Python frame below
    poll = [_frame("exists", "<frozen genericpath>", 19), _frame("spin_on_flag", JOB, 67),
            _frame("main", JOB, 111)]
    assert not _read(poll, owns_gil=False).native
    assert not _read([_frame("exists", "/usr/lib/python3.11/genericpath.py", 19),
                      *poll[1:]], owns_gil=False).native
    pathlib = [_frame("Path.stat", "/usr/lib/python3.11/pathlib.py", 1013),
               _frame("Path.exists", "/usr/lib/python3.11/pathlib.py", 1235), *poll[1:]]
    assert not _read(pathlib, owns_gil=False).native
    # the main thread waiting on a thread that works: Python's own wait, GIL released
    waits = [_frame("Condition.wait", "/usr/lib/python3.11/threading.py", 320),
             _frame("Future.result", "/usr/lib/python3.11/concurrent/futures/_base.py", 451),
             *FORWARD]
    assert _read(waits, owns_gil=False).native
    # an installed package in Debian's dist-packages is not Python's own helper
    assert _read([_frame("exists", "/usr/lib/python3/dist-packages/fsspec/os.py", 3),
                  *poll[1:]], owns_gil=False).native


def test_a_starved_evaluation_whose_reads_all_land_on_two_layers_is_working():
    """The CI run that stopped a healthy job: rank 1 evaluating (tests/fixtures/run_jobs/
    spin_job.py), starved to 13% of a core beside three test workers on 2 cores; all 13
    reads found it on forward's two heavy lines (43/44), inside nn.Linear. Measured here
    beside five busy loops: 35 of 40 reads had the GIL released there."""
    reads = []
    for i in range(13):
        line = 43 + i % 2
        frames = LINEAR + [_frame("Probe.forward", JOB, line), *FORWARD[1:]]
        reads.append(_read(frames, owns_gil=i % 5 == 4, at=i * 0.24))
    v = spin_verdict(reads)
    assert not v.spinning and "native call" in v.reason, v


def test_a_tight_loop_in_place_is_spinning_in_a_while_loop_working_in_a_for_loop():
    """``for w in words: counts[w] = counts.get(w, 0) + 1`` (rank 0 counting words while
    the others wait in a barrier): one line every read, GIL held, no call below, as a poll
    loop; its source says it steps through data."""
    from ddpdoctor.run.loops import Loop

    reads = _reads(_at(67, "build_vocab"), n=12)
    assert spin_verdict(reads).spinning  # the stacks alone
    v = spin_verdict(reads, lambda f, fn, lines: (Loop.FOR, 66)
                     if (fn, lines) == ("build_vocab", (67,)) else None)
    assert not v.spinning and v.reason == (
        "its 12 stacks stayed in a `for` loop (train.py:66): it steps through data, not "
        "polling a condition"), v
    assert spin_verdict(reads, lambda f, fn, lines: (Loop.WHILE, 67)).spinning
    assert spin_verdict(reads, lambda f, fn, lines: None).spinning  # source unknown


def test_sample_of_an_unreadable_or_waiting_rank():
    s = sample_of(RankStack(1, 11, "running", [], error="py-spy did not answer"), 1.0)
    assert s.error == "py-spy did not answer" and not s.user
    waiting = ThreadStack(1, "MainThread", False, [
        _frame("all_reduce", "/venv/lib/python3.11/site-packages/torch/distributed/"
               "distributed_c10d.py", 2800), _frame("step", JOB, 94)], is_main=True)
    s = sample_of(RankStack(1, 11, "sleeping", [waiting]), 1.0)
    assert s.kind == "collective"


# --- the verdict's premise: a busy culprit while others wait gets its stacks compared


def test_a_busy_culprit_while_a_peer_waits_is_to_be_checked_not_cleared():
    d = Diagnosis([State(0, "collective", 10), State(1, "compute", 11)],
                  [Finding("HANG_RANK_MISSING_COLLECTIVE", "rank 0 waits in all_reduce; "
                           "rank 1 is at train.py:67", ranks=[1])])
    v = judge(d, "", active={1})
    assert not v.confirmed and v.busy == (1,), v


def test_a_busy_culprit_with_no_rank_in_a_collective_is_not_to_be_checked():
    d = Diagnosis([State(0, "idle", 10), State(1, "compute", 11)],
                  [Finding("HANG_RANK_MISSING_COLLECTIVE", "odd", ranks=[1])])
    v = judge(d, "", active={1})
    assert not v.confirmed and v.busy == (), v


# --- the recheck's split of the busy ranks


@dataclass
class Reads:
    verdicts: dict[int, SpinVerdict]

    def verdict(self, rank: int) -> SpinVerdict:
        return self.verdicts[rank]


SPINS = SpinVerdict(True, "spins at train.py:67 in spin_on_flag: the same place in 5 "
                    "stacks over 2.0 s", "train.py:67 in spin_on_flag")
MOVES = SpinVerdict(False, "its callers changed between reads")


def _working(used: dict, reads: Reads, took: float) -> tuple[list[str], dict[int, str]]:
    seen = recheck_of(sorted(used), {r: (0.0, 0) for r in used}, used, took, reads.verdict)
    return list(seen.working.values()), dict(seen.spinning)


def test_cpu_with_the_same_lines_every_read_is_spinning_not_working():
    working, spins = _working({1: (1.9, 0)}, Reads({1: SPINS}), 2.0)
    assert working == [] and list(spins) == [1]
    assert spins[1].startswith("rank 1 spins at train.py:67 in spin_on_flag")
    assert "1.90 s of CPU" in spins[1]


def test_cpu_with_a_moving_stack_or_storage_io_is_working():
    working, spins = _working({0: (1.5, 0), 1: (0.4, 8 << 20)},
                              Reads({0: MOVES, 1: SPINS}), 2.0)
    assert spins == {}
    assert working[0] == "rank 0 used 1.50 s of CPU in 2.0 s (its callers changed " \
        "between reads)"
    assert working[1].startswith("rank 1 used 0.40 s of CPU and 8.4 MB of I/O")


# --- the recheck wired together, its edges faked (no process, no py-spy)


@dataclass
class Copy:
    lines: int = 0  # what the tracker saw last: no new output
    moving_lines: int = 0

    def looping_ranks(self) -> frozenset[int]:
        return frozenset()


@dataclass
class FakeJob:
    pid: int = 4242
    copy: Copy = field(default_factory=Copy)

    def poll(self) -> None:
        return None


def _stack(rank: int, pid: int, frames: list[Frame]) -> RankStack:
    # a Python busy-wait holds the GIL in every read (spinning.py: native work does not)
    return RankStack(rank, pid, "running", [ThreadStack(1, "MainThread", True, frames,
                                                        owns_gil=True, is_main=True)])


def _recheck_with(monkeypatch, stacks_of_read) -> object:
    """Rank 0 waits in all_reduce, rank 1 (pid 11) burns 0.9 s of CPU a second with no
    I/O; each py-spy read of rank 1 returns ``stacks_of_read(i)``."""
    from ddpdoctor.attach import stacks as stacks_mod
    from ddpdoctor.hang.verdict import HangVerdict
    from ddpdoctor.run import looks, watch_ranks
    from ddpdoctor.run.progress import ProgressTracker, TreeSample

    t0 = looks.time.monotonic()
    monkeypatch.setattr(watch_ranks, "rank_usage", lambda pids: {
        r: (0.9 * (looks.time.monotonic() - t0), 0) for r in pids})
    monkeypatch.setattr(looks, "sample_tree", lambda pid, now, cache: TreeSample(now))
    reads = iter(range(1000))
    monkeypatch.setattr(stacks_mod, "collect_stacks",
                        lambda targets, native=False, timeout=5.0, py_spy=None:
                        [stacks_of_read(next(reads))])
    first = stacks_of_read(0)
    d = Diagnosis([State(0, "collective", 10), State(1, "compute", 11)],
                  [Finding("HANG_RANK_MISSING_COLLECTIVE", "rank 0 waits in all_reduce; "
                           "rank 1 is at train.py:67", ranks=[1])])
    d.stacks = [first]
    tracker = ProgressTracker(0.0)
    verdict = HangVerdict(False, "…; but rank 1 is still working (CPU)", (1,), (1,),
                          busy=(1,))
    return looks._recheck(FakeJob(), tracker, verdict, d, 1.5, {}, lambda: {})


def test_the_recheck_names_a_rank_spinning_on_one_line(monkeypatch):
    spin = [_frame("spin_on_flag", JOB, 67), _frame("main", JOB, 111)]
    v = _recheck_with(monkeypatch, lambda i: _stack(1, 11, spin))
    assert v.confirmed and v.culprits == (1,), v
    assert v.reason.startswith("rank 0 waits in all_reduce; rank 1 is at train.py:67")
    [spun] = v.spins
    assert spun.startswith("rank 1 spins at train.py:67 in spin_on_flag"), spun


def test_the_recheck_leaves_a_busy_rank_whose_stack_moves(monkeypatch):
    layers = [[_frame("forward", JOB, 43 + i % 3), _frame("evaluate", JOB, 61),
               _frame("main", JOB, 111)] for i in range(3)]
    v = _recheck_with(monkeypatch, lambda i: _stack(1, 11, layers[i % 3]))
    assert not v.confirmed and v.spins == (), v
    assert "rank 1 used" in v.reason and "3 lines" in v.reason and "working, not hung" \
        in v.reason, v


def test_the_source_is_read_from_a_regular_file_only(tmp_path):
    """A frame's file name is the job's: a FIFO there (no writer) or a device must not
    make run's supervision wait; a relative name is the rank's directory's, not ours."""
    import os

    from ddpdoctor.run.loops import Loop
    from ddpdoctor.run.stack_reads import loop_in_source

    job = tmp_path / "train.py"
    job.write_text("def vocab(words, counts):\n"
                   "    for w in words: counts[w] = counts.get(w, 0) + 1\n")
    assert loop_in_source(str(job), "vocab", (2,)) == (Loop.FOR, 2)
    fifo = tmp_path / "fifo.py"
    os.mkfifo(fifo)
    assert loop_in_source(str(fifo), "vocab", (2,)) is None
    assert loop_in_source("/dev/zero", "vocab", (2,)) is None
    assert loop_in_source("train.py", "vocab", (2,)) is None
    assert loop_in_source(str(tmp_path / "gone.py"), "vocab", (2,)) is None
