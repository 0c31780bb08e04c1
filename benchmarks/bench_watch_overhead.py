"""Step-time overhead of ``ddpdoctor.watch()`` at its default settings.

One model trains, and the watch is switched on and off between its steps
(``handle.pause()`` takes every hook off, so an unwatched step runs exactly as without the
watch) in blocks of four: watched, unwatched, unwatched, watched. Slow drift of the
machine (the CPU time of the same step wanders by 15% over a minute here) and any effect
of a step's position hit both sides alike, and both come from the same tensors. (Two
identical models side by side do not work: where their memory landed makes one ~1.5%
faster for a while, then the other.) The watch counts only its watched steps, so its
check steps (every ``every``-th, with the cross-rank gather and, every 10th, the link
probe) fall among them as in a real run.

Per block: watched time / unwatched time. The watch's costs come on a schedule of its
watched steps (a check step every ``every``, module hooks on the steps before it, a
memory sample every 20th, a link probe every 10th check step), so blocks are grouped by
where their watched steps fall in that cycle: the estimate is the mean over the groups
of each group's median ratio (its mean where the group holds a check step: there the
rare link probe counts too). Every scheduled cost counts at its real frequency; the
machine's random spikes do not. A 95% interval comes from resampling blocks within their
groups (bootstrap). ``--control`` runs the same with the watch paused on both sides: an
A/A test of the method (it should say 0 within its interval). A watched step here starts
with its hooks freshly registered, which a watch that stays on never does: if anything,
that overstates.

    python benchmarks/bench_watch_overhead.py                    # one process, no DDP
    torchrun --nproc-per-node 2 benchmarks/bench_watch_overhead.py            # ~10 min here
    torchrun --nproc-per-node 2 benchmarks/bench_watch_overhead.py --dim 512 --steps 24000
    torchrun --nproc-per-node 2 benchmarks/bench_watch_overhead.py --loop handrolled   # or fsdp1
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import time
from dataclasses import dataclass, field, fields


@dataclass
class Blocks:
    """Per block: watched and unwatched wall and CPU time (half of its steps each)."""
    wall_w: list[float] = field(default_factory=list)
    wall_u: list[float] = field(default_factory=list)
    cpu_w: list[float] = field(default_factory=list)
    cpu_u: list[float] = field(default_factory=list)
    phase: list[int] = field(default_factory=list)   # first watched step mod `every`
    check: list[bool] = field(default_factory=list)  # a check step among the watched two

    def extend(self, other: Blocks) -> None:
        for f in fields(self):
            getattr(self, f.name).extend(getattr(other, f.name))


Groups = dict[int, tuple[bool, list[float]]]  # phase -> (holds a check step, ratios)


def group(b: Blocks, wall: bool = True) -> Groups:
    out: Groups = {}
    w, u = (b.wall_w, b.wall_u) if wall else (b.cpu_w, b.cpu_u)
    for wi, ui, ph, c in zip(w, u, b.phase, b.check):
        has, ratios = out.setdefault(ph, (False, []))
        ratios.append(wi / ui)
        if c and not has:
            out[ph] = (True, ratios)
    return out


def overhead(groups: Groups) -> float:
    """Mean over the groups of their median ratio (mean with a check step) - 1."""
    values = [statistics.fmean(r) if has else statistics.median(r)
              for has, r in groups.values() if r]
    return statistics.fmean(values) - 1 if values else 0.0


def interval(groups: Groups, reps: int = 300, seed: int = 0) -> tuple[float, float]:
    """95% bootstrap interval of :func:`overhead` (blocks resampled within groups)."""
    rng = random.Random(seed)
    estimates = sorted(
        overhead({ph: (has, rng.choices(r, k=len(r))) for ph, (has, r) in groups.items()})
        for _ in range(reps))
    return estimates[int(0.025 * reps)], estimates[int(0.975 * reps) - 1]


def summarize(b: Blocks, block: int) -> dict[str, float]:
    groups = group(b)
    low, high = interval(groups)
    checks = [r for has, rs in groups.values() if has for r in rs]
    regular = {ph: g for ph, g in groups.items() if not g[0]}
    cpu = {ph: g for ph, g in group(b, wall=False).items() if not g[0]}
    step_s = statistics.median(b.cpu_u) / (2 * block)
    return {"step_ms": statistics.median(b.wall_u) / (2 * block) * 1e3,
            "regular": overhead(regular),
            "check_blocks": len(checks),
            "check_extra": (statistics.fmean(checks) - 1) if checks else 0.0,
            "cpu_us": overhead(cpu) * step_s * 1e6,
            "overhead": overhead(groups), "low": low, "high": high}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=8000,
                   help="timed steps per run, half of them watched")
    p.add_argument("--warmup", type=int, default=400,
                   help="steps before timing, half of them watched (the watch's early check "
                        "steps and first link probes fall here, as in a real job's first "
                        "minutes)")
    p.add_argument("--repeat", type=int, default=1,
                   help="runs (a fresh watch each); one line each, then all pooled")
    p.add_argument("--dim", type=int, default=1024,
                   help="MLP width: 1024 is a ~65 ms step on 2 CPU ranks here, 512 ~17 ms")
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--checks", default=None,
                   help="watch only these checks (as DDPDOCTOR_WATCH_CHECKS: 'nonfinite', "
                        "'-links,-desync', 'none'); default: the default checks")
    p.add_argument("--block", type=int, default=1,
                   help="N: blocks of N watched, 2N unwatched, N watched steps (N=1 switches "
                        "every step; a larger N tests that the switching itself is free)")
    p.add_argument("--control", action="store_true",
                   help="A/A test: the watch stays paused on the 'watched' steps too")
    p.add_argument("--raw", default=None, help="write the per-block times (JSON) here")
    p.add_argument("--json", default=None,
                   help="write the pooled summary (step_ms, overhead, low, high, ...) here")
    p.add_argument("--loop", choices=("ddp", "handrolled", "fsdp1"), default="ddp",
                   help="how the ranks keep replicas (with torchrun): DDP; a hand-rolled "
                        "loop that all-reduces and averages each gradient after backward; "
                        "FSDP1 (FullyShardedDataParallel)")
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                   help="cuda: the model on this rank's GPU, NCCL between ranks, and each "
                        "step ends with a synchronize so its GPU work is in its time")
    args = p.parse_args()

    import torch
    import torch.distributed as dist
    from torch import nn

    import ddpdoctor

    torch.set_num_threads(1)
    distributed = "RANK" in os.environ
    cuda = args.device == "cuda"
    device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0))) if cuda else None
    if device is not None:
        torch.cuda.set_device(device)
    if distributed:
        dist.init_process_group("nccl" if cuda else "gloo")
    rank = dist.get_rank() if distributed else 0
    world = dist.get_world_size() if distributed else 1

    torch.manual_seed(0)
    layers: list[nn.Module] = []
    for _ in range(args.layers):
        layers += [nn.Linear(args.dim, args.dim), nn.GELU()]
    model: nn.Module = nn.Sequential(*layers, nn.Linear(args.dim, 1)).to(device or "cpu")
    if distributed and args.loop == "ddp":
        model = nn.parallel.DistributedDataParallel(
            model, device_ids=[device] if device is not None else None)
    elif distributed and args.loop == "fsdp1":
        from torch.distributed.fsdp import FullyShardedDataParallel

        model = FullyShardedDataParallel(model, device_id=device or torch.device("cpu"))
    elif distributed:
        for prm in model.parameters():
            dist.broadcast(prm.data, 0)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    by_hand = distributed and args.loop == "handrolled"
    gen = torch.Generator().manual_seed(rank)
    batches = [torch.randn(args.batch, args.dim, generator=gen).to(device or "cpu")
               for _ in range(8)]

    def step(i: int) -> None:
        # one batch per block of four: watched and unwatched steps see the same data
        model(batches[i // 4 % len(batches)]).pow(2).mean().backward()
        if by_hand:  # the tutorials' average_gradients
            for prm in model.parameters():
                dist.all_reduce(prm.grad)
                prm.grad /= world
        opt.step()
        opt.zero_grad(set_to_none=True)
        if cuda:  # the step's GPU work in its time (both sides alike)
            torch.cuda.synchronize()

    def run() -> tuple[Blocks, int]:
        handle = ddpdoctor.watch(model, opt, checks=args.checks)
        handle.pause()
        blocks = Blocks()
        wall, cpu, check, phase = [0.0, 0.0], [0.0, 0.0], False, 0
        n = args.block
        size = 4 * n
        for i in range(args.warmup + args.steps):
            pos = i % size
            slot = pos < n or pos >= 3 * n  # a watched slot (the watch is off with --control)
            watched = slot and not args.control
            switch_on = watched and pos in (0, 3 * n)
            switch_off = watched and pos in (n - 1, size - 1)
            if switch_on:
                handle.resume()
            t0, c0 = time.perf_counter(), time.thread_time()
            step(i)
            t1, c1 = time.perf_counter(), time.thread_time()
            if watched:
                if switch_off:
                    handle.pause()
                check = check or handle.is_check_step(handle.step)
                if pos == 0:
                    phase = handle.step % handle.cfg.every
            wall[not slot] += t1 - t0
            cpu[not slot] += c1 - c0
            if pos == size - 1:
                if i >= args.warmup:
                    blocks.wall_w.append(wall[0])
                    blocks.wall_u.append(wall[1])
                    blocks.cpu_w.append(cpu[0])
                    blocks.cpu_u.append(cpu[1])
                    blocks.check.append(check)
                    blocks.phase.append(phase if not args.control else i // size % 50)
                wall, cpu, check = [0.0, 0.0], [0.0, 0.0], False
        handle.resume()
        handle.close()
        return blocks, len(handle.findings)

    for i in range(args.warmup):  # allocator pools, DDP buckets, optimizer state
        step(i)
    if rank == 0:
        print(f"{world} rank(s) on {torch.cuda.get_device_name() if cuda else 'CPU'}, "
              f"{args.loop if distributed else 'one process'}, "
              f"{args.layers}x{args.dim} MLP, batch {args.batch}, "
              f"{args.steps} timed steps per run (half watched), checks: "
              f"{args.checks or 'the defaults'}"
              + ("; CONTROL (A/A): never watched" if args.control else ""))
        print(f"{'run':>4}{'step ms':>9}{'regular':>9}{'checks':>8}{'+each':>8}"
              f"{'CPU +us':>9}{'overhead':>10}{'95% interval':>20}")
    pooled, findings, raw = Blocks(), 0, []
    for rep in range(args.repeat):
        blocks, found = run()
        findings += found
        pooled.extend(blocks)
        raw.append(blocks.__dict__)
        s = summarize(blocks, args.block)
        if rank == 0:
            print(f"{rep + 1:>4}{s['step_ms']:>9.2f}{s['regular']:>+9.2%}"
                  f"{s['check_blocks']:>8}{s['check_extra']:>+8.1%}{s['cpu_us']:>+9.0f}"
                  f"{s['overhead']:>+10.2%}{s['low']:>+10.2%} to {s['high']:<+7.2%}")
    if rank == 0:
        s = summarize(pooled, args.block)
        if args.repeat > 1:
            print(f"{'all':>4}{s['step_ms']:>9.2f}{s['regular']:>+9.2%}"
                  f"{s['check_blocks']:>8}{s['check_extra']:>+8.1%}{s['cpu_us']:>+9.0f}"
                  f"{s['overhead']:>+10.2%}{s['low']:>+10.2%} to {s['high']:<+7.2%}")
        print("regular: watched/unwatched - 1 over the groups of blocks without a check "
              "step; checks: blocks with one, +each: their mean extra; CPU +us: "
              "training-thread CPU time added per watched step (without check steps); "
              "overhead: all groups")
        ratio = (f"{1 + s['overhead']:.4f} (95% interval {1 + s['low']:.4f} to "
                 f"{1 + s['high']:.4f})")
        if args.control:
            bias = "none shown" if s["low"] <= 0 <= s["high"] else "BIASED"
            print(f"control, unwatched / unwatched: {ratio}: the method's bias: {bias}")
        else:
            verdict = "within" if s["high"] < 0.01 else "NOT shown within"
            print(f"step time with the watch / without: {ratio}: {verdict} 1%")
        print(f"findings: {findings}")
        if args.raw:
            with open(args.raw, "w") as f:
                json.dump(raw, f)
        if args.json:
            with open(args.json, "w") as f:
                json.dump({**s, "findings": findings, "control": args.control,
                           "device": torch.cuda.get_device_name() if cuda else "cpu"}, f)
    if distributed:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
