"""FSDP2 (``fully_shard``) per transformer block: fsdp, zero2 and zero3.

ZeRO mapping: zero3 = ``reshard_after_forward=True`` (parameters sharded outside their
block's forward/backward); zero2 = ``reshard_after_forward=False`` (parameters stay
gathered from forward to backward; gradients and optimizer state sharded). ``fsdp`` is
zero3 with a bf16 mixed-precision policy on GPU.
"""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING, TypedDict

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
from torch.distributed.fsdp import (
    CPUOffloadPolicy,
    MixedPrecisionPolicy,
    OffloadPolicy,
    fully_shard,
)

from ddpdoctor.train.config import ModelConfig, RunConfig
from ddpdoctor.train.model import GPT, build_model
from ddpdoctor.train.strategies import Strategy, make_optimizer

if TYPE_CHECKING:
    from ddpdoctor.train.injector import Injector

# The root returns the head's output, a view; the loop never edits it in place.
warnings.filterwarnings("ignore", message="FSDP2-wrapped module .* returned a view tensor")


class _ShardOptions(TypedDict, total=False):
    """fully_shard's keywords; unset ones keep its defaults."""

    mesh: DeviceMesh
    reshard_after_forward: bool
    mp_policy: MixedPrecisionPolicy
    offload_policy: OffloadPolicy


def shard_blocks(model: GPT, mesh: DeviceMesh, reshard: bool,
                 mp: MixedPrecisionPolicy | None = None, offload: bool = False) -> GPT:
    kw: _ShardOptions = {"mesh": mesh, "reshard_after_forward": reshard}
    if mp is not None:
        kw["mp_policy"] = mp
    if offload:
        # pinned host memory only where there is a GPU to copy to
        kw["offload_policy"] = CPUOffloadPolicy(pin_memory=mesh.device_type == "cuda")
    for block in model.blocks.values():
        fully_shard(block, **kw)
    fully_shard(model, **kw)
    return model


def _build(mcfg: ModelConfig, rcfg: RunConfig, device: torch.device, injector: Injector,
           reshard: bool, mixed: bool, mesh: DeviceMesh | None = None) -> Strategy:
    world = dist.get_world_size()
    if mesh is None:
        mesh = init_device_mesh(device.type, (world,), mesh_dim_names=("dp",))
    model = build_model(mcfg, rcfg.seed, device, rcfg.activation_checkpointing)
    injector.model_built(model)
    mp = None
    if mixed and device.type == "cuda" and rcfg.precision in ("auto", "bf16"):
        mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    shard_blocks(model, mesh, reshard, mp, rcfg.cpu_offload)
    # every rank reads its own data shard: HSDP's replicas and shards alike
    s = Strategy("fsdp", model, model, make_optimizer(model.parameters(), rcfg),
                 dp_rank=dist.get_rank(), dp_world=world, loss_ranks=list(range(world)))
    s.precision_by_policy = mp is not None
    return s


def build_fsdp(mcfg: ModelConfig, rcfg: RunConfig, device: torch.device,
               injector: Injector) -> Strategy:
    return _build(mcfg, rcfg, device, injector, reshard=True, mixed=True)


def build_zero2(mcfg: ModelConfig, rcfg: RunConfig, device: torch.device,
                injector: Injector) -> Strategy:
    return _build(mcfg, rcfg, device, injector, reshard=False, mixed=False)


def build_zero3(mcfg: ModelConfig, rcfg: RunConfig, device: torch.device,
                injector: Injector) -> Strategy:
    return _build(mcfg, rcfg, device, injector, reshard=True, mixed=False)


def build_hsdp(mcfg: ModelConfig, rcfg: RunConfig, device: torch.device,
               injector: Injector) -> Strategy:
    """HYBRID_SHARD: a 2-D mesh (replicate, shard); fully_shard on it shards parameters
    within a group of --shard-group ranks and all-reduces gradients across the groups."""
    world, group = dist.get_world_size(), rcfg.shard_group
    if group < 2 or world % group or world // group < 2:
        raise ValueError(f"hsdp needs a world size that is a multiple of --shard-group "
                         f"{group} with at least two groups (world {world})")
    mesh = init_device_mesh(device.type, (world // group, group),
                            mesh_dim_names=("replicate", "shard"))
    return _build(mcfg, rcfg, device, injector, reshard=True, mixed=True, mesh=mesh)
