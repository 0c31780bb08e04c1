"""The rank side of a launch: runs inside each rank process."""

from __future__ import annotations

import os
import pickle
import socket
import traceback
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING

from ddpdoctor.check.launcher.outcome import STATUS_ERROR, STATUS_OK, RankContext
from ddpdoctor.core import safefile
from ddpdoctor.core.contract import FN_DONE_KEY, PRE_DONE_KEY, RANK_PRE_FILE, RANK_RESULT_FILE

if TYPE_CHECKING:
    import torch.distributed


def rank_entry(fn: Callable[..., object], args: tuple[object, ...], result_dir: str, backend: str,
                deadline_s: float, pre_init: Callable[..., object] | None = None) -> None:
    """Runs inside each rank process (must stay a module-level function: spawn pickles it)."""
    import torch
    import torch.distributed as dist

    rank = int(os.environ["RANK"])
    world = int(os.environ["WORLD_SIZE"])
    local_rank = int(os.environ["LOCAL_RANK"])
    out = Path(result_dir) / RANK_RESULT_FILE.format(rank=rank)
    device = "cpu"
    store = None
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
        behave_like_a_torchrun_rank()
        if pre_init is not None:
            ctx.progress("pre_init")
            pre = pre_init(ctx, *args)
            # Saved now: a rank torn down later (another rank failed) keeps its evidence.
            safefile.write_atomic(out.with_name(RANK_PRE_FILE.format(rank=rank)), pickle.dumps(pre))
            # Nobody starts the process group (which may fail and tear every rank down)
            # before every rank has saved its pre-init evidence. The mark comes first: a
            # rank waiting here is ahead of one that never got here.
            ctx.progress("pre_init done")
            store.set(PRE_DONE_KEY.format(rank=rank), "1")
            store.wait([PRE_DONE_KEY.format(rank=r) for r in range(world)], timeout)
        if not ctx.skip_init:
            ctx.progress("init_process_group")
            dist.init_process_group(backend, store=store, rank=rank, world_size=world,
                                    timeout=timeout)
        value = fn(ctx, *args)
        payload = {"status": STATUS_OK, "value": value}
    except BaseException as e:  # every failure must reach the launcher
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
    _done(store, rank, world, wait=payload["status"] == STATUS_OK and dist.is_initialized())
    if payload["status"] == STATUS_OK:
        if dist.is_initialized():
            dist.destroy_process_group()
        return
    # Exit non-zero without raising: elastic's own error reporting would add noise.
    os._exit(1)


# Long enough for a loaded peer to finish joining; short enough that a peer that died
# does not stretch the check (its result, saved above, is what the launcher reads)
_DONE_WAIT_S = 10.0


def _done(store: torch.distributed.TCPStore | None, rank: int, world: int, wait: bool) -> None:
    """Say this rank is done and wait, briefly, for the others: a rank whose function needs
    no collective can finish while a loaded peer is still inside init_process_group, and
    tearing its process group down then fails the peer's connect ("remote worker
    crashing"): a healthy check reported as a failed rank. A rank that failed only says so
    (its peers need not wait for it)."""
    if store is None:
        return
    try:
        store.set(FN_DONE_KEY.format(rank=rank), "1")
        if wait:
            store.wait([FN_DONE_KEY.format(rank=r) for r in range(world)],
                       timedelta(seconds=_DONE_WAIT_S))
    except Exception:  # a peer that died or a store gone: nothing to wait for
        pass


def behave_like_a_torchrun_rank() -> None:
    """Undo what being a spawn child changed, so probes see what a job's ranks see.

    multiprocessing's bootstrap forces a spawned process's default start method to
    "spawn"; a rank that torchrun starts (``python train.py``) keeps the platform default
    (fork on Linux before Python 3.14). With "spawn", every DataLoader worker of the
    dataloader probe re-imported torch (seconds each, most of the check's time on a
    2-core host) and tested a start method the job does not use.
    """
    import multiprocessing

    multiprocessing.set_start_method(None, force=True)


def free_store(host: str, world: int, deadline_s: float):
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
