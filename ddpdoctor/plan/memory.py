"""Per-rank memory of one training step, by strategy: the formulas, stated once.

Model states per parameter a rank holds (bytes):

    weights  w      gradients  g      optimizer  m (fp32 master copy) + k * s (k moments)

ddp keeps all three whole; zero1 divides the optimizer part by the data-parallel degree D;
zero2 and zero3/fsdp (FSDP2 in the reference trainer) divide all three by D, zero2 then
keeps every layer's gathered weights from forward to backward and zero3 only the root's
and one block's. tp divides the block matrices by the TP degree,
pp gives each stage its own blocks. Activations follow the block of
``ddpdoctor.train.model``: 16 s*b*h elements saved per block (4 replicated, 12 split by
TP), plus the loss's fp32 logits. docs/plan.md ("How plan computes") derives each number.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

from ddpdoctor.plan.model import ModelShape


@dataclass(frozen=True)
class Precision:
    name: str
    weight: int        # bytes per stored parameter
    grad: int          # bytes per gradient element
    master: int        # fp32 master copy held by the optimizer (classic mixed precision)
    state: int         # bytes per optimizer moment element
    compute: int       # bytes per weight as the forward uses it (all-gather dtype)
    act: int           # bytes per activation element
    help: str


PRECISIONS: dict[str, Precision] = {p.name: p for p in (
    Precision("mixed", 2, 2, 4, 4, 2, 2, "bf16/fp16 weights and grads, fp32 master copy and "
              "moments in the optimizer (DeepSpeed, Megatron): 16 B/param with Adam"),
    Precision("amp", 4, 4, 0, 4, 2, 2, "torch autocast: fp32 weights, grads and moments, "
              "2-byte copies for the forward (ddpdoctor train on GPU)"),
    Precision("fp32", 4, 4, 0, 4, 4, 4, "everything fp32 (ddpdoctor train on CPU)"),
    Precision("bf16", 2, 2, 0, 2, 2, 2, "pure bf16: weights, grads and moments"),
)}

# Optimizer moments per parameter.
OPTIMIZERS: dict[str, int] = {"adamw": 2, "adam": 2, "momentum": 1, "sgd": 0}

# Strategies in the order of what they cost to run: communication volume and code change.
STRATEGY_ORDER = ("ddp", "zero1", "zero2", "zero3", "fsdp", "pp", "tp-dp", "tp")
_FSDP_FAMILY = ("zero2", "zero3", "fsdp", "tp-dp")


@dataclass(frozen=True)
class Setup:
    world: int
    precision: Precision
    optimizer: str = "adamw"
    batch_size: int = 1          # per data-parallel rank (pp, tp: per group), as train takes it
    microbatches: int = 2        # pp
    schedule: str = "gpipe"      # pp: gpipe | 1f1b
    tp: int = 2                  # tp-dp group size
    checkpointing: bool = False  # activation checkpointing of every block
    offload: bool = False        # optimizer state (FSDP family: all shards) on the host
    flash: bool = True           # SDPA flash/memory-efficient attention: no s^2 scores kept
    foreach: bool = True         # multi-tensor optimizer step (torch's default on GPU)
    margin: float = 0.10         # allocator slack, fraction of the subtotal
    reserve: int = 0             # bytes outside the allocator: CUDA context, NCCL
    # bytes inside the allocator that no tensor owns: cuBLAS workspaces (plan/workspace.py);
    # 0 on CPU
    workspace: int = 0


@dataclass
class RankMemory:
    """Bytes one rank holds at its peak (the end of backward / the optimizer step)."""

    ranks: list[int]
    weights: float = 0.0
    grads: float = 0.0
    optimizer: float = 0.0
    activations: float = 0.0
    buffers: float = 0.0
    margin: float = 0.0
    step_temp: float = 0.0       # foreach optimizer step: one fp32 temporary per parameter
    host: float = 0.0            # offloaded to CPU memory (not in total)
    params: float = 0.0          # parameters this rank holds (local shard)
    notes: list[str] = field(default_factory=list)

    @property
    def model_states(self) -> float:
        return self.weights + self.grads + self.optimizer

    @property
    def subtotal(self) -> float:
        """What the allocator hands out at the peak: compare with max_memory_allocated.

        Backward frees each block's activations as its gradients appear (grads are None
        after ``zero_grad(set_to_none=True)``), so the two never peak together: the
        peak is at the start of backward (all activations) or at the optimizer step (all
        gradients plus the step's temporaries).
        """
        return (self.weights + self.optimizer + self.buffers
                + max(self.activations, self.grads + self.step_temp))

    @property
    def total(self) -> float:
        return self.subtotal + self.margin

    def to_dict(self) -> dict[str, object]:
        return {"ranks": self.ranks, "params": self.params, "weights": self.weights,
                "grads": self.grads, "optimizer": self.optimizer,
                "activations": self.activations, "buffers": self.buffers,
                "step_temp": self.step_temp,
                "margin": self.margin, "total": self.total, "model_states": self.model_states,
                "subtotal": self.subtotal, "host": self.host, "notes": self.notes}


def degrees(strategy: str, setup: Setup) -> tuple[int, int, int]:
    """(data-parallel, tensor-parallel, pipeline) degrees as ``ddpdoctor train`` runs them."""
    n = setup.world
    if strategy == "tp":
        return 1, n, 1
    if strategy == "pp":
        return 1, 1, n
    if strategy == "tp-dp":
        return n // setup.tp, setup.tp, 1
    return n, 1, 1


def check(strategy: str, shape: ModelShape, setup: Setup) -> str:
    """Why this strategy cannot split this model on this world ('' when it can)."""
    dp, tp, pp = degrees(strategy, setup)
    if strategy == "tp-dp" and (setup.tp < 2 or setup.world % setup.tp or dp < 2):
        return f"needs a world that is a multiple of --tp {setup.tp} with >= 2 TP groups"
    if tp > 1 and (shape.heads % tp or shape.mlp_ratio * shape.dim % tp):
        return f"heads ({shape.heads}) or MLP width not divisible by TP degree {tp}"
    if pp > shape.layers:
        return f"{pp} pipeline stages need >= {pp} layers (the model has {shape.layers})"
    if strategy == "pp" and setup.batch_size % setup.microbatches:
        return f"batch {setup.batch_size} not a multiple of --microbatches {setup.microbatches}"
    return ""


def _stage_layers(shape: ModelShape, stages: int) -> list[int]:
    bounds = [round(i * shape.layers / stages) for i in range(stages + 1)]
    return [bounds[i + 1] - bounds[i] for i in range(stages)]


def _activations(shape: ModelShape, setup: Setup, layers: int, tp: int, batch: int,
                 first: bool, last: bool) -> float:
    """Bytes saved for backward (plus the loss's transient logits) for one micro-batch."""
    e, s, h = setup.precision.act, shape.seq, shape.dim
    sbh = s * batch * h
    # saved per block: x, ln1 out, ln2 in, ln2 out (whole); q, k, v, attention out,
    # fc1 out (4h), gelu out (4h) (split by TP). o's input is a view of attention's output.
    block = sbh * (4 + 12 / tp) * e
    if not setup.flash:  # math attention keeps scores and probabilities: 2 a s^2 b
        block += 2 * (shape.heads / tp) * s * s * batch * e
    if setup.checkpointing:
        # each block keeps its input; one block is recomputed at a time in backward
        body = layers * sbh * e + (block if layers else 0)
    else:
        body = layers * block
    head = 0.0
    if last:
        # ln_f in/out, then fp32 log-softmax kept for backward, its gradient and the
        # gradient of the logits alive together in backward
        head = 2 * sbh * e + 3 * s * batch * shape.vocab * 4
    return body + head


class _RankGroup(NamedTuple):
    """Ranks that hold the same: their local parameter count and what the stage holds."""

    ranks: list[int]
    local: float       # parameters this rank holds before any data-parallel sharding
    root: float        # parameters FSDP2 keeps gathered at the root (embeddings, head)
    layers: int
    first: bool        # holds the embeddings (pipeline stage 0)
    last: bool         # holds the head (the last pipeline stage)


def estimate(strategy: str, shape: ModelShape, setup: Setup) -> list[RankMemory]:
    """One RankMemory per group of ranks that hold the same (all ranks, or per pp stage)."""
    dp, tp, pp = degrees(strategy, setup)
    block_local = shape.block_tp_params / tp + (shape.block_params - shape.block_tp_params)
    out = []
    for g in _rank_groups(shape, setup, pp, block_local):
        m = RankMemory(ranks=g.ranks)
        shard_states = strategy in _FSDP_FAMILY
        _model_states(m, strategy, setup, g.local, dp)
        _strategy_buffers(m, strategy, setup, g, block_local)
        micro, inflight = setup.batch_size, 1
        if pp > 1:
            micro, inflight = _pipeline_buffers(m, shape, setup, g, pp)
        m.activations = inflight * _activations(shape, setup, g.layers, tp, micro, g.first,
                                                g.last)
        if setup.offload:
            _offload(m, shard_states)
        if setup.workspace:
            m.buffers += setup.workspace
            m.notes.append(f"cuBLAS workspaces: {setup.workspace / 2**20:.0f} MiB")
        m.margin = setup.margin * m.subtotal + setup.reserve
        out.append(m)
    return out


def _rank_groups(shape: ModelShape, setup: Setup, pp: int,
                 block_local: float) -> list[_RankGroup]:
    if pp <= 1:
        local = shape.embed_params + shape.head_params + shape.layers * block_local
        return [_RankGroup(list(range(setup.world)), local, shape.embed_params
                           + shape.head_params, shape.layers, True, True)]
    groups = []
    for stage, n in enumerate(_stage_layers(shape, pp)):
        first, last = stage == 0, stage == pp - 1
        local = (n * block_local + (shape.embed_params if first else 0)
                 + (shape.head_params if last else 0))
        groups.append(_RankGroup([stage], local, 0.0, n, first, last))
    return groups


def _model_states(m: RankMemory, strategy: str, setup: Setup, local: float, dp: int) -> None:
    """Weights, gradients, optimizer state and the optimizer step's temporaries."""
    p = setup.precision
    k = OPTIMIZERS[setup.optimizer]
    shard_states = strategy in _FSDP_FAMILY
    div_w = dp if shard_states else 1
    div_o = dp if (shard_states or strategy == "zero1") else 1
    m.params = local / div_w
    m.weights = local * p.weight / div_w
    m.grads = local * p.grad / div_w
    m.optimizer = local * (p.master + k * p.state) / div_o
    if setup.foreach and k:
        m.step_temp = local / div_o * 4


def _strategy_buffers(m: RankMemory, strategy: str, setup: Setup, g: _RankGroup,
                      block_local: float) -> None:
    """What the strategy allocates beyond the states."""
    p = setup.precision
    if strategy in ("ddp", "zero1"):
        m.buffers = g.local * p.grad
        m.notes.append("DDP gradient buckets: a second copy of the gradients")
    elif strategy == "zero2":
        m.buffers = g.local * p.compute + block_local * p.grad
        m.notes.append("every layer's weights stay gathered from forward to backward")
    elif strategy in _FSDP_FAMILY:
        # at the peak (backward begins, every activation alive) the root stays gathered
        # and the first block to run backward is gathered; later blocks and their
        # unsharded gradients come as activations go
        m.buffers = (g.root + block_local) * p.compute
        m.notes.append("gathered: embeddings/head + the block running backward")
    if p.name == "amp" and strategy != "fsdp":
        # autocast caches a 2-byte copy of each weight; backward keeps it alive
        m.buffers += g.local * 2


def _pipeline_buffers(m: RankMemory, shape: ModelShape, setup: Setup, g: _RankGroup,
                      pp: int) -> tuple[int, int]:
    """A stage's send/receive buffers; returns (micro-batch size, micro-batches in flight)."""
    micro = setup.batch_size // setup.microbatches
    inflight = (setup.microbatches if setup.schedule == "gpipe"
                else min(pp - g.ranks[0], setup.microbatches))
    # per micro-batch in flight: a non-last stage keeps its output and receives its
    # gradient, a non-first stage receives its input and sends its gradient
    ends = (0 if g.last else 2) + (0 if g.first else 2)
    m.buffers += inflight * ends * shape.seq * micro * shape.dim * setup.precision.act
    return micro, inflight


def _offload(m: RankMemory, shard_states: bool) -> None:
    moved = m.optimizer + (m.weights + m.grads if shard_states else 0.0)
    m.host = moved
    m.optimizer = 0.0
    if shard_states:
        m.weights = m.grads = 0.0
    m.notes.append("offloaded to CPU: " + ("all shards" if shard_states else "optimizer state"))
