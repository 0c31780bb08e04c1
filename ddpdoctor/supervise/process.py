"""Start the job in its own process group and tee its output.

The job's stdout and stderr go through to the terminal as they come (chunks, so progress
bars and partial lines are not held back), and complete lines are copied to
``output.log`` (both streams, in arrival order) and, where a line carries torchrun's
``[rankN]:`` / ``[defaultN]:`` prefix, to ``rank{N}.log``. Nothing of the command is
changed: no extra launcher flags, no log dirs, only the environment ``env`` prepared.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import BinaryIO

from ddpdoctor.report import EXIT_DOCTOR_FAILED, EXIT_USAGE

_PREFIX = re.compile(rb"^\s*\[(?:rank|default)(\d+)\]:")
_MAX_PARTIAL = 1 << 20  # a "line" longer than this is copied in pieces


class JobStartError(Exception):
    """The command could not be started; ``str()`` is the one-line reason."""

    def __init__(self, reason: str, exit_code: int) -> None:
        super().__init__(reason)
        self.exit_code = exit_code


def rank_of_line(line: bytes) -> int | None:
    m = _PREFIX.match(line[:64])
    return int(m.group(1)) if m else None


class OutputCopy:
    """The kept copy of the job's output: whole lines, thread-safe, per-rank files."""

    def __init__(self, log_dir: Path) -> None:
        self.log_dir = log_dir
        self.combined_path = log_dir / "output.log"
        self._combined = open(self.combined_path, "wb")  # noqa: SIM115 - closed in close()
        self._ranks: dict[int, BinaryIO] = {}
        self._lock = threading.Lock()
        self.lines = 0
        self.last_line = time.monotonic()

    def add_line(self, line: bytes) -> None:
        rank = rank_of_line(line)
        with self._lock:
            self.lines += 1
            self.last_line = time.monotonic()
            try:
                self._combined.write(line)
                if rank is not None:
                    f = self._ranks.get(rank)
                    if f is None:
                        f = self._ranks[rank] = open(  # noqa: SIM115
                            self.log_dir / f"rank{rank}.log", "ab")
                    f.write(line)
            except (OSError, ValueError):
                pass  # a full disk must not stop the job's output from flowing

    def flush(self) -> None:
        with self._lock:
            for f in [self._combined, *self._ranks.values()]:
                try:
                    f.flush()
                except (OSError, ValueError):
                    pass

    def rank_paths(self) -> dict[int, Path]:
        return {r: self.log_dir / f"rank{r}.log" for r in sorted(self._ranks)}

    def close(self) -> None:
        with self._lock:
            for f in [self._combined, *self._ranks.values()]:
                try:
                    f.close()
                except OSError:
                    pass


def _pump(fd: int, sink: BinaryIO | None, copy: OutputCopy) -> None:
    """Read ``fd`` until EOF: chunks to ``sink`` at once, whole lines to ``copy``."""
    partial = b""
    while True:
        try:
            chunk = os.read(fd, 65536)
        except OSError:
            break
        if not chunk:
            break
        if sink is not None:
            try:
                sink.write(chunk)
                sink.flush()
            except (OSError, ValueError):
                sink = None  # the terminal went away; keep draining so the job never blocks
        partial += chunk
        start = 0
        while True:
            nl = partial.find(b"\n", start)
            if nl < 0:
                break
            copy.add_line(partial[start:nl + 1])
            start = nl + 1
        partial = partial[start:]
        if len(partial) > _MAX_PARTIAL:
            copy.add_line(partial + b"\n")
            partial = b""
    if partial:
        copy.add_line(partial + b"\n")
    try:
        os.close(fd)
    except OSError:
        pass


