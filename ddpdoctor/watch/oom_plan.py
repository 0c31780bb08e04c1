"""What `ddpdoctor plan` says about the job that just ran out of memory.

Only on the OOM path (never per step): the model's parameter count, the world size and
the strategy the watch can see are given to plan's pure model, and the finding's evidence
gets the predicted memory per rank, the cheapest strategy that fits and the `ddpdoctor
plan` command line that shows the whole table.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ddpdoctor.watch.context import CheckContext


def strategy_of(model: object) -> str:
    """plan's name for how ``model`` is wrapped: fsdp (FSDP1/FSDP2), else ddp."""
    names = {type(model).__name__, *(c.__name__ for c in type(model).__mro__)}
    return "fsdp" if any("FSDP" in n or "FullyShardedDataParallel" in n for n in names) \
        else "ddp"


def plan_advice(params: int, world_size: int, strategy: str, capacity: int,
                capacity_of: str, precision: str) -> dict[str, object]:
    """Evidence for an OOM finding, or ``{"skipped": why}`` where plan has no answer."""
    from ddpdoctor.plan import advice_for_oom

    try:
        advice = advice_for_oom(params, world_size, strategy, capacity, precision=precision)
    except (ValueError, ZeroDivisionError) as e:
        return {"skipped": f"ddpdoctor plan cannot model this job: {e}"}
    return {**advice["evidence"], "capacity_of": capacity_of, "fits": advice["strategy"],
            "command": advice["command"], "fix": advice["fix"]}


def advice_for_watch(w: CheckContext, kind: str) -> dict[str, object]:
    """plan_advice for a watched model; never raises (it runs on the way out of an OOM)."""
    try:
        import psutil
        import torch

        params = sum(p.numel() for p in w.model.parameters())
        world = max(1, int(w.world))
        if kind == "cuda" and torch.cuda.is_available():
            capacity = torch.cuda.get_device_properties(torch.cuda.current_device()).total_memory
            capacity_of, precision = "the GPU's total memory", "amp"
        else:
            local = max(1, int(os.environ.get("LOCAL_WORLD_SIZE", "1")))
            capacity = psutil.virtual_memory().total // local
            capacity_of, precision = f"host memory / {local} local rank(s)", "fp32"
        return plan_advice(params, world, strategy_of(w.model), capacity, capacity_of,
                           precision)
    except Exception as e:  # never turn an OOM into a different error
        return {"skipped": f"{type(e).__name__}: {e}"}

