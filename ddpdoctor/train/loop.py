"""The training loop of one strategy on this rank: set-up, steps, per-step record, summary.

Rank 0 prints one line per step and, with ``--json-log``, writes one JSON record per step
with every rank's numbers (gathered between the last forward and its backward, where
every strategy's ranks meet in the same order).
"""

from __future__ import annotations

import json
import math
import os
import resource
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol, TypedDict

import torch
import torch.distributed as dist
from torch import nn
from torch.utils.data import DataLoader

from ddpdoctor.core.contract import TRAIN_MEMORY
from ddpdoctor.train.config import ModelConfig, RunConfig, lr_at
from ddpdoctor.train.data import Batches, SyntheticTokens, build_loader, sample_indices
from ddpdoctor.train.injector import Injector
from ddpdoctor.train.profiling import StepProfiler
from ddpdoctor.train.step import StepRunner, micro_batches
from ddpdoctor.train.strategies import Strategy, build
from ddpdoctor.train.vs_plain import RunNumbers

if TYPE_CHECKING:
    from ddpdoctor.plan.measure import StepMemory

# Per-rank numbers gathered to rank 0 each step, in this order.
STATS = ("loss", "data_s", "compute_s", "rss_mb", "param_checksum", "index_sum")


class _ScalerAndMeter(TypedDict, total=False):
    loss_scale: float  # with a loss scaler
    step_skipped: bool
    comm_bytes: int  # with a comm meter
    comm_plain_bytes: int


class StepRecord(_ScalerAndMeter):
    """One step's JSON record; ``rank_<stat>``: every rank's STATS, in rank order."""

    event: str
    strategy: str
    step: int
    epoch: int
    loss: float
    lr: float
    grad_norm: float
    step_time_s: float
    tokens_per_s: float
    peak_mem_mb: float
    indices: list[int]
    rank_loss: list[float]
    rank_data_s: list[float]
    rank_compute_s: list[float]
    rank_rss_mb: list[float]
    rank_param_checksum: list[float]
    rank_index_sum: list[float]


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


def _checksum(params: list[nn.Parameter]) -> float:
    with torch.no_grad():
        return float(sum(getattr(p, "_local_tensor", p).double().sum().item() for p in params))


def _all_gather_flat(out: torch.Tensor, mine: torch.Tensor) -> None:
    # all_gather_single is the 2.13 name; older torch only has all_gather_into_tensor.
    fn = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
    fn(out, mine)


class Log:
    """Rank 0's human log lines and optional JSON lines."""

    def __init__(self, rank: int, json_path: str | None, tag: str = "") -> None:
        self.on = rank == 0
        self.json = open(json_path, "a") if (self.on and json_path) else None
        self.tag = tag  # put before every line ("(plain) " for --vs-plain's baseline run)

    def line(self, text: str) -> None:
        if self.on:
            print(self.tag + text, flush=True)

    def record(self, rec: Mapping[str, object]) -> None:
        if self.json:
            self.json.write(json.dumps(rec) + "\n")
            self.json.flush()


def _watch(strategy: Strategy, loader: DataLoader) -> object:
    import ddpdoctor

    watch = getattr(ddpdoctor, "watch", None)
    if watch is None:
        raise SystemExit("ddpdoctor.train: --watch needs ddpdoctor.watch, which this "
                         "install does not have")
    return watch(strategy.model, optimizer=strategy.optimizer, dataloader=loader)


def memory_enabled() -> bool:
    return os.environ.get(TRAIN_MEMORY, "") == "1"


class _Checkpoints(Protocol):
    """The checkpoint module (imported only when a run saves or resumes)."""

    def save(self, base: str, strategy: Strategy, step: int) -> str: ...

    def load(self, base: str, strategy: Strategy) -> int: ...


@dataclass
class Run:
    """One strategy's training on this rank: what the steps share."""

    name: str
    mcfg: ModelConfig
    rcfg: RunConfig
    device: torch.device
    injector: Injector
    log: Log
    strategy: Strategy
    batches: Batches
    runner: StepRunner
    meter: StepMemory | None = None  # DDPDOCTOR_TRAIN_MEMORY=1 or --vs-plain
    checkpoint: _Checkpoints | None = None  # when saving or resuming
    start: int = 0
    gathered: torch.Tensor = field(init=False)  # set by setup: every rank's STATS of a step
    first_loss: float = float("nan")
    last_loss: float = float("nan")
    tok_rates: list[float] = field(default_factory=list)
    step_times: list[float] = field(default_factory=list)
    skipped: int = 0

    @property
    def world(self) -> int:
        return dist.get_world_size()


