"""Pure parts of run's safety: the hang verdict, the memory history, secret scrubbing,
the kept-log accounting. No processes (but /dev/full for a real ENOSPC)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from look_fakes import Diagnosis, State

from ddpdoctor.core.findings import Finding
from ddpdoctor.hang.verdict import SpellMemory, judge, looking_again
from ddpdoctor.run.memory import MemoryHistory
from ddpdoctor.run.process import KeptFile
from ddpdoctor.run.progress import ProcSample, ProgressTracker, TreeSample
from ddpdoctor.run.secrets import scrub, secret_values


def _missing(culprit: int = 1) -> Diagnosis:
    return Diagnosis([State(0, "collective", 10), State(culprit, "compute", 11)],
                     [Finding("HANG_RANK_MISSING_COLLECTIVE", "rank 0 waits in barrier; "
                              "rank 1 is computing", ranks=[culprit])])


def test_odd_rank_idle_while_others_wait_is_confirmed():
    v = judge(_missing(), "", active=set())
    assert v.confirmed and v.culprits == (1,)


def test_odd_rank_still_working_is_not_a_hang():
    """rank 0 waits in a barrier while rank 1 saves a checkpoint: the stacks alone say
    HANG_RANK_MISSING_COLLECTIVE; rank 1's CPU time says it is working."""
    v = judge(_missing(), "", active={1})
    assert not v.confirmed and "still working" in v.reason and v.active == (1,)


def test_waiting_culprits_are_waiting_whatever_their_cpu():
    """A collective mismatch: both culprits wait (in different collectives). CPU from a
    spin-wait or prefetching workers does not make them 'working'."""
    d = Diagnosis([State(0, "collective", 10), State(1, "collective", 11)],
                  [Finding("HANG_COLLECTIVE_MISMATCH", "rank 0 in all_reduce; rank 1 in "
                           "broadcast", ranks=[0, 1])])
    assert judge(d, "", active={0, 1}).confirmed


@pytest.mark.parametrize("kinds,headline", [
    (["compute", "compute"], "no rank waits in a collective: no hang visible"),
    (["collective", "collective"], "ranks [0,1] wait in all_reduce: no odd one out"),
    (["idle", "idle"], "no rank waits in a collective: no hang visible")])
def test_no_finding_is_no_hang(kinds, headline):
    d = Diagnosis([State(r, k, 10 + r) for r, k in enumerate(kinds)], headline=headline)
    v = judge(d, "", active=set())
    assert not v.confirmed and v.reason == headline


def test_unreadable_stacks_are_no_hang():
    v = judge(None, "pid 7 is not a Python process", active=set())
    assert not v.confirmed and "not a Python process" in v.reason


def test_stopped_rank_confirms_but_a_suspended_job_or_a_debugger_does_not():
    one = Diagnosis([State(0, "collective", 10), State(1, "stopped", 11)])
    assert judge(one, "", set()).confirmed
    assert judge(one, "", set()).culprits == (1,)
    every = Diagnosis([State(0, "stopped", 10), State(1, "stopped", 11)])
    assert not judge(every, "", set()).confirmed
    assert not judge(one, "", set(), traced={11}).confirmed


def test_gone_rank_confirms_only_while_the_others_sit_idle():
    d = Diagnosis([State(0, "collective", 10), State(1, "dead", 11)],
                  [Finding("RANK_CRASHED", "rank 1 has exited", ranks=[1])])
    assert judge(d, "", set()).confirmed
    assert not judge(d, "", {0}).confirmed  # rank 0 is still finishing its work
    # rank 0 idle outside any collective (an upload, a wandb sync: network, no CPU) after
    # rank 1 finished: winding down, not a hang
    done = Diagnosis([State(0, "idle", 10), State(1, "dead", 11)],
                     [Finding("RANK_CRASHED", "rank 1 has exited", ranks=[1])])
    v = judge(done, "", set())
    assert not v.confirmed and "no live rank waits" in v.reason


