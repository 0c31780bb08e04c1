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
import re
import shutil
import signal
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypedDict

from ddpdoctor.check.launcher import zygote
from ddpdoctor.check.launcher.outcome import (
    STATUS_DIED,
    STATUS_OK,
    STATUS_TIMEOUT,
    STATUS_TORN_DOWN,
    LaunchResult,
    RankOutcome,
    read_progress,
)
from ddpdoctor.check.launcher.rank import free_store, rank_entry
from ddpdoctor.check.launcher.tree import (
    CLOSE_TIMEOUT_S,
    RankTree,
    Waiter,
    close_bounded,
    tail,
    watch,
)
from ddpdoctor.core.contract import RANK_PRE_FILE, RANK_RESULT_FILE
from ddpdoctor.core.signames import signal_name


def default_backend(nproc: int) -> str:
    """nccl when every rank can have its own GPU, else gloo."""
    import torch

    if torch.cuda.is_available() and torch.cuda.device_count() >= nproc:
        return "nccl"
    return "gloo"



def launch(
    fn: Callable[..., object],
    nproc: int = 2,
    args: tuple[object, ...] = (),
    backend: str | None = None,
    deadline_s: float = 60.0,
    rank_env: dict[int, dict[str, str]] | None = None,
    log_dir: str | None = None,
    master_addr: str = "127.0.0.1",
    pre_init: Callable[..., object] | None = None,
    on_progress: Callable[[dict[int, str]], None] | None = None,
) -> LaunchResult:
    """Run ``fn(ctx, *args)`` on ``nproc`` local ranks and collect every rank's outcome.

    ``fn`` must be a module-level function (it is pickled by reference). ``rank_env``
    adds environment variables to single ranks (tests use it to plant a differing env).
    ``pre_init(ctx, *args)``, if given, runs on each rank before the process group is
    created; its result is kept even when process group creation fails (the env probe uses
    it to explain why). ``on_progress`` is called about twice a second with each rank's
    last progress label. Returns within ``deadline_s`` plus the time to kill what is left.
    """
    if nproc < 1:
        raise ValueError("nproc must be at least 1")
    started = time.monotonic()
    # Before torch is imported here: the zygote's import of it overlaps ours.
    modules = tuple(m for m in {fn.__module__, getattr(pre_init, "__module__", None)}
                    if m and m != "__main__")
    zygote.prestart(modules)
    try:
        result, address = _launch(fn, nproc, args, backend, deadline_s, rank_env, log_dir,
                                  master_addr, pre_init, on_progress, started, modules)
    finally:
        zygote.stop()  # the ranks are gone; the next launch gets a fresh environment
    result.store_address = address
    if log_dir is None:
        # Everything worth keeping (return values, errors, stderr tails) is in the outcomes.
        shutil.rmtree(result.log_dir, ignore_errors=True)
        result.log_dir = ""
    return result


def _launch(fn, nproc, args, backend, deadline_s, rank_env, log_dir, master_addr, pre_init,
            on_progress, started, modules) -> tuple[LaunchResult, str]:
    from torch.distributed.elastic.multiprocessing import DefaultLogsSpecs, Std

    backend = backend or default_backend(nproc)
    work = Path(log_dir) if log_dir else Path(tempfile.mkdtemp(prefix="ddpdoctor-launch-"))
    work.mkdir(parents=True, exist_ok=True)
    # A fresh private directory (0700, unpredictable name): results are unpickled from it,
    # so nothing planted beforehand in a shared --log-dir can be read back as a result.
    result_dir = Path(tempfile.mkdtemp(prefix="results-", dir=work))
    store, listener = free_store(master_addr, nproc, deadline_s)

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
        method = zygote.start_method(modules, deadline_s - (time.monotonic() - started))
        with _quiet_torch_launcher(), _signal_handlers_kept():
            result = _run(fn, args, nproc, backend, deadline_s, envs, logs, store, result_dir,
                          work, started, pre_init, on_progress, method)
    finally:
        listener.close()
    return result, f"{master_addr}:{store.port}"


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


# the signals torch's launcher (PContext.start) takes over in the calling process
_TAKEN = ("SIGTERM", "SIGINT", "SIGHUP", "SIGQUIT")


