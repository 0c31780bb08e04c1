"""The job's last line of defence: a tiny process that outlives ``ddpdoctor run``.

run cleans up the job itself on every way it can end (run/tree.py), except one: run
killed with SIGKILL runs no code. The launcher then dies of its parent-death signal
(prctl PR_SET_PDEATHSIG), but torchrun's ranks, their workers and the job's daemons would
run on as orphans. So run starts this reaper first, in a session of its own, and tells it
every process of the job it sees (``+ PID CREATE_TIME`` lines on a pipe). When the pipe
closes without a ``done`` line, run is gone: the reaper ends every process it was told
about that still lives (same pid and create time), their children, and every process
that carries the job's ``DDPDOCTOR_RUN_ID`` in its environment (a daemon whose parent
died before run saw it), SIGTERM then SIGKILL after the grace, and writes what it
killed to ``RUN_DIR/reaper.json``.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from ddpdoctor.core.contract import REAPER_FILE, REAPER_SCHEMA

RECORD = REAPER_FILE


class Reaper:
    """run's side of the pipe."""

    def __init__(self, proc: subprocess.Popen[bytes]) -> None:
        self.proc = proc

    @property
    def pid(self) -> int:
        return self.proc.pid

    @classmethod
    def start(cls, run_dir: str, grace: float, marker: tuple[str, str]) -> Reaper | None:
        root = str(Path(__file__).resolve().parents[2])
        code = (f"import sys; sys.path.insert(0, {root!r}); "
                "from ddpdoctor.run.reaper import main; main()")
        try:
            proc = subprocess.Popen(
                [sys.executable, "-I", "-c", code, str(grace), run_dir, *marker],
                stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                start_new_session=True, cwd="/")
        except OSError:
            return None
        return cls(proc)

    def _send(self, line: str) -> None:
        stdin = self.proc.stdin  # a pipe (start); None only for a proc started without one
        if stdin is None:
            return
        try:
            stdin.write(line.encode())
            stdin.flush()
        except (OSError, ValueError):
            pass

    def track(self, pid: int, created: float) -> None:
        self._send(f"+ {pid} {created!r}\n")

    def done(self) -> None:
        """run cleaned up by itself: the reaper leaves without touching anything."""
        self._send("done\n")
        with contextlib.suppress(OSError, ValueError):
            if self.proc.stdin is not None:
                self.proc.stdin.close()
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def main() -> None:
    for sig in (signal.SIGINT, signal.SIGHUP, signal.SIGTERM, signal.SIGQUIT):
        # a terminal's or a scheduler's signal for run is not the reaper's: it ends
        # when run's pipe closes, and only then
        signal.signal(sig, signal.SIG_IGN)
    grace, run_dir = float(sys.argv[1]), sys.argv[2]
    marker = (sys.argv[3], sys.argv[4]) if len(sys.argv) > 4 else None
    tracked: list[tuple[int, float]] = []
    for raw in sys.stdin.buffer:
        line = raw.decode("ascii", "replace").split()
        if line == ["done"]:
            return
        if len(line) == 3 and line[0] == "+":
            with contextlib.suppress(ValueError):
                tracked.append((int(line[1]), float(line[2])))
    if not tracked:
        return
    from ddpdoctor.run.tree import JobTree

    tree = JobTree(tracked[0][0])
    tree.started = min(c for _, c in tracked)
    tree.marker = marker
    for pid, created in tracked:
        tree.add(pid, created)
    t0 = time.time()
    killed = tree.end_all(grace)
    record = {"schema": REAPER_SCHEMA, "time": round(t0, 3),
              "reason": "ddpdoctor run ended without cleaning up (killed by SIGKILL?); "
                        "the reaper ended what was left of the job",
              "killed": [k.to_dict() for k in killed]}
    with contextlib.suppress(OSError):
        from ddpdoctor.core.safefile import write_atomic

        write_atomic(os.path.join(run_dir, RECORD), json.dumps(record, indent=1))
