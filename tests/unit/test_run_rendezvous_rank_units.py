"""Which rank a failed rendezvous starts from: the pure parts, no processes.

run/rendezvous.py (each rank's endpoint from its environment / command line, the
odd one out, the finding when the log shows a rendezvous that never completed), the log
path (diagnose's rendezvous_split on per-rank logs), and the multi-node recheck that
sorts a spinning rank from a working one (run/busy.recheck_of). The real jobs
are in tests/functional/test_run_rendezvous_rank_e2e.py.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from ddpdoctor.core.findings import Finding
from ddpdoctor.diagnose.events import Event, EventKind
from ddpdoctor.run.busy import recheck_of
from ddpdoctor.run.rendezvous import (
    RankEndpoint,
    culprit_finding,
    endpoint_of,
    log_endpoints,
    odd_ranks,
)
from ddpdoctor.run.spinning import SpinVerdict, Spot, StackSample, spin_verdict

ENV = {"RANK": "1", "WORLD_SIZE": "2", "MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "29500"}


def _ep(rank: int, address: str, world: int | None = 2) -> RankEndpoint:
    return RankEndpoint(rank, address, world, "env")


# --- a rank's endpoint, from what run reads of its process


def test_endpoint_from_the_environment():
    e = endpoint_of(ENV, ["python", "train.py"])
    assert e == RankEndpoint(1, "10.0.0.1:29500", 2, "env")
    assert e.describe() == "rank 1: 10.0.0.1:29500, WORLD_SIZE=2 (env)"


@pytest.mark.parametrize("argv, address", [
    (["python", "train.py", "--dist-url", "tcp://10.0.0.9:23456"], "10.0.0.9:23456"),
    (["python", "train.py", "--init-method=tcp://node-a:1234", "--x"], "node-a:1234"),
    (["python", "t.py", "--dist-url", "tcp://[fe80::1]:99"], "[fe80::1]:99"),
    (["python", "t.py", "--init_method", "file:///shared/rdzv"], "file:///shared/rdzv"),
])
def test_an_init_method_on_the_command_line_wins(argv, address):
    e = endpoint_of(ENV, argv)
    assert e is not None and e.address == address and e.source == "command line"


def test_no_rank_or_no_endpoint_is_none_and_unset_parts_are_shown():
    assert endpoint_of({"MASTER_PORT": "1"}, ["python"]) is None  # the launcher
    assert endpoint_of({"RANK": "x", "MASTER_PORT": "1"}, ["python"]) is None
    assert endpoint_of({"RANK": "0"}, ["python"]) is None  # mp.spawn: set in Python
    assert endpoint_of({"RANK": "0", "MASTER_PORT": "7"}, ["p"]).address == "?:7"
    # the program's own name is never read as an init_method
    assert endpoint_of({"RANK": "0"}, ["tcp://h:1"]) is None


# --- the odd one out


def test_with_two_ranks_the_one_that_is_not_rank_0s_is_odd():
    odd = odd_ranks({0: _ep(0, "127.0.0.1:29611"), 1: _ep(1, "127.0.0.1:29612")})
    assert odd is not None and odd.ranks == (1,)
    assert odd.expected == "127.0.0.1:29611 with WORLD_SIZE=2"
    assert odd.lines == ("rank 0: 127.0.0.1:29611, WORLD_SIZE=2 (env)",
                         "rank 1: 127.0.0.1:29612, WORLD_SIZE=2 (env)")


def test_the_majority_wins_even_against_rank_0():
    eps = {r: _ep(r, "h:1") for r in (1, 2, 3)} | {0: _ep(0, "h:2")}
    assert odd_ranks(eps).ranks == (0,)


def test_a_different_world_size_is_odd_too_and_loopback_names_are_one_host():
    eps = {0: _ep(0, "localhost:5"), 1: _ep(1, "127.0.0.1:5"), 2: _ep(2, "LOCALHOST:5", 3)}
    assert odd_ranks(eps).ranks == (2,)


def test_agreeing_or_single_ranks_are_not_judged():
    assert odd_ranks({0: _ep(0, "h:1"), 1: _ep(1, "h:1")}) is None
    assert odd_ranks({0: _ep(0, "h:1")}) is None
    assert odd_ranks({}) is None


# --- the finding: only when the log shows a rendezvous that never completed


def _event(kind: EventKind, text: str, rank: int | None = None, **data) -> Event:
    return Event(kind, "output.log", 1, rank, text, data)


STORE = _event(EventKind.EXCEPTION, "torch.distributed.DistStoreError: Timed out after 4 "
               "seconds waiting for clients. 1/2 clients joined.",
               exception="torch.distributed.DistStoreError: Timed out after 4 seconds "
               "waiting for clients. 1/2 clients joined.")
CONNECT = _event(EventKind.CONNECT_TIMEOUT, "[c10d] The client socket has timed out after "
                 "3000ms while trying to connect to (127.0.0.1, 29612).",
                 host="127.0.0.1", port=29612)
FRAME = _event(EventKind.EXCEPTION, "frame #2: c10::DistNetworkError::DistNetworkError("
               "c10::SourceLocation) + 0x72", exception="DistNetworkError: :DistNetwork")
CRASHED = Finding("RANK_CRASHED", "the job raised torch.distributed.DistStoreError: Timed "
                  "out after 4 seconds waiting for clients. 1/2 clients joined.",
                  evidence={"exception": "DistStoreError"})
OTHER = Finding("OOM", "rank 0 ran out of memory", ranks=[0])
SPLIT = {0: _ep(0, "127.0.0.1:29611"), 1: _ep(1, "127.0.0.1:29612")}


def test_a_failed_rendezvous_with_an_odd_endpoint_names_that_rank():
    f, fallout = culprit_finding([CONNECT, FRAME, STORE], SPLIT, [CRASHED, OTHER])
    assert f is not None and (f.id, f.ranks) == ("ENV_RENDEZVOUS_UNREACHABLE", [1])
    assert "127.0.0.1:29612" in f.title and "127.0.0.1:29611" in f.title
    assert fallout == [CRASHED]  # rank 0's store timeout; the OOM is not explained by it
    assert not any("frame #" in line for line in f.evidence["lines"])
    assert any("clients joined" in line for line in f.evidence["lines"])


def test_no_rendezvous_failure_or_agreeing_endpoints_decide_nothing():
    assert culprit_finding([], SPLIT, [CRASHED]) == (None, [])
    same = {0: _ep(0, "h:1"), 1: _ep(1, "h:1")}
    assert culprit_finding([STORE, CONNECT], same, [CRASHED]) == (None, [])


def test_the_ranks_own_connect_lines_complete_what_run_could_not_read():
    """mp.spawn-like ranks carry no endpoint in their environment; a rank's prefixed c10d
    line names the address it tried."""
    line = _event(EventKind.CONNECT_TIMEOUT, CONNECT.text, rank=1, host="10.9.9.9",
                  port=29500)
    assert log_endpoints([line, CONNECT]) == {1: "10.9.9.9:29500"}
    f, _ = culprit_finding([line, STORE], {0: _ep(0, "10.0.0.1:29500")}, [])
    assert f is not None and f.ranks == [1] and "10.9.9.9:29500" in f.title


def test_triage_puts_the_odd_rank_first_and_drops_the_store_timeout(tmp_path):
    from ddpdoctor.run.triage import triage_output

    log = tmp_path / "output.log"
    log.write_text(
        "[E1126 socket.cpp:1028] [c10d] The client socket has timed out after 3000ms "
        "while trying to connect to (127.0.0.1, 29612).\n"
        "Traceback (most recent call last):\n"
        '  File "/job/task.py", line 21, in <module>\n'
        "    dist.init_process_group('gloo', timeout=timeout)\n"
        "torch.distributed.DistStoreError: Timed out after 4 seconds waiting for clients. "
        "1/2 clients joined.\n")
    plain, _ = triage_output(log, [], 1)
    assert plain and plain[0].ranks == []  # the lines carry no rank: nothing to compare
    found, _ = triage_output(log, [], 1, SPLIT)
    assert [(f.id, f.ranks) for f in found] == [("ENV_RENDEZVOUS_UNREACHABLE", [1])]


# --- the log path: per-rank logs, no environment


def _diagnose(tmp_path, logs: dict[str, str]) -> list[tuple[str, list[int]]]:
    from ddpdoctor.diagnose import LogInput, diagnose_logs

    inputs = []
    for name, text in logs.items():
        (tmp_path / name).write_text(text)
        inputs.append(LogInput(str(tmp_path / name)))
    found, _ = diagnose_logs(inputs)
    return [(f.id, f.ranks) for f in found]


RANK0 = ("Traceback (most recent call last):\n"
         '  File "/job/task.py", line 21, in <module>\n'
         "    dist.init_process_group('gloo', timeout=timeout)\n"
         "torch.distributed.DistStoreError: Timed out after 4 seconds waiting for clients. "
         "1/2 clients joined.\n")


def _connect(port: int) -> str:
    return ("[E1126 14:30:37.797722659 socket.cpp:1028] [c10d] The client socket has timed "
            f"out after 3000ms while trying to connect to (127.0.0.1, {port}).\n"
            "Traceback (most recent call last):\n"
            '  File "/job/task.py", line 21, in <module>\n'
            "    dist.init_process_group('gloo', timeout=timeout)\n"
            "torch.distributed.DistNetworkError: The client socket has timed out after "
            f"3000ms while trying to connect to (127.0.0.1, {port}).\n")


def test_per_rank_logs_name_the_rank_that_could_not_reach_the_waiting_store(tmp_path):
    assert _diagnose(tmp_path, {"rank0.log": RANK0, "rank1.log": _connect(29612)}) == [
        ("ENV_RENDEZVOUS_UNREACHABLE", [1])]


def test_per_rank_logs_naming_different_addresses_name_the_odd_one(tmp_path):
    logs = {f"rank{r}.log": _connect(29612 if r == 2 else 29611) for r in (1, 2, 3)}
    assert _diagnose(tmp_path, logs)[0] == ("ENV_RENDEZVOUS_UNREACHABLE", [2])


# --- multi-node: the recheck sorts a spinning rank from a working one (no process)


@dataclass
class Reads:
    verdicts: dict[int, SpinVerdict]

    def verdict(self, rank: int) -> SpinVerdict:
        return self.verdicts[rank]


SPINS = SpinVerdict(True, "spins at train.py:67 in spin_on_flag", "train.py:67 in spin")
MOVES = SpinVerdict(False, "it moved through 3 functions")


def test_a_spinning_rank_is_not_busy_but_a_moving_or_writing_one_is():
    pids = {1: 11, 2: 12, 3: 13, 4: 14}
    first = {r: (0.0, 0) for r in pids}
    after = {1: (2.9, 0), 2: (2.9, 0), 3: (2.0, 8 << 20), 4: (0.0, 0)}
    reads = Reads({1: SPINS, 2: MOVES, 3: SPINS, 4: SPINS})
    # 1 spins (CPU, no I/O, same lines): left out; 2 works; 3 writes a checkpoint
    # (storage I/O proves work whatever its stack); 4 is idle
    seen = recheck_of(sorted(pids), first, after, 3.0, reads.verdict)
    assert sorted(seen.working) == [2, 3] and list(seen.spinning) == [1]
    assert list(seen.idle) == [4] and seen.unmeasured == ()
    assert seen.lines()[0].startswith("rank 1 spins at train.py:67")
    assert seen.idle[4] == "rank 4 used 0.00 s of CPU in 3.0 s"
    # not measured: never idle (a hang is not confirmed on a rank run could not read)
    seen = recheck_of([5], {}, {5: (3.0, 0)}, 3.0, reads.verdict)
    assert seen.unmeasured == (5,) and not seen.working and not seen.idle


def _loop(native: list[bool]) -> SpinVerdict:
    spot = Spot("/job/jobview_job.py", "_evaluate", 31)
    caller = (Spot("/job/jobview_job.py", "main", 58),)
    return spin_verdict([StackSample(i * 0.2, "compute", (spot, *caller), (), native=n)
                         for i, n in enumerate(native)])


def test_a_tight_torch_loop_in_a_kernel_is_work_for_the_job_view():
    """``while time.monotonic() < end: x = torch.tanh(x @ x.T / 64)`` (the multi-node
    test's 40 s evaluation): two lines, no Python call below, like a spin; but 19 of 20
    reads found it inside torch's kernels with the GIL released."""
    evaluation = [True] * 19 + [False]
    assert not _loop(evaluation).spinning
    assert "native call" in _loop(evaluation).reason
    # the same loop on a host loaded past its cores: 9 of 15 reads native here, and below
    # half once in CI (a healthy job stopped): still work
    assert not _loop([True] * 9 + [False] * 6).spinning
    assert not _loop([True, False, False] * 5).spinning
    # a busy-wait whose GIL another thread took in 1 of 12 reads: still a spin
    assert _loop([True] + [False] * 11).spinning
    # a Python busy loop holds the GIL in every read: spinning
    assert _loop([False] * 20).spinning


def test_the_nodes_recheck_reads_stacks_and_leaves_the_spinner_out(monkeypatch):
    """jobnode._recheck wired with its edges faked (no process, no py-spy): rank 1
    burns CPU on one line holding the GIL (a spin), rank 2 burns CPU in a torch kernel
    with the GIL released (an evaluation), rank 3 waits in a collective (not watched)."""
    from ddpdoctor.attach import stacks as stacks_mod
    from ddpdoctor.attach.stacks import Frame, RankStack, ThreadStack
    from ddpdoctor.run import jobnode, looks, stack_reads, watch_ranks

    job_file = "/job/train.py"

    def stack(rank: int, pid: int) -> RankStack:
        line = 67 if rank == 1 else 31
        main = ThreadStack(1, "MainThread", True, [Frame("loop", job_file, line),
                                                   Frame("main", job_file, 111)],
                           owns_gil=rank == 1, is_main=True)
        return RankStack(rank, pid, "running", [main])

    @dataclass
    class State:
        rank: int
        pid: int
        kind: str

    class Job:
        def poll(self) -> None:
            return None

    t0 = looks.time.monotonic()
    monkeypatch.setattr(stack_reads, "SPIN_WINDOW_S", 1.0)  # reads every 0.1 s: >= 6
    monkeypatch.setattr(watch_ranks, "rank_usage", lambda pids: {
        r: (0.9 * (looks.time.monotonic() - t0), 0) for r in pids})
    monkeypatch.setattr(stacks_mod, "collect_stacks",
                        lambda targets, native=False, timeout=5.0, py_spy=None:
                        [stack(r, p) for r, p in targets])
    states = [State(1, 11, "compute"), State(2, 12, "compute"), State(3, 13, "collective")]
    seen = jobnode._recheck(Job(), states, 0.2)
    assert list(seen.working) == [2] and list(seen.spinning) == [1], seen
