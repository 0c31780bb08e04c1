import os
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


def kill_tree(pid: int) -> None:
    """SIGKILL a job's whole tree (torchrun's ranks live in sessions of their own)."""
    from ddpdoctor.proctree import kill_tree as _kill_tree

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
