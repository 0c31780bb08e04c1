"""Run a Python function on N local ranks, each with a process group, under a hard deadline.

Built on torch's own elastic multiprocessing (``start_processes``, what torchrun's agent
uses), not a hand-made spawner. What this module adds is what a doctor needs and torchrun
does not give:

- a hard deadline: ranks still running at the deadline are killed (SIGTERM, then SIGKILL, so
  a SIGSTOPped rank dies too) and reported as ``timeout``; the call returns within
  deadline + a few seconds, never hangs;
- a per-rank outcome (return value, exception with traceback, death by signal/exit code,
  killed at the deadline, torn down after another rank failed);
- progress marks through the rendezvous store, so that among several stuck ranks the ones
  that never reached the last step the others reached can be named as the culprits.

The rendezvous store is hosted by the calling process on a free port chosen by the OS, so
there is no port race and the parent can read progress while ranks are blocked. It listens
on ``master_addr`` only (loopback for a one-node check), never on every interface: the store
takes no password, and anyone who can reach it can write any key.

The deadline is the launcher's own: it watches the rank processes and every process they
start (DataLoader workers), and at the deadline SIGKILLs that whole tree itself before
asking torch to clean up, whose teardown waits are not all bounded (a stopped DataLoader
worker makes them wait forever).
"""

from __future__ import annotations

import contextlib
import logging
import os
import pickle
import shutil
import signal
import socket
import tempfile
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

from ddpdoctor import safefile

STATUS_OK = "ok"
STATUS_ERROR = "error"          # the function raised
STATUS_DIED = "died"            # the process exited without a result (signal, os._exit)
STATUS_TIMEOUT = "timeout"      # still running at the deadline, killed by the launcher
STATUS_TORN_DOWN = "torn_down"  # killed because another rank failed first

_PROGRESS_KEY = "ddpdoctor/progress/{rank}"


@dataclass
class RankContext:
    """What a launched function receives on each rank."""

    rank: int
    world_size: int
    local_rank: int
    backend: str
    device: str
    deadline_s: float
    store: Any = None  # the torch.distributed.Store shared by all ranks and the launcher
    _progress: int = 0

    def progress(self, label: str) -> None:
        """Record that this rank reached ``label``; the launcher reads it at the deadline."""
        self._progress += 1
        if self.store is not None:
            self.store.set(_PROGRESS_KEY.format(rank=self.rank), f"{self._progress}:{label}")


@dataclass
class RankOutcome:
    rank: int
    status: str
    value: Any = None
    error: str = ""           # one line
    traceback: str = ""
    exitcode: int | None = None
    pid: int | None = None
    pre: Any = None           # what ``pre_init`` returned, kept even when the rank failed
    progress: int = 0         # how many progress marks this rank reached
    last_step: str = ""       # the label of its last progress mark
    stderr_tail: list[str] = field(default_factory=list)
    # What the launcher saw of the process at the deadline: its state ("stopped",
    # "sleeping", ...) and descendants (DataLoader workers) that were stopped.
    process_state: str = ""
    stopped_children: list[int] = field(default_factory=list)

    @property
    def frozen(self) -> bool:
        """Stopped itself, or waiting on a stopped child: it cannot make progress."""
        return self.process_state == "stopped" or bool(self.stopped_children)


@dataclass
class LaunchResult:
    world_size: int
    backend: str
    deadline_s: float
    elapsed_s: float
    outcomes: list[RankOutcome]
    log_dir: str = ""
    store_address: str = ""  # where the launcher's rendezvous store listened

    @property
    def ok(self) -> bool:
        return all(o.status == STATUS_OK for o in self.outcomes)

    def values(self) -> dict[int, Any]:
        return {o.rank: o.value for o in self.outcomes if o.status == STATUS_OK}

    def by_status(self, status: str) -> list[int]:
        return [o.rank for o in self.outcomes if o.status == status]

    def culprits(self) -> list[int]:
        """Ranks where the failure started.

        Ranks that raised or died come first. Otherwise, among ranks killed at the deadline,
        those seen stopped (or waiting on a stopped child), then those that reached the
        fewest progress marks: a rank that never entered the collective the others wait in
        is behind them.
        """
        failed = [o.rank for o in self.outcomes if o.status in (STATUS_ERROR, STATUS_DIED)]
        if failed:
            return failed
        stuck = [o for o in self.outcomes if o.status == STATUS_TIMEOUT]
        if not stuck:
            return []
        frozen = [o.rank for o in stuck if o.frozen]
        if frozen:
            return frozen
        least = min(o.progress for o in stuck)
        return [o.rank for o in stuck if o.progress == least]


