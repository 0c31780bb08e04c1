"""One rank of the reference trainer: ``python -m ddpdoctor.train`` under torchrun or srun.

Reads RANK / WORLD_SIZE / LOCAL_RANK (torchrun) or SLURM_PROCID / SLURM_NTASKS /
SLURM_LOCALID (srun; MASTER_ADDR and MASTER_PORT must be set), trains each requested
strategy in turn on one process group, and logs on rank 0.
"""

from __future__ import annotations

import gc
import json
import math
import os
import resource
import sys
import time
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist
from torch.distributed.elastic.multiprocessing.errors import record

from ddpdoctor.train import injections
from ddpdoctor.train.config import ModelConfig, RunConfig, check_world, lr_at
from ddpdoctor.train.data import Batches, SyntheticTokens, build_loader, sample_indices
from ddpdoctor.train.options import configs, worker_parser
from ddpdoctor.train.strategies import Strategy, build

# Per-rank numbers gathered to rank 0 each step, in this order.
STATS = ("loss", "data_s", "compute_s", "rss_mb", "param_checksum", "index_sum")


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


def _rss_mb() -> float:
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
    except OSError:
        return float("nan")


def _peak_mb(device: torch.device) -> float:
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**20
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def _checksum(params: list[Any]) -> float:
    with torch.no_grad():
        return float(sum(getattr(p, "_local_tensor", p).double().sum().item() for p in params))


def _all_gather_flat(out: torch.Tensor, mine: torch.Tensor) -> None:
    # all_gather_single is the 2.13 name; older torch only has all_gather_into_tensor.
    fn = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
    fn(out, mine)


class Log:
    """Rank 0's human log lines and optional JSON lines."""

    def __init__(self, rank: int, json_path: str | None) -> None:
        self.on = rank == 0
        self.json = open(json_path, "a") if (self.on and json_path) else None

    def line(self, text: str) -> None:
        if self.on:
            print(text, flush=True)

    def record(self, rec: dict[str, Any]) -> None:
        if self.json:
            self.json.write(json.dumps(rec) + "\n")
            self.json.flush()


def _watch(strategy: Strategy, loader: Any) -> Any:
    import ddpdoctor

    watch = getattr(ddpdoctor, "watch", None)
    if watch is None:
        raise SystemExit("ddpdoctor.train: --watch needs ddpdoctor.watch, which this "
                         "install does not have")
    return watch(strategy.model, optimizer=strategy.optimizer, dataloader=loader)


