"""busbw as `ddpdoctor check` measures it vs a plain `dist.all_reduce` timing loop.

Both run on the same 2 gloo ranks in the same launch, interleaved size by size (so machine
load hits both alike). The check's number must agree within 10% of the plain loop's.

    .venv/bin/python benchmarks/bench_busbw.py [--nproc 2] [--max-bytes 16M] [--rounds 5]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from ddpdoctor.check.busbw import busbw_gbps, sizes
from ddpdoctor.check.launcher import launch


def measure(ctx, max_bytes: int, rounds: int, iters: int):
    import torch
    import torch.distributed as dist

    from ddpdoctor.check.probes.bandwidth import sweep

    out = {}
    for size in sizes(1024, max_bytes):
        plain, doctor = [], []
        for _ in range(rounds):
            # The plain loop: what a person would write to time all_reduce.
            t = torch.ones(size // 4)
            for _ in range(2):
                dist.all_reduce(t)
            dist.barrier()
            start = time.perf_counter()
            for _ in range(iters):
                dist.all_reduce(t)
            elapsed = (time.perf_counter() - start) / iters
            # The slowest rank decides, as in the check.
            e = torch.tensor([elapsed], dtype=torch.float64)
            dist.all_reduce(e, op=dist.ReduceOp.MAX)
            plain.append(float(e))
            rows = sweep(ctx, {"collectives": ["all_reduce"], "min_bytes": size,
                               "max_bytes": size, "iters": iters, "trials": 1})
            m = torch.tensor([rows[0]["median_s"]], dtype=torch.float64)
            dist.all_reduce(m, op=dist.ReduceOp.MAX)
            doctor.append(float(m))
        out[size] = (statistics.median(plain), statistics.median(doctor))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--nproc", type=int, default=2)
    ap.add_argument("--max-bytes", type=lambda s: int(float(s.rstrip("M")) * (1 << 20)),
                    default=16 << 20)
    ap.add_argument("--rounds", type=int, default=11)
    ap.add_argument("--iters", type=int, default=20)
    args = ap.parse_args()
    res = launch(measure, nproc=args.nproc, args=(args.max_bytes, args.rounds, args.iters),
                 backend="gloo", deadline_s=600)
    if not res.ok:
        print("benchmark failed:", [(o.rank, o.status, o.error) for o in res.outcomes])
        return 1
    data = res.values()[0]
    print(f"all_reduce busbw on {args.nproc} gloo ranks (GB/s), median of {args.rounds} "
          f"interleaved rounds x {args.iters} iterations")
    print(f"{'size':>10} {'plain loop':>12} {'ddpdoctor':>12} {'ratio':>7}  within 10%")
    worst = 0.0
    for size, (plain_s, doctor_s) in sorted(data.items()):
        p = busbw_gbps("all_reduce", size, plain_s, args.nproc)
        d = busbw_gbps("all_reduce", size, doctor_s, args.nproc)
        ratio = d / p if p else 0.0
        ok = abs(ratio - 1) <= 0.10
        if size >= 1 << 20:
            worst = max(worst, abs(ratio - 1))
        label = f"{size >> 20} MiB" if size >= 1 << 20 else f"{size >> 10} KiB"
        print(f"{label:>10} {p:>12.4f} {d:>12.4f} {ratio:>7.3f}  {'yes' if ok else 'NO'}")
    print(f"largest deviation at >= 1 MiB: {worst * 100:.1f}%")
    return 0


if __name__ == "__main__":
    sys.exit(main())
