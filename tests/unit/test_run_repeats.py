"""run/repeats.py: one traceback printed over and over is not the job moving; every other
line is, repeated or not. No processes: the output copy in a temporary directory."""

from __future__ import annotations

from ddpdoctor.run.process import OutputCopy, split_rank
from ddpdoctor.run.progress import ProgressTracker, TreeSample
from ddpdoctor.run.repeats import SEEN_BEFORE, ErrorRepeats

# the loop that hid a hang from run (tests/fixtures/run_jobs/fd_limit_job.py under load:
# rank 1's resource-sharer thread retrying accept() with no descriptor left)
LOOP = b"""[rank1]: Traceback (most recent call last):
[rank1]:   File "/usr/lib/python3.11/multiprocessing/resource_sharer.py", line 138, in _serve
[rank1]:     with self._listener.accept() as conn:
[rank1]:          ^^^^^^^^^^^^^^^^^^^^^^^
[rank1]:   File "/usr/lib/python3.11/multiprocessing/connection.py", line 466, in accept
[rank1]:     c = self._listener.accept()
[rank1]: OSError: [Errno 24] Too many open files
""".splitlines(keepends=True)


def _moving(lines: list[bytes]) -> list[bool]:
    r = ErrorRepeats()
    return [r.moves(split_rank(ln)[1]) for ln in lines]


def test_a_traceback_printed_in_a_loop_stops_moving_after_it_was_seen_twice():
    moved = _moving(LOOP * 10)
    per_round = [any(moved[i:i + len(LOOP)]) for i in range(0, len(moved), len(LOOP))]
    assert per_round[:SEEN_BEFORE] == [True] * SEEN_BEFORE
    assert not any(per_round[SEEN_BEFORE:])


def test_training_lines_that_repeat_their_shape_still_move():
    steps = [f"[rank0]: step {i} loss {2.5 - i / 100:.3f}\n".encode() for i in range(50)]
    assert all(_moving(steps))


def test_a_new_error_moves_even_after_a_loop():
    other = b"[rank0]: RuntimeError: CUDA error: an illegal memory access was encountered\n"
    assert _moving(LOOP * 5 + [other])[-1]


def test_the_output_copy_counts_moving_lines_and_the_tracker_reads_them(tmp_path):
    copy = OutputCopy(tmp_path)
    tracker = ProgressTracker(0.0)
    for ln in LOOP * SEEN_BEFORE:
        copy.add_line(ln)
    tracker.update(1.0, copy.moving_lines, TreeSample(1.0))
    assert tracker.last_progress == 1.0
    for ln in LOOP * 20:
        copy.add_line(ln)
    tracker.update(9.0, copy.moving_lines, TreeSample(9.0))
    assert tracker.last_progress == 1.0  # 140 more lines, none of them the job moving
    assert copy.lines == len(LOOP) * (SEEN_BEFORE + 20)  # every line is still kept
    copy.close()


def test_a_rank_in_an_error_loop_is_looping_and_its_cpu_is_not_work(tmp_path):
    """The hung job of tests/fixtures/run_jobs/fd_limit_job.py under load: rank 1's main
    thread waits for its workers, its resource-sharer thread spins printing the traceback
    (its CPU and its lines): neither is rank 1 moving. Rank 0's CPU still is."""
    from ddpdoctor.run.process import LOOP_LINES
    from ddpdoctor.run.progress import ProcSample

    copy = OutputCopy(tmp_path)
    for ln in LOOP * (LOOP_LINES // len(LOOP) + 3):
        copy.add_line(ln)
    copy.add_line(b"[rank0]: rank 0 step 3\n")
    assert copy.looping_ranks() == frozenset({1})
    tracker = ProgressTracker(0.0)

    def sample(t: float, cpu: float, rank: int) -> TreeSample:
        return TreeSample(t, [ProcSample(100 + rank, rank, cpu, 0.0)])

    tracker.update(1.0, copy.moving_lines, sample(1.0, 0.0, 1), looping=copy.looping_ranks())
    tracker.update(5.0, copy.moving_lines, sample(5.0, 3.9, 1), looping=copy.looping_ranks())
    assert tracker.last_progress <= 1.0  # rank 1 burnt a core printing its loop
    tracker.update(9.0, copy.moving_lines, sample(9.0, 8.0, 1))
    assert tracker.last_progress == 9.0  # not looping: its CPU is work, as before
    copy.add_line(b"[rank1]: rank 1 step 0\n")  # a line that moves ends the loop
    assert copy.looping_ranks() == frozenset()
    copy.close()