def default_backend(nproc: int) -> str:
    """nccl when every rank can have its own GPU, else gloo."""
    import torch

    if torch.cuda.is_available() and torch.cuda.device_count() >= nproc:
        return "nccl"
    return "gloo"


def _rank_entry(fn: Callable[..., Any], args: tuple, result_dir: str, backend: str,
                deadline_s: float, pre_init: Callable[..., Any] | None = None) -> None:
    """Runs inside each rank process (must stay a module-level function: spawn pickles it)."""
    import torch
    import torch.distributed as dist

    rank = int(os.environ["RANK"])
    world = int(os.environ["WORLD_SIZE"])
    local_rank = int(os.environ["LOCAL_RANK"])
    out = Path(result_dir) / f"rank{rank}.pkl"
    device = "cpu"
    try:
        if backend == "nccl":
            torch.cuda.set_device(local_rank)
            device = f"cuda:{local_rank}"
        timeout = timedelta(seconds=max(1.0, deadline_s))
        store = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]),
                              world, is_master=False, timeout=timeout)
        ctx = RankContext(rank, world, local_rank, backend, device, deadline_s, store)
        omp = os.environ.get("OMP_NUM_THREADS", "")
        if omp.isdigit() and int(omp) > 0:
            # torch was imported by the spawn machinery before our env was applied; a rank
            # started by torchrun would have read OMP_NUM_THREADS at import.
            torch.set_num_threads(int(omp))
        if pre_init is not None:
            ctx.progress("pre_init")
            pre = pre_init(ctx, *args)
            # Saved now: a rank torn down later (another rank failed) keeps its evidence.
            safefile.write_atomic(out.with_suffix(".pre"), pickle.dumps(pre))
            # Nobody starts the process group (which may fail and tear every rank down)
            # before every rank has saved its pre-init evidence. The mark comes first: a
            # rank waiting here is ahead of one that never got here.
            ctx.progress("pre_init done")
            store.set(f"ddpdoctor/pre_done/{rank}", "1")
            store.wait([f"ddpdoctor/pre_done/{r}" for r in range(world)], timeout)
        ctx.progress("init_process_group")
        dist.init_process_group(backend, store=store, rank=rank, world_size=world,
                                timeout=timeout)
        value = fn(ctx, *args)
        payload = {"status": STATUS_OK, "value": value}
    except BaseException as e:  # noqa: BLE001 - every failure must reach the launcher
        payload = {
            "status": STATUS_ERROR,
            "error": f"{type(e).__name__}: {e}".splitlines()[0][:500],
            "traceback": traceback.format_exc(),
        }
    try:
        data = pickle.dumps(payload)
    except Exception as e:  # unpicklable return value: say so rather than lose the rank
        data = pickle.dumps({"status": STATUS_ERROR, "error": f"result not picklable: {e}"})
    # An unpredictable O_EXCL temp name, renamed over the result: a link planted in a
    # shared --log-dir is replaced, never followed.
    safefile.write_atomic(out, data)
    if payload["status"] == STATUS_OK:
        if dist.is_initialized():
            dist.destroy_process_group()
        return
    # Exit non-zero without raising: elastic's own error reporting would add noise.
    os._exit(1)


