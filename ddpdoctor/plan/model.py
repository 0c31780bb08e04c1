"""What `plan` knows about a model: its shape and where its parameters live.

Three sources, none of which allocates the model: a trainer preset (``--size``), a bare
parameter count (``--params 7e9``, the shape filled in GPT-style), or the user's own
``nn.Module`` built on the meta device (``--model module:factory``, the one path that
imports torch). Parameter counts follow ``ddpdoctor.train.model.GPT`` exactly, so the
prediction can be checked against the reference trainer tensor by tensor.
"""

from __future__ import annotations

import importlib
import math
import os
import sys
from dataclasses import dataclass

# The reference trainer's presets for --size (train/config.py reads them from here: plan
# sizes the trainer's models without importing the trainer). "tiny" trains in seconds on
# 2 CPU ranks.
SIZES: dict[str, dict[str, int]] = {
    "tiny": dict(layers=2, dim=64, heads=4, seq=32, vocab=128),
    "small": dict(layers=4, dim=256, heads=8, seq=128, vocab=1024),
    "medium": dict(layers=12, dim=768, heads=12, seq=512, vocab=8192),
}


@dataclass(frozen=True)
class ModelShape:
    """Parameter counts by part, plus the dimensions the activation model needs."""

    layers: int
    dim: int
    heads: int
    seq: int
    vocab: int
    mlp_ratio: int
    embed_params: int      # token + position embeddings (pipeline stage 0)
    block_params: int      # one transformer block
    block_tp_params: int   # the part of a block that tensor parallel splits (q,k,v,o,fc1,fc2)
    head_params: int       # final norm + LM head (last pipeline stage)
    source: str = ""       # how the shape was obtained, for the report

    @property
    def params(self) -> int:
        return self.embed_params + self.layers * self.block_params + self.head_params

    def validate(self) -> None:
        if min(self.layers, self.dim, self.heads, self.seq, self.vocab, self.mlp_ratio) < 1:
            raise ValueError("layers, dim, heads, seq, vocab and mlp ratio must be positive")
        if self.block_params < 1 or self.block_tp_params > self.block_params:
            raise ValueError("the parameter count is too small for this many layers of "
                             "this width; give --layers/--dim that fit --params")


def gpt_shape(layers: int, dim: int, heads: int, seq: int, vocab: int, mlp_ratio: int = 4,
              source: str = "") -> ModelShape:
    """The exact parameter counts of ``ddpdoctor.train.model.GPT`` (Linear layers with bias)."""
    hidden = mlp_ratio * dim
    tp_split = (3 * (dim * dim + dim) + dim * dim        # q, k, v (w + b), o (w)
                + dim * hidden + hidden + hidden * dim)  # fc1 (w + b), fc2 (w)
    replicated = dim + dim + 4 * dim                     # o bias, fc2 bias, two LayerNorms
    shape = ModelShape(layers=layers, dim=dim, heads=heads, seq=seq, vocab=vocab,
                       mlp_ratio=mlp_ratio, embed_params=vocab * dim + seq * dim,
                       block_params=tp_split + replicated, block_tp_params=tp_split,
                       head_params=2 * dim + dim * vocab + vocab, source=source)
    shape.validate()
    return shape


def from_preset(size: str, layers: int | None = None, dim: int | None = None,
                heads: int | None = None, seq: int | None = None,
                vocab: int | None = None) -> ModelShape:
    """A ``ddpdoctor train --size`` preset with the same overrides the trainer takes."""
    if size not in SIZES:
        raise ValueError(f"unknown size {size!r}; choose one of {', '.join(SIZES)}")
    v = dict(SIZES[size])
    for k, val in (("layers", layers), ("dim", dim), ("heads", heads), ("seq", seq),
                   ("vocab", vocab)):
        if val is not None:
            v[k] = val
    if v["dim"] % v["heads"]:
        raise ValueError(f"dim {v['dim']} is not a multiple of heads {v['heads']}")
    return gpt_shape(v["layers"], v["dim"], v["heads"], v["seq"], v["vocab"],
                     source=f"preset {size}")


