"""`ddpdoctor plan`'s prediction vs what the reference trainer's ranks really hold.

For two model sizes, every 2-rank strategy runs in one launch (tp-dp in a 4-rank launch)
with DDPDOCTOR_TRAIN_MEMORY=1, which measures the last step on each rank: exact bytes of
the local parameter, gradient and optimizer-state tensors, the bytes autograd saved for
backward, and the step's peak (max_memory_allocated on GPU, the profiler's allocation
total on CPU). Prints the table of docs/benchmarks.md.

    .venv/bin/python benchmarks/bench_plan.py [--sizes tiny,small] [--device cpu]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from ddpdoctor.plan import PRECISIONS, Setup, from_preset
from ddpdoctor.plan.verify import compare, table

TWO_RANK = ["ddp", "zero1", "zero2", "zero3", "fsdp", "tp", "pp"]


def measure(size: str, nproc: int, strategies: list[str], batch: int, device: str,
            work: Path) -> dict[str, dict]:
    jlog = work / f"{size}-{nproc}.jsonl"
    cmd = [sys.executable, "-m", "ddpdoctor", "train", "--nproc", str(nproc), "--size", size,
           "--strategy", ",".join(strategies), "--steps", "3", "--batch-size", str(batch),
           "--device", device, "--json-log", str(jlog)]
    env = {**os.environ, "TMPDIR": str(work), "DDPDOCTOR_TRAIN_MEMORY": "1"}
    proc = subprocess.run(cmd, env=env, cwd=work, capture_output=True, text=True,
                          timeout=900)
    if proc.returncode:
        raise SystemExit(f"bench_plan: training failed:\n{proc.stdout[-2000:]}"
                         f"{proc.stderr[-2000:]}")
    recs = [json.loads(line) for line in jlog.read_text().splitlines()]
    return {r["strategy"]: r for r in recs if r["event"] == "summary"}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="tiny,small")
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    args = ap.parse_args()
    # CPU: fp32 and single-tensor AdamW; GPU: bf16 autocast and foreach AdamW
    precision, foreach = ("fp32", False) if args.device == "cpu" else ("amp", True)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for size in args.sizes.split(","):
            shape = from_preset(size)
            for nproc, names in ((2, TWO_RANK), (4, ["tp-dp"])):
                summaries = measure(size, nproc, names, args.batch_size, args.device,
                                    Path(tmp))
                setup = Setup(world=nproc, precision=PRECISIONS[precision],
                              batch_size=args.batch_size, microbatches=2, schedule="gpipe",
                              tp=2, margin=0.0, foreach=foreach)
                for name in names:
                    for c in compare(name, shape, setup, summaries[name]["rank_memory"]):
                        c.strategy = f"{size} {c.strategy}"
                        rows.append(c)
    print(table(rows))
    worst_states = max(abs(c.states_error) for c in rows)
    worst_total = max(abs(c.total_error) for c in rows)
    print(f"\nworst model-state error {worst_states:.1%} (limit 2%), worst peak error "
          f"{worst_total:.1%} (limit 15%)")
    return 0 if all(c.ok for c in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
