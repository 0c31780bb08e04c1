"""The rank launcher: outcomes, deadlines, culprits. Each test starts real ranks."""

import time

import psutil
import pytest

from ddpdoctor.check.analysis.launch import analyze_launch
from ddpdoctor.check.launcher import launch

import launch_fns

pytestmark = [pytest.mark.slow]


@pytest.mark.timeout(90)
def test_collects_every_rank_return_value():
    import signal

    before = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)}
    res = launch(launch_fns.allreduce, nproc=2, backend="gloo", deadline_s=60)
    assert res.ok
    # torch's launcher took these over in this process (a SIGTERM raised SignalException
    # in a test worker long after its test): the caller gets its own back
    assert {s: signal.getsignal(s) for s in before} == before
    assert res.values() == {0: {"rank": 0, "sum": 3.0}, 1: {"rank": 1, "sum": 3.0}}
    assert analyze_launch(res) == []


@pytest.mark.timeout(120)
@pytest.mark.parametrize("how", ["sleep", "sigstop"])
def test_rank_stuck_forever_is_killed_at_the_deadline_and_named(how):
    import torch.distributed.elastic.multiprocessing  # noqa: F401 - import time is not timed

    # the deadline counts the ranks' start-up too (torch's import took 8 s of wall time a
    # rank beside a CI run and a 2-rank job): at 12 s neither rank had reached the planted
    # fault once, and both were named
    deadline = 25.0
    start = time.monotonic()
    res = launch(launch_fns.stuck_rank, nproc=2, args=(1, how), backend="gloo",
                 deadline_s=deadline)
    elapsed = time.monotonic() - start
    # the launcher's own clock (start-up to teardown done); the wall clock only bounds a hang
    assert res.elapsed_s < deadline + 8, f"launcher took {res.elapsed_s:.1f} s"
    assert elapsed < deadline + 25, f"launch() returned after {elapsed:.1f} s"
    assert {o.rank: o.status for o in res.outcomes} == {0: "timeout", 1: "timeout"}
    # rank 0 waits in the all-reduce; rank 1 never got there: rank 1 is the culprit
    assert res.culprits() == [1]
    findings = analyze_launch(res)
    assert [(f.id, f.ranks) for f in findings] == [("COMM_CONNECTIVITY", [1])]
    assert findings[0].evidence["waiting_for_it"] == [0]


@pytest.mark.timeout(90)
def test_exception_on_one_rank_names_it_and_tears_down_the_rest():
    res = launch(launch_fns.raise_on, nproc=2, args=(1,), backend="gloo", deadline_s=60)
    by_rank = {o.rank: o for o in res.outcomes}
    assert by_rank[1].status == "error"
    assert by_rank[1].error == "RuntimeError: planted failure on rank 1"
    assert "raise_on" in by_rank[1].traceback
    assert by_rank[0].status == "torn_down"
    assert res.culprits() == [1]
    assert res.elapsed_s < 30


@pytest.mark.timeout(90)
def test_rank_killed_by_signal_is_reported_as_crashed():
    res = launch(launch_fns.sigkill_on, nproc=2, args=(0,), backend="gloo", deadline_s=60)
    by_rank = {o.rank: o for o in res.outcomes}
    assert by_rank[0].status == "died"
    assert by_rank[0].error == "killed by signal SIGKILL"
    findings = analyze_launch(res)
    assert [(f.id, f.ranks) for f in findings] == [("RANK_CRASHED", [0])]


@pytest.mark.timeout(90)
def test_ranks_that_answered_but_cannot_exit_do_not_hold_the_launch_to_its_deadline():
    deadline = 60.0
    start = time.monotonic()
    res = launch(launch_fns.answer_then_never_exit, nproc=2, backend="gloo",
                 deadline_s=deadline)
    elapsed = time.monotonic() - start
    assert res.values() == {0: 0, 1: 1}
    assert analyze_launch(res) == []
    assert elapsed < deadline / 2, f"launcher waited {elapsed:.0f} s for ranks that answered"
    for o in res.outcomes:
        assert not psutil.pid_exists(o.pid) or psutil.Process(o.pid).status() == "zombie"