@contextlib.contextmanager
def _signal_handlers_kept():
    """torch's launcher installs its own handlers (a signal raises SignalException) in the
    process that calls it and leaves them there; a caller that launches in-process (a test
    worker, a notebook) gets its own back after the launch."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    saved = {name: signal.getsignal(getattr(signal, name)) for name in _TAKEN
             if hasattr(signal, name)}
    try:
        yield
    finally:
        for name, handler in saved.items():
            # None: a handler installed outside Python, which signal.signal cannot put back
            if handler is not None:
                signal.signal(getattr(signal, name), handler)


def _run(fn, args, nproc, backend, deadline_s, envs, logs, store, result_dir, work,
         started, pre_init, on_progress, method) -> LaunchResult:
    from torch.distributed.elastic.multiprocessing import start_processes

    pc = start_processes(
        name="ddpdoctor",
        entrypoint=rank_entry,
        args={r: (fn, args, str(result_dir), backend, deadline_s, pre_init)
              for r in range(nproc)},
        envs=envs,
        logs_specs=logs,
        start_method=method,
    )
    pids = pc.pids()
    tree = RankTree(pids)
    exitcodes: dict[int, int | None] = {}
    states: dict[int, tuple[str, list[int]]] = {}
    waiter = Waiter(pc, deadline_s)
    try:
        run, answered = watch(waiter, tree, nproc, deadline_s, started, store, result_dir,
                               on_progress)
        timed_out = run is None and not answered
        if timed_out:
            states = tree.states()
        elif run is not None:
            for local_rank, failure in run.failures.items():
                exitcodes[local_rank] = failure.exitcode
    finally:
        progress = {r: read_progress(store, r) for r in range(nproc)}
        tree.kill()  # before torch's cleanup: nothing it waits on is left alive
        waiter.join(CLOSE_TIMEOUT_S)  # its wait ends with the processes
        close_bounded(pc, tree)
    elapsed = time.monotonic() - started

    ends = _Ends(exitcodes, timed_out, deadline_s, _payloads(result_dir, nproc))
    outcomes = []
    for r in range(nproc):
        count, label = progress[r]
        stderr_files = list(Path(logs.root_log_dir).glob(f"**/attempt_*/{r}/stderr.log"))
        state, stopped = states.get(r, ("", []))
        outcome = RankOutcome(rank=r, status=STATUS_DIED, pid=pids.get(r), progress=count,
                              last_step=label,
                              stderr_tail=tail(stderr_files[0]) if stderr_files else [],
                              process_state=state, stopped_children=stopped)
        pre_file = result_dir / RANK_PRE_FILE.format(rank=r)
        if pre_file.exists():
            outcome.pre = pickle.loads(pre_file.read_bytes())
        ends.settle(outcome)
        outcomes.append(outcome)
    return LaunchResult(nproc, backend, deadline_s, round(elapsed, 3), outcomes, str(work))


class _Payload(TypedDict, total=False):
    """A rank's result file, as ``rank_entry`` pickles it."""

    status: str
    value: object
    error: str
    traceback: str


def _payloads(result_dir: Path, nproc: int) -> dict[int, _Payload]:
    files = {r: result_dir / RANK_RESULT_FILE.format(rank=r) for r in range(nproc)}
    return {r: pickle.loads(f.read_bytes()) for r, f in files.items() if f.exists()}


# A rank's error that only says a peer went away (gloo's "Connection closed by peer" while
# it was still joining the process group): no failure of its own, so the peer that went is
# not its teardown's victim. Seen on a loaded host: a rank SIGKILLed in its function was
# called torn down because its peer, still in init_process_group, lost the connection.
_PEER_LOST = re.compile(r"Connection (?:closed|reset) by peer|Broken pipe|remote worker|"
                        r"ECONNRESET|EPIPE")


class _Ends:
    """How each rank ended, from its result file, its exit code or the deadline."""

    def __init__(self, exitcodes: dict[int, int | None], timed_out: bool, deadline_s: float,
                 payloads: dict[int, _Payload]) -> None:
        self.exitcodes, self.timed_out, self.deadline_s = exitcodes, timed_out, deadline_s
        self.payloads = payloads
        self.first_failure_seen = bool(exitcodes) or any(p["status"] != STATUS_OK
                                                         for p in payloads.values())

    def settle(self, outcome: RankOutcome) -> None:
        r = outcome.rank
        if r in self.payloads:
            payload = self.payloads[r]
            outcome.status = payload["status"]
            outcome.value = payload.get("value")
            outcome.error = payload.get("error", "")
            outcome.traceback = payload.get("traceback", "")
        elif r in self.exitcodes and any(p["status"] != STATUS_OK
                                         and not _PEER_LOST.search(p.get("error", ""))
                                         for p in self.payloads.values()):
            # gone with no word of its own after another rank reported its failure: the
            # teardown (or the peer's loss) took it, however fast a loaded host let the
            # launcher see both exits in one poll
            outcome.exitcode = self.exitcodes[r]
            outcome.status = STATUS_TORN_DOWN
            outcome.error = ("stopped after another rank failed ("
                             f"{_describe_exit(self.exitcodes[r])})")
        elif r in self.exitcodes:
            outcome.exitcode = self.exitcodes[r]
            outcome.error = _describe_exit(self.exitcodes[r])
        elif self.timed_out:
            outcome.status = STATUS_TIMEOUT
            outcome.error = (f"still running at the {self.deadline_s:g} s deadline "
                             f"(last reached: {outcome.last_step or 'nothing'}); killed")
        elif self.first_failure_seen:
            outcome.status = STATUS_TORN_DOWN
            outcome.error = "stopped by the launcher after another rank failed"


def _describe_exit(code: int | None) -> str:
    if code is None:
        return "exited without a result"
    if code < 0:
        return f"killed by signal {signal_name(-code) or -code}"
    return f"exited with code {code} without a result"
