"""A small GPT-style decoder: token + position embedding, pre-LN blocks, tied-free head.

Attention projections (q, k, v, o) and the MLP (fc1, fc2) are separate Linear layers so
tensor parallel can split them Megatron-style (column: q, k, v, fc1; row: o, fc2). Blocks
live in a ModuleDict keyed "0".."n-1" so a pipeline stage keeps its blocks' original names
(checkpoints of a stage then line up with the full model's).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ddpdoctor.train.config import ModelConfig


class Attention(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.head_dim = cfg.dim // cfg.heads
        self.q = nn.Linear(cfg.dim, cfg.dim)
        self.k = nn.Linear(cfg.dim, cfg.dim)
        self.v = nn.Linear(cfg.dim, cfg.dim)
        self.o = nn.Linear(cfg.dim, cfg.dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, _ = x.shape
        # -1 heads: under tensor parallel each rank holds heads/tp of them.
        q = self.q(x).view(b, t, -1, self.head_dim).transpose(1, 2)
        k = self.k(x).view(b, t, -1, self.head_dim).transpose(1, 2)
        v = self.v(x).view(b, t, -1, self.head_dim).transpose(1, 2)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.o(y.transpose(1, 2).reshape(b, t, -1))


class MLP(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.fc1 = nn.Linear(cfg.dim, cfg.mlp_ratio * cfg.dim)
        self.fc2 = nn.Linear(cfg.mlp_ratio * cfg.dim, cfg.dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(F.gelu(self.fc1(x)))


class Block(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.ln1 = nn.LayerNorm(cfg.dim)
        self.attn = Attention(cfg)
        self.ln2 = nn.LayerNorm(cfg.dim)
        self.mlp = MLP(cfg)
        # --activation-checkpointing: keep only the block's input, recompute the rest in
        # backward. Inside forward, so FSDP2's hooks (outside) have gathered the params
        # by the time the recompute runs, as with checkpoint_wrapper before fully_shard.
        self.checkpointed = False

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.checkpointed and torch.is_grad_enabled():
            from torch.utils.checkpoint import checkpoint

            return checkpoint(self._forward, x, use_reentrant=False)
        return self._forward(x)

    def _forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    """Decoder-only LM. A pipeline stage is the same class with some parts set to None."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.tok_emb: nn.Embedding | None = nn.Embedding(cfg.vocab, cfg.dim)
        self.pos_emb: nn.Embedding | None = nn.Embedding(cfg.seq, cfg.dim)
        self.blocks = nn.ModuleDict({str(i): Block(cfg) for i in range(cfg.layers)})
        self.ln_f: nn.LayerNorm | None = nn.LayerNorm(cfg.dim)
        self.head: nn.Linear | None = nn.Linear(cfg.dim, cfg.vocab)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # Stage 0 receives token ids; later pipeline stages receive hidden states.
        if self.tok_emb is not None:
            assert self.pos_emb is not None  # a stage keeps both embeddings or neither
            pos = torch.arange(x.shape[1], device=x.device)
            x = self.tok_emb(x) + self.pos_emb(pos)
        for block in self.blocks.values():
            x = block(x)
        if self.head is not None:
            assert self.ln_f is not None  # the last stage keeps both
            x = self.head(self.ln_f(x))
        return x


def build_model(cfg: ModelConfig, seed: int, device: torch.device | str = "cpu",
                checkpointed: bool = False) -> GPT:
    """The same weights on every rank: the seed alone decides them."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = GPT(cfg)
    for block in model.blocks.values():
        assert isinstance(block, Block)
        block.checkpointed = checkpointed
    return model.to(device)


def pipeline_stage(model: GPT, stage: int, num_stages: int) -> GPT:
    """Keep only this stage's part of ``model`` (in place): contiguous blocks per stage."""
    n = model.cfg.layers
    if n < num_stages:
        raise ValueError(f"pp needs at least one block per stage: {n} layers, "
                         f"{num_stages} stages (raise --layers)")
    bounds = [round(i * n / num_stages) for i in range(num_stages + 1)]
    keep = {str(i) for i in range(bounds[stage], bounds[stage + 1])}
    for name in list(model.blocks.keys()):
        if name not in keep:
            del model.blocks[name]
    if stage != 0:
        model.tok_emb = None
        model.pos_emb = None
    if stage != num_stages - 1:
        model.ln_f = None
        model.head = None
    return model


def lm_loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), targets.reshape(-1))
