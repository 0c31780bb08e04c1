"""Save and resume with torch.distributed.checkpoint (DCP).

Layout: ``DIR/<strategy>/step-<N>/`` holds one DCP checkpoint of the model, the optimizer
and the step. ``get_state_dict`` gives sharded state for FSDP/TP and per-stage state for
pp, so every rank writes only what it owns; each pp stage's optimizer state has its own
key. ZeroRedundancyOptimizer has no DCP state-dict support, so zero1 keeps each rank's
optimizer shard next to it (``zero1-optim-rank<R>.pt``): resume needs the same world size.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, TypeGuard

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

from ddpdoctor.train.config import checkpoint_root, latest_checkpoint_step

if TYPE_CHECKING:
    from torch.distributed.optim import ZeroRedundancyOptimizer

    from ddpdoctor.train.strategies import Strategy

# The layout is defined once, torch-free, for the CLI's pre-launch --resume check too.
_root = checkpoint_root
latest_step = latest_checkpoint_step


def _is_zero(optimizer: torch.optim.Optimizer) -> TypeGuard[ZeroRedundancyOptimizer]:
    from torch.distributed.optim import ZeroRedundancyOptimizer

    return isinstance(optimizer, ZeroRedundancyOptimizer)


def _optim_key(strategy: Strategy) -> str:
    # DCP keeps one copy of non-tensor values (rank 0's); pipeline stages have different
    # param_groups, so each stage's optimizer state gets its own key.
    return f"optim.stage{strategy.pp_stage}" if strategy.pp_schedule is not None else "optim"


def save(base: str, strategy: Strategy, step: int) -> str:
    path = os.path.join(_root(base, strategy.name), f"step-{step}")
    if _is_zero(strategy.optimizer):
        os.makedirs(path, exist_ok=True)
        torch.save(strategy.optimizer.optim.state_dict(),
                   os.path.join(path, f"zero1-optim-rank{dist.get_rank()}.pt"))
        state: dict[str, object] = {"model": strategy.module.state_dict()}
    else:
        msd, osd = get_state_dict(strategy.module, strategy.optimizer)
        state = {"model": msd, _optim_key(strategy): osd}
    state["step"] = torch.tensor(step)
    dcp.save(state, checkpoint_id=path)
    return path


def load(base: str, strategy: Strategy) -> int:
    """Load the newest checkpoint into ``strategy``; returns its step. Raises if none."""
    step = latest_step(base, strategy.name)
    if step is None:
        raise FileNotFoundError(f"no checkpoint for strategy {strategy.name} under "
                                f"{_root(base, strategy.name)}")
    path = os.path.join(_root(base, strategy.name), f"step-{step}")
    if _is_zero(strategy.optimizer):
        # what DCP loads into: read back by key, each entry as torch's state-dict type
        # (STATE_DICT_TYPE is dict[str, Any]) expects it
        state: dict[str, Any] = {"model": strategy.module.state_dict(),
                                 "step": torch.tensor(0)}
        dcp.load(state, checkpoint_id=path)
        strategy.module.load_state_dict(state["model"])
        strategy.optimizer.optim.load_state_dict(torch.load(
            os.path.join(path, f"zero1-optim-rank{dist.get_rank()}.pt"), weights_only=True))
    else:
        msd, osd = get_state_dict(strategy.module, strategy.optimizer)
        key = _optim_key(strategy)
        state = {"model": msd, key: osd, "step": torch.tensor(0)}
        dcp.load(state, checkpoint_id=path)
        set_state_dict(strategy.module, strategy.optimizer, model_state_dict=state["model"],
                       optim_state_dict=state[key])
    return int(state["step"])
