"""Start the job in its own process group and tee its output.

The job's stdout and stderr go through to the terminal as they come (chunks, so progress
bars and partial lines are not held back), and complete lines are copied to
``output.log`` (both streams, in arrival order) and, where a line carries torchrun's
``[rankN]:`` / ``[defaultN]:`` prefix, to ``rank{N}.log``. Nothing of the command is
changed: no extra launcher flags, no log dirs, only the environment ``env`` prepared.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import select
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO

from ddpdoctor.core.contract import OUTPUT_LOG, RANK_LOG
from ddpdoctor.core.errors import DoctorError
from ddpdoctor.core.report import EXIT_DOCTOR_FAILED, EXIT_USAGE
from ddpdoctor.core.safefile import open_regular
from ddpdoctor.run.repeats import EXCEPTION_LINE, ErrorRepeats
from ddpdoctor.run.tree import die_with_parent, load_prctl

if TYPE_CHECKING:
    import builtins  # KeptFile counts ``bytes``: the type's own name is shadowed there

    from _typeshed import HasFileno

_PREFIX = re.compile(rb"^\s*\[(?:rank|default)(\d+)\]:")
_MAX_PARTIAL = 1 << 20  # a "line" longer than this is copied in pieces
LOOP_LINES = 64  # a rank's repeated traceback lines in a row that make it an error loop


class JobStartError(DoctorError):
    """The command could not be started (the one error type, named for where)."""


def rank_of_line(line: bytes) -> int | None:
    return split_rank(line)[0]


def split_rank(line: bytes) -> tuple[int | None, bytes]:
    """The rank torchrun's ``[rankN]:`` prefix names, and the line after it."""
    m = _PREFIX.match(line[:64])
    return (int(m.group(1)), line[m.end():]) if m else (None, line)


@dataclass
class KeptFile:
    """One kept log: what reached it, and what a write error kept out of it."""

    path: Path
    fd: int | None
    lines: int = 0
    bytes: int = 0
    lost_lines: int = 0
    lost_bytes: int = 0
    error: str = ""  # "ENOSPC (No space left on device)", the first failure

    def write(self, line: builtins.bytes) -> None:
        if self.fd is None:
            self.lost_lines += 1
            self.lost_bytes += len(line)
            return
        view = memoryview(line)
        try:
            while view:  # a short write (a nearly full disk) is retried, then an error
                n = os.write(self.fd, view)
                if n <= 0:
                    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
                view = view[n:]
        except OSError as e:
            # stop writing here: a log with holes reads as if nothing happened in them
            self.error = _errno_text(e)
            self.lost_lines += 1
            self.lost_bytes += len(view)
            self._close()
            return
        self.lines += 1
        self.bytes += len(line)

    def _close(self) -> None:
        if self.fd is not None:
            with contextlib.suppress(OSError):
                os.close(self.fd)
            self.fd = None

    @property
    def complete(self) -> bool:
        return not self.error and not self.lost_lines


def _errno_text(e: OSError) -> str:
    name = errno.errorcode.get(e.errno or 0, "") if e.errno else ""
    return f"{name} ({e.strerror})" if name and e.strerror else str(e)


def _open_kept(path: Path) -> KeptFile:
    """Truncated (a reused run dir must not mix jobs), no symlink followed, unbuffered:
    every line is in the file as soon as it is complete."""
    try:
        fd = open_regular(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o644)
    except OSError as e:
        return KeptFile(path, None, error=_errno_text(e))
    return KeptFile(path, fd)


