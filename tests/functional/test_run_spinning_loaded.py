"""A rank's stacks read live on a host loaded past its cores: work stays work, a spin a spin.

A CI run stopped a healthy job: rank 1 evaluating (tests/fixtures/run_jobs/spin_job.py),
starved to 13% of a core beside three test workers on 2 cores, was read 13 times on its
model's two heavy lines and called spinning. Here the same evaluation and the same
``os.path.exists`` spin run alone (no process group: the functions of spin_job.py), beside
busy loops that leave the rank less than a core, and run/spinning.py judges py-spy's real
reads.
"""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest
from run_helpers import PY, kill_tree

from ddpdoctor.attach.stacks import collect_stacks
from ddpdoctor.run.spinning import sample_of, spin_verdict
from ddpdoctor.run.stack_reads import loop_in_source

pytestmark = [pytest.mark.slow, pytest.mark.matrix]

JOBS = Path(__file__).parents[1] / "fixtures" / "run_jobs"
# busy loops beside the rank: with it, more runnable processes than this host's 2 cores
# (CI's own test workers add more); few, for the tests running beside this one
BUSY = 2
READS = 15
# imports spin_job.py (its main() is guarded) and runs one of its functions
RUN = ("import sys; sys.path.insert(0, {jobs!r}); sys.argv = ['spin_job', {mode!r}, '600']; "
       "import spin_job; print('ready', flush=True); {call}")


def _reads_of(mode: str, call: str, tmp_path: Path) -> list:
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    busy = [subprocess.Popen([PY, "-c", "while True: pass"]) for _ in range(BUSY)]
    rank = subprocess.Popen([PY, "-c", RUN.format(jobs=str(JOBS), mode=mode, call=call)],
                            stdout=subprocess.PIPE, text=True, env=env)
    try:
        assert rank.stdout is not None and rank.stdout.readline().strip() == "ready"
        time.sleep(1.0)  # into its loop
        samples = []
        for _ in range(READS):
            (stack,) = collect_stacks([(1, rank.pid)], timeout=5.0)
            samples.append(sample_of(stack, time.monotonic()))
            time.sleep(0.1)
        return samples
    finally:
        for p in (rank, *busy):
            kill_tree(p.pid)
            p.wait(timeout=10)


def test_a_starved_evaluation_read_live_is_working(tmp_path):
    samples = _reads_of("evaluate", "spin_job.evaluate(600)", tmp_path)
    assert all(not s.error for s in samples), [s.error for s in samples]
    assert all(s.user and s.user[0].name.endswith("forward") or s.user[0].name.endswith(
        ("evaluate", "accuracy")) for s in samples), samples
    v = spin_verdict(samples, loop_in_source)
    assert not v.spinning, v


def test_a_starved_spin_read_live_is_spinning(tmp_path):
    samples = _reads_of("flag", "spin_job.spin_on_flag()", tmp_path)
    v = spin_verdict(samples, loop_in_source)
    assert v.spinning and v.where.startswith("spin_job.py:"), v
    assert "in spin_on_flag" in v.where, v



def test_a_starved_word_count_read_live_is_working_by_its_source(tmp_path):
    """A one-line ``for`` loop through data: the stacks alone call it a spin (one line,
    GIL held), the source read as run reads it (stack_reads.loop_in_source) does not."""
    samples = _reads_of("vocab", "spin_job.build_vocab(600)", tmp_path)
    assert spin_verdict(samples).spinning
    v = spin_verdict(samples, loop_in_source)
    assert not v.spinning and "stayed in a `for` loop (spin_job.py:" in v.reason, v


def test_a_starved_spin_is_still_spinning_with_its_source_read(tmp_path):
    samples = _reads_of("deadline", "spin_job.spin_until_deadline()", tmp_path)
    v = spin_verdict(samples, loop_in_source)
    assert v.spinning and "in spin_until_deadline" in v.where, v
