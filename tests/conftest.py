import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent


@pytest.fixture(autouse=True)
def _isolated_tmp(tmp_path, monkeypatch):
    # torchrun and elastic write /tmp/torchelastic_* dirs: keep them inside the test's tmp.
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    yield


def ddpdoctor_cmd() -> list[str]:
    exe = BIN / "ddpdoctor"
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "ddpdoctor"]


os.environ.setdefault("PYTHONUNBUFFERED", "1")
# DeepSpeed's jobs build its CPU ops with torch's extension builder at start-up, under a
# lock file: a run killed mid-build leaves the lock, and every later build waits on it
# forever (seen here: the next run's deepspeed tests hung to their deadline). The suite
# builds into a folder of its own checkout (gitignored): another run's stale lock cannot
# hang it, and a fresh clone builds once.
os.environ.setdefault("TORCH_EXTENSIONS_DIR", str(REPO / ".torch_extensions"))


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


@pytest.fixture
def two_nodes():
    """(namespaces, veth devices, addresses) keyed "a" and "b"; removed afterwards."""
    tag = str(os.getpid() % 100000)
    ns = {"a": f"ddpd-a-{tag}", "b": f"ddpd-b-{tag}"}
    dev = {"a": f"ddpa{tag}", "b": f"ddpb{tag}"}
    addr = {"a": "10.77.0.1", "b": "10.77.0.2"}  # inside namespaces this fixture creates
    try:
        for k in "ab":
            sh("ip", "netns", "add", ns[k])
        sh("ip", "link", "add", dev["a"], "type", "veth", "peer", "name", dev["b"])
        for k in "ab":
            sh("ip", "link", "set", dev[k], "netns", ns[k])
            sh("ip", "-n", ns[k], "addr", "add", f"{addr[k]}/24", "dev", dev[k])
            sh("ip", "-n", ns[k], "link", "set", dev[k], "up")
            sh("ip", "-n", ns[k], "link", "set", "lo", "up")
        yield ns, dev, addr
    finally:
        for k in "ab":
            subprocess.run(["ip", "netns", "del", ns[k]], capture_output=True, timeout=30)


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
