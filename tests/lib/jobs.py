"""The suite's process helpers: the doctor's command line, a job run to completion with its
whole tree killed on a timeout, commands inside network namespaces, a launcher's ranks."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from paths import REPO

BIN = Path(sys.executable).parent
__all__ = ["BIN", "REPO", "check_ranks_of", "ddpdoctor_cmd", "kill_tree", "needs_netns",
           "run_job", "run_on_nodes", "sh"]


def ddpdoctor_cmd() -> list[str]:
    exe = BIN / "ddpdoctor"
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "ddpdoctor"]


def kill_tree(pid: int) -> None:
    """SIGKILL a job's whole tree (torchrun's ranks live in sessions of their own)."""
    from ddpdoctor.core.proctree import kill_tree as _kill_tree

    _kill_tree(pid)


def run_job(cmd: list[str], timeout: float, env: dict | None = None,
            cwd=None) -> tuple[int, str]:
    """Run a job to completion (stdout and stderr merged); kill its whole tree if it does
    not finish in ``timeout`` (the TimeoutExpired then fails the test)."""
    import subprocess

    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env,
                            cwd=cwd, start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=timeout)
    finally:
        if proc.poll() is None:
            kill_tree(proc.pid)
    return proc.returncode, out.decode("utf-8", "replace")


# ---- two "nodes" on one machine: network namespaces joined by a veth pair

needs_netns = pytest.mark.skipif(
    os.geteuid() != 0 or not shutil.which("ip") or not shutil.which("tc")
    or not shutil.which("unshare"), reason="needs root, iproute2 (ip, tc) and unshare")


def sh(*args: str) -> None:
    subprocess.run(args, check=True, capture_output=True, timeout=30)


def run_on_nodes(commands: dict, timeout: float) -> tuple[dict, dict]:
    """Run each ``{key: (namespace, hostname, argv, extra_env)}`` in its network namespace
    under its own hostname, all at once; (outputs, processes) by key. Every process tree
    still alive at the end (a timeout, a failed assert) is killed."""
    procs = {}
    try:
        for k, (ns, hostname, argv, extra_env) in commands.items():
            inner = f"hostname {hostname} && exec " + " ".join(argv)
            procs[k] = subprocess.Popen(
                ["ip", "netns", "exec", ns, "unshare", "--uts", "sh", "-c", inner],
                env={**os.environ, **extra_env}, stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT, text=True, start_new_session=True)
        return {k: p.communicate(timeout=timeout)[0] for k, p in procs.items()}, procs
    finally:
        for p in procs.values():
            if p.poll() is None:
                kill_tree(p.pid)


def check_ranks_of(pid: int) -> list:
    """The launcher's rank processes under ``pid``, rank order: forked from its rank zygote
    (a forkserver child of ``pid``), or spawned by ``pid`` (``--multiprocessing-fork``, the
    launcher's fallback)."""
    import psutil

    ranks = []
    for c in psutil.Process(pid).children(recursive=True):
        try:
            parent = c.parent()
            if parent is None or c.status() == psutil.STATUS_ZOMBIE:
                continue
            if parent.pid == pid and "--multiprocessing-fork" in c.cmdline():
                ranks.append(c)
            elif parent.ppid() == pid and \
                    "multiprocessing.forkserver" in " ".join(parent.cmdline()):
                ranks.append(c)
        except psutil.NoSuchProcess:
            continue
    return sorted(ranks, key=lambda c: (c.create_time(), c.pid))