class OutputCopy:
    """The kept copy of the job's output: whole lines, thread-safe, per-rank files.

    Each line is written as it completes (no buffer to lose when run is killed). A write
    error is never hidden: the file stops there and the lines it misses are counted.
    """

    def __init__(self, log_dir: Path) -> None:
        self.log_dir = log_dir
        self.combined_path = log_dir / OUTPUT_LOG
        self._combined = _open_kept(self.combined_path)
        self._ranks: dict[int, KeptFile] = {}
        self._lock = threading.Lock()
        self.lines = 0
        # the lines that show the job moving: one traceback printed over and over does not
        # (run/repeats.py); run's progress tracker reads this, the report counts ``lines``
        self.moving_lines = 0
        self._repeats = ErrorRepeats()
        # rank -> its lines in a row that did not move: a rank in an error loop
        self._looping: dict[int, int] = {}
        self.last_line = time.monotonic()
        self.rank_raised = threading.Event()  # set on a rank's uncaught exception line

    def add_line(self, line: bytes) -> None:
        rank, body = split_rank(line)
        with self._lock:
            self.lines += 1
            moved = self._repeats.moves(body)
            self.moving_lines += moved
            if rank is not None:
                self._looping[rank] = 0 if moved else self._looping.get(rank, 0) + 1
            self.last_line = time.monotonic()
            self._combined.write(line)
            if rank is not None:
                f = self._ranks.get(rank)
                if f is None:
                    f = self._ranks[rank] = _open_kept(self.log_dir / RANK_LOG.format(rank=rank))
                f.write(line)
        # the last line of an uncaught exception as torch's c10d excepthook prints it on
        # a rank ("[rank3]: RuntimeError: ..."): that rank is dying. Seen here, before the
        # process exits and its peers (on other nodes too) feel it, so a job view can
        # publish it first.
        if rank is not None and EXCEPTION_LINE.match(body):
            self.rank_raised.set()  # after the write: whoever wakes reads the line

    def looping_ranks(self) -> frozenset[int]:
        """The ranks whose last LOOP_LINES lines were one traceback printed again: what
        CPU they use is that loop's (run/progress.py does not count it as work)."""
        with self._lock:
            return frozenset(r for r, n in self._looping.items() if n >= LOOP_LINES)

    def flush(self) -> None:
        """Nothing is buffered; kept for callers that flush before reading."""

    def kept_bytes(self) -> int:
        """How much of the combined copy is written: where what comes later starts.
        No lock: a signal handler asks (the main thread may hold the lock it interrupted),
        and one int read is whole under the GIL."""
        return self._combined.bytes

    def files(self) -> list[KeptFile]:
        with self._lock:
            return [self._combined, *(self._ranks[r] for r in sorted(self._ranks))]

    def incomplete(self) -> list[KeptFile]:
        return [f for f in self.files() if not f.complete]

    def rank_paths(self) -> dict[int, Path]:
        return {r: self.log_dir / RANK_LOG.format(rank=r) for r in sorted(self._ranks)}

    def close(self) -> None:
        with self._lock:
            for f in [self._combined, *self._ranks.values()]:
                f._close()


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
                # the reader went away (`| head -1`: EPIPE; a hung-up terminal: EIO): stop
                # echoing, keep draining (the job never blocks) and copying to the run dir
                silence(sink)
                sink = None
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


def silence(stream: HasFileno) -> None:
    """Point ``stream``'s descriptor at /dev/null after a write to it failed.

    What the stream still buffers, the terminal view and the interpreter's last flush then
    go nowhere instead of failing again: a reader that closed run's stdout (``| head -1``)
    must not turn the job's exit code into 1 (rich's exit on a broken pipe) or 120 (a
    failed flush at exit). The run dir keeps everything.
    """
    try:
        fd = stream.fileno()
        null = os.open(os.devnull, os.O_WRONLY)
    except (OSError, ValueError, AttributeError):  # no descriptor (a test's BytesIO)
        return
    try:
        os.dup2(null, fd)
    except OSError:
        pass
    finally:
        os.close(null)


def reader_gone(stream: HasFileno) -> bool:
    """True when nobody can read what is written to ``stream`` any more: a pipe whose
    reader closed it (poll: POLLERR), a terminal that hung up (POLLHUP)."""
    try:
        poller = select.poll()
        poller.register(stream.fileno(), select.POLLOUT)
        events = poller.poll(0)
    except (OSError, ValueError, AttributeError):
        return False
    return any(ev & (select.POLLERR | select.POLLHUP | select.POLLNVAL) for _, ev in events)


class Job:
    """A running command: its own session/process group, output teed into ``log_dir``."""

    def __init__(self, proc: subprocess.Popen[bytes], copy: OutputCopy,
                 pumps: list[threading.Thread]) -> None:
        self.proc = proc
        self.copy = copy
        self.pumps = pumps
        self.started = time.monotonic()

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
            parent = os.getpid()
            load_prctl()
            # the launcher dies with run, even when run is SIGKILLed (no code of run runs
            # then; the reaper ends the rest of the tree)
            proc = subprocess.Popen(cmd, env=env, stdin=None, stdout=out_w, stderr=err_w,
                                    start_new_session=True,
                                    preexec_fn=lambda: die_with_parent(parent))
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
