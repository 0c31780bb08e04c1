"""Step-time overhead of ``ddpdoctor.watch()`` at its default settings.

Two identical DDP models train side by side in one run, one watched and one not, step by
step interleaved (so machine noise hits both alike). Two identical models are not equally
fast, though: where their tensors landed in memory alone makes one up to ~1.5% faster for
a whole run here (measured with neither watched). So every run has two halves, and the
watch moves from one model to the other between them; the geometric mean of the halves'
ratios cancels that bias and the square root of their quotient shows how big it was.

Per half: the paired ratio (median of with/without over back-to-back step pairs), the
training thread's CPU time per step, and the check steps (1 in ``every``, which the median
drops) counted on their own: their extra time is spread over all steps.

    torchrun --nproc-per-node 2 benchmarks/bench_watch_overhead.py [--steps 800 --repeat 5]
    python benchmarks/bench_watch_overhead.py            # one process, no DDP
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import time
from dataclasses import dataclass


@dataclass
class Half:
    """One half of a run: the watch on one of the two models."""
    paired: float        # median over step pairs of with/without
    check_share: float   # the check steps' extra time / the unwatched run's time
    cpu_with_ms: float   # median training-thread CPU time per step
    cpu_without_ms: float
    med_with_ms: float
    med_without_ms: float
    checks: int


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=800, help="timed steps per model per half")
    p.add_argument("--warmup", type=int, default=300,
                   help="untimed steps per model after each attach (the watch's early "
                        "check steps and link probes fall here, as in the first minutes "
                        "of a real job)")
    p.add_argument("--repeat", type=int, default=1,
                   help="measure this many times (one line each, then the median)")
    p.add_argument("--dim", type=int, default=512)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--checks", default=None,
                   help="watch only these checks (as DDPDOCTOR_WATCH_CHECKS: 'nonfinite', "
                        "'-links,-desync', 'none'); default: the default checks")
    args = p.parse_args()

    import torch
    import torch.distributed as dist
    from torch import nn

    import ddpdoctor

    torch.set_num_threads(1)
    distributed = "RANK" in os.environ
    if distributed:
        dist.init_process_group("gloo")
    rank = dist.get_rank() if distributed else 0
    world = dist.get_world_size() if distributed else 1

    def build() -> tuple[nn.Module, torch.optim.Optimizer]:
        torch.manual_seed(0)
        layers: list[nn.Module] = []
        for _ in range(args.layers):
            layers += [nn.Linear(args.dim, args.dim), nn.GELU()]
        model: nn.Module = nn.Sequential(*layers, nn.Linear(args.dim, 1))
        if distributed:
            model = nn.parallel.DistributedDataParallel(model)
        return model, torch.optim.AdamW(model.parameters(), lr=1e-4)

    models = [build(), build()]
    gen = torch.Generator().manual_seed(rank)
    batches = [torch.randn(args.batch, args.dim, generator=gen) for _ in range(8)]

    def step(model: nn.Module, opt: torch.optim.Optimizer, i: int) -> None:
        model(batches[i % len(batches)]).pow(2).mean().backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    def half(watched: int) -> tuple[Half, int]:
        """Watch model ``watched``, warm up, time both models interleaved."""
        handle = ddpdoctor.watch(models[watched][0], models[watched][1], checks=args.checks)
        for i in range(args.warmup):
            for model, opt in models:
                step(model, opt, i)
        wall: list[list[float]] = [[], []]
        cpu: list[list[float]] = [[], []]
        check: list[bool] = []
        for i in range(args.steps):
            for k in ((0, 1) if i % 2 == 0 else (1, 0)):  # each goes first half the time
                t0, c0 = time.perf_counter(), time.thread_time()
                step(*models[k], i)
                wall[k].append(time.perf_counter() - t0)
                cpu[k].append(time.thread_time() - c0)
                if k == watched:
                    check.append(handle.is_check_step(handle.step))
        handle.close()
        with_w, base = wall[watched], wall[1 - watched]
        extra = sum(w - b for w, b, c in zip(with_w, base, check) if c)
        return Half(paired=statistics.median(w / b for w, b in zip(with_w, base)),
                    check_share=extra / sum(base),
                    cpu_with_ms=statistics.median(cpu[watched]) * 1e3,
                    cpu_without_ms=statistics.median(cpu[1 - watched]) * 1e3,
                    med_with_ms=statistics.median(with_w) * 1e3,
                    med_without_ms=statistics.median(base) * 1e3,
                    checks=sum(check)), len(handle.findings)

    # Untimed warm-up of both models: allocator pools, DDP buckets, optimizer state.
    for i in range(args.warmup):
        for model, opt in models:
            step(model, opt, i)
    if rank == 0:
        print(f"{world} rank(s), {args.layers}x{args.dim} MLP, batch {args.batch}, "
              f"{args.steps} timed steps per model per half, checks: "
              f"{args.checks or 'the defaults'}")
        print(f"{'run':>4}{'step ms':>9}{'half A':>9}{'half B':>9}{'bias':>8}"
              f"{'checks':>8}{'CPU +us':>9}{'overhead':>10}")
    estimates, findings = [], 0
    for rep in range(args.repeat):
        a, fa = half(0)
        b, fb = half(1)
        findings += fa + fb
        paired = math.sqrt(a.paired * b.paired)  # the slot bias cancels
        bias = math.sqrt(a.paired / b.paired) - 1
        share = (a.check_share + b.check_share) / 2
        estimate = paired - 1 + share
        estimates.append(estimate)
        cpu_us = ((a.cpu_with_ms - a.cpu_without_ms) + (b.cpu_with_ms - b.cpu_without_ms)) * 500
        if rank == 0:
            print(f"{rep + 1:>4}{(a.med_without_ms + b.med_without_ms) / 2:>9.2f}"
                  f"{a.paired - 1:>+9.2%}{b.paired - 1:>+9.2%}{bias:>+8.2%}{share:>8.2%}"
                  f"{cpu_us:>+9.0f}{estimate:>+10.2%}")
    if rank == 0:
        print("half A/B: paired ratio - 1 with the watch on model A / on model B; bias: "
              "how much faster model A was anyway; checks: the check steps' extra time "
              "spread over the run; CPU +us: training-thread CPU time per step added; "
              "overhead: geometric mean of the halves - 1 + checks")
        if len(estimates) > 1:
            print(f"overhead over {len(estimates)} runs: median "
                  f"{statistics.median(estimates):.2%}, range {min(estimates):.2%} to "
                  f"{max(estimates):.2%}")
        print(f"findings: {findings}")
    if distributed:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
