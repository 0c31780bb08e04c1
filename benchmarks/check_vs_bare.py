"""`ddpdoctor check` vs the bare script people write by hand, interleaved, on this machine.

The bare script is what issue #31 timed: ``torchrun --nproc-per-node N bare.py``, where
bare.py inits a gloo process group, does one all_reduce and one send/recv per pair of
ranks, and exits. The check is ``ddpdoctor check --nproc N`` doing every probe (extra
arguments with ``--check-args``, e.g. ``--check-args=--quick``).

Both run back to back in each round (the order alternates), so machine load hits both
alike; the ratio that counts is taken within this one run (min of each, median of each,
and the median of the per-round ratios). Each run's CPU seconds (its whole process tree:
user + sys of every reaped descendant) are printed too: unlike wall time they barely
move with the load that other processes put on the machine.

    .venv/bin/python benchmarks/check_vs_bare.py [--rounds 5] [--nproc 2] [--check-args=...]
"""

from __future__ import annotations

import argparse
import os
import resource
import shlex
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

BARE = '''\
import os

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
t = torch.ones(1024)
dist.all_reduce(t)
assert t[0].item() == world
# One send/recv per pair: every rank walks the pairs in the same order, so no deadlock.
for a in range(world):
    for b in range(a + 1, world):
        if rank in (a, b):
            peer = b if rank == a else a
            out, inp = torch.full((4096,), float(rank)), torch.empty(4096)
            for w in (dist.isend(out, peer), dist.irecv(inp, peer)):
                w.wait()
            assert inp[0].item() == peer
dist.destroy_process_group()
'''


@dataclass(frozen=True)
class Run:
    wall_s: float
    cpu_s: float
    code: int


def free_port() -> int:
    # A small race with other processes on this host is acceptable for a benchmark: a
    # collision shows as a failed run (non-zero code), never as a wrong number.
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def timed(argv: list[str], env: dict[str, str], timeout: float) -> Run:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    try:
        code = subprocess.run(argv, env=env, stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE, timeout=timeout).returncode
    except subprocess.TimeoutExpired:
        code = -9
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return Run(wall, cpu, code)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--nproc", type=int, default=2)
    ap.add_argument("--check-args", default="", help="extra arguments for ddpdoctor check")
    ap.add_argument("--timeout", type=float, default=300.0, help="per run, seconds")
    args = ap.parse_args()

    bindir = Path(sys.executable).parent
    doctor, torchrun = bindir / "ddpdoctor", bindir / "torchrun"
    with tempfile.TemporaryDirectory(prefix="check-vs-bare-") as tmp:
        script = Path(tmp) / "bare.py"
        script.write_text(BARE)
        # torchrun and the check leave their logs in TMPDIR: keep them in ours.
        env = {**os.environ, "TMPDIR": tmp}
        env.pop("MASTER_PORT", None)
        bare_runs, check_runs = [], []
        print(f"load average at start: {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
        print(f"{'round':>5}  {'bare s':>7}  {'check s':>7}  {'ratio':>5}  "
              f"{'bare cpu':>8}  {'check cpu':>9}  codes")
        for i in range(args.rounds):
            port = free_port()
            bare = [str(torchrun), f"--nproc-per-node={args.nproc}",
                    f"--master-port={port}", "--log-dir", str(Path(tmp) / f"logs{i}"),
                    str(script)]
            check = [str(doctor), "check", f"--nproc={args.nproc}", f"--master-port={port}",
                     "--json", str(Path(tmp) / "check.json"), *shlex.split(args.check_args)]
            pair = [(bare, bare_runs), (check, check_runs)]
            for argv, runs in (pair if i % 2 == 0 else pair[::-1]):
                runs.append(timed(argv, env, args.timeout))
            b, c = bare_runs[-1], check_runs[-1]
            print(f"{i:>5}  {b.wall_s:>7.2f}  {c.wall_s:>7.2f}  {c.wall_s / b.wall_s:>5.2f}  "
                  f"{b.cpu_s:>8.2f}  {c.cpu_s:>9.2f}  {b.code},{c.code}", flush=True)
    print(f"load average at end: {os.getloadavg()[0]:.1f}")
    _summary(bare_runs, check_runs)
    # The check exits 1 when it finds a problem on this host (that is its job); anything
    # else, or a failed bare run, makes the numbers meaningless.
    failed = [r.code for r in bare_runs if r.code != 0] + \
             [r.code for r in check_runs if r.code not in (0, 1)]
    if failed:
        print(f"some runs failed (exit codes {failed}): numbers are not comparable")
        return 1
    return 0


def _summary(bare_runs: list[Run], check_runs: list[Run]) -> None:
    def row(name: str, pick) -> None:
        b, c = [pick(r) for r in bare_runs], [pick(r) for r in check_runs]
        print(f"{name:<9} bare min {min(b):6.2f} median {statistics.median(b):6.2f} | "
              f"check min {min(c):6.2f} median {statistics.median(c):6.2f} | "
              f"ratio of mins {min(c) / min(b):4.2f}, of medians "
              f"{statistics.median(c) / statistics.median(b):4.2f}")

    row("wall s", lambda r: r.wall_s)
    row("cpu s", lambda r: r.cpu_s)
    per_round = [c.wall_s / b.wall_s for b, c in zip(bare_runs, check_runs)]
    print(f"per-round wall ratio: median {statistics.median(per_round):.2f} "
          f"(min {min(per_round):.2f}, max {max(per_round):.2f})")


if __name__ == "__main__":
    sys.exit(main())
