"""The trainer's options, defined once: the ``ddpdoctor train`` click command shows them in
``--help`` and forwards them, the per-rank worker parses them with argparse. No torch.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ddpdoctor.train.config import SIZES, STRATEGIES, ModelConfig, RunConfig
from ddpdoctor.train.host_checks import check_checkpoint_dir


@dataclass(frozen=True)
class Option:
    flag: str
    type: Any            # int | float | str | bool (a flag) | list (repeatable str)
    default: object
    help: str
    choices: tuple[str, ...] | None = None
    # Bounds of a number (inclusive; ``min_open``: min itself refused). Every number has
    # them: NaN, inf or a negative count would otherwise reach the ranks.
    min: float | None = None
    max: float | None = None
    min_open: bool = False

    @property
    def dest(self) -> str:
        return self.flag.lstrip("-").replace("-", "_")

    def check_number(self, text: str) -> int | float:
        """``text`` as this option's number; ValueError with a one-line reason."""
        try:
            value = self.type(text)
        except (TypeError, ValueError):
            kind = "an integer" if self.type is int else "a number"
            raise ValueError(f"{text!r} is not {kind}") from None
        if not math.isfinite(value):
            raise ValueError(f"{text!r} is not a finite number")
        low_bad = self.min is not None and (value < self.min
                                            or (self.min_open and value == self.min))
        if low_bad or (self.max is not None and value > self.max):
            raise ValueError(f"{text!r} is out of range ({self.range_text()})")
        return value

    def range_text(self) -> str:
        low = "" if self.min is None else f"{'>' if self.min_open else '>='} {self.min:g}"
        high = "" if self.max is None else f"<= {self.max:g}"
        return ", ".join(x for x in (low, high) if x)


OPTIONS: list[Option] = [
    Option("--strategy", str, "ddp", "Parallelism; a comma list runs them one after another "
           f"in one launch: {', '.join(STRATEGIES)}."),
    Option("--steps", int, 5, "Optimizer steps to train.", min=1, max=10_000_000),
    Option("--size", str, "tiny", "Model preset: " + "; ".join(
        f"{k}: {v['layers']} layers, dim {v['dim']}, {v['heads']} heads, seq {v['seq']}"
        for k, v in SIZES.items()) + ".", tuple(SIZES)),
    Option("--layers", int, None, "Override the preset's number of blocks.", min=1, max=1024),
    Option("--dim", int, None, "Override the preset's model width.", min=1, max=65536),
    Option("--heads", int, None, "Override the preset's attention heads.", min=1, max=1024),
    Option("--seq", int, None, "Override the preset's sequence length.", min=1, max=1 << 20),
    Option("--vocab", int, None, "Override the preset's vocabulary size.", min=1,
           max=1 << 24),
    Option("--batch-size", int, 8, "Samples per data-parallel rank per step (pp/tp: per "
           "pipeline / TP group).", min=1, max=1 << 20),
    Option("--lr", float, 1e-2, "AdamW peak learning rate.", min=0, max=1e3),
    Option("--warmup", int, 2, "Linear learning-rate warmup steps.", min=0, max=10_000_000),
    Option("--clip", float, 1.0, "Gradient-norm clipping (0: off).", min=0, max=1e9),
    Option("--seed", int, 0, "Seed of weights and data order (same on every rank).", min=0,
           max=2**63 - 1),
    Option("--dataset-size", int, 512, "Samples in the synthetic dataset (one epoch).",
           min=1, max=1 << 31),
    Option("--num-workers", int, 0, "DataLoader worker processes per rank.", min=0, max=256),
    Option("--microbatches", int, 2, "pp: micro-batches per step.", min=1, max=4096),
    Option("--schedule", str, "gpipe", "pp: pipeline schedule.", ("gpipe", "1f1b")),
    Option("--tp", int, 2, "tp-dp: tensor-parallel group size (dp = world / tp).", min=1,
           max=1024),
    Option("--find-unused", bool, False, "DDP find_unused_parameters=True."),
    Option("--precision", str, "auto", "auto = bf16 autocast on GPU, fp32 on CPU; fp16 = "
           "fp16 autocast with loss scaling (GradScaler; ShardedGradScaler for FSDP).",
           ("auto", "fp32", "bf16", "fp16")),
    Option("--device", str, "auto", "auto = cuda:LOCAL_RANK with nccl if a GPU is there, "
           "else cpu with gloo.", ("auto", "cpu", "cuda")),
    Option("--pg-timeout", float, 600.0, "Process-group timeout in seconds (a hang stays a "
           "hang this long before the collective times out).", min=0, max=7 * 86400,
           min_open=True),
    Option("--json-log", str, None, "Rank 0 appends one JSON line per step (per-rank losses, "
           "times, memory, parameter checksums) and a summary line to this file."),
    Option("--checkpoint-dir", str, None, "Where torch.distributed.checkpoint saves go."),
    Option("--save-every", int, 0, "Save every N steps and at the end (needs "
           "--checkpoint-dir).", min=0, max=10_000_000),
    Option("--resume", bool, False, "Resume from the newest checkpoint in --checkpoint-dir."),
    Option("--watch", bool, False, "Train under ddpdoctor.watch(model, optimizer, loader)."),
    Option("--grad-accum", int, 1, "Micro-batches per optimizer step: the batch is split, "
           "all but the last backward without gradient sync (DDP no_sync, FSDP2 "
           "set_requires_gradient_sync(False)).", min=1, max=4096),
    Option("--comm-hook", str, "none", "ddp/zero1 gradient compression: torch's fp16 / bf16 / "
           "PowerSGD hooks or top-k sparsification with error feedback.",
           ("none", "fp16", "bf16", "powersgd", "topk")),
    Option("--topk-ratio", float, 0.01, "topk: fraction of each gradient bucket sent.",
           min=0, max=1, min_open=True),
    Option("--shard-group", int, 2, "hsdp: ranks sharding one replica (on GPUs: the GPUs of "
           "a node).", min=1, max=1024),
    Option("--cpu-offload", bool, False, "FSDP2 CPUOffloadPolicy: parameters, gradients and "
           "optimizer state live on the CPU."),
    Option("--activation-checkpointing", bool, False, "Recompute each block's activations "
           "in backward instead of keeping them."),
    Option("--profile", int, 0, "Trace this many steps (from step 2 when there are more) "
           "with torch.profiler: one Chrome trace JSON per rank (Perfetto).", min=0,
           max=10_000),
    Option("--profile-dir", str, "ddpdoctor-profile", "Where --profile writes its traces."),
    Option("--vs-plain", bool, False, "Train each strategy first without --grad-accum, "
           "--comm-hook, --precision, --cpu-offload and --activation-checkpointing (hsdp: as "
           "fsdp), then as asked, and print step time, memory and loss against that plain "
           "run (the last step's memory is measured exactly)."),
    Option("--inject", list, [], "Plant a fault: NAME[@RANK|@all][:STEP] (repeatable); "
           "`--inject list` shows them."),
]


