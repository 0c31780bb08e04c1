"""Every process the job started, and the one way run ends them all.

torchrun starts each rank in a session of its own, ranks start DataLoader workers, and a
job may start daemons (setsid, double fork) that leave every process group. Signalling
the launcher's group reaches none of those. So:

- run makes itself a child subreaper (prctl PR_SET_CHILD_SUBREAPER): an orphan of the job
  is reparented to run, not to init, and stays findable as run's descendant;
- every descendant seen is remembered by (pid, create time), so a pid reused by an
  unrelated process is never signalled;
- :func:`end_all` is the single cleanup path: SIGTERM to everything still alive, SIGKILL
  after the grace, and a list of what was killed and how (for the report).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ddpdoctor.core import redact
from ddpdoctor.core.proctree import HostProcs
from ddpdoctor.core.signames import signal_name

if TYPE_CHECKING:
    from collections.abc import Callable

PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36
_CTIME_SLACK = 0.01


_libc_prctl = None


def load_prctl():  # a ctypes function or None
    """Resolve prctl once, in the parent: the launcher's preexec hook then calls it
    without dlopen in a freshly forked child (a lock another thread held at fork time
    could deadlock there)."""
    global _libc_prctl
    if _libc_prctl is None:
        try:
            _libc_prctl = ctypes.CDLL(None, use_errno=True).prctl
        except (OSError, AttributeError):
            _libc_prctl = False  # not Linux: no subreaper, no parent-death signal
    return _libc_prctl or None


def _prctl(option: int, value: int) -> bool:
    fn = load_prctl()
    if fn is None:
        return False
    return fn(option, value, 0, 0, 0) == 0


def set_subreaper(on: bool) -> bool:
    return _prctl(PR_SET_CHILD_SUBREAPER, 1 if on else 0)


def die_with_parent(parent_pid: int, sig: int = signal.SIGKILL) -> None:
    """preexec hook of the launcher: ``sig`` when run dies, even of SIGKILL."""
    _prctl(PR_SET_PDEATHSIG, int(sig))
    if os.getppid() != parent_pid:  # run died before the prctl took hold
        os.kill(os.getpid(), sig)


@dataclass(frozen=True)
class Seen:
    pid: int
    created: float
    name: str
    cmdline: str  # redacted, cut


@dataclass
class Killed:
    pid: int
    name: str
    how: str  # "SIGTERM", "SIGKILL", "already gone", "survived SIGKILL"
    cmdline: str = ""

    def to_dict(self) -> dict:
        return {"pid": self.pid, "name": self.name, "how": self.how, "cmdline": self.cmdline}


_CMD_SHOWN = 300
# A secret named before _CMD_SHOWN still sees its whole value (a quoted one with spaces)
_CMD_WINDOW = 1 << 16


def _describe(p) -> tuple[str, str]:  # psutil.Process
    import psutil

    try:
        name = p.name()
    except psutil.Error:
        name = "?"
    try:
        cmd = " ".join(redact.argv(p.cmdline()))
    except psutil.Error:
        cmd = ""
    # Only the first _CMD_SHOWN characters are kept: redact a window well past them, not
    # the whole command line (a 1 MB argument, redacted for every process of the tree).
    return redact.text(name[:_CMD_WINDOW]), redact.text(cmd[:_CMD_WINDOW])[:_CMD_SHOWN]


def _is_zombie_child(pid: int) -> bool:
    """A zombie run must still reap (an orphan reparented to run, the subreaper)."""
    import psutil

    try:
        p = psutil.Process(pid)
        return p.ppid() == os.getpid() and p.status() == psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _is_py_spy(pid: int) -> bool:
    import psutil

    try:
        return psutil.Process(pid).name().startswith("py-spy")
    except psutil.Error:
        return False


class JobTree:
    """The processes of one job: seen so far, by (pid, create time)."""

    def __init__(self, launcher_pid: int, exclude: set[int] | None = None,
                 started: float | None = None) -> None:
        self.launcher_pid = launcher_pid
        self.exclude = set(exclude or ())  # run's own helpers (the reaper)
        self.seen: dict[int, Seen] = {}
        # when the job began (its launcher's create time): a process older than that is
        # not the job's. Not the time this tree is made: on a loaded host that can be
        # seconds after the launcher started its ranks, which were then never seen and
        # outlived run
        self.started = time.time() if started is None else started
        # called with (pid, created) for each new process (the reaper)
        self.on_new: Callable[[int, float], None] | None = None
        # run is the job's subreaper: its own children other than the launcher are the
        # job's orphans (its py-spy readers excepted)
        self.own_children = False
        # (name, value) of the variable run put in the job's environment: every process
        # of the job inherits it, so one that escaped both the tree and the subreaper (a
        # daemon whose parent died before run saw it, run itself gone) is still found
        self.marker: tuple[str, str] | None = None

    def add(self, pid: int, created: float, proc=None) -> None:
        old = self.seen.get(pid)
        if old is not None and abs(old.created - created) < _CTIME_SLACK:
            return
        import psutil

        try:
            name, cmd = _describe(proc or psutil.Process(pid))
        except psutil.Error:
            name, cmd = "?", ""
        self.seen[pid] = Seen(pid, created, name, cmd)
        if self.on_new is not None:
            self.on_new(pid, created)

    def scan(self, host: HostProcs | None = None) -> None:
        """Remember the launcher, its descendants and the orphans reparented to run.

        ``host``: this poll's one walk of the host's processes (read here when not
        given); every root's descendants come from it, none from a walk of its own."""
        host = host or HostProcs.read()
        me = os.getpid()
        roots = {self.launcher_pid, *((me,) if self.own_children else ())}
        # the children of every process still alive: a daemon's own children too
        roots |= {s.pid for s in self.seen.values()
                  if abs(host.created.get(s.pid, -1.0) - s.created) < _CTIME_SLACK}
        pids = {self.launcher_pid} if self.launcher_pid in host.parent else set()
        for root in roots:
            pids.update(host.descendants(root))
        for pid in sorted(pids):
            created = host.created.get(pid)
            if pid in self.exclude or pid == me or created is None:
                continue
            if created + 1.0 < self.started:
                continue  # older than the job: not ours (run used in-process, tests)
            if host.parent.get(pid) == me and pid != self.launcher_pid and _is_py_spy(pid):
                continue  # the hang diagnosis's own stack reader
            self.add(pid, created)

    def sweep_marked(self) -> None:
        """Every process on the host carrying the job's marker in its environment (the
        last look before the kill; reading every environment is too slow for each poll)."""
        if self.marker is None:
            return
        import psutil

        name, value = self.marker
        for p in psutil.process_iter():
            if p.pid in self.exclude or p.pid == os.getpid() or p.pid in self.seen:
                continue
            try:
                created = p.create_time()
                if created + 1.0 < self.started or p.environ().get(name) != value:
                    continue
            except (psutil.Error, OSError):
                continue
            self.add(p.pid, created, p)

    def alive(self) -> list:
        """psutil.Process of every process seen that still lives (zombies do not)."""
        import psutil

        out = []
        gone = []
        for s in self.seen.values():
            try:
                p = psutil.Process(s.pid)
                if abs(p.create_time() - s.created) < _CTIME_SLACK and \
                        p.status() != psutil.STATUS_ZOMBIE:
                    out.append(p)
                    continue
            except psutil.Error:
                pass
            gone.append(s.pid)
        for pid in gone:
            # forgotten once gone: a job that starts new DataLoader workers every epoch
            # must not make each scan slower (an unreaped zombie stays until reaped)
            if not _is_zombie_child(pid):
                del self.seen[pid]
        return out

    def reap(self, popen_pid: int | None = None) -> None:
        """Collect orphans that died as run's children (subreaper), never the launcher
        (its Popen waits for it)."""
        for pid in list(self.seen):
            if pid == popen_pid:
                continue
            with contextlib.suppress(ChildProcessError, OSError):
                os.waitpid(pid, os.WNOHANG)

    def end_all(self, grace: float, first: int = signal.SIGTERM,
                should_hurry=None) -> list[Killed]:
        """Signal everything still alive with ``first``; SIGKILL what is left after
        ``grace`` s (or at once when ``should_hurry()`` turns true)."""
        self.scan()
        self.sweep_marked()
        targets = self.alive()
        if not targets:
            return []
        killed: dict[int, Killed] = {}
        for p in targets:
            s = self.seen[p.pid]
            killed[p.pid] = Killed(p.pid, s.name, signal_name(first) or str(first), s.cmdline)
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(p.pid, first)
        if first != signal.SIGKILL:
            deadline = time.monotonic() + grace
            while time.monotonic() < deadline:
                self.reap(self.launcher_pid)
                self._scan_new(killed, first)
                if not self.alive() or (should_hurry is not None and should_hurry()):
                    break
                time.sleep(0.05)
        for _ in range(3):
            self._scan_new(killed, signal.SIGKILL)
            left = self.alive()
            if not left:
                break
            for p in left:
                killed[p.pid].how = "SIGKILL"
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(p.pid, signal.SIGKILL)
            deadline = time.monotonic() + 5.0
            while self.alive() and time.monotonic() < deadline:
                self.reap(self.launcher_pid)
                time.sleep(0.05)
        for p in self.alive():
            killed[p.pid].how = "survived SIGKILL"
        self.reap(self.launcher_pid)
        return sorted(killed.values(), key=lambda k: k.pid)

    def _scan_new(self, killed: dict[int, Killed], sig: int) -> None:
        # a process started during the grace (a rank's SIGTERM handler forking) dies too
        self.scan()
        self.sweep_marked()
        for p in self.alive():
            if p.pid not in killed:
                s = self.seen[p.pid]
                killed[p.pid] = Killed(p.pid, s.name, signal_name(sig) or str(sig), s.cmdline)
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(p.pid, sig)


def killed_summary(killed: list[Killed], limit: int = 8) -> str:
    parts = [f"{k.pid} {k.name} ({k.how})" for k in killed[:limit]]
    if len(killed) > limit:
        parts.append(f"{len(killed) - limit} more")
    return ", ".join(parts)
