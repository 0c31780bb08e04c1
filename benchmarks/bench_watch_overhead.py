"""Step-time overhead of ``ddpdoctor.watch()`` at its default settings.

Two identical DDP models train side by side in one run, one watched and one not, in
interleaved blocks of steps (so machine noise hits both alike); the table shows the
median and the mean step time of each and their ratio. The mean includes the every-K
check steps (checksums, the all_gather), so it is the number that counts.

    torchrun --nproc-per-node 2 benchmarks/bench_watch_overhead.py [--steps 1000 --repeat 5]
    python benchmarks/bench_watch_overhead.py            # one process, no DDP
"""

from __future__ import annotations

import argparse
import os
import statistics
import time


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=400, help="steps per model")
    p.add_argument("--block", type=int, default=1, help="steps per interleaved block")
    p.add_argument("--warmup", type=int, default=300, help="untimed steps per model first")
    p.add_argument("--repeat", type=int, default=1,
                   help="measure this many times (one line each, then the median)")
    p.add_argument("--dim", type=int, default=512)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--batch", type=int, default=64)
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

    def build() -> tuple[nn.Module, torch.optim.Optimizer]:
        torch.manual_seed(0)
        layers: list[nn.Module] = []
        for _ in range(args.layers):
            layers += [nn.Linear(args.dim, args.dim), nn.GELU()]
        model: nn.Module = nn.Sequential(*layers, nn.Linear(args.dim, 1))
        if distributed:
            model = nn.parallel.DistributedDataParallel(model)
        return model, torch.optim.AdamW(model.parameters(), lr=1e-4)

    plain, plain_opt = build()
    watched, watched_opt = build()
    handle = ddpdoctor.watch(watched, watched_opt)  # the defaults
    gen = torch.Generator().manual_seed(rank)
    batches = [torch.randn(args.batch, args.dim, generator=gen) for _ in range(8)]
    runs = [("without watch", plain, plain_opt), ("with watch()", watched, watched_opt)]
    world = dist.get_world_size() if distributed else 1
    every = handle.cfg.every
    # Untimed warm-up of both models: allocator pools, DDP buckets, optimizer state and
    # CPU caches settle (the first timed run was 1-2% off for both models alike, watch or
    # not, before this).
    for j in range(args.warmup):
        for _, model, opt in runs:
            model(batches[j % len(batches)]).pow(2).mean().backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
    estimates = []
    for rep in range(args.repeat):
        times: dict[str, list[float]] = {"without watch": [], "with watch()": []}
        check: list[bool] = []  # was the watched model's step a check step
        n = 0
        while n < args.steps:
            for label, model, opt in (runs if (n // args.block) % 2 == 0 else runs[::-1]):
                for j in range(args.block):
                    x = batches[(n + j) % len(batches)]
                    t0 = time.perf_counter()
                    loss = model(x).pow(2).mean()
                    loss.backward()
                    opt.step()
                    opt.zero_grad(set_to_none=True)
                    times[label].append(time.perf_counter() - t0)
                    if model is watched:
                        check.append(handle.step % every == 0)
            n += args.block
        if rank != 0:
            continue
        rows = times
        base, with_watch = rows["without watch"], rows["with watch()"]
        # Paired: step i of each model ran back to back, so a load spike hits both.
        paired = statistics.median(w / b for w, b in zip(with_watch, base))
        # The check steps (1 in `every`) are rare enough for the median and the trimmed
        # mean to drop them: their extra time, spread over all steps, is counted here.
        extra = sum(w - b for w, b, c in zip(with_watch, base, check) if c)
        share = extra / sum(base)
        estimates.append(paired - 1 + share)
        print(f"run {rep + 1}/{args.repeat}: {world} rank(s), {args.layers}x{args.dim} MLP, "
              f"batch {args.batch}, {len(base)} steps each, interleaved every {args.block} "
              f"step(s), every={every}")
        print(f"{'':<16}{'median ms':>10}{'trimmed mean ms':>16}{'ratio (median)':>16}"
              f"{'ratio (trimmed mean)':>22}")
        for label, v in rows.items():
            med, mean = statistics.median(v), trimmed_mean(v)
            print(f"{label:<16}{med * 1e3:>10.2f}{mean * 1e3:>16.2f}"
                  f"{med / statistics.median(base):>16.4f}{mean / trimmed_mean(base):>22.4f}")
        print(f"paired step-time ratio (median of with/without per step pair): {paired:.4f}")
        print(f"check steps: {sum(check)}, {extra / max(sum(check), 1) * 1e3:.2f} ms extra "
              f"each, {share:.2%} of the run amortised")
        print(f"overhead estimate (paired ratio - 1 + check steps): {paired - 1 + share:.2%}\n")
    handle.close()
    if rank == 0:
        if len(estimates) > 1:
            print(f"overhead over {len(estimates)} runs: median "
                  f"{statistics.median(estimates):.2%}, range {min(estimates):.2%} to "
                  f"{max(estimates):.2%}")
        print(f"findings: {len(handle.findings)}")
    if distributed:
        dist.destroy_process_group()


def trimmed_mean(values: list[float], cut: float = 0.05) -> float:
    """Mean without the top ``cut`` share (load spikes from other processes; this drops
    the rare check steps too, which the script counts on their own)."""
    v = sorted(values)
    return statistics.fmean(v[: max(1, int(len(v) * (1 - cut)))])


if __name__ == "__main__":
    main()
