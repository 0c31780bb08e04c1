"""Pure: one rank's stacks -> RankState (where the rank is and what it waits for).

py-spy only sees Python frames, so a rank blocked inside gloo/NCCL shows the c10d API frame
(``all_reduce (torch/distributed/distributed_c10d.py)``) as its innermost frame; a rank
waiting on ``work.wait()`` of an async op shows the user line that calls it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from functools import lru_cache

from ddpdoctor.attach.stacks import (
    DEAD,
    MISSING,
    STOPPED,
    ZOMBIE,
    Frame,
    RankStack,
    ThreadStack,
)

# RankState.kind values
COLLECTIVE = "collective"
P2P = "p2p"
DATALOADER = "dataloader"
COMPUTE = "compute"
IDLE = "idle"  # sleeping or waiting on IO in non-communication code
UNKNOWN = "unknown"  # no stack could be read
GONE = (DEAD, ZOMBIE, MISSING)
WAITING = (COLLECTIVE, P2P)

COLLECTIVE_OPS = frozenset({
    "all_reduce", "all_reduce_coalesced", "broadcast", "broadcast_object_list", "barrier",
    "monitored_barrier", "all_gather", "all_gather_into_tensor", "_all_gather_base",
    "all_gather_object", "all_gather_coalesced", "reduce_scatter", "reduce_scatter_tensor",
    "_reduce_scatter_base", "all_to_all", "all_to_all_single", "reduce", "gather",
    # torch 2.13 implements all_gather_into_tensor / reduce_scatter_tensor through these.
    "all_gather_single", "reduce_scatter_single",
    "gather_object", "scatter", "scatter_object_list", "new_group", "new_subgroups",
    "init_process_group", "destroy_process_group",
})
P2P_OPS = frozenset({"send", "recv", "isend", "irecv", "batch_isend_irecv",
                     "send_object_list", "recv_object_list"})
# Collectives DDP issues from its own Python code (buffer and parameter sync).
_DDP_OPS = {
    "_distributed_broadcast_coalesced": "broadcast",
    "_sync_module_states": "broadcast",
    "_verify_param_shape_across_processes": "all_gather",
}
# DDP methods that run a collective inside C++ (no Python collective frame below them):
# idle with one of these innermost, the rank waits in that collective.
_DDP_CPP_OPS = {
    "_pre_forward": "broadcast",  # reducer._rebuild_buckets() syncs bucket order (step 2)
    "_sync_buffers": "broadcast",
    "_check_global_requires_backward_grad_sync": "all_reduce",
}
_C10D_FILE = "torch/distributed/distributed_c10d.py"
_FUTURE_COLLECTIVE = re.compile(r"^(all_|reduce|broadcast|barrier|gather|scatter)\w*$")
_DDP_FILE = "torch/nn/parallel/distributed.py"
_FUNCOL_FILE = "torch/distributed/_functional_collectives.py"
_BACKWARD = frozenset({"_engine_run_backward", "run_backward"})
_DATALOADER_WAIT = frozenset({"_get_data", "_try_get_data"})
_DATA_DIR = "torch/utils/data/"
_GETITEM = frozenset({"__getitem__", "__getitems__", "__next__", "__iter__"})


@dataclass
class RankState:
    rank: int
    pid: int
    kind: str
    op: str = ""  # the collective / p2p call, or the DataLoader step ("__getitem__")
    site: Frame | None = None  # the user line that matters (call site, or where it is)
    detail: str = ""  # one human phrase: "sleeping", "DataLoader worker pid 4711"
    thread: str = ""
    frames: tuple[Frame, ...] = ()  # the chosen thread, innermost first
    notes: list[str] = field(default_factory=list)
    gpu_wait: str = ""  # the host sync it waits for the GPU in (device_wait), if any

    @property
    def where(self) -> str:
        if self.site is None:
            return ""
        return f"{self.site.short} in {_leaf(self.site.name)}"

    def describe(self) -> str:
        """``waits in all_reduce at train.py:88 in step`` and the like."""
        at = f" at {self.where}" if self.where else ""
        if self.kind in WAITING:
            return f"waits in {self.op}{at}"
        if self.kind in GONE:
            return {"dead": "has exited", "zombie": "is a zombie (exited, not reaped)",
                    "missing": "has no process"}[self.kind]
        if self.kind == STOPPED:
            return f"is stopped (SIGSTOP / debugger){at}"
        if self.kind == UNKNOWN:
            return f"could not be read ({self.detail})"
        what = {DATALOADER: self.detail or "in data loading",
                COMPUTE: self.detail or "computing"}.get(self.kind, self.detail or "sleeping/IO")
        return f"is at {self.where} ({what})" if self.where else f"is {what}"


@lru_cache(maxsize=65536)
def is_library(filename: str) -> bool:
    """Torch, the stdlib, installed packages and ddpdoctor's own hooks: not the user's code.

    The reference trainer (ddpdoctor/train/) counts as user code: its lines are the ones a
    planted fault points at.
    """
    if filename.startswith("<"):
        return True
    f = filename.replace("\\", "/")
    if "/ddpdoctor/train/" in f or f.startswith("ddpdoctor/train/"):
        return False
    return ("/site-packages/" in f or "/dist-packages/" in f or "/lib/python3" in f
            or "/lib64/python3" in f or "/torch/" in f or f.startswith("torch/")
            or "/ddpdoctor/" in f)


# the stdlib modules a poll loop calls that drop the GIL for a moment (a stat, a listdir):
# not work. Python's blocking waits (threading, queue, concurrent.futures, selectors)
# drop it too, but while they wait another thread works
_POLL_MODULES = frozenset({"genericpath", "posixpath", "ntpath", "os", "pathlib", "glob",
                           "fnmatch", "stat"})


@lru_cache(maxsize=4096)
def is_poll_helper(filename: str) -> bool:
    """A frame of Python's own file-system helpers (``os.path.exists``'s ``<frozen
    genericpath>``, ``/usr/lib/python3.11/pathlib.py``), not an installed package's."""
    f = filename.replace("\\", "/")
    if f.startswith("<frozen "):
        return f[len("<frozen "):].rstrip(">") in _POLL_MODULES
    if "/site-packages/" in f or "/dist-packages/" in f:
        return False
    if "/lib/python3" not in f and "/lib64/python3" not in f:
        return False
    return f.rsplit("/", 1)[-1].removesuffix(".py") in _POLL_MODULES


