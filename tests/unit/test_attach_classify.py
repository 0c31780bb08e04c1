"""classify: one rank's stacks -> where it is (pure; synthetic and recorded py-spy stacks)."""

import pytest
from attach_helpers import (
    DATA,
    STDLIB,
    TORCH,
    TRAIN,
    f,
    in_collective,
    in_getitem,
    load_recorded,
    rank,
    thread,
    waiting_on_workers,
)

from ddpdoctor.attach import classify as c
from ddpdoctor.attach.stacks import STOPPED, ZOMBIE, RankStack


@pytest.mark.parametrize("op", ["all_reduce", "broadcast", "barrier", "all_gather",
                                "all_gather_into_tensor", "reduce_scatter_tensor",
                                "all_to_all_single", "monitored_barrier",
                                # torch 2.13's names under all_gather_into_tensor & co.
                                "all_gather_single", "reduce_scatter_single",
                                # a collective a newer torch may add
                                "all_reduce_quantized"])
def test_collective_names_op_and_user_call_site(op):
    s = c.classify(rank(0, thread(in_collective(op, line=88))))
    assert (s.kind, s.op, s.where) == (c.COLLECTIVE, op, "train.py:88 in step")


def test_outermost_api_call_names_the_op():
    # all_gather_object calls all_gather: the user called all_gather_object
    frames = [f("all_gather", f"{TORCH}/distributed/distributed_c10d.py", 1),
              f("all_gather_object", f"{TORCH}/distributed/distributed_c10d.py", 2),
              f("log", TRAIN, 5), f("main", TRAIN, 9)]
    s = c.classify(rank(0, thread(frames)))
    assert (s.op, s.where) == ("all_gather_object", "train.py:5 in log")


@pytest.mark.parametrize("op", ["send", "recv", "batch_isend_irecv"])
def test_point_to_point(op):
    s = c.classify(rank(0, thread(in_collective(op, line=12, func="exchange"))))
    assert (s.kind, s.op, s.where) == (c.P2P, op, "train.py:12 in exchange")


def test_blocked_wait_on_async_work_is_p2p_wait():
    frames = [f("exchange", TRAIN, 14, "req.wait()"), f("main", TRAIN, 30)]
    s = c.classify(rank(0, thread(frames, active=False)))
    assert (s.kind, s.op, s.where) == (c.P2P, "wait", "train.py:14 in exchange")


def test_getitem_without_workers():
    s = c.classify(rank(1, thread(in_getitem(41))))
    assert (s.kind, s.op, s.where) == (c.DATALOADER, "__getitem__", "data.py:41 in __getitem__")


def test_waiting_on_workers_points_at_the_stuck_worker():
    worker = RankStack(1, 4711, "sleeping", [thread(
        in_getitem(41)[:3] + [f("_worker_loop", f"{TORCH}/utils/data/_utils/worker.py", 374),
                              f("Popen._launch", f"{STDLIB}/multiprocessing/popen_fork.py", 71)])])
    idle_worker = RankStack(1, 4712, "sleeping", [thread(
        [f("Queue.get", f"{STDLIB}/multiprocessing/queues.py", 113),
         f("_worker_loop", f"{TORCH}/utils/data/_utils/worker.py", 334)])])
    stack = rank(1, thread(waiting_on_workers()))
    assert c.classify(stack).op == "worker queue"
    stack.workers = [idle_worker, worker]
    s = c.classify(stack)
    assert (s.kind, s.op, s.where) == (c.DATALOADER, "__getitem__", "data.py:41 in __getitem__")
    assert "4711" in s.detail
    assert s.frames[-1].name == "_worker_loop"  # the parent's frames after fork are cut


def test_sleeping_and_computing_user_code():
    sleeping = [f("wait_for_checkpoint", TRAIN, 61, "time.sleep(10**6)"), f("main", TRAIN, 9)]
    s = c.classify(rank(1, thread(sleeping, active=False)))
    assert (s.kind, s.where, s.detail) == (c.IDLE, "train.py:61 in wait_for_checkpoint",
                                           "sleeping")
    busy = [f("matmul", f"{TORCH}/functional.py", 3), f("forward", TRAIN, 40, "x @ w"),
            f("main", TRAIN, 9)]
    s = c.classify(rank(1, thread(busy, active=True)))
    assert (s.kind, s.where) == (c.COMPUTE, "train.py:40 in forward")