def train_one(name: str, mcfg: ModelConfig, rcfg: RunConfig, device: torch.device,
              injector: injections.Injector, log: Log) -> None:
    world = dist.get_world_size()
    meter = None  # DDPDOCTOR_TRAIN_MEMORY=1: what this rank holds in the last step (plan)
    if memory_enabled():
        from ddpdoctor.plan.measure import StepMemory

        meter = StepMemory(device)
    try:
        strategy = build(name, mcfg, rcfg, device, injector)
    except ValueError as e:  # a size that this strategy cannot split: say why, exit 1
        raise SystemExit(f"ddpdoctor.train: error: {name}: {e}") from None
    dataset = SyntheticTokens(rcfg.dataset_size, mcfg.seq, mcfg.vocab, rcfg.seed)
    loader = build_loader(dataset, rcfg.batch_size, strategy.dp_rank, strategy.dp_world,
                          rcfg.seed, injector.use_sampler,
                          injector.num_workers(rcfg.num_workers))
    batches = Batches(loader, injector.call_set_epoch)
    dataset.fault = injector.dataset_fault(
        lambda step: sample_indices(loader, step, injector.call_set_epoch),
        batches.steps_per_epoch)
    start = 0
    if rcfg.resume or rcfg.save_every:
        # DCP pulls in torch.distributed.tensor (~2 s of imports): only when asked
        from ddpdoctor.train import checkpoint
    if rcfg.resume:
        start = checkpoint.load(rcfg.checkpoint_dir, strategy)
        log.line(f"[{name}] resumed from step {start}")
    if start:
        batches.skip_to(start)
    # Before the first epoch's iterator exists, so a watcher sees every batch being loaded.
    handle = _watch(strategy, loader) if rcfg.watch else None
    tokens_per_step = rcfg.batch_size * mcfg.seq * strategy.dp_world
    nparams = sum(p.numel() for p in strategy.module.parameters())
    log.line(f"[{name}] world {world} on {device.type}, {mcfg.layers} layers dim {mcfg.dim}, "
             f"{nparams:,} params on rank 0, batch {rcfg.batch_size} x {strategy.dp_world} "
             f"dp, {rcfg.steps} steps" + (f", inject {', '.join(rcfg.injections)}"
                                           if rcfg.injections else ""))
    gathered = torch.zeros(world * len(STATS), dtype=torch.float64, device=device)
    first_loss = last_loss = float("nan")
    t_run = time.perf_counter()
    tok_rates: list[float] = []
    for step in range(start + 1, rcfg.steps + 1):
        if meter is not None and step == rcfg.steps:
            meter.step()
        t0 = time.perf_counter()
        injector.step_begin(step, strategy.params)
        x, y, idx = batches.next()
        x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
        t_data = time.perf_counter() - t0
        lr = lr_at(rcfg, step)
        for g in strategy.optimizer.param_groups:
            g["lr"] = lr
        t1 = time.perf_counter()
        loss = strategy.loss(x, y, injector.loss)
        local_loss = float(loss.detach().float().item())
        t_compute = time.perf_counter() - t1
        # Gathered between forward and backward: every strategy reaches this point in the
        # same order, and a DDP rank that skipped parameters still meets the others here.
        mine = torch.tensor([local_loss, t_data, t_compute, _rss_mb(),
                             _checksum(strategy.params()), float(idx.sum())],
                            dtype=torch.float64, device=device)
        _all_gather_flat(gathered, mine)
        strategy.backward(loss)
        gnorm = strategy.clip(rcfg.clip)
        strategy.optimizer.step()
        if meter is not None and step == rcfg.steps:
            meter.take_states(strategy.module, strategy.optimizer, strategy.model)
            meter.stop()
        strategy.optimizer.zero_grad(set_to_none=True)
        injector.step_end(device)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        dt = time.perf_counter() - t0
        stats = gathered.view(world, len(STATS)).cpu().tolist()
        rank_losses = [row[0] for row in stats]
        step_loss = sum(rank_losses[r] for r in strategy.loss_ranks) / len(strategy.loss_ranks)
        if step == start + 1:
            first_loss = step_loss
        last_loss = step_loss
        tok_s = tokens_per_step / dt
        tok_rates.append(tok_s)
        peak = _peak_mb(device)
        log.line(f"[{name}] step {step:>4}/{rcfg.steps}  loss {step_loss:.4f}  "
                 f"{tok_s:>9,.0f} tok/s  {dt * 1000:7.1f} ms/step  peak {peak:,.0f} MB")
        log.record({
            "event": "step", "strategy": name, "step": step, "epoch": batches.epoch,
            "loss": step_loss, "lr": lr, "grad_norm": gnorm, "step_time_s": dt,
            "tokens_per_s": tok_s, "peak_mem_mb": peak,
            "indices": [int(i) for i in idx.tolist()],
            **{f"rank_{k}": [row[i] for row in stats] for i, k in enumerate(STATS)},
        })
        if rcfg.save_every and (step % rcfg.save_every == 0 or step == rcfg.steps):
            path = checkpoint.save(rcfg.checkpoint_dir, strategy, step)
            log.line(f"[{name}] saved checkpoint {path}")
    if handle is not None and hasattr(handle, "close"):
        handle.close()
    total = time.perf_counter() - t_run
    mean_tok = sum(tok_rates) / len(tok_rates) if tok_rates else 0.0
    peak = _peak_mb(device)
    ok = math.isfinite(last_loss) and last_loss < first_loss
    log.line(f"[{name}] summary: {len(tok_rates)} steps in {total:.2f} s, loss {first_loss:.4f} "
             f"-> {last_loss:.4f} ({'down' if ok else 'NOT down'}), {mean_tok:,.0f} tok/s, "
             f"peak {peak:,.0f} MB, world {world}")
    log.record({"event": "summary", "strategy": name, "steps": len(tok_rates),
                "first_loss": first_loss, "final_loss": last_loss, "loss_down": ok,
                "time_s": total, "tokens_per_s": mean_tok, "peak_mem_mb": peak,
                "world": world, **_rank_memory(meter, device, world)})


def memory_enabled() -> bool:
    return os.environ.get("DDPDOCTOR_TRAIN_MEMORY", "") == "1"


def _rank_memory(meter: Any, device: torch.device, world: int) -> dict[str, Any]:
    """Every rank's measured bytes, gathered to rank 0 (only when the last step was measured)."""
    if meter is None:
        return {}
    from ddpdoctor.plan.measure import FIELDS

    mine = torch.tensor(meter.vector(), dtype=torch.float64, device=device)
    out = torch.zeros(world * len(FIELDS), dtype=torch.float64, device=device)
    _all_gather_flat(out, mine)
    rows = out.view(world, len(FIELDS)).cpu().tolist()
    return {"rank_memory": [dict(zip(FIELDS, row)) for row in rows]}


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
            injections.check_compatible(injs, name, world)
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
    dist.init_process_group(backend, timeout=timedelta(seconds=rcfg.pg_timeout),
                            **({"device_id": device} if device.type == "cuda" else {}))
    injector = injections.Injector(injs, rank, world)
    injector.setup()
    log = Log(rank, rcfg.json_log)
    for name in rcfg.strategies:
        train_one(name, mcfg, rcfg, device, injector, log)
        dist.barrier()
    dist.destroy_process_group()
    # A gloo worker thread that drops the last reference to a Python-owned tensor during
    # interpreter shutdown aborts the process (pytorch/pytorch#190489): collect the cycles
    # that keep the groups alive now, so their threads are joined while Python still runs.
    gc.collect()
    return 0
