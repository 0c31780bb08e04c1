"""run/exit_watch.py on real processes: each death stamped as it happens, before its
parent reaps it, in the order the processes died."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import psutil
import pytest

from ddpdoctor.run.exit_watch import ExitWatch

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not hasattr(os, "pidfd_open"), reason="no pidfds here")]


def _sleeper() -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])


@pytest.mark.timeout(60)
def test_deaths_are_stamped_in_the_order_they_happen_before_any_reap():
    procs = [_sleeper(), _sleeper()]
    watch = ExitWatch()
    try:
        assert watch.active
        for p in procs:
            watch.watch(p.pid, psutil.Process(p.pid).create_time())
        procs[1].send_signal(signal.SIGKILL)
        deadline = time.monotonic() + 20
        while watch.pending > 1 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert watch.pending == 1  # the other still runs
        time.sleep(0.3)
        procs[0].send_signal(signal.SIGTERM)
        watch.settle(10.0)
        assert watch.pending == 0
        died = watch.deaths()
        # neither was reaped yet (zombies of this test): the pidfd fired at death
        assert all(psutil.Process(p.pid).status() == psutil.STATUS_ZOMBIE for p in procs)
        assert set(died) == {procs[0].pid, procs[1].pid}
        assert died[procs[1].pid] < died[procs[0].pid]
    finally:
        watch.close()
        for p in procs:
            p.kill()
            p.wait(timeout=10)


@pytest.mark.timeout(60)
def test_a_process_dead_before_it_is_watched_or_not_the_one_seen_gets_no_time():
    dead, other = _sleeper(), _sleeper()
    watch = ExitWatch()
    try:
        created = psutil.Process(dead.pid).create_time()
        dead.kill()
        time.sleep(0.5)
        watch.watch(dead.pid, created)  # a zombie already: when it died is unknown
        watch.watch(other.pid, 12345.0)  # not the process the sampler saw (pid reused)
        other.kill()
        watch.settle(2.0)
        assert watch.deaths() == {}
    finally:
        watch.close()
        for p in (dead, other):
            p.kill()
            p.wait(timeout=10)