def test_recheck_measures_ranks_by_their_pids_not_a_rank_variable():
    """mp.spawn ranks carry no RANK: the recheck measures the pids the stacks matched."""
    import os

    from ddpdoctor.run.watch_ranks import rank_usage

    usage = rank_usage({3: os.getpid(), 4: 2**22 + 12345})  # a pid that does not exist
    assert set(usage) == {3} and usage[3][0] > 0


def test_finding_without_a_waiting_rank_is_not_confirmed():
    d = Diagnosis([State(0, "idle", 10), State(1, "dataloader", 11)],
                  [Finding("HANG_DATALOADER", "rank 1 in data loading", ranks=[1])])
    assert not judge(d, "", set()).confirmed


def test_cpu_of_a_heartbeat_rank_marks_it_active_without_ending_the_quiet_spell():
    from ddpdoctor.run.progress import Heartbeat

    t = ProgressTracker(0.0)
    hb = {0: Heartbeat(0, 5, 1.0, 1.0, "data/forward", "running")}
    t.update(0.0, 0, TreeSample(0.0, [ProcSample(10, 0, 1.0, 1.0)]), hb)
    t.update(1.0, 0, TreeSample(1.0, [ProcSample(10, 0, 2.0, 1.0)]), hb)
    assert t.stalled_for(1.0) == 1.0  # a heartbeat rank's CPU is not a step
    assert t.active_ranks(1.0, 2.0) == {0}  # ... but it is working
    assert t.active_ranks(10.0, 2.0) == set()


def test_memory_history_is_bounded_and_spans_the_run():
    h = MemoryHistory(0.0, max_points=8, interval=1.0)
    for i in range(100):
        h.add(TreeSample(float(i), [ProcSample(10, 1, 0.0, 0.0, rss=(100 + i) << 20),
                                    ProcSample(11, 1, 0.0, 0.0, top=False, rss=1 << 20)]))
    pts = h.series(1)
    assert 4 <= len(pts) <= 8
    assert pts[0] == (0.0, 101.0)  # the rank's process + its worker
    assert pts[-1][0] >= 80  # still reaches the end
    ev = h.evidence(1)
    assert ev["rss_mb_peak"] == max(mb for _, mb in pts) and ev["rss_mb_first"] == 101.0
    assert h.evidence(5) is None


def test_secret_values_and_scrub():
    env = {"HF_TOKEN": "hf_abcdef123", "MASTER_PASSWORD": "hunter22", "PATH": "/bin",
           "SHORT_TOKEN": "x1"}
    argv = ["train.py", "--token", "tok_9876", "--api-key=key_5555", "--lr", "0.1"]
    secrets = secret_values(env, argv)
    assert set(secrets) == {"hf_abcdef123", "hunter22", "tok_9876", "key_5555"}
    got = scrub({"line": "login failed: hf_abcdef123 (hunter22)", "PATH": "/bin",
                 "cmd": "python train.py --token tok_9876", "HF_TOKEN": "hf_abcdef123",
                 "n": 3, "list": ["key_5555"]}, secrets)
    text = repr(got)
    for s in secrets:
        assert s not in text
    assert got["PATH"] == "/bin" and got["n"] == 3 and "--token ***" in got["cmd"]


def test_kept_file_counts_what_a_write_error_keeps_out(tmp_path):
    """/dev/full fails every write with ENOSPC: the file says so and counts the loss."""
    fd = os.open("/dev/full", os.O_WRONLY)
    f = KeptFile(Path("/dev/full"), fd)
    f.write(b"first line\n")
    f.write(b"second\n")
    assert not f.complete
    assert f.error.startswith("ENOSPC") and f.lines == 0
    assert f.lost_lines == 2 and f.lost_bytes == len(b"first line\nsecond\n")
    ok = KeptFile(tmp_path / "x", os.open(tmp_path / "x", os.O_WRONLY | os.O_CREAT))
    ok.write(b"a\n")
    assert ok.complete and ok.lines == 1 and (tmp_path / "x").read_bytes() == b"a\n"
    ok._close()


