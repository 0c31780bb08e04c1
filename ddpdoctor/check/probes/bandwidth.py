"""Bandwidth: an nccl-tests-style sweep of four collectives, then every directed link.

Sizes run from 1 KiB to ``max_bytes`` (x4 steps); each size gets warm-up iterations, then
trials of back-to-back timed iterations (as nccl-tests times them), and the median trial
is kept. A trial has ``iters`` iterations, fewer for a size whose one call already takes
longer than the trial budget (large messages, slow links): the sweep's cost stays bounded
while every trial stays long enough to time. Times are per rank; the
analysis uses the slowest rank's, as a collective is only done when every rank is.
Links: the hypercube schedule (ceil(log2 N) rounds, intra-node partners first, then
inter-node ones); each direction is timed on the receiver after a handshake, so a slow
egress of one node shows as slow links *from* its ranks.
"""

from __future__ import annotations

import socket
import statistics
import time
from datetime import timedelta
from typing import TYPE_CHECKING

from ddpdoctor.check.analysis.bandwidth import analyze
from ddpdoctor.check.busbw import sizes as size_sweep
from ddpdoctor.check.options import CheckOptions
from ddpdoctor.check.probe import Probe
from ddpdoctor.check.probes.records import BandwidthData, NicInfo, SweepRow
from ddpdoctor.check.schedule import hypercube

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from ddpdoctor.check.launcher.outcome import RankContext

NAME = "bandwidth"


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        import torch

        torch.cuda.synchronize()


def _op(name: str, size: int, world: int, device: str):
    """A closure running one collective whose nccl-tests 'size' is ``size`` bytes."""
    import torch
    import torch.distributed as dist

    n = max(1, size // 4)
    n -= n % world  # all_gather / reduce_scatter split evenly
    n = max(n, world)
    if name == "all_reduce":
        t = torch.ones(n, device=device)
        return lambda: dist.all_reduce(t)
    if name == "broadcast":
        t = torch.ones(n, device=device)
        return lambda: dist.broadcast(t, src=0)
    if name == "all_gather":
        out = torch.empty(n, device=device)
        inp = torch.ones(n // world, device=device)
        return lambda: dist.all_gather_into_tensor(out, inp)
    if name == "reduce_scatter":
        inp = torch.ones(n, device=device)
        out = torch.empty(n // world, device=device)
        return lambda: dist.reduce_scatter_tensor(out, inp)
    raise ValueError(name)


def _iters(run: Callable[[], object], ctx: RankContext, opts: CheckOptions) -> int:
    """Back-to-back calls per trial: ``iters``, or as many as fit in the trial budget.

    One timed call sizes it; the slowest rank's time decides for every rank (they must
    issue the same number of collectives, or they would wait on each other forever).
    """
    if opts.trial_budget_s is None:
        return opts.iters
    import torch
    import torch.distributed as dist

    start = time.perf_counter()
    run()
    _sync(ctx.device)
    one = torch.tensor([time.perf_counter() - start], dtype=torch.float64, device=ctx.device)
    dist.all_reduce(one, op=dist.ReduceOp.MAX)
    return max(1, min(opts.iters, int(opts.trial_budget_s / max(float(one.item()), 1e-9))))


def sweep(ctx: RankContext, opts: CheckOptions | Mapping[str, object]) -> list[SweepRow]:
    """Like nccl-tests: time ``iters`` back-to-back calls and divide, in ``trials`` trials."""
    import torch.distributed as dist

    opts = CheckOptions.coerce(opts)
    warmup, trials = opts.warmup, opts.trials
    rows: list[SweepRow] = []
    for coll in opts.collectives:
        ctx.progress(f"{NAME}: {coll}")
        for size in size_sweep(opts.min_bytes, opts.bandwidth_max_bytes(ctx.backend)):
            run = _op(coll, size, ctx.world_size, ctx.device)
            for _ in range(warmup):
                run()
            _sync(ctx.device)
            iters = _iters(run, ctx, opts)
            times = []
            for _ in range(trials):
                dist.barrier()
                start = time.perf_counter()
                for _ in range(iters):
                    run()
                _sync(ctx.device)
                times.append((time.perf_counter() - start) / iters)
            rows.append({"collective": coll, "size": size, "iters": iters,
                         "median_s": statistics.median(times), "times_s": times})
    return rows


def links(ctx: RankContext, opts: CheckOptions) -> dict[str, float]:
    """GB/s of each link *into* this rank, keyed by the sending rank."""
    import torch
    import torch.distributed as dist

    link_bytes = opts.link_bytes
    if link_bytes is None:
        link_bytes = min(8 << 20, opts.bandwidth_max_bytes(ctx.backend))
    n = link_bytes // 4
    timeout = timedelta(seconds=opts.link_timeout_s)
    payload = torch.ones(n, device=ctx.device)
    buf = torch.empty(n, device=ctx.device)
    token = torch.zeros(1, device=ctx.device)
    out: dict[str, float] = {}
    for i, pairs in enumerate(hypercube(ctx.world_size)):
        peer = pairs.get(ctx.rank)
        if peer is None:
            continue
        ctx.progress(f"{NAME}: link round {i} with rank {peer}")
        # Lower rank sends first; each direction is timed where it lands.
        for sender in sorted((ctx.rank, peer)):
            times = []
            for _ in range(opts.link_iters):
                if ctx.rank == sender:
                    dist.recv(token, peer)  # receiver is ready: start together
                    work = dist.isend(payload, peer)
                    assert work is not None  # None only for a rank outside the group
                    work.wait(timeout=timeout)
                else:
                    dist.send(token, peer)
                    start = time.perf_counter()
                    work = dist.irecv(buf, peer)
                    assert work is not None
                    work.wait(timeout=timeout)
                    _sync(ctx.device)
                    times.append(time.perf_counter() - start)
            if times:
                out[str(peer)] = round(n * 4 / statistics.median(times) / 1e9, 4)
    return out


def nic_towards(addr: str) -> NicInfo:
    """The interface this host uses to reach ``addr``, with its line rate when known.

    The expected bandwidth of a link between nodes: sysfs reports the negotiated speed of
    Ethernet NICs (-1 or nothing for loopback and many virtual devices).
    """
    import psutil

    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect((addr, 9))  # UDP connect sends nothing: it only picks the route
            local = s.getsockname()[0]
    except OSError:
        return {}
    name = next((n for n, addrs in psutil.net_if_addrs().items()
                 if any(a.address == local for a in addrs)), None)
    if name is None:
        return {"address": local}
    try:
        with open(f"/sys/class/net/{name}/speed") as f:
            speed = int(f.read().strip())
    except (OSError, ValueError):
        speed = -1
    return {"name": name, "address": local, "speed_mbps": speed if speed > 0 else None}


def collect(ctx: RankContext, opts: CheckOptions) -> BandwidthData:
    import os

    return {"host": socket.gethostname(), "world_size": ctx.world_size,
            "nic": nic_towards(os.environ.get("MASTER_ADDR", "127.0.0.1")),
            "sweep": sweep(ctx, opts) if ctx.world_size > 1 else [],
            "links_in": links(ctx, opts) if ctx.world_size > 1 else {}}


PROBE = Probe(NAME, "Communication", "rank", collect, analyze, stall_finding="COMM_CONNECTIVITY")