def test_ddp_backward_waiting_counts_as_collective_but_busy_backward_is_compute():
    frames = [f("_engine_run_backward", f"{TORCH}/autograd/graph.py", 829),
              f("backward", f"{TORCH}/autograd/__init__.py", 364),
              f("Tensor.backward", f"{TORCH}/_tensor.py", 625), f("step", TRAIN, 77)]
    assert c.classify(rank(0, thread(frames, active=False))).kind == c.COLLECTIVE
    assert c.classify(rank(0, thread(frames, active=True))).kind == c.COMPUTE


def test_communication_thread_beats_idle_main_thread_and_infra_threads_are_ignored():
    main = thread([f("join", f"{STDLIB}/threading.py", 1), f("main", TRAIN, 5, "t.join()")])
    worker = thread(in_collective("all_reduce", 50), name="trainer")
    feeder = thread([f("Condition.wait", f"{STDLIB}/threading.py", 327)], name="QueueFeeder")
    s = c.classify(rank(0, feeder, main, worker))
    assert (s.kind, s.thread) == (c.COLLECTIVE, "trainer")


def test_process_states():
    assert c.classify(RankStack(2, 9, ZOMBIE)).kind == ZOMBIE
    stopped = c.classify(RankStack(2, 9, STOPPED, error="the process is stopped"))
    assert stopped.kind == STOPPED
    unreadable = c.classify(RankStack(2, 9, "sleeping", error="py-spy did not answer"))
    assert (unreadable.kind, unreadable.detail) == (c.UNKNOWN, "py-spy did not answer")


@pytest.mark.parametrize("path,lib", [
    ("/x/site-packages/torch/nn/modules/module.py", True),
    ("/usr/lib/python3.11/threading.py", True),
    ("<frozen importlib._bootstrap>", True),
    ("/work/main/ddpdoctor/watch/hooks.py", True),
    ("/x/site-packages/ddpdoctor/train/ddp.py", False),
    (TRAIN, False), (DATA, False),
])
def test_is_library(path, lib):
    assert c.is_library(path) is lib


@pytest.mark.parametrize("name,culprit,kind,op,where", [
    ("missing-3ranks", 1, c.IDLE, "", "hang.py:61 in wait_for_checkpoint"),
    ("compute-2ranks", 1, c.IDLE, "", "hang.py:56 in forward"),
    ("mismatch-3ranks", 1, c.COLLECTIVE, "broadcast", "hang.py:131 in main"),
    ("p2p-2ranks", 1, c.P2P, "recv", "hang.py:126 in main"),
    ("data-workers-2ranks", 1, c.DATALOADER, "__getitem__", "hang.py:42 in __getitem__"),
])
def test_recorded_real_stacks(name, culprit, kind, op, where):
    states = {r: c.classify(s) for r, s in load_recorded(name).items()}
    s = states[culprit]
    assert (s.kind, s.op, s.where) == (kind, op, where)
    if name != "p2p-2ranks":
        assert states[0].kind == c.COLLECTIVE and states[0].where == "hang.py:65 in sync"


def test_ddp_collective_run_from_cpp_in_pre_forward():
    # DDP's 2nd forward rebuilds its buckets with a broadcast inside C++: the innermost
    # Python frame is _pre_forward and the thread is idle.
    frames = [f("DistributedDataParallel._pre_forward", f"{TORCH}/nn/parallel/distributed.py",
                1775),
              f("DistributedDataParallel.forward", f"{TORCH}/nn/parallel/distributed.py", 1880),
              f("step", TRAIN, 40), f("main", TRAIN, 9)]
    s = c.classify(rank(0, thread(frames, active=False)))
    assert (s.kind, s.op, s.where) == (c.COLLECTIVE, "broadcast", "train.py:40 in step")
    busy = c.classify(rank(0, thread(frames, active=True)))
    assert busy.kind != c.COLLECTIVE
