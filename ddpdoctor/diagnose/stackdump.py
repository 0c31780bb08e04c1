"""A hang shown as py-spy dumps pasted into a log: where each process's main thread was.

People post ``py-spy dump`` output when a job hangs with no error (no timeout fired yet).
Each dumped process's main thread is classified as ``attach`` classifies a live rank's
(attach/classify.py: in a collective, in its DataLoader, computing, idle), then the
processes are compared: some wait in a collective while one waits for its data -> the
data loader; some wait while another computes -> a rank that never entered the collective;
all wait, in different collectives -> a mismatch. A dump names no rank: the finding says
which dumped process is where, in the order of the log.

py-spy prints paths short: the standard library's by file name (``threading.py``),
installed packages' from their package directory (``torch/...``, ``deepspeed/...``).
Those are made long again so that attach's library test sees them as not the user's code.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ddpdoctor.attach.stacks import Frame, ThreadStack

HEADER = re.compile(r'^\s*Thread (?P<tid>0x[0-9A-Fa-f]+|\d+) \((?P<state>idle|active)[^)]*\): '
                    r'"(?P<name>[^"]*)"')
FRAME = re.compile(r"^\s+(?P<name>[^\s(][^(]*?) \((?P<file>[^():]+\.py):(?P<line>\d+)\)\s*$")
# ``py-spy dump --native``'s C frames: the shared object, no line (recorded on an H200:
# "    cuCtxSynchronize_v2 (libcuda.so.580.159.04)")
NATIVE = re.compile(r"^\s+(?P<name>\S.*) \((?P<lib>[\w.+-]*\.so(?:\.\w+)*)\)\s*$")
# the lines the post-pass reads back: thread headers and frame lines
KEYWORDS: tuple[bytes, ...] = (b"Thread ", b".py:", b".so")
MAX_PROCESSES = 64
# installed packages whose frames py-spy prints from the package directory
_PACKAGES = frozenset({"torch", "deepspeed", "transformers", "accelerate", "lightning",
                       "pytorch_lightning", "lightning_fabric", "apex", "fairscale",
                       "numpy", "tqdm", "wandb", "datasets", "triton", "torchvision"})
_STDLIB_WAIT = frozenset({"wait", "get", "acquire", "_wait_for_tstate_lock", "join"})
SYNC = "sync"
# A launcher's own process (torchrun's agent, deepspeed's and accelerate's launchers, the
# parent of mp.spawn) idles while its ranks work or hang: a py-spy of the whole tree dumps
# it too, and it is not a rank (recorded on an H200: torchrun's agent in _invoke_run was
# taken for the rank that never joined). Keyed by the file py-spy prints; None: any function.
_LAUNCHER_FRAMES: dict[str, frozenset[str] | None] = {
    "torch/distributed/run.py": None,
    "torch/distributed/launch.py": None,
    "torch/distributed/launcher/api.py": None,
    "torch/distributed/elastic/agent/server/api.py": None,
    "torch/multiprocessing/spawn.py": frozenset({"join", "start_processes", "spawn"}),
    "deepspeed/launcher/launch.py": None,
    "deepspeed/launcher/runner.py": None,
    "accelerate/commands/launch.py": None,
}


@dataclass(frozen=True)
class DumpedProcess:
    """One dumped main thread: where it was, in words."""

    index: int  # 1-based, in the order of the log
    lineno: int
    kind: str  # attach/classify's kinds: collective, p2p, dataloader, compute, idle
    op: str
    where: str  # file:line in function, the user line that matters

    def describe(self) -> str:
        at = f" at {self.where}" if self.where else ""
        what = {"collective": f"waits in {self.op}", "p2p": f"waits in {self.op}",
                "dataloader": "waits for its data loader", "compute": "is computing",
                SYNC: f"waits on the GPU (in {self.op})",
                }.get(self.kind, "is idle (sleeping or IO)")
        return f"process {self.index} (line {self.lineno}) {what}{at}"

    def to_dict(self) -> dict[str, str | int]:
        return {"process": self.index, "line": self.lineno, "state": self.kind,
                "op": self.op, "where": self.where}


def _long_name(filename: str) -> str:
    if "/" not in filename:
        stem = filename[:-3] if filename.endswith(".py") else filename
        return f"/usr/lib/python3/{filename}" if stem in sys.stdlib_module_names else filename
    top = filename.split("/", 1)[0]
    return f"/site-packages/{filename}" if top in _PACKAGES else filename


def parse(lines: Iterable[tuple[int, str]]) -> list[tuple[int, ThreadStack]]:
    """``(lineno, text)`` lines -> ``(header lineno, ThreadStack)`` per dumped thread."""
    from ddpdoctor.attach.stacks import ThreadStack

    threads: list[tuple[int, ThreadStack]] = []
    current: ThreadStack | None = None
    last = -1
    for lineno, text in lines:
        head = HEADER.match(text)
        if head:
            current = ThreadStack(int(head["tid"], 0), head["name"], head["state"] == "active",
                                  [], is_main=head["name"] == "MainThread")
            threads.append((lineno, current))
            last = lineno
            continue
        frame = _frame_of(text) if current is not None and lineno == last + 1 else None
        if current is not None and frame is not None:
            current.frames.append(frame)
            last = lineno
        else:
            current = None
    return [(n, t) for n, t in threads if t.frames][:MAX_PROCESSES * 8]


def _frame_of(text: str) -> Frame | None:
    from ddpdoctor.attach.stacks import Frame

    if m := FRAME.match(text):
        return Frame(m["name"], _long_name(m["file"]), int(m["line"]))
    if m := NATIVE.match(text):
        return Frame(m["name"], m["lib"], 0, native=True)
    return None


def _data_queue(thread: ThreadStack) -> bool:
    """Idle in a stdlib queue/lock wait called from a data-loading module (a loader of a
    library of its own, as fairseq's iterators, not torch's DataLoader)."""
    frames = [f for f in thread.frames if not f.native]
    i = 0
    while i < len(frames) and frames[i].filename.startswith("/usr/lib/python3/") \
            and frames[i].name.rsplit(".", 1)[-1] in _STDLIB_WAIT:
        i += 1
    if i == 0 or i >= len(frames) or thread.active:
        return False
    caller = frames[i].filename.lower()
    return "/data/" in f"/{caller}" or "dataloader" in caller or "iterator" in caller


def _is_launcher(thread: ThreadStack) -> bool:
    for f in thread.frames:
        names = _LAUNCHER_FRAMES.get(f.filename.removeprefix("/site-packages/"), frozenset())
        if names is None or f.name.rsplit(".", 1)[-1] in names:
            return True
    return False


def classify(dumped: list[tuple[int, ThreadStack]]) -> list[DumpedProcess]:
    """Each process's main thread (every thread, where no thread is named MainThread)."""
    from ddpdoctor.attach.classify import DATALOADER, classify_thread

    mains = [(n, t) for n, t in dumped if t.is_main] or dumped
    out = []
    for i, (lineno, t) in enumerate(mains[:MAX_PROCESSES], 1):
        if _is_launcher(t):
            continue
        v = classify_thread(t)
        kind, op = v.kind, v.op
        if kind not in ("collective", "p2p", DATALOADER) and _data_queue(t):
            kind, op = DATALOADER, "queue"
        elif kind in ("compute", "idle") and v.gpu_wait:
            kind, op = SYNC, v.gpu_wait
        site = v.site
        where = f"{site.filename.removeprefix('/site-packages/')}:{site.line} in {site.name}" \
            if site is not None else ""
        out.append(DumpedProcess(i, lineno, kind, op, where))
    return out


