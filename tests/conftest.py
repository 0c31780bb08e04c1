"""The suite's fixtures (its helpers are in tests/lib, on the path through pyproject's
``pythonpath``)."""

import os
import subprocess

import pytest
from jobs import sh
from paths import REPO


@pytest.fixture(autouse=True)
def _isolated_tmp(tmp_path, monkeypatch):
    # torchrun and elastic write /tmp/torchelastic_* dirs: keep them inside the test's tmp.
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    yield


os.environ.setdefault("PYTHONUNBUFFERED", "1")
# DeepSpeed's jobs build its CPU ops with torch's extension builder at start-up, under a
# lock file: a run killed mid-build leaves the lock, and every later build waits on it
# forever (seen here: the next run's deepspeed tests hung to their deadline). The suite
# builds into a folder of its own checkout (gitignored): another run's stale lock cannot
# hang it, and a fresh clone builds once.
os.environ.setdefault("TORCH_EXTENSIONS_DIR", str(REPO / ".torch_extensions"))


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