def setup(name: str, mcfg: ModelConfig, rcfg: RunConfig, device: torch.device,
          injector: Injector, log: Log) -> tuple[Run, DataLoader]:
    meter = None  # DDPDOCTOR_TRAIN_MEMORY=1: what this rank holds in the last step (plan)
    if memory_enabled() or rcfg.vs_plain:
        from ddpdoctor.plan.measure import StepMemory

        meter = StepMemory(device)
    try:
        strategy = build(name, mcfg, rcfg, device, injector)
    except ValueError as e:  # a size that this strategy cannot split: say why, exit 1
        raise SystemExit(f"ddpdoctor.train: error: {name}: {e}") from None
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)  # this strategy's peak, not the last's
    dataset = SyntheticTokens(rcfg.dataset_size, mcfg.seq, mcfg.vocab, rcfg.seed)
    loader = build_loader(dataset, rcfg.batch_size, strategy.dp_rank, strategy.dp_world,
                          rcfg.seed, injector.use_sampler,
                          injector.num_workers(rcfg.num_workers))
    batches = Batches(loader, injector.call_set_epoch)
    dataset.fault = injector.dataset_fault(
        lambda step: sample_indices(loader, step, injector.call_set_epoch),
        batches.steps_per_epoch)
    run = Run(name, mcfg, rcfg, device, injector, log, strategy, batches,
              StepRunner(strategy, rcfg.precision, device), meter=meter)
    if rcfg.resume or rcfg.save_every:
        # DCP pulls in torch.distributed.tensor (~2 s of imports): only when asked
        from ddpdoctor.train import checkpoint

        run.checkpoint = checkpoint
        # RunConfig.validate refuses --resume / --save-every without --checkpoint-dir
        assert rcfg.checkpoint_dir is not None
        if rcfg.resume:
            run.start = checkpoint.load(rcfg.checkpoint_dir, strategy)
            log.line(f"[{name}] resumed from step {run.start}")
    if run.start:
        batches.skip_to(run.start)
    run.gathered = torch.zeros(run.world * len(STATS), dtype=torch.float64, device=device)
    return run, loader


def _header(run: Run) -> str:
    s, m, r = run.strategy, run.mcfg, run.rcfg
    nparams = sum(p.numel() for p in s.module.parameters())
    extras = [f"grad-accum {r.grad_accum}" if r.grad_accum > 1 else "",
              f"comm-hook {r.comm_hook}" if r.comm_hook != "none" else "",
              f"precision {r.precision}" if r.precision != "auto" else "",
              "cpu-offload" if r.cpu_offload else "",
              "activation-checkpointing" if r.activation_checkpointing else "",
              f"inject {', '.join(r.injections)}" if r.injections else ""]
    return (f"[{run.name}] world {run.world} on {run.device.type}, {m.layers} layers dim "
            f"{m.dim}, {nparams:,} params on rank 0, batch {r.batch_size} x {s.dp_world} dp, "
            f"{r.steps} steps" + "".join(f", {e}" for e in extras if e))


def one_step(run: Run, step: int) -> StepRecord:
    """Train step ``step``; returns its JSON record (every rank computes it alike)."""
    s, rcfg, device = run.strategy, run.rcfg, run.device
    t0 = time.perf_counter()
    run.injector.step_begin(step, s.params)
    x, y, idx = run.batches.next()
    x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
    t_data = time.perf_counter() - t0
    lr = lr_at(rcfg, step)
    for g in s.optimizer.param_groups:
        g["lr"] = lr
    t1 = time.perf_counter()

    def gather(local_loss: float) -> None:
        mine = torch.tensor([local_loss, t_data, time.perf_counter() - t1, _rss_mb(),
                             _checksum(s.params()), float(idx.sum())],
                            dtype=torch.float64, device=device)
        _all_gather_flat(run.gathered, mine)

    chunks = micro_batches(x, y, run.injector.micro_batches(rcfg.grad_accum))
    run.runner.forward_backward(chunks, run.injector.loss, gather)
    gnorm, skipped, scale = run.runner.update(rcfg.clip)
    if run.meter is not None and step == rcfg.steps:
        run.meter.take_states(s.module, s.optimizer, s.model)
        run.meter.stop()
    s.optimizer.zero_grad(set_to_none=True)
    run.injector.step_end(device)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    dt = time.perf_counter() - t0
    return _record(run, step, idx, lr, gnorm, dt, skipped, scale)


def _record(run: Run, step: int, idx: torch.Tensor, lr: float, gnorm: float, dt: float,
            skipped: bool, scale: float) -> StepRecord:
    s = run.strategy
    stats = run.gathered.view(run.world, len(STATS)).cpu().tolist()
    rank_losses = [row[0] for row in stats]
    step_loss = sum(rank_losses[r] for r in s.loss_ranks) / len(s.loss_ranks)
    tok_s = run.rcfg.batch_size * run.mcfg.seq * s.dp_world / dt
    col: list[list[float]] = [[row[i] for row in stats] for i in range(len(STATS))]
    rec: StepRecord = {  # the rank_ keys in STATS order
        "event": "step", "strategy": run.name, "step": step, "epoch": run.batches.epoch,
        "loss": step_loss, "lr": lr, "grad_norm": gnorm, "step_time_s": dt,
        "tokens_per_s": tok_s, "peak_mem_mb": _peak_mb(run.device),
        "indices": [int(i) for i in idx.tolist()],
        "rank_loss": col[0], "rank_data_s": col[1], "rank_compute_s": col[2],
        "rank_rss_mb": col[3], "rank_param_checksum": col[4], "rank_index_sum": col[5]}
    if run.runner.scaler is not None:
        rec.update({"loss_scale": scale, "step_skipped": skipped})
    if s.comm_meter is not None:
        rec.update({"comm_bytes": s.comm_meter.take(), "comm_plain_bytes": s.comm_plain_bytes})
    return rec