@lru_cache(maxsize=65536)
def _leaf(name: str) -> str:
    """py-spy qualifies names (``Items.__getitem__``); the function itself is the leaf."""
    return name.rsplit(".", 1)[-1]


def _comm_op(frame: Frame) -> str:
    f = frame.filename
    leaf = _leaf(frame.name)
    if f.endswith(_C10D_FILE) and (leaf in COLLECTIVE_OPS or leaf in P2P_OPS):
        return leaf
    if f.endswith(_C10D_FILE) and _FUTURE_COLLECTIVE.match(leaf):
        # A collective added or renamed in a newer torch: still a collective.
        return leaf
    if f.endswith(_DDP_FILE) and leaf in _DDP_OPS:
        return _DDP_OPS[leaf]
    if f.endswith(_FUNCOL_FILE) and leaf == "wait_tensor":
        return "wait_tensor"
    return ""


def _first_user(frames: list[Frame] | tuple[Frame, ...], start: int = 0) -> Frame | None:
    for f in frames[start:]:
        if not is_library(f.filename):
            return f
    return None


# torch's Python frames that wait for the GPU (a host sync): the thread is blocked until the
# work queued before finishes, an NCCL collective's kernel in the common hang (the
# collective itself was only enqueued). Keyed by the file's end and the function; None:
# any function of that file. item() and tolist() are C methods: py-spy shows their caller.
_PY_SYNC: dict[str, frozenset[str] | None] = {
    "torch/_tensor.py": frozenset({"__format__", "__repr__", "__array__"}),
    "torch/_tensor_str.py": None,
    "torch/cuda/__init__.py": frozenset({"synchronize"}),
    "torch/cuda/streams.py": frozenset({"synchronize", "wait_event", "wait_stream"}),
}
# The same wait in C (``py-spy --native``, recorded on an H200: cuCtxSynchronize_v2 under
# cudaDeviceSynchronize under c10::cuda::device_synchronize); .item() shows only here.
_NATIVE_SYNC = re.compile(r"^(?:cuda|cu|hip)(?:Ctx|Device|Stream|Event)Synchronize(?:_v\d+|_ptsz)?$"
                          r"|^c10::(?:cuda|hip)::(?:device|stream)_synchronize\b")


def _py_sync(frame: Frame) -> str:
    f = frame.filename.replace("\\", "/")
    for end, names in _PY_SYNC.items():
        if f == end or f.endswith("/" + end):
            leaf = _leaf(frame.name)
            return leaf if names is None or leaf in names else ""
    return ""


def device_wait(frames: list[Frame] | tuple[Frame, ...]) -> str:
    """The call a thread waits for the GPU in (innermost), or '': torch's Python sync
    as the innermost Python frame, or CUDA's in the native frames above it."""
    for f in frames:
        if f.native:
            if _NATIVE_SYNC.match(f.name):
                return f.name
            continue
        return _py_sync(f)
    return ""


