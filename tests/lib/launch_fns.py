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


def watched_link_probe(ctx, late_rank, late_s):
    """Three optimizer steps of a watched model, probing links every step; ``late_rank``
    reaches every step boundary ``late_s`` late. Returns each probe's incoming times."""
    import torch

    import ddpdoctor

    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(8, 8))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    handle = ddpdoctor.watch(model, opt, every=1, link_every=1, warn=False, checks="links")
    links = next(c for c in handle.checks if c.name == "links")
    seen = []
    for _ in range(3):
        model(torch.ones(4, 8)).sum().backward()
        if ctx.rank == late_rank:
            time.sleep(late_s)
        opt.step()
        seen.append(list(links.last))
    handle.close()
    return {"times": seen, "findings": [f.id for f in handle.findings]}


def watched_pause(ctx, events):
    """A DDP model watched with a 0.5 s hang timeout: 2 steps, an "evaluation" of 1.5 s
    paused on every rank, 4 more steps; rank 1's weights drift after its 3rd watched step."""
    import torch

    import ddpdoctor

    torch.manual_seed(0)
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(8, 8))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    handle = ddpdoctor.watch(model, opt, every=2, early_checks=(), checks="desync,hang",
                             hang_timeout_s=0.5, heartbeat_interval_s=0.05,
                             events_path=events, warn=False)

    def step():
        model(torch.ones(4, 8) * (ctx.rank + 1)).sum().backward()
        opt.step()
        opt.zero_grad()
        if handle.step == 3 and ctx.rank == 1:  # seen by check step 4
            with torch.no_grad():
                model.module.bias.add_(1.0)

    for _ in range(2):
        step()
    with ddpdoctor.watch.paused():
        with torch.no_grad():
            for _ in range(3):
                model(torch.ones(4, 8))
                time.sleep(0.5)
    for _ in range(4):
        step()
    handle.close()
    return {"step": handle.step,
            "findings": [(f.id, f.ranks, f.evidence.get("step")) for f in handle.findings]}


def answer_then_never_exit(ctx):
    """Returns its answer, then the process cannot exit: a non-daemon thread that never
    ends (like a teardown joining a stopped DataLoader worker)."""
    import threading

    threading.Thread(target=time.sleep, args=(3600,), name="never-ends").start()
    return ctx.rank