def _free_store(host: str, world: int, deadline_s: float):
    """A TCPStore listening on ``host`` only, on a port the OS picks.

    TCPStore binds every interface by itself; handing it a socket already bound to
    ``host`` (``master_listen_fd``) keeps it off the network. The socket must stay open as
    long as the store: it is returned with it.
    """
    import torch.distributed as dist

    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    listener = socket.socket(family, socket.SOCK_STREAM)
    try:
        listener.bind((host, 0))
        listener.listen(128)
        store = dist.TCPStore(host, listener.getsockname()[1], world + 1, is_master=True,
                              timeout=timedelta(seconds=max(1.0, deadline_s)),
                              wait_for_workers=False, master_listen_fd=listener.fileno())
    except BaseException:
        listener.close()
        raise
    return store, listener


class _RankTree:
    """The rank processes and every process they started, as seen while they ran.

    Descendants are remembered (psutil.Process keeps the create time, so a reused pid is
    never signalled): a DataLoader worker orphaned by its rank's death is still killed.
    """

    def __init__(self, pids: dict[int, int]) -> None:
        import psutil

        self.ranks: dict[int, Any] = {}
        for r, pid in pids.items():
            with contextlib.suppress(psutil.Error):
                self.ranks[r] = psutil.Process(pid)
        self.children: dict[int, dict[int, Any]] = {r: {} for r in self.ranks}

    def refresh(self) -> None:
        import psutil

        for r, proc in self.ranks.items():
            with contextlib.suppress(psutil.Error):
                for c in proc.children(recursive=True):
                    self.children[r].setdefault(c.pid, c)

    def states(self) -> dict[int, tuple[str, list[int]]]:
        """rank -> (its process state, pids of its stopped descendants)."""
        import psutil

        out = {}
        for r, proc in self.ranks.items():
            try:
                state = proc.status() if proc.is_running() else "gone"
            except psutil.Error:
                state = "gone"
            stopped = []
            for pid, c in self.children[r].items():
                with contextlib.suppress(psutil.Error):
                    if c.is_running() and c.status() in (psutil.STATUS_STOPPED,
                                                         psutil.STATUS_TRACING_STOP):
                        stopped.append(pid)
            out[r] = (state, sorted(stopped))
        return out

    def kill(self) -> None:
        """SIGKILL every descendant, then the ranks (SIGKILL also ends a stopped process)."""
        import psutil

        self.refresh()
        everyone = [c for kids in self.children.values() for c in kids.values()]
        for proc in everyone + list(self.ranks.values()):
            with contextlib.suppress(psutil.Error):
                if proc.is_running():
                    proc.kill()


def _read_progress(store, rank: int) -> tuple[int, str]:
    key = _PROGRESS_KEY.format(rank=rank)
    try:
        if not store.check([key]):
            return 0, ""
        count, _, label = store.get(key).decode().partition(":")
        return int(count), label
    except Exception:  # the store is best effort evidence, never a reason to fail
        return 0, ""


def _tail(path: Path, lines: int = 20) -> list[str]:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 16384))
            text = f.read().decode("utf-8", "replace")
    except OSError:
        return []
    return [ln for ln in text.splitlines() if ln.strip()][-lines:]


