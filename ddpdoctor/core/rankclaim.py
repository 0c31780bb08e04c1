"""The rank a process really has when no launcher wrote it into its environment.

torchrun, deepspeed and MPI launchers put ``RANK`` into each rank's environment before
exec (``attach/rankproof.py`` reads it). ``torch.multiprocessing.spawn`` and
``multiprocessing.Process`` do not: every child inherits its parent's environment and gets
its rank as an argument. PID order is not the rank either (a script may start rank 1
first, or give spawn index ``i`` the rank ``world - 1 - i``). What is read instead,
strongest first:

1. the process group's own rank, published for this pid by ddpdoctor's watch: the
   heartbeat ``rank{R}.json`` (its ``"pid"``) or the Flight Recorder ``.ready`` file
   (``{"pid": ...}``), either newer than the process (a reused pid cannot claim it);
2. the main thread's locals (``py-spy dump --locals``): ``rank`` passed to a
   ``torch.distributed`` function (``init_process_group(rank=...)``), else ``rank`` in the
   outermost user frame that mp.spawn / multiprocessing called;
3. mp.spawn's process index (``i`` in ``torch.multiprocessing.spawn._wrap``), which is only
   the rank when the script passes it on unchanged: the claim says it is an index.

Before any of them, where a Python's own command line numbers it (``argv_rank``: ``python
main.py --rank 1 --world-size 2 --dist-url tcp://...``, one command per rank from a shell
loop or a Slurm task script), that number is its rank, read from ``/proc/PID/cmdline`` as
the launcher's variables are read from its environment.

When none of them answers, the rank is unknown and callers say so (never PID order
silently). Shared by ``attach`` (discovery) and ``run`` (its per-rank sampling): the same
process gets the same number in both. Never imports torch.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Any

from ddpdoctor.core import contract as C
from ddpdoctor.core import safefile

# Command-line marks of a child that Python's multiprocessing started with the "spawn" or
# "forkserver" method (torch.multiprocessing.spawn uses "spawn").
_MP_MARKS = ("--multiprocessing-fork", "from multiprocessing.spawn import spawn_main",
             "from multiprocessing.forkserver import main")
_RANK_NAMES = ("rank", "global_rank", "world_rank")
_SPAWN_FILE = os.path.join("torch", "multiprocessing", "spawn.py")
_DIST_DIR = os.path.join("torch", "distributed", "")
_LIBRARY_DIRS = ("site-packages", "dist-packages", os.path.join("lib", "python"))
_MAX_FILE = 1 << 20


PYTHON_EXE = re.compile(r"^(python|pypy)[\d.]*[mtd]*$")  # a Python interpreter's basename

# A script's options that number its process. `--rank` alone may be something else (a LoRA
# rank): it counts only beside an option that says the script runs a process group.
_RANK_OPTS = ("--rank", "--global-rank", "--global_rank", "--world-rank", "--world_rank")
_LOCAL_RANK_OPTS = ("--local-rank", "--local_rank")  # torch.distributed.launch's own
_WORLD_OPTS = ("--world-size", "--world_size")
_GROUP_OPTS = ("--dist-url", "--dist_url", "--init-method", "--init_method", "--master-addr",
               "--master_addr", "--master-port", "--master_port", "--dist-backend",
               "--dist_backend", *_WORLD_OPTS)
_PY_VALUE_OPTS = frozenset({"-X", "-W", "-Q"})  # Python's own options that take a value


@dataclass(frozen=True)
class ArgvRank:
    """What a Python's command line says of its rank (``detail``: the options, as given)."""

    rank: int | None
    local_rank: int | None
    world_size: int | None
    detail: str

    @property
    def number(self) -> int | None:
        """Its rank: ``--rank`` where given, else ``--local-rank`` (the rank on one node)."""
        return self.rank if self.rank is not None else self.local_rank


def script_args(cmdline: Sequence[str]) -> list[str]:
    """The arguments a Python passes to its script or ``-m`` module; [] for ``-c`` or none."""
    args = list(cmdline[1:])
    i = 0
    while i < len(args):
        a = args[i]
        if a in _PY_VALUE_OPTS:
            i += 2
            continue
        if a == "-m":
            return args[i + 2:]
        if a.startswith("-c") or (a.startswith("-m") and not a.startswith("--")):
            return [] if a.startswith("-c") else args[i + 1:]
        if not a.startswith("-"):
            return args[i + 1:]
        i += 1
    return []