def from_params(params: int, layers: int | None = None, dim: int | None = None,
                heads: int | None = None, seq: int = 2048, vocab: int = 32000) -> ModelShape:
    """A decoder of ``params`` parameters. Missing width/depth follow the common ratio of
    7B-70B models (layers = dim / 128, head size 128): 7e9 -> 32 layers of 4096. The
    blocks absorb whatever the embeddings and head do not hold, so the total is exact."""
    if dim is None:
        body = float(params)
        for _ in range(2):  # the second pass takes the embeddings and head off the body
            # 12 d^2 per block; with layers = d/128 the body is 12 d^3 / 128
            d = (body * 128 / 12) ** (1 / 3) if layers is None else math.sqrt(body / layers / 12)
            dim = max(128, int(round(d / 128)) * 128)
            body = max(float(params) - 2 * vocab * dim - seq * dim, params / 2)
    assert dim is not None  # the loop above ran
    if layers is None:
        layers = max(1, int(round(dim / 128)))
    if heads is None:
        heads = max(1, dim // 128) if dim % 128 == 0 else 1
    if dim % heads:
        raise ValueError(f"dim {dim} is not a multiple of heads {heads}")
    base = gpt_shape(layers, dim, heads, seq, vocab, source=f"--params {params:g}")
    rest = params - base.embed_params - base.head_params
    if rest < layers:
        raise ValueError(f"--params {params:g} is smaller than the embeddings and head of "
                         f"a {dim}-wide model with vocab {vocab} alone; give a smaller "
                         f"--dim or --vocab")
    block = rest // layers
    tp_frac = base.block_tp_params / base.block_params
    shape = ModelShape(layers=layers, dim=dim, heads=heads, seq=seq, vocab=vocab,
                       mlp_ratio=4, embed_params=base.embed_params + (rest - block * layers),
                       block_params=block, block_tp_params=int(block * tp_frac),
                       head_params=base.head_params, source=base.source)
    shape.validate()
    return shape


def from_module(spec: str, seq: int = 2048, heads: int | None = None) -> ModelShape:
    """Build ``module:factory()`` on the meta device (no memory) and count its parameters.

    The repeated blocks are the largest ``ModuleList``/``ModuleDict`` of same-typed
    children; everything else counts as embeddings (pipeline stage 0). The width is the
    most common ``in_features`` of the Linear layers; tensor parallel is assumed to split
    the Linear weights inside the blocks.
    """
    from torch import nn

    model = _build_on_meta(spec)
    total = sum(p.numel() for p in model.parameters())
    blocks = _repeated_blocks(model)
    widths: dict[int, int] = {}
    for m in model.modules():
        if isinstance(m, nn.Linear):
            widths[m.in_features] = widths.get(m.in_features, 0) + 1
    if not blocks or not widths:
        raise ValueError(f"--model {spec!r}: found no repeated blocks of Linear layers; "
                         "use --params with --layers/--dim instead")
    dim = max(widths, key=lambda w: widths[w])
    block = sum(p.numel() for p in blocks[0].parameters())
    tp_part = sum(m.weight.numel() for m in blocks[0].modules() if isinstance(m, nn.Linear))
    vocab = max((m.num_embeddings for m in model.modules() if isinstance(m, nn.Embedding)),
                default=1)
    heads = heads or (dim // 128 if dim % 128 == 0 else 1)
    shape = ModelShape(layers=len(blocks), dim=dim, heads=heads, seq=seq, vocab=vocab,
                       mlp_ratio=4, embed_params=total - block * len(blocks), block_params=block,
                       block_tp_params=tp_part, head_params=0, source=f"--model {spec}")
    shape.validate()
    return shape


def _build_on_meta(spec: str):  # -> nn.Module (torch is imported only here)
    """``module:factory()`` built under ``torch.device("meta")``; a usage error otherwise."""
    import torch
    from torch import nn

    mod_name, _, attr = spec.partition(":")
    if not mod_name or not attr:
        raise ValueError(f"--model {spec!r}: expected module.path:factory")
    if "" not in sys.path and os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())  # like `python -m`: the user's package from here
    try:
        factory = getattr(importlib.import_module(mod_name), attr)
    except (ImportError, AttributeError) as e:
        raise ValueError(f"--model {spec!r}: {e}") from None
    try:
        with torch.device("meta"):
            model = factory()
    except Exception as e:  # the user's code: any failure is a usage error
        raise ValueError(f"--model {spec!r}: {attr}() raised {type(e).__name__}: {e}") from None
    if not isinstance(model, nn.Module):
        raise ValueError(f"--model {spec!r} returned {type(model).__name__}, not an nn.Module")
    return model


def _repeated_blocks(model) -> list:
    """The children of the largest ``ModuleList``/``ModuleDict`` whose children share a type."""
    from torch import nn

    blocks: list[nn.Module] = []
    for m in model.modules():
        if isinstance(m, (nn.ModuleList, nn.ModuleDict)):
            kids = list(m.children())
            if len(kids) > len(blocks) and len({type(k) for k in kids}) == 1:
                blocks = kids
    return blocks
