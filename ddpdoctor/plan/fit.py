"""Which strategies fit, cheapest first, and the command line that runs each one."""

from __future__ import annotations

from dataclasses import dataclass, field

from ddpdoctor.plan.memory import (
    PRECISIONS,
    STRATEGY_ORDER,
    RankMemory,
    Setup,
    check,
    estimate,
)
from ddpdoctor.plan.model import SIZES, ModelShape, from_params
from ddpdoctor.plan.units import fmt_bytes
from ddpdoctor.plan.workspace import DEFAULT as WORKSPACE

# What `ddpdoctor train --precision` runs for each precision of the plan.
_TRAIN_PRECISION = {"mixed": "bf16", "amp": "bf16", "bf16": "bf16", "fp32": "fp32"}


@dataclass
class StrategyPlan:
    strategy: str
    ranks: list[RankMemory] = field(default_factory=list)
    unsupported: str = ""         # why the strategy cannot split this model ('' if it can)
    fits: bool | None = None      # None: no GPU memory known
    command: str = ""

    @property
    def peak(self) -> float:
        return max((r.total for r in self.ranks), default=0.0)

    @property
    def worst(self) -> RankMemory | None:
        return max(self.ranks, key=lambda r: r.total, default=None)

    def to_dict(self) -> dict[str, object]:
        return {"strategy": self.strategy, "fits": self.fits, "unsupported": self.unsupported,
                "peak": self.peak, "command": self.command,
                "ranks": [r.to_dict() for r in self.ranks]}


def train_command(strategy: str, shape: ModelShape, setup: Setup) -> str:
    """`ddpdoctor train` with a GPT of this shape: the plan, runnable as it stands."""
    parts = ["ddpdoctor", "train", "--nproc", str(setup.world), "--strategy", strategy]
    preset: dict[str, int] = {}
    if shape.source.startswith("preset "):
        size = shape.source.split()[1]
        preset = SIZES[size]
        parts += ["--size", size]
    for flag in ("layers", "dim", "heads", "seq", "vocab"):
        value = getattr(shape, flag)
        if preset.get(flag) != value:  # the preset already says the rest
            parts += [f"--{flag}", str(value)]
    parts += ["--batch-size", str(setup.batch_size),
              "--precision", _TRAIN_PRECISION[setup.precision.name]]
    if strategy == "tp-dp":
        parts += ["--tp", str(setup.tp)]
    if strategy == "pp":
        parts += ["--microbatches", str(setup.microbatches), "--schedule", setup.schedule]
    return " ".join(parts)


def plan(shape: ModelShape, setup: Setup, strategies: list[str] | None = None,
         gpu_mem: int | None = None) -> list[StrategyPlan]:
    """Every strategy's per-rank memory; those that fit first, in STRATEGY_ORDER."""
    out = []
    for name in strategies or list(STRATEGY_ORDER):
        sp = StrategyPlan(name, unsupported=check(name, shape, setup))
        if not sp.unsupported:
            sp.ranks = estimate(name, shape, setup)
            sp.fits = None if gpu_mem is None else sp.peak <= gpu_mem
            sp.command = train_command(name, shape, setup)
        out.append(sp)

    def key(sp: StrategyPlan) -> tuple[int, float, int]:
        group = 0 if sp.fits else 1 if sp.fits is None else 2 if not sp.unsupported else 3
        return (group, 0.0 if sp.fits else sp.peak, STRATEGY_ORDER.index(sp.strategy))

    return sorted(out, key=key)


def best(plans: list[StrategyPlan]) -> StrategyPlan | None:
    """The cheapest strategy that fits, or None."""
    return next((sp for sp in plans if sp.fits), None)


def advice_for_oom(params: int, world_size: int, strategy: str, gpu_mem: int,
                   precision: str = "mixed", batch_size: int = 1, seq: int = 2048) -> dict:
    """For an OOM finding: what ``strategy`` needs per rank and the cheapest that fits.

    Pure (no torch, no I/O). ``evidence`` is JSON-ready; ``command`` is the `ddpdoctor
    plan` line that shows the whole table, ``fix`` the trainer line of the first strategy
    that fits ('' when none does).
    """
    shape = from_params(params, seq=seq)
    setup = Setup(world=world_size, precision=PRECISIONS[precision], batch_size=batch_size,
                  # as `ddpdoctor plan`'s default --reserve and --workspace
                  reserve=2**30, workspace=WORKSPACE)
    plans = plan(shape, setup, gpu_mem=gpu_mem)
    current = next((sp for sp in plans if sp.strategy == strategy), None)
    good = best(plans)
    evidence: dict[str, object] = {
        "params": params, "world_size": world_size, "gpu_mem": fmt_bytes(gpu_mem),
        "precision": precision,
    }
    w = current.worst if current is not None else None  # None: no rank
    if current is not None and w is not None:
        evidence[f"predicted_{strategy}_per_rank"] = fmt_bytes(current.peak)
        evidence["model_states_per_rank"] = fmt_bytes(w.model_states)
        evidence["activations_per_rank"] = fmt_bytes(w.activations)
    evidence["fits"] = good.strategy if good else None
    return {
        "evidence": evidence,
        "strategy": good.strategy if good else None,
        "command": (f"ddpdoctor plan --params {params:g} --nproc {world_size} "
                    f"--gpu-mem {gpu_mem / 2**30:g}G --precision {precision} "
                    f"--batch-size {batch_size} --seq {seq}"),
        "fix": good.command if good else "",
    }
