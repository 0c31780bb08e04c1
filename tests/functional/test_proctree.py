"""HostProcs: the host's processes read in one walk, and the job tree built from it."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from ddpdoctor.core.proctree import HostProcs
from ddpdoctor.run.progress import sample_tree
from ddpdoctor.run.tree import JobTree


def test_descendants_come_from_one_walk_parents_first():
    host = HostProcs.build({1: 0, 10: 1, 11: 10, 12: 10, 13: 11, 20: 1, 30: 30},
                           {pid: 100.0 for pid in (1, 10, 11, 12, 13, 20, 30)})
    assert host.descendants(10) == [11, 12, 13]
    assert host.descendants(13) == [] and host.descendants(99) == []
    assert host.descendants(30) == []  # a process that is its own parent: no loop
    # a pid reused during the walk that makes a cycle still ends
    cyc = HostProcs.build({5: 6, 6: 5}, {5: 1.0, 6: 1.0})
    assert cyc.descendants(5) == [6]


@pytest.mark.slow  # starts a process (tests/lib/spawn_report.py)
def test_job_tree_and_sample_from_one_host_walk(monkeypatch):
    """A launcher with a child and a grandchild: the tree and the CPU sample both find
    them, and neither walks the host again when given this poll's walk."""
    script = ("import subprocess, sys, time; "
              "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(30)']); "
              "time.sleep(30)")
    launcher = subprocess.Popen([sys.executable, "-c", script])
    try:
        deadline = time.monotonic() + 20
        while True:
            host = HostProcs.read()
            kids = host.descendants(launcher.pid)
            if len(kids) == 1 or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        assert len(kids) == 1 and host.parent[kids[0]] == launcher.pid
        tree = JobTree(launcher.pid)
        tree.started = host.created[launcher.pid] - 0.5
        calls = []
        monkeypatch.setattr(HostProcs, "read", classmethod(lambda cls: calls.append(1)))
        tree.scan(host)
        assert set(tree.seen) == {launcher.pid, kids[0]}
        sample = sample_tree(launcher.pid, 0.0, {}, host)
        assert {p.pid for p in sample.procs} == {launcher.pid, kids[0]}
        assert calls == []
        assert os.getpid() not in tree.seen
    finally:
        subprocess.run(["pkill", "-KILL", "-P", str(launcher.pid)], check=False)
        launcher.kill()
        launcher.wait()


def test_job_tree_dates_the_job_from_its_launcher_not_from_when_the_tree_is_made():
    """On a loaded host run may build its tree seconds after the launcher started its
    ranks: a process older than the tree but younger than the launcher is the job's (it
    was skipped, and a SIGSTOPped rank outlived run). One older than the launcher is not."""
    launcher, rank, older = 9_000_001, 9_000_002, 9_000_003
    host = HostProcs.build({launcher: 1, rank: launcher, older: launcher},
                           {launcher: 100.0, rank: 100.2, older: 90.0})
    tree = JobTree(launcher, started=100.0)
    tree.scan(host)
    assert set(tree.seen) == {launcher, rank}
    made_now = JobTree(launcher)  # no start given: the tree's own birth (in-process use)
    made_now.scan(host)
    assert made_now.seen == {}


@pytest.mark.slow  # starts a process
def test_run_tree_finds_ranks_started_before_the_tree_was_made():
    """run's tree, made (as under load) well over a second after the launcher forked its
    rank, still finds that rank: the tree is dated from the launcher's create time."""
    import psutil

    from ddpdoctor.run.process import Job
    from ddpdoctor.run.runner import job_tree

    launcher = subprocess.Popen(["sh", "-c", "sleep 30 & wait"])
    try:
        born = psutil.Process(launcher.pid).create_time()
        deadline = time.monotonic() + 20
        while (not HostProcs.read().descendants(launcher.pid) or time.time() < born + 1.5) \
                and time.monotonic() < deadline:
            time.sleep(0.1)
        kids = HostProcs.read().descendants(launcher.pid)
        assert len(kids) == 1
        tree = job_tree(Job(launcher, None, []), None, False, ("X", "y"))  # type: ignore[arg-type]
        tree.scan()
        assert set(tree.seen) == {launcher.pid, kids[0]}
    finally:
        subprocess.run(["pkill", "-KILL", "-P", str(launcher.pid)], check=False)
        launcher.kill()
        launcher.wait()