@dataclass
class _ThreadVerdict:
    kind: str
    op: str = ""
    site: Frame | None = None
    detail: str = ""
    score: float = 0.0
    gpu_wait: str = ""


# Stack -> verdict, keyed by frame identity (parsing interns frames): 16k ranks parked in
# the same wait are classified once. The value keeps the frames alive so ids stay unique.
_VERDICTS: dict[tuple, tuple[list[Frame], _ThreadVerdict]] = {}
_MAX_VERDICTS = 50_000


def classify_thread(thread: ThreadStack) -> _ThreadVerdict:
    key = (thread.active, tuple(map(id, thread.frames)))
    hit = _VERDICTS.get(key)
    if hit is not None:
        return hit[1]
    verdict = _classify_thread(thread)
    if len(_VERDICTS) >= _MAX_VERDICTS:
        _VERDICTS.clear()
    _VERDICTS[key] = (thread.frames, verdict)
    return verdict


@dataclass
class _Scan:
    """One pass over a thread's library frames, innermost first, up to the first user
    frame: the communication op (outermost API call), DataLoader and backward marks."""

    op: str = ""
    op_index: int = -1
    in_data_wait: bool = False
    in_fetch: bool = False
    in_backward: bool = False
    user_index: int = -1

    @classmethod
    def of(cls, frames: list[Frame]) -> _Scan:
        sc = cls()
        for i, f in enumerate(frames):
            if not is_library(f.filename):
                sc.user_index = i
                break
            found = _comm_op(f)
            if found:
                sc.op, sc.op_index = found, i  # keep going: the outermost call names it
            sc._mark(f)
        return sc

    def _mark(self, f: Frame) -> None:
        leaf = _leaf(f.name)
        if _DATA_DIR in f.filename:
            self.in_data_wait |= leaf in _DATALOADER_WAIT
            self.in_fetch |= leaf in ("fetch", "_worker_loop") and leaf not in _DATALOADER_WAIT
        elif leaf in _BACKWARD:
            self.in_backward = True


def _comm_verdict(thread: ThreadStack, sc: _Scan) -> _ThreadVerdict | None:
    frames = thread.frames
    op, op_index = sc.op, sc.op_index
    inner = frames[0]
    if (not op and not thread.active and inner.filename.endswith(_DDP_FILE)
            and _leaf(inner.name) in _DDP_CPP_OPS):
        op, op_index = _DDP_CPP_OPS[_leaf(inner.name)], 0
    if not op:
        return None
    site = _first_user(frames, op_index + 1)
    kind = P2P if op in P2P_OPS else COLLECTIVE
    return _ThreadVerdict(kind, op, site or frames[op_index], score=3)


def _data_verdict(thread: ThreadStack, sc: _Scan, user: Frame | None) -> _ThreadVerdict | None:
    if sc.in_data_wait:
        return _ThreadVerdict(DATALOADER, "worker queue", user,
                              "waits for its DataLoader workers", score=2)
    # Inside the dataset itself: a user __getitem__ (or anything it calls) below the fetch.
    if sc.in_fetch or _dataset_frame(thread.frames) is not None:
        return _ThreadVerdict(DATALOADER, "__getitem__", user,
                              "in Dataset.__getitem__", score=2)
    return None


# torch.utils.cpp_extension's build lock: one process builds a JIT extension (DeepSpeed's
# ops, custom kernels), the others wait on its lock file. A process killed while building
# leaves the file behind, and every later load waits on it forever.
_BATON = "torch/utils/file_baton.py"
EXTENSION_LOCK = "extension build lock"
# the frames of the process that holds the lock and builds
_BUILDING = frozenset({"_write_ninja_file_and_build_library", "_run_ninja_build",
                       "_build_extension_module"})


def _lock_verdict(thread: ThreadStack, user: Frame | None) -> _ThreadVerdict | None:
    frames = thread.frames
    if not any(f.filename.endswith(_BATON) and _leaf(f.name) == "wait" for f in frames[:3]):
        return None
    return _ThreadVerdict(IDLE, EXTENSION_LOCK, user or frames[0],
                          "waits for torch's C++ extension build lock (FileBaton.wait)",
                          score=0.75)


def is_building_extension(frames: tuple[Frame, ...] | list[Frame]) -> bool:
    """A thread inside torch's extension build (it holds the build lock)."""
    return any(_leaf(f.name) in _BUILDING for f in frames)


