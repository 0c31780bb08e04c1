"""Connectivity through the backend: a world all-reduce with a known answer, then
point-to-point on the hypercube schedule.

ceil(log2 N) rounds (``ddpdoctor/check/schedule.py``), all pairs of a round in parallel,
give every rank log2 N partners, inside its node first and then across nodes: a rank that
fails with every partner is named, a single failing pair is the link. (That every pair can
connect at all was proved before the process group existed, by the reachability mesh.)
Each transfer, and the all-reduce, waits with its own deadline, so a dead link is a
finding, not a hung doctor.
"""

from __future__ import annotations

import time
from datetime import timedelta
from typing import TYPE_CHECKING

from ddpdoctor.check.analysis.connectivity import analyze
from ddpdoctor.check.options import CheckOptions
from ddpdoctor.check.probe import Probe
from ddpdoctor.check.probes.records import AllreduceError, ConnectivityData, P2pError, P2pResult
from ddpdoctor.check.schedule import hypercube

if TYPE_CHECKING:
    from ddpdoctor.check.launcher.outcome import RankContext

NAME = "connectivity"
P2P_ELEMENTS = 4096


def _pattern(src: int, dst: int, device: str):
    import torch

    # A payload only this sender could produce for this receiver: a crossed or corrupted
    # transfer cannot pass as a good one.
    return torch.arange(P2P_ELEMENTS, dtype=torch.float32, device=device) + (src * 1000 + dst)


def _allreduce_s(ctx: RankContext) -> float:
    # A small all-reduce takes milliseconds; a quarter of the deadline leaves the p2p
    # rounds theirs when it cannot finish.
    return max(2.0, ctx.deadline_s / 4)


def collect(ctx: RankContext, opts: CheckOptions) -> ConnectivityData:
    import torch
    import torch.distributed as dist

    t = torch.full((1024,), float(ctx.rank + 1), device=ctx.device)
    expected = ctx.world_size * (ctx.world_size + 1) / 2
    start = time.perf_counter()
    try:
        dist.all_reduce(t, async_op=True).wait(timeout=timedelta(seconds=_allreduce_s(ctx)))
        ok, error = bool(torch.all(t == expected).item()), ""
    except Exception as e:  # a world collective that cannot finish is evidence
        ok, error = False, f"{type(e).__name__}: {str(e).splitlines()[0][:300] if str(e) else ''}"
    elapsed = time.perf_counter() - start
    p2p: dict[str, P2pResult] = {}
    unfinished: AllreduceError = {"allreduce_error": error} if error else {}
    out: ConnectivityData = {
        "allreduce_ok": ok,
        **unfinished,
        "allreduce_expected": expected,
        "allreduce_got": float(t[0].item()),
        "allreduce_ms": round(elapsed * 1000, 3),
        "p2p": p2p,
    }
    rounds = hypercube(ctx.world_size)
    per_pair_s = opts.p2p_timeout_s
    if per_pair_s is None:
        per_pair_s = max(2.0, ctx.deadline_s / (len(rounds) + 3))
    for i, pairs in enumerate(rounds):
        peer = pairs.get(ctx.rank)
        if peer is None:
            continue
        ctx.progress(f"{NAME}: p2p round {i} with rank {peer}")
        send = _pattern(ctx.rank, peer, ctx.device)
        recv = torch.empty_like(send)
        start = time.perf_counter()
        try:
            works = [dist.isend(send, peer), dist.irecv(recv, peer)]
            for w in works:
                assert w is not None  # None only for a rank outside the group
                w.wait(timeout=timedelta(seconds=per_pair_s))
            ok = bool(torch.equal(recv, _pattern(peer, ctx.rank, ctx.device)))
            wrong: P2pError = {} if ok else {"error": "received wrong data"}
            p2p[str(peer)] = {"ok": ok, "ms": round((time.perf_counter() - start) * 1e3, 3),
                              **wrong}
        except Exception as e:  # a failed pair is evidence
            p2p[str(peer)] = {"ok": False, "error": f"{type(e).__name__}: "
                                     f"{str(e).splitlines()[0][:300] if str(e) else ''}"}
    return out


PROBE = Probe(NAME, "Communication", "rank", collect, analyze, stall_finding="COMM_CONNECTIVITY")
