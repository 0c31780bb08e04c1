"""Dump every rank's Python stack with py-spy, in parallel, each with a deadline.

The dataclasses here are the evidence the pure analysis reads (classify, analyze); the
py-spy subprocesses and psutil are the only side effects.
"""

from __future__ import annotations

import json
import linecache
import os
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

# Process states a RankStack can be in (psutil's words, narrowed to what analysis needs).
RUNNING, SLEEPING, STOPPED, ZOMBIE, DEAD, MISSING = (
    "running", "sleeping", "stopped", "zombie", "dead", "missing")


class StackError(Exception):
    """The doctor cannot dump stacks at all (py-spy missing): one line, exit 3."""


@dataclass(frozen=True)
class Frame:
    name: str
    filename: str
    line: int
    # The source line, read on this machine where the file exists; "" where it does not.
    code: str = ""
    # A C/C++ frame (``py-spy --native``: py-spy names the shared object it is in): never
    # the user's line; only the GPU waits are read from it (classify.device_wait).
    native: bool = False

    @property
    def short(self) -> str:
        return f"{os.path.basename(self.filename)}:{self.line}"

    def __str__(self) -> str:
        return f"{self.name} ({self.short})"


@dataclass
class ThreadStack:
    thread_id: int
    name: str
    active: bool  # on CPU when sampled; False for sleep, IO and blocking waits
    frames: list[Frame]  # innermost first, as py-spy prints them
    owns_gil: bool = False
    is_main: bool = False


@dataclass
class RankStack:
    rank: int
    pid: int
    state: str  # RUNNING, SLEEPING, STOPPED, ZOMBIE, DEAD or MISSING
    threads: list[ThreadStack] = field(default_factory=list)
    error: str = ""  # why there are no threads, when there are none
    # Stacks of the rank's DataLoader workers, dumped when the rank waits on them.
    workers: list[RankStack] = field(default_factory=list)


# Thousands of ranks share the same few hundred frames: one Frame object each keeps parsing
# fast and lets classify memoise whole stacks by frame identity.
_FRAMES: dict[tuple[str, str, int, bool], Frame] = {}
_MAX_INTERNED = 200_000


def _frame(name: str, filename: str, line: int, native: bool = False) -> Frame:
    key = (name, filename, line, native)
    frame = _FRAMES.get(key)
    if frame is None:
        if len(_FRAMES) >= _MAX_INTERNED:
            _FRAMES.clear()
        frame = _FRAMES[key] = Frame(name, filename, line, native=native)
    return frame


def parse_py_spy_json(text: str | bytes, pid: int = 0) -> list[ThreadStack]:
    """Parse ``py-spy dump --json`` output; raises ValueError on anything else."""
    data = json.loads(text)
    if not isinstance(data, list):
        raise ValueError("py-spy JSON: expected a list of threads")
    threads = []
    for t in data:
        # py-spy gives a native frame the shared object it is in ("module"); a Python
        # frame's module is null
        frames = [_frame(str(f.get("name", "?")), str(f.get("filename", "?")),
                         int(f.get("line") or 0), f.get("module") is not None)
                  for f in t.get("frames") or []]
        os_tid = t.get("os_thread_id")
        threads.append(ThreadStack(
            thread_id=int(t.get("thread_id") or 0),
            name=str(t.get("thread_name") or ""),
            active=bool(t.get("active")),
            owns_gil=bool(t.get("owns_gil")),
            frames=frames,
            is_main=(t.get("thread_name") == "MainThread"
                     or (os_tid is not None and os_tid == (t.get("pid") or pid))),
        ))
    return threads


def with_source(threads: list[ThreadStack]) -> list[ThreadStack]:
    """Fill in each frame's source line (classify reads ``.wait()`` calls from it)."""
    for t in threads:
        t.frames = [Frame(f.name, f.filename, f.line,
                          linecache.getline(f.filename, f.line).strip())
                    if not (f.native or f.filename.startswith("<")) else f
                    for f in t.frames]
    return threads


def find_py_spy() -> str:
    """py-spy next to this Python first (the venv ddpdoctor runs in), then on PATH."""
    here = os.path.join(os.path.dirname(sys.executable), "py-spy")
    if os.access(here, os.X_OK):
        return here
    found = shutil.which("py-spy")
    if not found:
        raise StackError("py-spy is not installed: pip install py-spy "
                         "(ddpdoctor attach reads every rank's stack with it)")
    return found


