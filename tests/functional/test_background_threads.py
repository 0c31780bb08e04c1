"""run leaves a rank's background threads (the watch's, gloo's event loops) out of its CPU.

A hung rank still runs the watch's heartbeat thread and the Flight Recorder dump that run
asks for when it looks; counted as work, they made run call a sleeping culprit "still
working" now and then (CI:
tests/functional/test_run_e2e.py::test_run_catches_hang[compute] named the hang one look
late). Here a real process sleeps in its main thread while a thread of its
own burns CPU: named like the watch's threads it is not work, unnamed it is.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
import time

import pytest

from ddpdoctor.core.contract import OWN_THREAD_PREFIX
from ddpdoctor.core.threadname import name_this_thread
from ddpdoctor.run.background_threads import BackgroundThreads
from ddpdoctor.run.busy import is_working
from ddpdoctor.run.progress import ProgressTracker, sample_tree
from ddpdoctor.run.watch_ranks import rank_usage

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc: Linux")

_RANK = textwrap.dedent("""
    import sys, threading, time
    from ddpdoctor.core.threadname import name_this_thread
    started = threading.Event()
    def spin():
        if sys.argv[1] == "named":
            name_this_thread("ddpdoctor-watch")
        started.set()
        while True:
            sum(range(10000))
    threading.Thread(target=spin, daemon=True).start()
    started.wait()
    print("ready", flush=True)
    time.sleep(60)  # the main thread: a rank stuck outside any collective
""")


def _spin(named: bool, stop: threading.Event, started: threading.Semaphore) -> None:
    if named:
        assert name_this_thread(OWN_THREAD_PREFIX + "-t")
    started.release()
    while not stop.is_set():
        sum(range(10000))


def test_only_threads_named_ours_are_counted():
    stop, started = threading.Event(), threading.Semaphore(0)
    threads = [threading.Thread(target=_spin, args=(named, stop, started), daemon=True)
               for named in (True, False)]
    for t in threads:
        t.start()
    for _ in threads:
        started.acquire()
    try:
        own = BackgroundThreads()
        first = own.cpu_s(os.getpid())
        # until ours has had 0.1 s of CPU (a loaded machine gives it less per second: no
        # fixed sleep), at most 30 s
        deadline = time.monotonic() + 30
        grew = 0.0
        while grew <= 0.1 and time.monotonic() < deadline:
            time.sleep(0.2)
            grew = own.cpu_s(os.getpid()) - first
        total = sum(os.times()[:2])
    finally:
        stop.set()
    # two spinners share the cores with the test: ours got a share, not all of it
    assert 0.1 < grew < total, (grew, total)
    assert BackgroundThreads().cpu_s(999_999_999) == 0.0  # no such process: nothing, no error


@pytest.mark.slow  # starts a process (tests/lib/spawn_report.py)
@pytest.mark.parametrize("named", [True, False])
def test_a_sleeping_rank_whose_watch_threads_work_is_not_working(named):
    proc = subprocess.Popen([sys.executable, "-c", _RANK, "named" if named else "plain"],
                            env={**os.environ, "RANK": "0"}, stdout=subprocess.PIPE)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == b"ready"
        cache: dict = {}
        tracker = ProgressTracker(time.monotonic())
        tracker.update(time.monotonic(), 0, sample_tree(proc.pid, time.monotonic(), cache))
        before = rank_usage({0: proc.pid})
        time.sleep(1.0)
        now = time.monotonic()
        tracker.update(now, 0, sample_tree(proc.pid, now, cache))
        after = rank_usage({0: proc.pid})
        cpu = after[0][0] - before[0][0]
        working = is_working(cpu, 0, 1.0)
        active = 0 in tracker.active_ranks(now, 5.0)
    finally:
        proc.kill()
        proc.wait()
    assert working is (not named), cpu
    assert active is (not named)


_GLOO_RANK = textwrap.dedent("""
    import sys, time
    import torch.distributed as dist
    dist.init_process_group("gloo", init_method="file://" + sys.argv[1], rank=0, world_size=1)
    print("ready", flush=True)
    time.sleep(60)
""")


@pytest.mark.slow  # starts a process (tests/lib/spawn_report.py)
def test_gloo_names_its_event_loops_as_we_expect(tmp_path):
    """The names run leaves out are the ones torch's gloo really gives its threads: a
    torch that renames them fails here, not silently in a hang verdict."""
    from ddpdoctor.run.background_threads import _BACKGROUND

    proc = subprocess.Popen([sys.executable, "-c", _GLOO_RANK, str(tmp_path / "store")],
                            stdout=subprocess.PIPE)
    gloo = [n for n in _BACKGROUND if n.startswith((b"gloo", b"pt_gloo"))]
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == b"ready"
        # gloo starts (and names) its event-loop thread as it goes: on a loaded machine
        # it can come a moment after init returns. Look until it is there or 30 s pass.
        names: set[bytes] = set()
        for _ in range(300):
            for tid in os.listdir(f"/proc/{proc.pid}/task"):
                try:
                    with open(f"/proc/{proc.pid}/task/{tid}/comm", "rb") as f:
                        names.add(f.read().strip())
                except FileNotFoundError:
                    continue
            if set(gloo) <= names:
                break
            time.sleep(0.1)
    finally:
        proc.kill()
        proc.wait()
    assert set(gloo) <= names, names