class Job:
    """A running command: its own session/process group, output teed into ``log_dir``."""

    def __init__(self, proc: subprocess.Popen, copy: OutputCopy,
                 pumps: list[threading.Thread]) -> None:
        self.proc = proc
        self.copy = copy
        self.pumps = pumps
        self.started = time.monotonic()
        # every descendant seen (pid -> create time), for the last kill
        self.known: dict[int, float] = {}

    @property
    def pid(self) -> int:
        return self.proc.pid

    @classmethod
    def start(cls, cmd: list[str], env: dict[str, str], log_dir: Path,
              stdout: BinaryIO | None = None, stderr: BinaryIO | None = None) -> Job:
        """Start ``cmd``; raises JobStartError (exit 2 for not found / not executable)."""
        if not cmd:
            raise JobStartError("no command given: ddpdoctor run [OPTIONS] -- CMD...",
                                EXIT_USAGE)
        log_dir.mkdir(parents=True, exist_ok=True)
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        try:
            proc = subprocess.Popen(cmd, env=env, stdin=None, stdout=out_w, stderr=err_w,
                                    start_new_session=True)
        except FileNotFoundError:
            _close(out_r, out_w, err_r, err_w)
            raise JobStartError(f"cannot start {cmd[0]!r}: command not found",
                                EXIT_USAGE) from None
        except PermissionError:
            _close(out_r, out_w, err_r, err_w)
            raise JobStartError(f"cannot start {cmd[0]!r}: permission denied (not "
                                "executable?)", EXIT_USAGE) from None
        except OSError as e:
            _close(out_r, out_w, err_r, err_w)
            raise JobStartError(f"cannot start {cmd[0]!r}: {e.strerror or e}",
                                EXIT_DOCTOR_FAILED) from None
        _close(out_w, err_w)
        copy = OutputCopy(log_dir)
        if stdout is None:
            stdout = sys.stdout.buffer
        if stderr is None:
            stderr = sys.stderr.buffer
        pumps = [threading.Thread(target=_pump, args=(fd, sink, copy), daemon=True,
                                  name=f"ddpdoctor-tee-{name}")
                 for fd, sink, name in ((out_r, stdout, "out"), (err_r, stderr, "err"))]
        for t in pumps:
            t.start()
        return cls(proc, copy, pumps)

    def poll(self) -> int | None:
        return self.proc.poll()

    def signal_group(self, sig: int) -> bool:
        """Send ``sig`` to the job's process group (as a terminal would); False if gone."""
        try:
            os.killpg(self.proc.pid, sig)
            return True
        except (ProcessLookupError, PermissionError):
            return False

    def stop(self, grace: float = 5.0) -> int | None:
        """SIGTERM the process group, SIGKILL it (and every descendant seen) after
        ``grace`` seconds. Returns the launcher's exit status, None if it would not die."""
        self.signal_group(signal.SIGTERM)
        if self._wait(grace) is None or self._survivors():
            self.signal_group(signal.SIGKILL)
            self._kill_known()
        return self._wait(5.0)

    def _survivors(self) -> list:
        """Descendants seen earlier that still live (checked by create time: no pid reuse)."""
        import psutil

        alive = []
        for pid, created in self.known.items():
            try:
                p = psutil.Process(pid)
                if abs(p.create_time() - created) < 0.01 and p.status() != psutil.STATUS_ZOMBIE:
                    alive.append(p)
            except psutil.Error:
                pass
        return alive

    def _kill_known(self) -> None:
        # a rank or worker that left the process group (setsid) still dies with the job
        import psutil

        for p in self._survivors():
            try:
                p.kill()
            except psutil.Error:
                pass

    def _wait(self, timeout: float) -> int | None:
        try:
            return self.proc.wait(timeout=max(0.0, timeout))
        except subprocess.TimeoutExpired:
            return None

    def drain(self, timeout: float = 5.0) -> None:
        """Wait for the output pipes to close (a leftover child may hold them open)."""
        deadline = time.monotonic() + timeout
        for t in self.pumps:
            t.join(max(0.0, deadline - time.monotonic()))
        self.copy.flush()


def _close(*fds: int) -> None:
    for fd in fds:
        try:
            os.close(fd)
        except OSError:
            pass
