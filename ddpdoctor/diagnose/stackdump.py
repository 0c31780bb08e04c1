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
    from ddpdoctor.attach.stacks import ThreadStack

HEADER = re.compile(r'^\s*Thread (?P<tid>0x[0-9A-Fa-f]+|\d+) \((?P<state>idle|active)[^)]*\): '
                    r'"(?P<name>[^"]*)"')
FRAME = re.compile(r"^\s+(?P<name>[^\s(][^(]*?) \((?P<file>[^():]+\.py):(?P<line>\d+)\)\s*$")
# the lines the post-pass reads back: thread headers and frame lines
KEYWORDS: tuple[bytes, ...] = (b"Thread ", b".py:")
MAX_PROCESSES = 64
# installed packages whose frames py-spy prints from the package directory
_PACKAGES = frozenset({"torch", "deepspeed", "transformers", "accelerate", "lightning",
                       "pytorch_lightning", "lightning_fabric", "apex", "fairscale",
                       "numpy", "tqdm", "wandb", "datasets", "triton", "torchvision"})
_STDLIB_WAIT = frozenset({"wait", "get", "acquire", "_wait_for_tstate_lock", "join"})
# torch's Python frames that copy a CUDA tensor to the host or wait for the device: a main
# thread stuck in one waits for the GPU work queued before it (an NCCL collective's kernel,
# the common case in a hang: the collective itself was only enqueued). Keyed by the file
# py-spy prints and the function; None: any function of that file.
_SYNC_FRAMES: dict[str, frozenset[str] | None] = {
    # item() and tolist() are C methods: py-spy shows their caller, not a frame here
    "torch/_tensor.py": frozenset({"__format__", "__repr__", "__array__"}),
    "torch/_tensor_str.py": None,
    "torch/cuda/__init__.py": frozenset({"synchronize"}),
    "torch/cuda/streams.py": frozenset({"synchronize", "wait_event", "wait_stream"}),
}
SYNC = "sync"


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
                SYNC: f"waits on the device (in tensor {self.op})",
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
    from ddpdoctor.attach.stacks import Frame, ThreadStack

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
        frame = FRAME.match(text)
        if current is not None and frame and lineno == last + 1:
            current.frames.append(Frame(frame["name"], _long_name(frame["file"]),
                                        int(frame["line"])))
            last = lineno
        else:
            current = None
    return [(n, t) for n, t in threads if t.frames][:MAX_PROCESSES * 8]


def _data_queue(thread: ThreadStack) -> bool:
    """Idle in a stdlib queue/lock wait called from a data-loading module (a loader of a
    library of its own, as fairseq's iterators, not torch's DataLoader)."""
    frames = thread.frames
    i = 0
    while i < len(frames) and frames[i].filename.startswith("/usr/lib/python3/") \
            and frames[i].name.rsplit(".", 1)[-1] in _STDLIB_WAIT:
        i += 1
    if i == 0 or i >= len(frames) or thread.active:
        return False
    caller = frames[i].filename.lower()
    return "/data/" in f"/{caller}" or "dataloader" in caller or "iterator" in caller


def _device_sync(thread: ThreadStack) -> str:
    """The torch function a thread waits for the device in (innermost frame), or ''."""
    if not thread.frames:
        return ""
    inner = thread.frames[0]
    short = inner.filename.removeprefix("/site-packages/")
    names = _SYNC_FRAMES.get(short, frozenset())
    leaf = inner.name.rsplit(".", 1)[-1]
    return leaf if names is None or leaf in names else ""


def classify(dumped: list[tuple[int, ThreadStack]]) -> list[DumpedProcess]:
    """Each process's main thread (every thread, where no thread is named MainThread)."""
    from ddpdoctor.attach.classify import DATALOADER, classify_thread

    mains = [(n, t) for n, t in dumped if t.is_main] or dumped
    out = []
    for i, (lineno, t) in enumerate(mains[:MAX_PROCESSES], 1):
        v = classify_thread(t)
        kind, op = v.kind, v.op
        if kind not in ("collective", "p2p", DATALOADER) and _data_queue(t):
            kind, op = DATALOADER, "queue"
        elif kind in ("compute", "idle") and (synced := _device_sync(t)):
            kind, op = SYNC, synced
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
    if waiting and rest:
        return ("HANG_RANK_MISSING_COLLECTIVE",
                f"{rest[0].describe()} while {waiting[0].describe()}: it never entered the "
                "collective the others wait in")
    if not waiting:
        return _sync_split(procs, rest)
    ops = {p.op for p in waiting}
    if len(waiting) > 1 and len(ops) > 1:
        return ("HANG_COLLECTIVE_MISMATCH", "the dumped processes wait in different "
                "collectives: " + "; ".join(p.describe() for p in waiting[:4]))
    # every dumped process waits in one collective: the rank that never arrived is not
    # among them
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
