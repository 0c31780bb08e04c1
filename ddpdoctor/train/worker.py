"""One rank of the reference trainer: ``python -m ddpdoctor.train`` under torchrun or srun.

Reads RANK / WORLD_SIZE / LOCAL_RANK (torchrun) or SLURM_PROCID / SLURM_NTASKS /
SLURM_LOCALID (srun; MASTER_ADDR and MASTER_PORT must be set), trains each requested
strategy in turn on one process group, and logs on rank 0.
"""

from __future__ import annotations

import gc
import os
import sys
from datetime import timedelta

import torch
import torch.distributed as dist
from torch.distributed.elastic.multiprocessing.errors import record

from ddpdoctor.train import injections, vs_plain
from ddpdoctor.train.config import check_world
from ddpdoctor.train.injector import Injector
from ddpdoctor.train.loop import Log, train_one
from ddpdoctor.train.options import configs, worker_parser


def _env_rank() -> tuple[int, int, int]:
    env = os.environ
    if "RANK" not in env and "SLURM_PROCID" in env:
        env["RANK"] = env["SLURM_PROCID"]
        env["WORLD_SIZE"] = env.get("SLURM_NTASKS", "1")
        env["LOCAL_RANK"] = env.get("SLURM_LOCALID", "0")
    if "RANK" not in env:
        raise SystemExit("ddpdoctor.train: RANK/WORLD_SIZE not set; launch with torchrun "
                         "(or `ddpdoctor train`), or srun with MASTER_ADDR/MASTER_PORT set")
    return int(env["RANK"]), int(env["WORLD_SIZE"]), int(env.get("LOCAL_RANK", "0"))


def _device(choice: str, local_rank: int) -> torch.device:
    if choice == "cuda" or (choice == "auto" and torch.cuda.is_available()):
        torch.cuda.set_device(local_rank)
        return torch.device("cuda", local_rank)
    return torch.device("cpu")


@record
def main(argv: list[str] | None = None) -> int:
    args = worker_parser().parse_args(argv)
    try:
        mcfg, rcfg = configs(vars(args))
        injs = injections.parse_all(rcfg.injections)
    except ValueError as e:
        print(f"ddpdoctor.train: error: {e}", file=sys.stderr)
        return 2
    rank, world, local_rank = _env_rank()
    try:
        check_world(mcfg, rcfg, world)
        for name in rcfg.strategies:
            injections.check_compatible(injs, name, world,
                                        injections.options_on(rcfg.precision))
    except ValueError as e:
        if rank == 0:
            print(f"ddpdoctor.train: error: {e}", file=sys.stderr)
        return 2
    device = _device(rcfg.device, local_rank)
    try:
        injections.check_host(injs, rank, device.type)  # this rank's own machine
    except ValueError as e:
        print(f"ddpdoctor.train: error: rank {rank}: {e}", file=sys.stderr)
        return 2
    backend = "nccl" if device.type == "cuda" else "gloo"
    if device.type == "cuda":
        dist.init_process_group(backend, timeout=timedelta(seconds=rcfg.pg_timeout),
                                device_id=device)
    else:
        dist.init_process_group(backend, timeout=timedelta(seconds=rcfg.pg_timeout))
    injector = Injector(injs, rank, world)
    injector.setup()
    log = Log(rank, rcfg.json_log)
    for name in rcfg.strategies:
        plain = vs_plain.plain_of(name, rcfg) if rcfg.vs_plain else None
        if rcfg.vs_plain and plain is None:
            log.line(f"[{name}] --vs-plain: nothing to compare (no option that changes "
                     "memory or time is on)")
        before = None
        if plain is not None:
            # its lines tagged, its records kept out of --json-log (one run per strategy
            # there); the comparison record says what the baseline measured
            before = train_one(plain[0], mcfg, plain[1], device, injector,
                               Log(rank, None, tag="(plain) "))
            dist.barrier()
        numbers = train_one(name, mcfg, rcfg, device, injector, log)
        if before is not None and plain is not None:  # before is the plain run's
            line, record = vs_plain.comparison(vs_plain.options_text(name, rcfg, plain[1]),
                                               numbers, before)
            log.line(line)
            log.record(record)
        dist.barrier()
    dist.destroy_process_group()
    # A gloo worker thread that drops the last reference to a Python-owned tensor during
    # interpreter shutdown aborts the process (pytorch/pytorch#190489): collect the cycles
    # that keep the groups alive now, so their threads are joined while Python still runs.
    gc.collect()
    return 0
