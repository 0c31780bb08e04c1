"""Pipeline parallel with torch.distributed.pipelining: one stage per rank.

Every rank builds the full model from the same seed and keeps only its contiguous blocks
(stage 0 also the embeddings, the last stage also the final norm and head), so a stage's
parameter names are the full model's. Each step splits the batch into ``--microbatches``
and runs GPipe or 1F1B. Every rank reads the same batch (stage 0 uses the tokens, the
last stage the targets); there is no data parallelism.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
import torch.distributed as dist
from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe

from ddpdoctor.train.config import ModelConfig, RunConfig
from ddpdoctor.train.model import build_model, lm_loss, pipeline_stage
from ddpdoctor.train.strategies import LossHook, Strategy, make_optimizer

if TYPE_CHECKING:
    from ddpdoctor.train.injector import Injector


def build_pp(mcfg: ModelConfig, rcfg: RunConfig, device: torch.device,
             injector: Injector) -> Strategy:
    rank, world = dist.get_rank(), dist.get_world_size()
    model = pipeline_stage(build_model(mcfg, rcfg.seed, device,
                                       rcfg.activation_checkpointing), rank, world)
    injector.model_built(model)
    stage = PipelineStage(model, rank, world, device)
    strategy = Strategy("pp", model, model, make_optimizer(model.parameters(), rcfg),
                        loss_ranks=[world - 1], pp_stage=rank, pp_stages=world,
                        norm_group=dist.group.WORLD)
    hook: dict[str, LossHook] = {"fn": lambda loss: loss}

    def loss_fn(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return hook["fn"](lm_loss(logits, targets))

    cls = ScheduleGPipe if rcfg.schedule == "gpipe" else Schedule1F1B
    strategy.pp_schedule = cls(stage, n_microbatches=rcfg.microbatches, loss_fn=loss_fn)
    strategy.pp_loss_hook = hook
    return strategy