def test_signals_first_ctrl_c_is_passed_on_even_while_the_job_starts():
    import signal

    from ddpdoctor.run.signals import RunSignals

    class FakeCopy:
        def __init__(self) -> None:
            self.written = 120  # bytes of the job's output kept so far

        def kept_bytes(self) -> int:
            return self.written

    class FakeJob:
        def __init__(self) -> None:
            self.sent: list[int] = []
            self.copy = FakeCopy()

        def signal_group(self, sig: int) -> bool:
            self.sent.append(sig)
            return True

    sigs, job = RunSignals(), FakeJob()
    sigs._handle(signal.SIGINT, None)  # before the job is attached
    sigs.attach(job)
    assert job.sent == [signal.SIGINT] and not sigs.teardown
    # what the job printed before it got the Ctrl-C, not the tracebacks it makes
    assert sigs.output_bytes == 120
    job.copy.written = 900
    sigs._handle(signal.SIGINT, None)  # the second: the whole tree, at once
    assert sigs.output_bytes == 120
    assert sigs.teardown.startswith("a second Ctrl-C") and sigs.hurry
    assert job.sent == [signal.SIGINT]

    term = RunSignals()
    term.attach(FakeJob())
    term._handle(signal.SIGHUP, None)
    assert term.teardown == "SIGHUP to ddpdoctor run" and term.terminal_gone
    assert not term.hurry
    term._handle(signal.SIGTERM, None)  # again during the grace: no more grace
    assert term.hurry and term.teardown == "SIGHUP to ddpdoctor run"


def test_a_look_that_found_no_hang_is_followed_by_a_sooner_one_then_by_one_per_timeout():
    from ddpdoctor.run.steps import relook_after

    # a quarter of the timeout, half, then the timeout: a missed hang is caught within
    # 1.25 x the timeout; a long evaluation is looked at once per timeout after that
    assert [relook_after(8.0, n) for n in (1, 2, 3, 4)] == [2.0, 4.0, 8.0, 8.0]


# ---- two looks that disagree about one rank at one place: one more look decides


def test_a_rank_working_at_the_last_look_is_looked_at_once_more_before_a_hang():
    """CI (a 2-core host loaded past its cores): the job view's first look found rank 2's
    evaluation working at jobview_job.py:31; the second, 15 s later, called it idle at the
    same line and stopped a healthy job. Now the second look asks for a third."""
    where = "jobview_job.py:31 in _evaluate"
    memory = SpellMemory()
    assert memory.look_again(100.0, False, [(2, where)], working=[2]) == []
    assert memory.look_again(100.0, True, [(2, where)], working=[]) == [2]
    # the third look agrees with the second: a hang (the rank stopped there)
    assert memory.look_again(100.0, True, [(2, where)], working=[]) == []
    text = looking_again("rank 2 is at " + where, [2], where)
    assert text.endswith(f"but rank 2 was working at {where} at the last look: looking "
                         "once more before calling it hung")


def test_a_spin_or_a_hang_with_no_earlier_work_there_is_confirmed_at_once():
    memory = SpellMemory()
    # a first look that confirms: nothing seen before
    assert memory.look_again(5.0, True, [(1, "spin_job.py:67 in spin_on_flag")], []) == []
    # working elsewhere before (it moved on, then stopped): no second look
    assert memory.look_again(9.0, False, [(1, "train.py:40 in evaluate")], [1]) == []
    assert memory.look_again(9.0, True, [(1, "train.py:88 in forward")], []) == []
    # a new quiet spell forgets the last one's work
    assert memory.look_again(9.0, False, [(1, "train.py:88 in forward")], [1]) == []
    assert memory.look_again(30.0, True, [(1, "train.py:88 in forward")], []) == []
    # a culprit that was not working (only named) is not remembered
    assert memory.look_again(40.0, False, [(3, "train.py:5 in f")], [1]) == []
    assert memory.look_again(40.0, True, [(3, "train.py:5 in f")], []) == []