def judge(procs: list[DumpedProcess]) -> tuple[str, str] | None:
    """The finding id and title the dumped processes add up to, if any."""
    waiting = [p for p in procs if p.kind in ("collective", "p2p")]
    data = [p for p in procs if p.kind == "dataloader"]
    rest = [p for p in procs if p.kind in ("compute", "idle")]
    if data and (waiting or len(procs) == 1):
        return ("HANG_DATALOADER", f"a hang in data loading: {data[0].describe()}"
                + (f", while {waiting[0].describe()}" if waiting else ""))
    # a process waiting on the GPU is elsewhere too: not in the collective the others are in
    elsewhere = rest + [p for p in procs if p.kind == SYNC]
    if waiting and elsewhere:
        return ("HANG_RANK_MISSING_COLLECTIVE",
                f"{elsewhere[0].describe()} while {waiting[0].describe()}: it never entered "
                "the collective the others wait in")
    if not waiting:
        return _sync_split(procs, rest)
    return _all_waiting(waiting)


def _all_waiting(waiting: list[DumpedProcess]) -> tuple[str, str]:
    """Every dumped process waits in a collective: in different ones, or in one and the
    rank that never arrived is not among them."""
    if len(waiting) > 1 and len({p.op for p in waiting}) > 1:
        return ("HANG_COLLECTIVE_MISMATCH", "the dumped processes wait in different "
                "collectives: " + "; ".join(p.describe() for p in waiting[:4]))
    return ("HANG_RANK_MISSING_COLLECTIVE", f"{waiting[0].describe()}"
            + (f" (and {len(waiting) - 1} more in it)" if len(waiting) > 1 else "")
            + ": the rank it waits for is not in the dump")


def _sync_split(procs: list[DumpedProcess], rest: list[DumpedProcess]) -> tuple[str, str] | None:
    """No process in a collective, but some wait on the device (a host sync) while the
    others are elsewhere: the sync waits for a collective the others never entered."""
    syncing = [p for p in procs if p.kind == SYNC]
    if not syncing or not rest:
        return None
    return ("HANG_RANK_MISSING_COLLECTIVE",
            f"{len(rest)} of {len(procs)} dumped processes "
            f"{'is' if len(rest) == 1 else 'are'} elsewhere ({rest[0].describe()}) while "
            f"{len(syncing)} {'waits' if len(syncing) == 1 else 'wait'} on the device "
            f"({syncing[0].describe()}): a host sync waits for the GPU work queued before "
            "it, a collective the processes elsewhere never entered")