def _options(args: Sequence[str]) -> dict[str, str]:
    """``--name value`` and ``--name=value``; the last one given wins, as in argparse."""
    out: dict[str, str] = {}
    for i, a in enumerate(args):
        if not a.startswith("--"):
            continue
        name, eq, value = a.partition("=")
        if not eq:
            value = args[i + 1] if i + 1 < len(args) else ""
        out[name] = value
    return out


def _first_int(opts: dict[str, str], names: Sequence[str]) -> tuple[int | None, str]:
    for name in names:
        value = opts.get(name)
        if value is not None and value.isdigit():
            return int(value), f"{name} {value}"
    return None, ""


def argv_rank(cmdline: Sequence[str]) -> ArgvRank | None:
    """The rank a Python process's own command line gives it: ``--local-rank N`` (what
    torch.distributed.launch passes), or ``--rank N`` beside a world size, a ``--dist-url``
    / ``--init-method`` or a master address or port; None otherwise (a non-Python process
    included)."""
    if not cmdline or not PYTHON_EXE.match(os.path.basename(cmdline[0])):
        return None
    opts = _options(script_args(cmdline))
    if not opts:
        return None
    local, local_said = _first_int(opts, _LOCAL_RANK_OPTS)
    rank, rank_said = _first_int(opts, _RANK_OPTS)
    if rank is not None and not any(name in opts for name in _GROUP_OPTS):
        rank, rank_said = None, ""
    if rank is None and local is None:
        return None
    world, world_said = _first_int(opts, _WORLD_OPTS)
    said = ", ".join(x for x in (rank_said, local_said, world_said) if x)
    return ArgvRank(rank, local, world, f"{said} on its command line")


class RankSource(str, Enum):
    """Where a rank number came from (strongest first)."""

    PROCESS_GROUP = "process_group"  # the watch's heartbeat / Flight Recorder file
    LOCALS = "locals"  # a local named rank in the process's stack
    SPAWN_INDEX = "spawn_index"  # mp.spawn's process index


@dataclass(frozen=True)
class RankClaim:
    rank: int
    source: RankSource
    detail: str  # what said so, for the report
    spawn_index: int | None = None  # mp.spawn's index of this child, where read


def is_mp_child(cmdline: Sequence[str], parent_cmdline: Sequence[str] = ()) -> bool:
    """A Python child started by multiprocessing: the spawn/forkserver marks, or a fork
    (the same command line as its parent, which fork cannot change)."""
    text = " ".join(cmdline)
    if any(mark in text for mark in _MP_MARKS):
        return True
    return bool(cmdline) and list(cmdline) == list(parent_cmdline)


# -- 1. the process group's rank, as the watch published it -------------------------------

def _read_json(path: str) -> tuple[object, float]:
    try:
        fd = safefile.open_regular(path, os.O_RDONLY)  # no link, no FIFO
        with os.fdopen(fd, "rb") as f:
            return json.loads(f.read(_MAX_FILE)), os.fstat(f.fileno()).st_mtime
    except (OSError, ValueError):
        return None, 0.0


def _rank_in_name(name: str, prefix: str, suffix: str) -> int | None:
    if not (name.startswith(prefix) and name.endswith(suffix)):
        return None
    try:
        return int(name[len(prefix):len(name) - len(suffix)])
    except ValueError:
        return None


def _files_naming(directory: str, prefix: str, suffix: str) -> list[tuple[int, str]]:
    try:
        names = os.listdir(directory)
    except OSError:
        return []
    found = ((_rank_in_name(n, prefix, suffix), os.path.join(directory, n)) for n in names)
    return sorted((r, p) for r, p in found if r is not None)


def claim_from_files(pid: int, created: float, heartbeat_dir: str, fr_dir: str
                     ) -> RankClaim | None:
    """The rank the watch's heartbeat or Flight Recorder ready file gives ``pid``, written
    after the process started (``created``, epoch seconds)."""
    for directory, name, what in ((heartbeat_dir, C.HEARTBEAT_FILE, "the watch's heartbeat"),
                                  (fr_dir, C.FR_READY_FILE, "the Flight Recorder file")):
        head, tail = name.split("{rank}")
        for rank, path in _files_naming(directory, head, tail) if directory else ():
            data, mtime = _read_json(path)
            if isinstance(data, dict) and data.get("pid") == pid and mtime >= created - 1:
                return RankClaim(rank, RankSource.PROCESS_GROUP,
                                 f"{what} {os.path.basename(path)} names pid {pid}")
    return None


