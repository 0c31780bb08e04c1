"""Configuration of the reference trainer: the model's shape and one run's knobs.

Plain dataclasses with no torch import, so the CLI can build and validate them cheaply.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field

# the presets for --size live with plan's model of the reference GPT, which sizes them
from ddpdoctor.plan.model import SIZES

STRATEGIES: dict[str, str] = {
    "ddp": "DistributedDataParallel: every rank holds the whole model, gradients all-reduced.",
    "fsdp": "FSDP2 fully_shard per transformer block (params, grads, optimizer state sharded).",
    "zero1": "ZeroRedundancyOptimizer + DDP: optimizer state sharded (ZeRO stage 1).",
    "zero2": "FSDP2 with reshard_after_forward=False: grads + optimizer state sharded, params "
             "kept gathered between forward and backward (ZeRO stage 2 equivalent).",
    "zero3": "FSDP2 with reshard_after_forward=True: params, grads and optimizer state sharded "
             "(ZeRO stage 3).",
    "pp": "Pipeline parallel (torch.distributed.pipelining): one stage per rank, GPipe or 1F1B, "
          "micro-batches.",
    "tp": "Tensor parallel (parallelize_module): Megatron column/row split of attention and MLP.",
    "tp-dp": "2-D device mesh: tensor parallel inside a group of --tp ranks, FSDP2 across groups.",
    "hsdp": "FSDP2 on a 2-D mesh (HYBRID_SHARD): sharded inside groups of --shard-group ranks, "
            "replicated across the groups (gradients reduce-scattered, then all-reduced).",
}

FSDP_STRATEGIES = ("fsdp", "zero2", "zero3", "hsdp", "tp-dp")
DDP_STRATEGIES = ("ddp", "zero1")
COMM_HOOKS = ("none", "fp16", "bf16", "powersgd", "topk")



@dataclass
class ModelConfig:
    layers: int = 2
    dim: int = 64
    heads: int = 4
    seq: int = 32
    vocab: int = 128
    mlp_ratio: int = 4

    @classmethod
    def preset(cls, size: str, **overrides: int | None) -> ModelConfig:
        if size not in SIZES:
            raise ValueError(f"unknown size {size!r}; choose one of {', '.join(SIZES)}")
        values = dict(SIZES[size])
        values.update({k: v for k, v in overrides.items() if v is not None})
        cfg = cls(**values)
        cfg.validate()
        return cfg

    def validate(self) -> None:
        if min(self.layers, self.dim, self.heads, self.seq, self.vocab) < 1:
            raise ValueError("layers, dim, heads, seq and vocab must be positive")
        if self.dim % self.heads:
            raise ValueError(f"dim {self.dim} is not a multiple of heads {self.heads}")


@dataclass
class RunConfig:
    strategies: list[str] = field(default_factory=lambda: ["ddp"])
    steps: int = 5
    batch_size: int = 8          # per data-parallel rank (pp, tp: per pipeline/TP group)
    lr: float = 1e-2
    warmup: int = 2              # linear LR warmup steps
    clip: float = 1.0            # grad-norm clipping; 0 turns it off
    seed: int = 0
    dataset_size: int = 512      # samples in the synthetic dataset (one epoch)
    num_workers: int = 0         # DataLoader workers
    microbatches: int = 2        # pp only
    schedule: str = "gpipe"      # pp only: gpipe | 1f1b
    tp: int = 2                  # tp-dp only: tensor-parallel group size
    find_unused: bool = False    # DDP find_unused_parameters
    precision: str = "auto"      # auto (bf16 autocast on GPU, fp32 on CPU) | fp32 | bf16 | fp16
    pg_timeout: float = 600.0    # process-group timeout in seconds
    json_log: str | None = None  # JSON lines, one per step, written by rank 0
    checkpoint_dir: str | None = None
    save_every: int = 0          # save a checkpoint every N steps (and at the end) when > 0
    resume: bool = False         # resume from checkpoint_dir
    injections: list[str] = field(default_factory=list)  # raw "NAME[@RANK][:STEP]" specs
    device: str = "auto"         # auto | cpu | cuda
    watch: bool = False          # train under ddpdoctor.watch()
    grad_accum: int = 1          # micro-batches per optimizer step (the batch is split)
    comm_hook: str = "none"      # DDP gradient compression: none | fp16 | bf16 | powersgd | topk
    topk_ratio: float = 0.01     # topk: fraction of each bucket's gradients sent
    shard_group: int = 2         # hsdp: ranks that shard one replica
    cpu_offload: bool = False    # FSDP2 CPUOffloadPolicy
    activation_checkpointing: bool = False  # recompute each block's activations in backward
    profile: int = 0             # torch.profiler trace of this many steps per rank
    profile_dir: str = "ddpdoctor-profile"
    vs_plain: bool = False       # train the plain strategy first; print memory/time against it

    def validate(self) -> None:
        for s in self.strategies:
            if s not in STRATEGIES:
                raise ValueError(f"unknown strategy {s!r}; choose from {', '.join(STRATEGIES)}")
        if self.steps < 1 or self.batch_size < 1:
            raise ValueError("--steps and --batch-size must be positive")
        if self.schedule not in ("gpipe", "1f1b"):
            raise ValueError(f"unknown pipeline schedule {self.schedule!r} (gpipe | 1f1b)")
        if self.batch_size % self.microbatches:
            raise ValueError(f"--batch-size {self.batch_size} is not a multiple of "
                             f"--microbatches {self.microbatches}")
        if self.precision not in ("auto", "fp32", "bf16", "fp16"):
            raise ValueError(f"unknown precision {self.precision!r}")
        if (self.resume or self.save_every) and not self.checkpoint_dir:
            raise ValueError("--resume and --save-every need --checkpoint-dir")
        if self.pg_timeout <= 0:
            raise ValueError("--pg-timeout must be positive")
        self._validate_features()

    def _validate_features(self) -> None:
        """The options of accumulation, compression, precision, sharding and offload."""
        if self.grad_accum < 1 or self.batch_size % self.grad_accum:
            raise ValueError(f"--batch-size {self.batch_size} is not a multiple of "
                             f"--grad-accum {self.grad_accum} (the batch is split into "
                             "micro-batches)")
        if self.grad_accum > 1 and "pp" in self.strategies:
            raise ValueError("--grad-accum: pp already splits each step into --microbatches")
        if self.comm_hook not in COMM_HOOKS:
            raise ValueError(f"unknown --comm-hook {self.comm_hook!r} ({' | '.join(COMM_HOOKS)})")
        _only(self.comm_hook != "none", "--comm-hook", DDP_STRATEGIES, self.strategies)
        _only(self.cpu_offload, "--cpu-offload", FSDP_STRATEGIES, self.strategies)
        if self.precision == "fp16" and "pp" in self.strategies:
            raise ValueError("--precision fp16 needs loss scaling, which the pipeline "
                             "schedule's own backward does not do: not with pp")
        if self.precision == "fp16" and "tp" in self.strategies:
            # torch 2.13: "_amp_foreach_non_finite_check_and_unscale_: got mixed
            # torch.Tensor and DTensor" (tp keeps embeddings and norms as plain tensors)
            raise ValueError("--precision fp16: torch's GradScaler cannot unscale tp's mix "
                             "of DTensor and plain gradients: not with tp")
        if not 0 < self.topk_ratio <= 1:
            raise ValueError("--topk-ratio must be in (0, 1]")
        if self.vs_plain and (self.injections or self.resume or self.save_every):
            # a fault or a checkpoint would land in the plain run too: two different jobs
            raise ValueError("--vs-plain trains twice: not with --inject, --resume or "
                             "--save-every")


def _only(on: bool, flag: str, allowed: tuple[str, ...], strategies: list[str]) -> None:
    bad = [s for s in strategies if s not in allowed]
    if on and bad:
        raise ValueError(f"{flag} works with {', '.join(allowed)}, not {', '.join(bad)}")


def lr_at(rcfg: RunConfig, step: int) -> float:
    """Linear warmup to ``rcfg.lr`` over ``rcfg.warmup`` steps (steps count from 1)."""
    return rcfg.lr * min(1.0, step / max(1, rcfg.warmup))


def check_world(mcfg: ModelConfig, rcfg: RunConfig, world: int) -> None:
    """Raise ValueError when ``world`` ranks cannot split this model with these strategies."""
    for s in rcfg.strategies:
        if s == "pp" and mcfg.layers < world:
            raise ValueError(f"pp puts one stage per rank: {world} ranks need at least {world} "
                             f"layers (--layers), the model has {mcfg.layers}")
        if s == "hsdp":
            _check_hsdp(rcfg.shard_group, world)
        tp = world if s == "tp" else rcfg.tp if s == "tp-dp" else 0
        if s == "tp-dp" and (tp < 2 or world % tp or world // tp < 2):
            raise ValueError(f"tp-dp needs the world size ({world}) to be a multiple of --tp "
                             f"({tp}) with at least two TP groups, e.g. 4 ranks with --tp 2")
        if tp and (mcfg.heads % tp or (mcfg.mlp_ratio * mcfg.dim) % tp):
            raise ValueError(f"{s} splits heads ({mcfg.heads}) and the MLP width "
                             f"({mcfg.mlp_ratio * mcfg.dim}) over {tp} ranks: not divisible")


def _check_hsdp(group: int, world: int) -> None:
    if group < 2 or world % group or world // group < 2:
        raise ValueError(f"hsdp needs the world size ({world}) to be a multiple of "
                         f"--shard-group ({group}) with at least two groups, e.g. 4 ranks "
                         "with --shard-group 2")


# Checkpoint layout (train/checkpoint.py writes it): DIR/<strategy>/step-<N>/.metadata.
_STEP_DIR = re.compile(r"^step-(\d+)$")


def checkpoint_root(base: str, strategy: str) -> str:
    return os.path.join(base, strategy)


def latest_checkpoint_step(base: str, strategy: str) -> int | None:
    """The newest complete checkpoint's step (DCP writes .metadata last), or None."""
    root = checkpoint_root(base, strategy)
    if not os.path.isdir(root):
        return None
    steps = [int(m.group(1)) for name in os.listdir(root) if (m := _STEP_DIR.match(name))
             and os.path.exists(os.path.join(root, name, ".metadata"))]
    return max(steps) if steps else None


def check_resume(rcfg: RunConfig) -> None:
    """Raise ValueError when --resume has nothing to resume from, before any rank starts
    (otherwise every rank fails on its own with the same FileNotFoundError)."""
    if not rcfg.resume or not rcfg.checkpoint_dir:
        return
    for s in rcfg.strategies:
        if latest_checkpoint_step(rcfg.checkpoint_dir, s) is None:
            raise ValueError(f"--resume: no complete checkpoint for {s} under "
                             f"{checkpoint_root(rcfg.checkpoint_dir, s)} (train with "
                             f"--save-every N --checkpoint-dir {rcfg.checkpoint_dir} first)")
