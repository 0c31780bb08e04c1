"""Functions the launcher tests run on ranks (module level: spawn pickles them by name)."""

import os
import signal
import time


def allreduce(ctx):
    import torch
    import torch.distributed as dist

    t = torch.ones(1) * (ctx.rank + 1)
    ctx.progress("all_reduce")
    dist.all_reduce(t)
    return {"rank": ctx.rank, "sum": float(t)}


def stuck_rank(ctx, who, how):
    """Rank ``who`` never reaches the all-reduce the others wait in."""
    import torch
    import torch.distributed as dist

    if ctx.rank == who:
        if how == "sigstop":
            os.kill(os.getpid(), signal.SIGSTOP)
        time.sleep(3600)
    ctx.progress("all_reduce")
    dist.all_reduce(torch.ones(1))
    return ctx.rank


def raise_on(ctx, who):
    if ctx.rank == who:
        raise RuntimeError(f"planted failure on rank {ctx.rank}")
    time.sleep(3600)


def sigkill_on(ctx, who):
    if ctx.rank == who:
        os.kill(os.getpid(), signal.SIGKILL)
    time.sleep(3600)