# -- 2 and 3. the stack's locals -----------------------------------------------------------

def _int_local(frame: Mapping[str, Any], names: Sequence[str]) -> tuple[str, int] | None:
    for local in frame.get("locals") or ():
        if local.get("name") in names:
            try:
                return str(local["name"]), int(str(local.get("repr")))
            except (TypeError, ValueError):
                continue
    return None


def _is_user(filename: str) -> bool:
    return not (filename.startswith("<") or any(d in filename for d in _LIBRARY_DIRS))


def _main_frames(threads: Sequence[Mapping[str, Any]], pid: int) -> list[Mapping[str, Any]]:
    for t in threads:
        if t.get("thread_name") == "MainThread" or t.get("os_thread_id") == pid:
            return list(t.get("frames") or ())
    return list(threads[0].get("frames") or ()) if threads else []


def claim_from_locals(threads: Sequence[Mapping[str, Any]], pid: int = 0) -> RankClaim | None:
    """The rank in a py-spy ``--json --locals`` dump of one process (pure)."""
    frames = _main_frames(threads, pid)  # innermost first
    index = next((hit[1] for f in frames if str(f.get("filename", "")).endswith(_SPAWN_FILE)
                  and (hit := _int_local(f, ("i",)))), None)
    for f in frames:  # a torch.distributed call that got the rank (init_process_group)
        hit = _int_local(f, _RANK_NAMES)
        if _DIST_DIR in str(f.get("filename", "")) and hit and hit[1] >= 0:
            return RankClaim(hit[1], RankSource.LOCALS, f"{hit[0]}={hit[1]} passed to "
                             f"{f.get('name')} ({os.path.basename(str(f.get('filename')))})",
                             index)
    for f in reversed(frames):  # outermost user frame first: the function mp started
        hit = _int_local(f, _RANK_NAMES)
        if _is_user(str(f.get("filename", ""))) and hit and hit[1] >= 0:
            return RankClaim(hit[1], RankSource.LOCALS, f"local {hit[0]}={hit[1]} in "
                             f"{f.get('name')} ({os.path.basename(str(f.get('filename')))}:"
                             f"{f.get('line')})", index)
    if index is not None:
        return RankClaim(index, RankSource.SPAWN_INDEX, f"mp.spawn's process index {index} "
                         "(no local rank read: the rank it passes on may differ)", index)
    return None


def py_spy() -> str | None:
    """py-spy next to this Python (the venv ddpdoctor runs in), then on PATH."""
    here = os.path.join(os.path.dirname(sys.executable), "py-spy")
    return here if os.access(here, os.X_OK) else shutil.which("py-spy")


def read_locals(pid: int, timeout: float = 2.0) -> list[Mapping[str, Any]] | None:
    """``py-spy dump --json --locals`` of ``pid`` (~20 ms); None when it cannot be read."""
    exe = py_spy()
    if exe is None:
        return None
    try:
        proc = subprocess.run([exe, "dump", "--json", "--locals", "--pid", str(pid)],
                              capture_output=True, timeout=timeout, text=True)
        data = json.loads(proc.stdout) if proc.returncode == 0 else None
    except (OSError, subprocess.TimeoutExpired, ValueError):
        return None
    return data if isinstance(data, list) else None


def resolve(pid: int, created: float, env: Mapping[str, str], timeout: float = 2.0
            ) -> RankClaim | None:
    """The strongest claim on ``pid``'s rank (its environment gives the watch's dirs)."""
    read = read_locals(pid, timeout)
    from_locals = claim_from_locals(read, pid) if read else None
    index = from_locals.spawn_index if from_locals else None
    files = claim_from_files(pid, created, env.get(C.HEARTBEAT_DIR, ""), env.get(C.FR_DIR, ""))
    if files is not None:
        return RankClaim(files.rank, files.source, files.detail, index)
    return from_locals
