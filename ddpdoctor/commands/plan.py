"""`ddpdoctor plan`: per-strategy, per-rank memory of a training step, and what fits.

Torch-free unless ``--model`` asks to build the user's module (on the meta device).
"""

from __future__ import annotations

import re

import click

from ddpdoctor.commands.common import (
    DoctorCommand,
    FiniteFloat,
    finish,
    html_option,
    json_option,
)
from ddpdoctor.core.errors import DoctorError
from ddpdoctor.core.report import EXIT_USAGE, Check, Report
from ddpdoctor.plan.fit import best, plan
from ddpdoctor.plan.memory import OPTIMIZERS, PRECISIONS, STRATEGY_ORDER, Setup
from ddpdoctor.plan.model import SIZES, ModelShape, from_module, from_params, from_preset
from ddpdoctor.plan.units import fmt_bytes, fmt_count, parse_count, parse_size
from ddpdoctor.plan.workspace import DEFAULT as WORKSPACE

_HELP = """Will it fit, and with which strategy? Predicts, per strategy and per rank, the
weights, gradients, optimizer state, activations, communication buffers and an allocator
margin of one training step, and whether that fits the GPU (NVML, or --gpu-mem). The
cheapest strategy that fits comes first, with the `ddpdoctor train` line that runs it.

\b
The model: --size PRESET (the trainer's), --params N (e.g. 7e9, 7B; shape from --layers
--dim, or GPT-like defaults), or --model module:factory (built on the meta device).

\b
Examples:
  ddpdoctor plan --params 7e9 --nproc 8 --gpu-mem 80G
  ddpdoctor plan --params 70B --nproc 64 --gpu-mem 80G --checkpointing
  ddpdoctor plan --size small --nproc 2 --strategy ddp,zero3 --precision fp32
"""


class SizeType(click.ParamType):
    """Bytes: 80G = 80GiB = 80 * 2**30, 80GB = 80 * 10**9. Refuses anything else (exit 2)."""

    name = "size"

    def __init__(self, zero: bool = False) -> None:
        self.zero = zero   # '0' means none (--reserve, --workspace on CPU), not a typo

    def convert(self, value: str | int, param: click.Parameter | None,
                ctx: click.Context | None) -> int:
        if self.zero and str(value).strip() == "0":
            return 0
        try:
            return value if isinstance(value, int) else parse_size(value)
        except ValueError as e:
            self.fail(str(e), param, ctx)


class CountType(click.ParamType):
    name = "count"

    def convert(self, value: str | int, param: click.Parameter | None,
                ctx: click.Context | None) -> int:
        try:
            return value if isinstance(value, int) else parse_count(value)
        except ValueError as e:
            self.fail(str(e), param, ctx)


def _strategies(text: str) -> list[str]:
    if text == "all":
        return list(STRATEGY_ORDER)
    names = [s.strip() for s in text.split(",") if s.strip()]
    bad = [s for s in names if s not in STRATEGY_ORDER]
    if bad or not names:
        raise ValueError(f"unknown strategy {', '.join(bad) or text!r}; choose from "
                         f"{', '.join(STRATEGY_ORDER)} or all")
    return names


def _shape(size: str | None, params: int | None, model: str | None,
           dims: dict[str, int | None]) -> ModelShape:
    given = [x for x in (size, params, model) if x is not None]
    if len(given) != 1:
        raise ValueError("give exactly one of --size, --params or --model")
    if size is not None:
        return from_preset(size, **dims)
    seq = dims["seq"] or 2048
    if params is not None:
        return from_params(params, layers=dims["layers"], dim=dims["dim"],
                           heads=dims["heads"], seq=seq, vocab=dims["vocab"] or 32000)
    mod_name, _, attr = model.partition(":")  # type: ignore[union-attr]
    if not (_DOTTED.fullmatch(mod_name) and _DOTTED.fullmatch(attr)):
        # importlib raises TypeError, not ImportError, for '../x' (a relative name).
        raise ValueError(f"--model {model!r}: expected module.path:factory (Python names, "
                         "as `python -m` takes them; not a file path)")
    return from_module(model, seq=seq, heads=dims["heads"])  # type: ignore[arg-type]