def process_state(pid: int) -> str:
    import psutil

    try:
        status = psutil.Process(pid).status()
    except psutil.NoSuchProcess:
        return DEAD
    except psutil.Error:
        return RUNNING
    if status == psutil.STATUS_ZOMBIE:
        return ZOMBIE
    if status in (psutil.STATUS_DEAD,):
        return DEAD
    if status in (psutil.STATUS_STOPPED, getattr(psutil, "STATUS_TRACING_STOP", "tracing-stop")):
        return STOPPED
    return RUNNING if status == psutil.STATUS_RUNNING else SLEEPING


def _explain(pid: int, rc: int, stderr: str) -> str:
    low = stderr.lower()
    if "permission denied" in low or "operation not permitted" in low:
        return (f"no permission to attach to PID {pid}: run as its user or root, or allow "
                "ptrace (kernel.yama.ptrace_scope=0 / CAP_SYS_PTRACE in containers)")
    if "failed to find python" in low or "failed to get process executable" in low:
        return f"PID {pid} is not a Python process (py-spy found no interpreter)"
    if "no such file" in low or "no such process" in low:
        return f"PID {pid} exited while its stack was being read"
    last = stderr.strip().splitlines()[-1] if stderr.strip() else f"exit code {rc}"
    return f"py-spy failed on PID {pid}: {last[:200]}"


def dump_threads(pid: int, py_spy: str, native: bool = False,
                 timeout: float = 5.0) -> tuple[list[ThreadStack], str]:
    """One py-spy dump; returns (threads, error). Never waits past ``timeout``."""
    cmd = [py_spy, "dump", "--json", "--pid", str(pid)]
    if native:
        cmd.append("--native")
    try:
        proc = subprocess.run(cmd, capture_output=True, timeout=timeout, text=True)
    except subprocess.TimeoutExpired:
        return [], f"py-spy did not answer for PID {pid} within {timeout:g} s"
    except OSError as e:
        return [], f"cannot run py-spy: {e.strerror}"
    if proc.returncode != 0:
        return [], _explain(pid, proc.returncode, proc.stderr)
    try:
        return with_source(parse_py_spy_json(proc.stdout, pid)), ""
    except (ValueError, TypeError, AttributeError) as e:
        return [], f"unreadable py-spy output for PID {pid}: {e}"


def dump_rank(rank: int, pid: int, py_spy: str, native: bool, timeout: float) -> RankStack:
    state = process_state(pid)
    if state in (ZOMBIE, DEAD):
        return RankStack(rank, pid, state, error=f"process {state}")
    threads, error = dump_threads(pid, py_spy, native, timeout)
    if error and state == STOPPED:
        # py-spy cannot read a stopped interpreter (it fails at once, it does not hang).
        error = "the process is stopped (SIGSTOP, Ctrl-Z or a debugger): no stack"
    after = process_state(pid)
    if after in (ZOMBIE, DEAD):
        state = after
    return RankStack(rank, pid, state, threads, error)


def collect_stacks(targets: list[tuple[int, int]], native: bool = False,
                   timeout: float = 5.0, py_spy: str | None = None) -> list[RankStack]:
    """Dump ``(rank, pid)`` pairs in parallel; each dump has its own ``timeout``.

    The whole call returns within about ``timeout`` plus process start-up, however many
    ranks hang py-spy: the pool has one thread per target (bounded), and every
    subprocess is killed at its deadline.
    """
    py_spy = py_spy or find_py_spy()
    if not targets:
        return []
    workers = min(len(targets), 32)
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="ddpdoctor-pyspy") as pool:
        futures = [pool.submit(dump_rank, r, p, py_spy, native, timeout) for r, p in targets]
        return [f.result() for f in futures]


def stack_to_dict(stack: RankStack) -> dict[str, object]:
    return {
        "rank": stack.rank, "pid": stack.pid, "state": stack.state, "error": stack.error,
        "threads": [{"name": t.name, "active": t.active,
                     "frames": [str(f) for f in t.frames]} for t in stack.threads],
        "workers": [stack_to_dict(w) for w in stack.workers],
    }