def launch(
    fn: Callable[..., Any],
    nproc: int = 2,
    args: tuple = (),
    backend: str | None = None,
    deadline_s: float = 60.0,
    rank_env: dict[int, dict[str, str]] | None = None,
    log_dir: str | None = None,
    master_addr: str = "127.0.0.1",
    pre_init: Callable[..., Any] | None = None,
    on_progress: Callable[[dict[int, str]], None] | None = None,
) -> LaunchResult:
    """Run ``fn(ctx, *args)`` on ``nproc`` local ranks and collect every rank's outcome.

    ``fn`` must be a module-level function (spawn pickles it by reference). ``rank_env``
    adds environment variables to single ranks (tests use it to plant a differing env).
    ``pre_init(ctx, *args)``, if given, runs on each rank before the process group is
    created; its result is kept even when process group creation fails (the env probe uses
    it to explain why). ``on_progress`` is called about twice a second with each rank's
    last progress label. Returns within ``deadline_s`` plus the time to kill what is left.
    """
    from torch.distributed.elastic.multiprocessing import DefaultLogsSpecs, Std

    if nproc < 1:
        raise ValueError("nproc must be at least 1")
    backend = backend or default_backend(nproc)
    started = time.monotonic()
    work = Path(log_dir) if log_dir else Path(tempfile.mkdtemp(prefix="ddpdoctor-launch-"))
    work.mkdir(parents=True, exist_ok=True)
    # A fresh private directory (0700, unpredictable name): results are unpickled from it,
    # so nothing planted beforehand in a shared --log-dir can be read back as a result.
    result_dir = Path(tempfile.mkdtemp(prefix="results-", dir=work))
    store, listener = _free_store(master_addr, nproc, deadline_s)

    envs = {}
    for r in range(nproc):
        env = {
            "RANK": str(r), "LOCAL_RANK": str(r), "WORLD_SIZE": str(nproc),
            "LOCAL_WORLD_SIZE": str(nproc), "GROUP_RANK": "0",
            "MASTER_ADDR": master_addr, "MASTER_PORT": str(store.port),
            "TORCHELASTIC_RUN_ID": "ddpdoctor",
        }
        if nproc > 1 and "OMP_NUM_THREADS" not in os.environ:
            # torchrun does the same for multi-rank jobs; probes must see what jobs see.
            env["OMP_NUM_THREADS"] = "1"
        env.update((rank_env or {}).get(r, {}))
        envs[r] = env

    logs = DefaultLogsSpecs(log_dir=str(work / "logs"), redirects=Std.ALL)
    try:
        with _quiet_torch_launcher():
            result = _run(fn, args, nproc, backend, deadline_s, envs, logs, store, result_dir,
                          work, started, pre_init, on_progress)
    finally:
        listener.close()
    result.store_address = f"{master_addr}:{store.port}"
    if log_dir is None:
        # Everything worth keeping (return values, errors, stderr tails) is in the outcomes.
        shutil.rmtree(work, ignore_errors=True)
        result.log_dir = ""
    return result


@contextlib.contextmanager
def _quiet_torch_launcher():
    """torch's launcher logs every kill and failure with a traceback; the report says it
    better, so its loggers are silenced for the launch only."""
    loggers = [logging.getLogger(n) for n in ("torch.distributed.elastic",
                                              "torch.multiprocessing")]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        for lg, level in zip(loggers, levels):
            lg.setLevel(level)


def _run(fn, args, nproc, backend, deadline_s, envs, logs, store, result_dir, work,
         started, pre_init, on_progress) -> LaunchResult:
    from torch.distributed.elastic.multiprocessing import start_processes

    pc = start_processes(
        name="ddpdoctor",
        entrypoint=_rank_entry,
        args={r: (fn, args, str(result_dir), backend, deadline_s, pre_init)
              for r in range(nproc)},
        envs=envs,
        logs_specs=logs,
    )
    pids = pc.pids()
    tree = _RankTree(pids)
    exitcodes: dict[int, int | None] = {}
    states: dict[int, tuple[str, list[int]]] = {}
    waiter = _Waiter(pc, deadline_s)
    try:
        run, answered = _watch(waiter, tree, nproc, deadline_s, started, store, result_dir,
                               on_progress)
        timed_out = run is None and not answered
        if timed_out:
            states = tree.states()
        elif run is not None:
            for local_rank, failure in run.failures.items():
                exitcodes[local_rank] = failure.exitcode
    finally:
        progress = {r: _read_progress(store, r) for r in range(nproc)}
        tree.kill()  # before torch's cleanup: nothing it waits on is left alive
        waiter.join(CLOSE_TIMEOUT_S)  # its wait ends with the processes
        _close_bounded(pc, tree)
    elapsed = time.monotonic() - started

    payloads = {r: pickle.loads((result_dir / f"rank{r}.pkl").read_bytes())
                for r in range(nproc) if (result_dir / f"rank{r}.pkl").exists()}
    first_failure_seen = bool(exitcodes) or any(p["status"] != STATUS_OK
                                                for p in payloads.values())
    outcomes = []
    for r in range(nproc):
        res_file = result_dir / f"rank{r}.pkl"
        count, label = progress[r]
        stderr_path = Path(logs.root_log_dir)
        stderr_files = list(stderr_path.glob(f"**/attempt_*/{r}/stderr.log"))
        tail = _tail(stderr_files[0]) if stderr_files else []
        state, stopped = states.get(r, ("", []))
        outcome = RankOutcome(rank=r, status=STATUS_DIED, pid=pids.get(r), progress=count,
                              last_step=label, stderr_tail=tail, process_state=state,
                              stopped_children=stopped)
        pre_file = res_file.with_suffix(".pre")
        if pre_file.exists():
            outcome.pre = pickle.loads(pre_file.read_bytes())
        if r in payloads:
            payload = payloads[r]
            outcome.status = payload["status"]
            outcome.value = payload.get("value")
            outcome.error = payload.get("error", "")
            outcome.traceback = payload.get("traceback", "")
        elif r in exitcodes:
            outcome.exitcode = exitcodes[r]
            outcome.error = _describe_exit(exitcodes[r])
        elif timed_out:
            outcome.status = STATUS_TIMEOUT
            outcome.error = (f"still running at the {deadline_s:g} s deadline "
                             f"(last reached: {label or 'nothing'}); killed")
        elif first_failure_seen:
            outcome.status = STATUS_TORN_DOWN
            outcome.error = "stopped by the launcher after another rank failed"
        outcomes.append(outcome)
    return LaunchResult(nproc, backend, deadline_s, round(elapsed, 3), outcomes, str(work))


