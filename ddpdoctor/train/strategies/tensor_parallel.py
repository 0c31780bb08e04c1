"""Tensor parallel (Megatron split via parallelize_module), alone or on a 2-D mesh with FSDP2.

In each block q, k, v and fc1 are column-parallel (each rank holds heads/tp heads and
1/tp of the MLP's hidden units), o and fc2 are row-parallel (their outputs are summed
across the TP group). Embeddings, norms and the head stay replicated. All ranks of a TP
group read the same batch; tp-dp shards the data across the ``dp`` dimension.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
from torch.distributed.tensor.parallel import (
    ColwiseParallel,
    RowwiseParallel,
    parallelize_module,
)

from ddpdoctor.train.config import ModelConfig, RunConfig
from ddpdoctor.train.model import GPT, build_model
from ddpdoctor.train.strategies import Strategy, make_optimizer
from ddpdoctor.train.strategies.sharded import shard_blocks

if TYPE_CHECKING:
    from ddpdoctor.train.injector import Injector

BLOCK_PLAN = {
    "attn.q": ColwiseParallel(),
    "attn.k": ColwiseParallel(),
    "attn.v": ColwiseParallel(),
    "attn.o": RowwiseParallel(),
    "mlp.fc1": ColwiseParallel(),
    "mlp.fc2": RowwiseParallel(),
}


def _check_divisible(mcfg: ModelConfig, tp: int) -> None:
    if mcfg.heads % tp or (mcfg.mlp_ratio * mcfg.dim) % tp:
        raise ValueError(f"tensor parallel over {tp} ranks needs --heads ({mcfg.heads}) and "
                         f"the MLP width ({mcfg.mlp_ratio * mcfg.dim}) divisible by {tp}")


def apply_tp(model: GPT, tp_mesh: DeviceMesh) -> GPT:
    for block in model.blocks.values():
        parallelize_module(block, tp_mesh, BLOCK_PLAN)
    return model


def build_tp(mcfg: ModelConfig, rcfg: RunConfig, device: torch.device,
             injector: Injector) -> Strategy:
    world = dist.get_world_size()
    _check_divisible(mcfg, world)
    mesh = init_device_mesh(device.type, (world,), mesh_dim_names=("tp",))
    model = build_model(mcfg, rcfg.seed, device, rcfg.activation_checkpointing)
    injector.model_built(model)
    apply_tp(model, mesh)
    return Strategy("tp", model, model, make_optimizer(model.parameters(), rcfg),
                    loss_ranks=list(range(world)))


def build_tp_dp(mcfg: ModelConfig, rcfg: RunConfig, device: torch.device,
                injector: Injector) -> Strategy:
    world, tp = dist.get_world_size(), rcfg.tp
    if tp < 2 or world % tp or world // tp < 2:
        raise ValueError(f"tp-dp needs a world size that is a multiple of --tp {tp} with at "
                         f"least two TP groups (world {world}); run 4 ranks with --tp 2")
    _check_divisible(mcfg, tp)
    mesh = init_device_mesh(device.type, (world // tp, tp), mesh_dim_names=("dp", "tp"))
    model = build_model(mcfg, rcfg.seed, device, rcfg.activation_checkpointing)
    injector.model_built(model)
    apply_tp(model, mesh["tp"])
    shard_blocks(model, mesh["dp"], reshard=True)
    return Strategy("tp-dp", model, model, make_optimizer(model.parameters(), rcfg),
                    dp_rank=mesh["dp"].get_local_rank(), dp_world=world // tp,
                    loss_ranks=list(range(world)))