_DOTTED = re.compile(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*")
# The model is computed per rank group, a list of its ranks: 10 million ranks took minutes
# and 3 GB. The largest jobs run on about 100,000 GPUs.
MAX_WORLD = 1 << 17


def _gpu_memory(gpu_mem: int | None, data: dict[str, list[int]]) -> tuple[int | None, str]:
    """--gpu-mem, else the smallest GPU NVML sees, else unknown (and why)."""
    if gpu_mem is not None:
        return gpu_mem, f"{fmt_bytes(gpu_mem)} per GPU (--gpu-mem)"
    from ddpdoctor.nvml import NvmlUnavailable, read_snapshot

    try:
        snap = read_snapshot(topology=False, xids=False)
    except NvmlUnavailable as e:
        return None, f"unknown: {e}; pass --gpu-mem"
    totals = [d.memory_total for d in snap.devices if d.memory_total]
    if not totals:
        return None, "unknown: NVML sees no GPU; pass --gpu-mem"
    data["nvml_memory_total"] = totals
    return min(totals), f"{fmt_bytes(min(totals))} per GPU (NVML, smallest of {len(totals)})"


@click.command(name="plan", cls=DoctorCommand, help=_HELP,
               context_settings={"max_content_width": 100})
@click.option("--size", type=click.Choice(list(SIZES)), default=None,
              help="A `ddpdoctor train` model preset.")
@click.option("--params", type=CountType(), default=None,
              help="Parameter count (7e9, 7B, 350M): a GPT-style decoder of that size.")
@click.option("--model", "model_spec", default=None, metavar="MODULE:FACTORY",
              help="Your nn.Module: FACTORY() is called on the meta device (needs torch).")
@click.option("--layers", type=click.IntRange(min=1), default=None)
@click.option("--dim", type=click.IntRange(min=1), default=None, help="Hidden size.")
@click.option("--heads", type=click.IntRange(min=1), default=None)
@click.option("--seq", type=click.IntRange(min=1), default=None,
              help="Sequence length (default: the preset's, else 2048).")
@click.option("--vocab", type=click.IntRange(min=1), default=None)
@click.option("--nproc", type=click.IntRange(min=1, max=MAX_WORLD), default=2, show_default=True,
              help="World size: GPUs in the job.")
@click.option("--strategy", default="all", show_default=True,
              help=f"Comma list or all: {', '.join(STRATEGY_ORDER)}.")
@click.option("--precision", type=click.Choice(list(PRECISIONS)), default="mixed",
              show_default=True, help="; ".join(f"{p.name}: {p.help}"
                                                for p in PRECISIONS.values()))
@click.option("--optimizer", type=click.Choice(list(OPTIMIZERS)), default="adamw",
              show_default=True)
@click.option("--batch-size", type=click.IntRange(min=1), default=1, show_default=True,
              help="Micro-batch per data-parallel rank (pp, tp: per group), as train takes it.")
@click.option("--microbatches", type=click.IntRange(min=1), default=None,
              help="pp: micro-batches per step (default 2 when the batch is even, else 1).")
@click.option("--schedule", type=click.Choice(["gpipe", "1f1b"]), default="1f1b",
              show_default=True, help="pp schedule.")
@click.option("--tp", type=click.IntRange(min=2), default=2, show_default=True,
              help="tp-dp: tensor-parallel group size.")
@click.option("--checkpointing", is_flag=True, help="Activation checkpointing per block.")
@click.option("--offload", is_flag=True,
              help="CPU offload: optimizer state (FSDP family: every shard) on the host.")
@click.option("--no-flash", is_flag=True,
              help="Attention without SDPA flash/memory-efficient kernels (keeps s^2 scores).")
@click.option("--gpu-mem", type=SizeType(), default=None, metavar="SIZE",
              help="Memory per GPU (80G = 80GiB, 80GB = 80e9 bytes); default: NVML.")
@click.option("--margin", type=FiniteFloat(min=0, max=1), default=0.10, show_default=True,
              help="Allocator slack as a fraction of the predicted bytes.")
@click.option("--reserve", type=SizeType(zero=True), default="1G", show_default=True,
              metavar="SIZE",
              help="Per GPU, outside PyTorch's allocator: CUDA context, NCCL buffers.")
@click.option("--workspace", type=SizeType(zero=True), default=f"{WORKSPACE >> 20}M",
              show_default=True, metavar="SIZE",
              help="Per rank, inside the allocator: cuBLAS workspaces (the forward's and the "
                   "backward's thread, 32 MiB each on Hopper, 8.1 MiB before); 0 on CPU.")
@json_option
@html_option
def command(size: str | None, params: int | None, model_spec: str | None, layers: int | None,
            dim: int | None, heads: int | None, seq: int | None, vocab: int | None,
            nproc: int, strategy: str, precision: str, optimizer: str, batch_size: int,
            microbatches: int | None, schedule: str, tp: int, checkpointing: bool,
            offload: bool, no_flash: bool, gpu_mem: int | None, margin: float, reserve: int,
            workspace: int, json_path: str | None, html_path: str | None) -> int:
    try:
        names = _strategies(strategy)
        shape = _shape(size, params, model_spec, dict(layers=layers, dim=dim, heads=heads,
                                                     seq=seq, vocab=vocab))
    except ValueError as e:
        raise DoctorError(str(e), EXIT_USAGE) from None
    if microbatches is None:
        microbatches = 2 if batch_size % 2 == 0 else 1
    setup = Setup(world=nproc, precision=PRECISIONS[precision], optimizer=optimizer,
                  batch_size=batch_size, microbatches=microbatches, schedule=schedule, tp=tp,
                  checkpointing=checkpointing, offload=offload, flash=not no_flash,
                  margin=margin, reserve=reserve, workspace=workspace)
    report = Report("plan", world={"world_size": nproc})
    gpu_data: dict[str, list[int]] = {}
    limit, how = _gpu_memory(gpu_mem, gpu_data)
    report.checks.append(Check("gpu memory", how, status="ok" if limit else "skipped",
                               data={"bytes": limit, **gpu_data}))
    plans = plan(shape, setup, names, limit)
    good = best(plans)
    summary = (f"{fmt_count(shape.params)} params ({shape.layers} layers x {shape.dim}, seq "
               f"{shape.seq}, {shape.source}), {precision}, {optimizer}, batch {batch_size}: "
               + (f"{good.strategy} fits ({fmt_bytes(good.peak)} per rank)" if good else
                  "nothing fits" if limit else "fit unknown"))
    report.checks.append(Check("plan", summary, data={
        "model": {**shape.__dict__, "params": shape.params},
        "setup": {"world": nproc, "precision": precision, "optimizer": optimizer,
                  "batch_size": batch_size, "microbatches": microbatches,
                  "schedule": schedule, "tp": tp, "checkpointing": checkpointing,
                  "offload": offload, "flash": not no_flash, "margin": margin,
                  "reserve": reserve, "workspace": workspace},
        "gpu_mem": limit, "best": good.strategy if good else None,
        "strategies": [sp.to_dict() for sp in plans]}))
    if limit and good is None:
        from ddpdoctor.core.findings import Finding

        runnable = [sp for sp in plans if sp.ranks]
        low = min(runnable, key=lambda sp: sp.peak, default=None)
        report.add(Finding("OOM", f"predicted out of memory: no strategy fits {nproc} x "
                                  f"{fmt_bytes(limit)}", severity="warning", evidence={
                                      "gpu_mem": fmt_bytes(limit),
                                      "smallest": (f"{low.strategy}: {fmt_bytes(low.peak)} "
                                                   "per rank") if low else "none runs",
                                  }), check="plan")

    def after(_: Report) -> None:
        from ddpdoctor.plan.render import table

        click.echo()
        click.echo(table(plans, limit))

    return finish(report, json_path, after=after, html_path=html_path)
