"""Connectivity: a world all-reduce with a known answer, checked on every rank."""

from __future__ import annotations

import time
from typing import Any

NAME = "connectivity"


def collect(ctx: Any, opts: dict[str, Any]) -> dict[str, Any]:
    import torch
    import torch.distributed as dist

    # Each rank contributes rank+1, so the sum is known and a rank that contributes a wrong
    # value (or whose transport corrupts data) shows up as a wrong total.
    t = torch.full((1024,), float(ctx.rank + 1), device=ctx.device)
    expected = ctx.world_size * (ctx.world_size + 1) / 2
    start = time.perf_counter()
    dist.all_reduce(t)
    elapsed = time.perf_counter() - start
    got = float(t[0].item())
    return {
        "allreduce_ok": bool(torch.all(t == expected).item()),
        "allreduce_expected": expected,
        "allreduce_got": got,
        "allreduce_ms": round(elapsed * 1000, 3),
    }