def worker_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m ddpdoctor.train",
                                description="One rank of the ddpdoctor reference trainer.")
    for o in OPTIONS:
        if o.type is bool:
            p.add_argument(o.flag, action="store_true", help=o.help)
        elif o.type is list:
            p.add_argument(o.flag, action="append", default=[], help=o.help)
        elif o.type in (int, float):
            p.add_argument(o.flag, type=_argparse_number(o), default=o.default, help=o.help)
        else:
            p.add_argument(o.flag, type=o.type, default=o.default, choices=o.choices,
                           help=o.help)
    return p


def _argparse_number(o: Option) -> Callable[[str], int | float]:
    def convert(text: str) -> int | float:
        try:
            return o.check_number(text)
        except ValueError as e:
            raise argparse.ArgumentTypeError(str(e)) from None

    convert.__name__ = o.type.__name__  # argparse names the type in its messages
    return convert


# ``values`` below: an option bag (argparse's vars(), click's keywords) whose values have
# each its option's type, which only the option's name tells.
def to_argv(values: dict[str, Any]) -> list[str]:
    """Options that differ from their defaults, as worker command-line arguments."""
    argv: list[str] = []
    for o in OPTIONS:
        v = values.get(o.dest, o.default)
        if o.type is bool:
            if v:
                argv.append(o.flag)
        elif o.type is list:
            for item in v or ():
                argv += [o.flag, str(item)]
        elif v is not None and v != o.default:
            argv += [o.flag, str(v)]
    return argv


_FEATURES = ("grad_accum", "comm_hook", "topk_ratio", "shard_group", "cpu_offload",
             "activation_checkpointing", "profile", "profile_dir", "vs_plain")


def configs(values: dict[str, Any]) -> tuple[ModelConfig, RunConfig]:
    """Build and validate both configs; ValueError with a one-line reason."""
    mcfg = ModelConfig.preset(values.get("size") or "tiny",
                              **{k: values.get(k) for k in
                                 ("layers", "dim", "heads", "seq", "vocab")})
    rcfg = RunConfig(
        strategies=[s.strip() for s in str(values.get("strategy") or "ddp").split(",")
                    if s.strip()],
        steps=values["steps"], batch_size=values["batch_size"], lr=values["lr"],
        warmup=values["warmup"], clip=values["clip"], seed=values["seed"],
        dataset_size=values["dataset_size"], num_workers=values["num_workers"],
        microbatches=values["microbatches"], schedule=values["schedule"], tp=values["tp"],
        find_unused=bool(values["find_unused"]), precision=values["precision"],
        pg_timeout=values["pg_timeout"], json_log=values["json_log"],
        checkpoint_dir=values["checkpoint_dir"], save_every=values["save_every"],
        resume=bool(values["resume"]), injections=list(values.get("inject") or []),
        device=values["device"], watch=bool(values.get("watch")),
        **{o.dest: values.get(o.dest, o.default) for o in OPTIONS if o.dest in _FEATURES})
    rcfg.validate()
    if rcfg.save_every and rcfg.checkpoint_dir:
        # before any rank starts: a directory no rank can write is one line, not a
        # PermissionError traceback from every rank at its first save
        check_checkpoint_dir(rcfg.checkpoint_dir)
    return mcfg, rcfg
