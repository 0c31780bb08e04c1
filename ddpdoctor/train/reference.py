"""What a data-parallel run must reproduce: one process training on the global batch.

The global batch of a step is the concatenation of every data-parallel rank's batch (the
same DistributedSampler shards the trainer uses), so the per-step losses of ddp / fsdp /
zero* / tp-dp with ``dp_world`` ranks must match these within float tolerance; pp and tp
(one data shard) match ``dp_world=1``.
"""

from __future__ import annotations

import torch

from ddpdoctor.train.config import ModelConfig, RunConfig, lr_at
from ddpdoctor.train.data import SyntheticTokens, build_loader, sample_indices
from ddpdoctor.train.model import build_model, lm_loss
from ddpdoctor.train.strategies import clip_grad_norm, make_optimizer


def reference_losses(mcfg: ModelConfig, rcfg: RunConfig, dp_world: int) -> list[float]:
    model = build_model(mcfg, rcfg.seed)
    opt = make_optimizer(model.parameters(), rcfg)
    dataset = SyntheticTokens(rcfg.dataset_size, mcfg.seq, mcfg.vocab, rcfg.seed)
    loaders = [build_loader(dataset, rcfg.batch_size, r, dp_world, rcfg.seed)
               for r in range(dp_world)]
    losses = []
    for step in range(1, rcfg.steps + 1):
        idx = [i for ld in loaders for i in sample_indices(ld, step)]
        x = torch.stack([dataset[i][0] for i in idx])
        y = torch.stack([dataset[i][1] for i in idx])
        for g in opt.param_groups:
            g["lr"] = lr_at(rcfg, step)
        loss = lm_loss(model(x), y)
        losses.append(loss.item())
        loss.backward()
        clip_grad_norm(list(model.parameters()), rcfg.clip)
        opt.step()
        opt.zero_grad(set_to_none=True)
    return losses
