"""The trainer's options, defined once: the ``ddpdoctor train`` click command shows them in
``--help`` and forwards them, the per-rank worker parses them with argparse. No torch.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import Any

from ddpdoctor.train.config import SIZES, STRATEGIES, ModelConfig, RunConfig


@dataclass(frozen=True)
class Option:
    flag: str
    type: Any            # int | float | str | bool (a flag) | list (repeatable str)
    default: Any
    help: str
    choices: tuple[str, ...] | None = None

    @property
    def dest(self) -> str:
        return self.flag.lstrip("-").replace("-", "_")


OPTIONS: list[Option] = [
    Option("--strategy", str, "ddp", "Parallelism; a comma list runs them one after another "
           f"in one launch: {', '.join(STRATEGIES)}."),
    Option("--steps", int, 5, "Optimizer steps to train."),
    Option("--size", str, "tiny", "Model preset: " + "; ".join(
        f"{k}: {v['layers']} layers, dim {v['dim']}, {v['heads']} heads, seq {v['seq']}"
        for k, v in SIZES.items()) + ".", tuple(SIZES)),
    Option("--layers", int, None, "Override the preset's number of blocks."),
    Option("--dim", int, None, "Override the preset's model width."),
    Option("--heads", int, None, "Override the preset's attention heads."),
    Option("--seq", int, None, "Override the preset's sequence length."),
    Option("--vocab", int, None, "Override the preset's vocabulary size."),
    Option("--batch-size", int, 8, "Samples per data-parallel rank per step (pp/tp: per "
           "pipeline / TP group)."),
    Option("--lr", float, 1e-2, "AdamW peak learning rate."),
    Option("--warmup", int, 2, "Linear learning-rate warmup steps."),
    Option("--clip", float, 1.0, "Gradient-norm clipping (0: off)."),
    Option("--seed", int, 0, "Seed of weights and data order (same on every rank)."),
    Option("--dataset-size", int, 512, "Samples in the synthetic dataset (one epoch)."),
    Option("--num-workers", int, 0, "DataLoader worker processes per rank."),
    Option("--microbatches", int, 2, "pp: micro-batches per step."),
    Option("--schedule", str, "gpipe", "pp: pipeline schedule.", ("gpipe", "1f1b")),
    Option("--tp", int, 2, "tp-dp: tensor-parallel group size (dp = world / tp)."),
    Option("--find-unused", bool, False, "DDP find_unused_parameters=True."),
    Option("--precision", str, "auto", "auto = bf16 autocast on GPU, fp32 on CPU.",
           ("auto", "fp32", "bf16", "fp16")),
    Option("--device", str, "auto", "auto = cuda:LOCAL_RANK with nccl if a GPU is there, "
           "else cpu with gloo.", ("auto", "cpu", "cuda")),
    Option("--pg-timeout", float, 600.0, "Process-group timeout in seconds (a hang stays a "
           "hang this long before the collective times out)."),
    Option("--json-log", str, None, "Rank 0 appends one JSON line per step (per-rank losses, "
           "times, memory, parameter checksums) and a summary line to this file."),
    Option("--checkpoint-dir", str, None, "Where torch.distributed.checkpoint saves go."),
    Option("--save-every", int, 0, "Save every N steps and at the end (needs "
           "--checkpoint-dir)."),
    Option("--resume", bool, False, "Resume from the newest checkpoint in --checkpoint-dir."),
    Option("--watch", bool, False, "Train under ddpdoctor.watch(model, optimizer, loader)."),
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
        else:
            p.add_argument(o.flag, type=o.type, default=o.default, choices=o.choices,
                           help=o.help)
    return p


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
        device=values["device"], watch=bool(values.get("watch")))
    rcfg.validate()
    return mcfg, rcfg
