"""DDP and ZeRO-1 (ZeroRedundancyOptimizer over DDP): the whole model on every rank."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

from ddpdoctor.train.comm_hooks import CommMeter, plain_payload, register
from ddpdoctor.train.config import ModelConfig, RunConfig
from ddpdoctor.train.model import build_model
from ddpdoctor.train.strategies import Strategy, make_optimizer

if TYPE_CHECKING:
    from ddpdoctor.train.injector import Injector


def _ddp(mcfg: ModelConfig, rcfg: RunConfig, device: torch.device, injector: Injector) -> DDP:
    model = build_model(mcfg, rcfg.seed, device, rcfg.activation_checkpointing)
    injector.model_built(model)
    ids = [device.index] if device.type == "cuda" else None
    return DDP(model, device_ids=ids, find_unused_parameters=rcfg.find_unused)


def _compress(s: Strategy, ddp: DDP, rcfg: RunConfig, injector: Injector) -> Strategy:
    """Register this rank's gradient compression hook on ``ddp`` (``s.model``) and meter
    what it sends."""
    s.comm_plain_bytes = plain_payload(s.model.parameters())
    s.comm_meter = CommMeter(s.comm_plain_bytes)
    hook = injector.comm_hook(rcfg.comm_hook)
    register(ddp, hook, rcfg.topk_ratio, s.comm_meter)
    return s


def build_ddp(mcfg: ModelConfig, rcfg: RunConfig, device: torch.device,
              injector: Injector) -> Strategy:
    model = _ddp(mcfg, rcfg, device, injector)
    world = dist.get_world_size()
    return _compress(Strategy("ddp", model, model.module,
                              make_optimizer(model.parameters(), rcfg), dp_rank=dist.get_rank(),
                              dp_world=world, loss_ranks=list(range(world))), model, rcfg,
                     injector)


def build_zero1(mcfg: ModelConfig, rcfg: RunConfig, device: torch.device,
                injector: Injector) -> Strategy:
    from torch.distributed.optim import ZeroRedundancyOptimizer

    model = _ddp(mcfg, rcfg, device, injector)
    opt = ZeroRedundancyOptimizer(model.parameters(), optimizer_class=torch.optim.AdamW,
                                  lr=rcfg.lr, weight_decay=0.01)
    world = dist.get_world_size()
    return _compress(Strategy("zero1", model, model.module, opt, dp_rank=dist.get_rank(),
                              dp_world=world, loss_ranks=list(range(world))), model, rcfg,
                     injector)