def _wait_verdict(thread: ThreadStack, sc: _Scan, user: Frame | None) -> _ThreadVerdict | None:
    if thread.active:
        return None
    if sc.in_backward:
        # DDP's gradient all_reduce runs in C++ hooks: waiting for it shows as backward.
        return _ThreadVerdict(COLLECTIVE, "backward (DDP gradient all_reduce)", user, score=3)
    if user is not None and ".wait(" in user.code:
        return _ThreadVerdict(P2P, "wait", user, "waits on an async work handle", score=3)
    return None


def _rest_verdict(thread: ThreadStack, user: Frame | None) -> _ThreadVerdict:
    frames = thread.frames
    if user is None:
        # Only library frames (thread pools, queue feeders, our own hooks): infrastructure.
        kind = COMPUTE if thread.active else IDLE
        return _ThreadVerdict(kind, site=frames[0], score=-0.5)
    if thread.active:
        return _ThreadVerdict(COMPUTE, site=user, score=1)
    detail = "sleeping" if "sleep" in user.code or _leaf(frames[0].name) == "sleep" else ""
    return _ThreadVerdict(IDLE, site=user, detail=detail or "sleeping/IO", score=0.5)


def _classify_thread(thread: ThreadStack) -> _ThreadVerdict:
    every = thread.frames
    if any(f.native for f in every):
        # where the rank is in Python decides; C frames only add a GPU wait
        thread = replace(thread, frames=[f for f in every if not f.native])
    frames = thread.frames
    if not frames:
        return _ThreadVerdict(IDLE, score=-1)
    sc = _Scan.of(frames)
    user = frames[sc.user_index] if sc.user_index >= 0 else None
    verdict = (_comm_verdict(thread, sc) or _data_verdict(thread, sc, user)
               or _lock_verdict(thread, user) or _wait_verdict(thread, sc, user)
               or _rest_verdict(thread, user))
    if verdict.kind in (COMPUTE, IDLE) and not verdict.op and (wait := device_wait(every)):
        verdict = replace(verdict, detail=f"waits on the GPU in {wait}", gpu_wait=wait)
    return verdict


def _dataset_frame(frames: list[Frame]) -> Frame | None:
    """A frame of a dataset's ``__getitem__`` called by torch's fetcher."""
    for i, f in enumerate(frames):
        if _leaf(f.name) in _GETITEM and i + 1 < len(frames):
            caller = frames[i + 1]
            if _DATA_DIR in caller.filename or _leaf(caller.name) in ("<listcomp>", "fetch"):
                return f
    return None


def classify(stack: RankStack) -> RankState:
    """Where one rank is; the busiest thread wins (communication > data > compute > idle)."""
    if stack.state in GONE:
        return RankState(stack.rank, stack.pid, stack.state, detail=stack.error)
    best: tuple[float, ThreadStack, _ThreadVerdict] | None = None
    for t in stack.threads:
        v = classify_thread(t)
        score = v.score + (0.25 if t.is_main else 0.0)
        if best is None or score > best[0]:
            best = (score, t, v)
    if best is None:
        kind = STOPPED if stack.state == STOPPED else UNKNOWN
        return RankState(stack.rank, stack.pid, kind, detail=stack.error or "no Python threads")
    _, thread, v = best
    state = RankState(stack.rank, stack.pid, v.kind, v.op, v.site, v.detail, thread.name,
                      tuple(thread.frames), gpu_wait=v.gpu_wait)
    if stack.state == STOPPED:
        state.kind, state.detail = STOPPED, "stopped"
    if state.kind == DATALOADER and stack.workers:
        _explain_workers(state, stack.workers)
    return state


def _explain_workers(state: RankState, workers: list[RankStack]) -> None:
    """Point a rank that waits on its DataLoader at the worker stuck in the dataset."""
    for w in workers:
        for t in w.threads:
            frame = _dataset_frame(t.frames)
            if frame is None:
                continue
            user = _first_user(t.frames) or frame
            state.op = "__getitem__"
            state.site = user
            state.detail = f"DataLoader worker pid {w.pid}"
            # A forked worker still shows its parent's frames below _worker_loop: noise.
            cut = next((i for i, f in enumerate(t.frames) if _leaf(f.name) == "_worker_loop"),
                       len(t.frames) - 1)
            state.frames = tuple(t.frames[:cut + 1])
            return
    dead = [w.pid for w in workers if w.state in GONE]
    if dead:
        state.detail = f"DataLoader worker(s) {dead} gone"
    else:
        state.notes.append("no worker is inside the dataset (workers idle or unreadable)")


def signature(state: RankState) -> tuple:
    """What makes two ranks' stacks 'the same' in the merged view."""
    return (state.kind, tuple((f.name, f.filename, f.line) for f in state.frames))
