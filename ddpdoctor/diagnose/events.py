"""Events: the facts read from log lines, and the kinds they come in.

An event is one fact from one line ("rank 1: DataLoader worker killed by signal: Bus
error"). Events are immutable: the scanner makes them, triage only reads them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import TypeVar, overload

_T = TypeVar("_T")


class EventKind(str, Enum):
    # DDP
    DDP_REDUCTION = "ddp_reduction"
    UNUSED_NAMES = "unused_names"
    UNUSED_INDICES = "unused_indices"
    UNUSED_FRAMEWORK = "unused_framework"  # Lightning's wording of the same error
    # DataLoader and shared memory
    DL_KILLED = "dl_killed"
    DL_EXIT = "dl_exit"
    DL_EXITED = "dl_exited"
    DL_TIMEOUT = "dl_timeout"
    DL_WORKER_EXCEPTION = "dl_worker_exception"
    DL_WORKER_SIGNAL = "dl_worker_signal"  # "ERROR: Unexpected bus error encountered in worker"
    SHM_ALLOC = "shm_alloc"
    NCCL_SHM = "nccl_shm"
    # memory
    CUDA_OOM = "cuda_oom"
    CPU_OOM = "cpu_oom"
    HOST_OOM = "host_oom"
    # NCCL collectives
    NCCL_WATCHDOG = "nccl_watchdog"
    NCCL_WORK_STATE = "nccl_work_state"  # "Timeout at NCCL work: N, last enqueued ..."
    DESYNC_MISSING = "desync_missing"
    DESYNC_HEADER = "desync_header"
    DESYNC_UNFINISHED = "desync_unfinished"
    DESYNC_UNJOINED = "desync_unjoined"
    DESYNC_TIMEOUT_AT = "desync_timeout_at"
    DESYNC_STARTED = "desync_started"
    # NCCL transport and setup
    NCCL_REMOTE = "nccl_remote"
    # Open MPI's fatal error handler: an MPI call failed on this rank (kb/mpi.py)
    MPI_ERROR = "mpi_error"
    NCCL_DETAIL = "nccl_detail"
    NCCL_SYSTEM = "nccl_system"
    NCCL_CUDA = "nccl_cuda"
    NCCL_SOCKET = "nccl_socket"  # "socketStartConnect: Connect to A<p> failed"
    NCCL_PEER_LOST = "nccl_peer_lost"  # "Call to recv from A<p> failed : Connection reset"
    IB_COMPLETION = "ib_completion"
    NCCL_XML = "nccl_xml"
    NCCL_ENV = "nccl_env"  # informational: "NCCL_X set by environment to Y"
    NCCL_WARN = "nccl_warn"
    NET_CONFIG = "net_config"  # an interface / address setting that cannot work
    VERSION = "version"  # informational: "NCCL version 2.19.3"
    NCCL_NET = "nccl_net"  # informational: the network plugin / transport a process uses
    NCCL_COMM_INIT = "nccl_comm_init"  # informational: "ncclCommInitRank... commId X - Init START"
    DRIVER_MISMATCH = "driver_mismatch"  # NVML: the kernel driver and its library differ
    NO_P2P = "no_p2p"  # a library says GPUs of this node cannot use peer-to-peer
    NCCL_IFACES = "nccl_ifaces"  # informational: "NET/Socket : Using [0]eth0:10.0.0.1<0> ..."
    # GPU
    DUPLICATE_GPU = "duplicate_gpu"
    DEVICE_HELD = "device_held"  # an accelerator still held by another (earlier) process
    GPU_ECC = "gpu_ecc"
    GPU_XID = "gpu_xid"
    GPU_FABRIC = "gpu_fabric"  # NVSwitch fabric not ready: Fabric Manager down or mismatched
    GPU_FAULT = "gpu_fault"  # the GPU runtime says the device faulted (ROCm: "HW Exception")
    GPU_MEMFAULT = "gpu_memfault"  # a kernel touched an unmapped page (ROCm's page fault)
    CUDA_ILLEGAL = "cuda_illegal"
    CUDA_ERROR = "cuda_error"
    # gloo / c10d / store
    MISMATCH_DETAIL = "mismatch_detail"
    SIZE_MISMATCH = "size_mismatch"
    MONITORED_BARRIER = "monitored_barrier"
    BARRIER_PEER_ERROR = "barrier_peer_error"
    GLOO_TIMEOUT = "gloo_timeout"
    STORE_TIMEOUT = "store_timeout"
    STORE_UNIQUEID = "store_uniqueid"
    STORE_BARRIER_WAIT = "store_barrier_wait"  # init's store barrier: worker_count of world
    CONNECT_TIMEOUT = "connect_timeout"
    CONN_REFUSED = "conn_refused"
    ADDR_IN_USE = "addr_in_use"
    CONN_RESET = "conn_reset"
    CONN_CLOSED = "conn_closed"
    BROKEN_PIPE = "broken_pipe"
    # numerics
    GRAD_NAN = "grad_nan"
    GRAD_NONFINITE_NORM = "grad_nonfinite_norm"
    LOSS_NAN = "loss_nan"
    LOSS_VALUE = "loss_value"  # informational: a trainer's loss, a number (the series)
    # process deaths
    CPP_ABORT = "cpp_abort"
    FATAL_PYTHON = "fatal_python"
    SEGFAULT = "segfault"
    PROCESS_EXIT = "process_exit"
    SIGKILL = "sigkill"
    AGENT_FAILED = "agent_failed"
    TORCHRUN_FAILURE = "torchrun_failure"
    TEARDOWN = "teardown"  # the launcher stopping its workers: "closing signal SIGTERM"
    KNOWN_BUG = "known_bug"  # a line that matches a known upstream bug's signature
    NATIVE_FRAME = "native_frame"  # a gdb/faulthandler frame: "#0 0x... in f () at file"
    BUSY = "busy"  # informational: a rank's progress line ("Running predictions on rank=0")
    JOB_DONE = "job_done"  # informational: a trainer saying its training completed
    # informational: a warning or an error record the job's progress followed (a connect
    # it tried again, a banner logged at an error level): it did not stop the job
    OUTLIVED = "outlived"
    # informational: torch.nn.DataParallel's re-raise ("Caught X in replica N on device N"):
    # one process drives every GPU, so the job has one rank (index._one_process)
    ONE_PROCESS = "one_process"
    EXCEPTION = "exception"
    TRACEBACK = "traceback"  # a Python traceback whose exception line was not recognised
    ERROR_LINE = "error_line"  # "[E ...]" c10d lines: a failure, wording unknown
    FLOOR = "floor"  # failure evidence by kind, not by text (diagnose/floor.py)
    FAMILY_RESOLVE = "family_resolve"  # a host name that does not resolve, any raiser
    FAMILY_LIMITS = "family_limits"  # out of file descriptors (errno 24), any raiser
    FAMILY_START = "family_start"  # the script or program to launch does not exist
    FAMILY_RDZV_ENV = "family_rdzv_env"  # env:// rendezvous without the launcher's variables
    FAMILY_SSH = "family_ssh"  # a launcher could not reach a node of its hostfile over ssh
    FAMILY_SAMPLER = "family_sampler"  # a data-parallel loop's sampler is not distributed
    FAMILY_BACKEND = "family_backend"  # this torch build lacks the backend asked for
    IB_ASYNC = "ib_async"  # "NET/IB : Got async event : port error"
    # a C++/CUDA extension that failed to compile at start-up (torch.utils.cpp_extension's
    # JIT build: DeepSpeed's ops, fused kernels): ninja's stop, the compiler's error, the
    # RuntimeError that says which extension
    EXT_BUILD = "ext_build"
    # argparse refusing the script's command line ("train.py: error: unrecognized
    # arguments: --local-rank=0"): the process exits 2 before any training
    CLI_ERROR = "cli_error"
    # informational: a launcher's account of the job's shape (DeepSpeed's "nnodes=2,
    # num_local_procs=1, node_rank=1"): a local rank it names is a global one on one node only
    LAUNCH_LAYOUT = "launch_layout"
    # informational: a launch command's node rank or node count ("--rank 1", "--nnodes=2",
    # "machine_rank=1"): this log may be one node of several
    NODE_RANK = "node_rank"
    SIDE_TRACEBACK = "side_traceback"  # a dashboard/logger's traceback (visdom, wandb, ...)
    # an exception Python reported and went on from ("Exception ignored in: <obj>",
    # "Exception ignored in atexit callback: <fn>": a destructor, an atexit hook): never
    # a failure, whatever its class and message
    IGNORED_EXCEPTION = "ignored_exception"
    # informational: a reading of the host's memory the job printed (DeepSpeed's
    # see_memory_usage "CPU Virtual Memory: used = 26.4 GB, percent = 84.6%"); near full
    # just before a death nothing explains, the OOM killer is the likely cause
    HOST_MEMORY = "host_memory"
    # informational: a launcher saying a process or its worker group ended well
    # (DeepSpeed's "Process N exits successfully.", torchelastic's "Local worker group
    # finished (SUCCEEDED)"): what peers print after it is the job's teardown
    LAUNCH_SUCCEEDED = "launch_succeeded"
    # "NCCL communicator was aborted on rank N": the Python side of an abort that came
    # from elsewhere (the watchdog after a timeout, a peer's error): fallout
    NCCL_ABORTED = "nccl_aborted"
    # torchelastic's agent got a signal from outside ("Received 1 death signal, shutting
    # down workers"): the job was stopped, no rank failed (rules_crash.launcher_signalled)
    LAUNCHER_SIGNALLED = "launcher_signalled"
    HOROVOD_STALL = "horovod_stall"  # the stall inspector: "OP [ready ranks: 0, 1, 3]"
    DS_CONFIG = "ds_config"  # DeepSpeed refusing its config ("Check batch related parameters")
    # a loss scaler skipped a step ("Gradient overflow. Skipping step"): routine in fp16
    # while the scale settles; context for a lone non-finite gradient norm
    SCALER_SKIP = "scaler_skip"
    # a framework's performance advice (DDP's find_unused_parameters found nothing unused,
    # Lightning's DataLoader workers may be a bottleneck): info, never a failure
    ADVICE = "advice"
    # a py-spy dump's thread header ("Thread 1439102 (idle): \"MainThread\""): the file is
    # read again for the dump's frames (diagnose/stackdump.py), which make a STACK_DUMP
    STACK_HEADER = "stack_header"
    STACK_DUMP = "stack_dump"
    # informational: a rank announcing itself at process-group start-up with the world it
    # expects (Lightning's "initializing ddp: GLOBAL_RANK: 1, MEMBER: 2/4"), or the
    # start-up saying every member joined ("All distributed processes registered"): the
    # census of who came (rules_collective.rank_census)
    RANK_ANNOUNCE = "rank_announce"
    # informational: a batch script's own line that failed ("slurm_script: line 372:
    # python: command not found") after which ranks printed: without `set -e` the script
    # went on and launched the job (index._script_went_on)
    SCRIPT_WENT_ON = "script_went_on"
    # informational: the first line the reader picked from a rank (its launcher's prefix
    # names it): that rank ran and printed (index._script_went_on)
    RANK_SEEN = "rank_seen"
    # informational: a launcher starting (torchrun's OMP_NUM_THREADS banner, the deprecated
    # torch.distributed.launch's warning, DeepSpeed's "WORLD INFO DICT"): where a log holds
    # several launches, one starts here (launches.split)
    LAUNCH_START = "launch_start"


# What other ranks report when one rank goes away (or a collective never completes).
CASCADE = frozenset({
    EventKind.CONN_RESET, EventKind.CONN_CLOSED, EventKind.BROKEN_PIPE, EventKind.NCCL_REMOTE,
    EventKind.NCCL_SYSTEM, EventKind.GLOO_TIMEOUT, EventKind.NCCL_WATCHDOG,
    EventKind.CONN_REFUSED, EventKind.CONNECT_TIMEOUT, EventKind.CPP_ABORT, EventKind.DL_EXITED,
    EventKind.AGENT_FAILED, EventKind.NCCL_DETAIL, EventKind.NCCL_WORK_STATE,
    EventKind.NCCL_PEER_LOST, EventKind.NCCL_WARN, EventKind.ERROR_LINE, EventKind.NCCL_CUDA,
    EventKind.TEARDOWN, EventKind.TRACEBACK, EventKind.NCCL_ABORTED,
})
# What a rank prints when a peer went away under it: the rank that says so was alive.
PEER_LOSS = frozenset({EventKind.CONN_RESET, EventKind.CONN_CLOSED, EventKind.BROKEN_PIPE,
                       EventKind.NCCL_REMOTE, EventKind.NCCL_PEER_LOST})
# Lines that healthy jobs print too (an NCCL WARN about a missing libibverbs, a proxy
# thread closing at exit): fallout when something failed, never a failure on their own.
WEAK = frozenset({EventKind.NCCL_WARN, EventKind.SIDE_TRACEBACK})
# Facts that say nothing went wrong by themselves.
INFORMATIONAL = frozenset({EventKind.NCCL_ENV, EventKind.VERSION, EventKind.DESYNC_HEADER,
                           EventKind.NATIVE_FRAME, EventKind.BUSY, EventKind.NCCL_NET,
                           EventKind.NCCL_IFACES, EventKind.NCCL_COMM_INIT,
                           EventKind.SCALER_SKIP, EventKind.ADVICE, EventKind.STACK_HEADER,
                           EventKind.LOSS_VALUE, EventKind.JOB_DONE, EventKind.OUTLIVED,
                           EventKind.ONE_PROCESS, EventKind.LAUNCH_LAYOUT, EventKind.NODE_RANK,
                           EventKind.IGNORED_EXCEPTION, EventKind.HOST_MEMORY,
                           EventKind.LAUNCH_SUCCEEDED, EventKind.RANK_ANNOUNCE,
                           EventKind.RANK_SEEN,
                           EventKind.SCRIPT_WENT_ON, EventKind.LAUNCH_START})


# how many of an event's last repeats keep their line numbers (Event.tail_lines)
TAIL = 3


@dataclass(frozen=True)
class Event:
    """One fact read from a log line."""

    kind: EventKind
    source: str
    lineno: int
    rank: int | None
    text: str
    # The line's fields as the knowledge base converted them (kb/signature.py: a group's
    # text, a number, a list of ranks) plus what the scanner adds: the rules know each
    # kind's fields, and read them through the typed getters below.
    data: Mapping[str, object] = field(default_factory=dict)
    repeats: int = 0  # identical-kind lines past the cap, counted here
    rank_from: str = ""  # set when the rank was not on the line itself
    # the lines of the last few of ``repeats`` (TAIL of them at most), oldest first
    tail_lines: tuple[int, ...] = ()

    @property
    def where(self) -> str:
        return f"{self.source}:{self.lineno}"

    @property
    def last_lineno(self) -> int:
        """The line of the last line this event stands for: itself, or its last repeat."""
        return self.tail_lines[-1] if self.tail_lines else self.lineno

    @property
    def is_failure(self) -> bool:
        """Whether this line by itself shows that something failed."""
        if self.kind in INFORMATIONAL or self.kind in WEAK:
            return False
        if self.kind in (EventKind.PROCESS_EXIT, EventKind.AGENT_FAILED,
                         EventKind.TORCHRUN_FAILURE):
            return self.data.get("exit_code") != 0
        if self.kind is EventKind.LAUNCHER_SIGNALLED:  # a Ctrl-C stopped it: not a failure
            return self.data.get("signame") != "SIGINT" and self.data.get("signum") != 2
        return True

    def typed(self, key: str, kind: type[_T]) -> _T:
        """``data[key]``, which the knowledge base made a ``kind`` (KeyError when absent)."""
        return self._checked(key, self.data[key], kind)

    @overload
    def get_int(self, key: str) -> int | None: ...
    @overload
    def get_int(self, key: str, default: _T) -> int | _T: ...

    def get_int(self, key: str, default: object = None) -> object:
        """``data.get(key, default)`` of a field the knowledge base converted to an int."""
        value = self.data.get(key)
        return default if value is None else self._checked(key, value, int)

    def get_str(self, key: str, default: str = "") -> str:
        """``data.get(key, default)`` of a field kept as the line's text."""
        value = self.data.get(key)
        return default if value is None else self._checked(key, value, str)

    def ints(self, key: str, default: list[int] | None = None) -> list[int]:
        """A list of ints (ranks, pids: ``kb.signature.ints``): ``data[key]``, or ``default``
        when given and the field is absent."""
        if default is not None and key not in self.data:
            return default
        return self._list_of(key, int)

    def texts(self, key: str) -> list[str]:
        """``data[key]``, a list of texts (parameter names, descriptions)."""
        return self._list_of(key, str)

    def _list_of(self, key: str, kind: type[_T]) -> list[_T]:
        # a mistyped knowledge-base field fails here, where it is read, as the others do
        return [self._checked(key, v, kind) for v in self._checked(key, self.data[key], list)]

    def _checked(self, key: str, value: object, kind: type[_T]) -> _T:
        if not isinstance(value, kind):
            raise TypeError(f"{self.kind.value} field {key!r} is a {type(value).__name__}, "
                            f"not a {kind.__name__}")
        return value

    def quote(self, width: int = 300) -> str:
        """``file:line: [rankN] text`` for the evidence, cut to ``width``."""
        who = f"[rank{self.rank}] " if self.rank is not None else ""
        if self.rank_from:
            who = f"[rank{self.rank} per {self.rank_from}] "
        text = self.text if len(self.text) <= width else self.text[:width] + " ..."
        return f"{self.where}: {who}{text}"