def _step_line(run: Run, rec: StepRecord) -> str:
    text = (f"[{run.name}] step {rec['step']:>4}/{run.rcfg.steps}  loss {rec['loss']:.4f}  "
            f"{rec['tokens_per_s']:>9,.0f} tok/s  {rec['step_time_s'] * 1000:7.1f} ms/step  "
            f"peak {rec['peak_mem_mb']:,.0f} MB")
    if "loss_scale" in rec:
        text += f"  scale {rec['loss_scale']:g}" + (" (skipped)" if rec["step_skipped"] else "")
    meter = run.strategy.comm_meter
    if "comm_bytes" in rec and meter is not None and meter.hooked:  # comm_bytes: a meter
        share = rec["comm_bytes"] / max(1, rec["comm_plain_bytes"])
        text += f"  sent {rec['comm_bytes']:,} B ({share:.1%} of plain)"
    return text


def train_one(name: str, mcfg: ModelConfig, rcfg: RunConfig, device: torch.device,
              injector: Injector, log: Log) -> RunNumbers:
    run, loader = setup(name, mcfg, rcfg, device, injector, log)
    # Before the first epoch's iterator exists, so a watcher sees every batch being loaded.
    handle = _watch(run.strategy, loader) if rcfg.watch else None
    log.line(_header(run))
    profiler = StepProfiler(name, rcfg, dist.get_rank(), run.start + 1)
    t_run = time.perf_counter()
    for step in range(run.start + 1, rcfg.steps + 1):
        if run.meter is not None and step == rcfg.steps:
            run.meter.step()
        profiler.begin(step)
        rec = one_step(run, step)
        profiler.end(step)
        _account(run, rec)
        log.line(_step_line(run, rec))
        log.record(rec)
        if rcfg.save_every and (step % rcfg.save_every == 0 or step == rcfg.steps):
            # setup imports it when saving; validate requires the directory then
            assert run.checkpoint is not None and rcfg.checkpoint_dir is not None
            path = run.checkpoint.save(rcfg.checkpoint_dir, run.strategy, step)
            log.line(f"[{name}] saved checkpoint {path}")
    if handle is not None and hasattr(handle, "close"):
        handle.close()
    return _summary(run, time.perf_counter() - t_run)


def _account(run: Run, rec: StepRecord) -> None:
    if not run.tok_rates:
        run.first_loss = rec["loss"]
    run.last_loss = rec["loss"]
    run.tok_rates.append(rec["tokens_per_s"])
    run.step_times.append(rec["step_time_s"])
    run.skipped += int(rec.get("step_skipped", False))


def _summary(run: Run, total: float) -> RunNumbers:
    n = len(run.tok_rates)
    mean_tok = sum(run.tok_rates) / n if n else 0.0
    # the first step pays for warm-up (allocations, lazy init): left out when there are more
    times = run.step_times[1:] or run.step_times
    step_s = sum(times) / len(times) if times else 0.0
    peak = _peak_mb(run.device)
    ok = math.isfinite(run.last_loss) and run.last_loss < run.first_loss
    skipped = f", {run.skipped} steps skipped by the loss scaler" if run.runner.scaler else ""
    run.log.line(f"[{run.name}] summary: {n} steps in {total:.2f} s, loss "
                 f"{run.first_loss:.4f} -> {run.last_loss:.4f} "
                 f"({'down' if ok else 'NOT down'}), {mean_tok:,.0f} tok/s, "
                 f"{step_s * 1000:.1f} ms/step, peak {peak:,.0f} MB, world {run.world}"
                 + skipped)
    run.log.record({"event": "summary", "strategy": run.name, "steps": n,
                    "first_loss": run.first_loss, "final_loss": run.last_loss,
                    "loss_down": ok, "time_s": total, "tokens_per_s": mean_tok,
                    "step_time_s": step_s, "peak_mem_mb": peak, "world": run.world,
                    "skipped_steps": run.skipped,
                    **_rank_memory(run.meter, run.device, run.world)})
    return RunNumbers(run.name, step_s, run.last_loss, peak,
                      dict(run.meter.values) if run.meter is not None else {})


def _rank_memory(meter: StepMemory | None, device: torch.device,
                 world: int) -> dict[str, list[dict[str, float]]]:
    """Every rank's measured bytes, gathered to rank 0 (only when the last step was measured)."""
    if meter is None:
        return {}
    from ddpdoctor.plan.measure import FIELDS

    mine = torch.tensor(meter.vector(), dtype=torch.float64, device=device)
    out = torch.zeros(world * len(FIELDS), dtype=torch.float64, device=device)
    _all_gather_flat(out, mine)
    rows = out.view(world, len(FIELDS)).cpu().tolist()
    return {"rank_memory": [dict(zip(FIELDS, row)) for row in rows]}