class _Waiter(threading.Thread):
    """torch's ``pc.wait`` in a thread of its own: it is not bounded (once every
    entrypoint has returned it blocks until every process exits, forever if one cannot,
    e.g. a teardown joining a stopped DataLoader worker), so the launcher keeps the time."""

    def __init__(self, pc: Any, deadline_s: float) -> None:
        super().__init__(name="ddpdoctor-launcher-wait", daemon=True)
        self.pc, self.deadline_s = pc, deadline_s
        self.run_result: Any = None
        self.start()

    def run(self) -> None:
        with contextlib.suppress(Exception):  # the outcomes are read from the result files
            self.run_result = self.pc.wait(timeout=self.deadline_s + 1, period=0.1)


def _watch(waiter: _Waiter, tree: _RankTree, nproc: int, deadline_s: float, started: float,
           store: Any, result_dir: Path, on_progress: Any) -> tuple[Any, bool]:
    """Wait for the ranks until the deadline; returns (torch's result, or None when it did
    not come, and whether every rank has written its answer)."""
    answered_at: float | None = None
    while waiter.is_alive():
        remaining = deadline_s - (time.monotonic() - started)
        if remaining <= 0:
            break
        if answered_at is None and all((result_dir / f"rank{r}.pkl").exists()
                                       for r in range(nproc)):
            answered_at = time.monotonic()
        elif answered_at is not None and time.monotonic() - answered_at > EXIT_GRACE_S:
            break  # every rank answered but some process cannot exit: end it now
        tree.refresh()
        waiter.join(min(0.5, remaining))
        if waiter.is_alive() and on_progress is not None:
            on_progress({r: _read_progress(store, r)[1] for r in range(nproc)})
    if waiter.is_alive():
        return None, answered_at is not None
    return waiter.run_result, True


CLOSE_TIMEOUT_S = 5.0  # torch's own cleanup, after the launcher's kill
EXIT_GRACE_S = 5.0  # every rank has answered: how long their processes get to exit


def _close_bounded(pc: Any, tree: _RankTree) -> None:
    """torch's own cleanup (reaping, log files), given a few seconds and no more.

    Its waits are not all bounded; whatever it has not ended by then is SIGKILLed here,
    descendants included (a DataLoader worker left behind by a finished rank).
    """
    closer = threading.Thread(target=pc.close, kwargs={"death_sig": signal.SIGTERM,
                                                         "timeout": 2},
                              name="ddpdoctor-launcher-close", daemon=True)
    closer.start()
    closer.join(CLOSE_TIMEOUT_S)
    tree.kill()
    if closer.is_alive():
        closer.join(1.0)


def _describe_exit(code: int | None) -> str:
    if code is None:
        return "exited without a result"
    if code < 0:
        try:
            return f"killed by signal {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exited with code {code} without a result"
