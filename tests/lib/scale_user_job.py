"""A user's job for `ddpdoctor scale -- torchrun ... tests/lib/scale_user_job.py`.

Each step: build a batch (data), a small matmul (compute), then an all-reduce of
SCALE_JOB_MB megabytes of "gradients" (communication). Compute is tiny, the all-reduce is
not: from two ranks on, the job is communication-bound by construction. Prints the
documented throughput line (ddpdoctor.scale.lines) from rank 0 and, with SCALE_JOB_TIMES=1,
per-rank times from every rank.
"""

import os
import time

import torch
import torch.distributed as dist

from ddpdoctor.scale.lines import NPROC_ENV, RANK_BATCH_ENV, format_line


def main() -> None:
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    if os.environ.get(NPROC_ENV) != str(world):
        raise SystemExit(f"{NPROC_ENV}={os.environ.get(NPROC_ENV)} but world {world}")
    grads = torch.ones(int(float(os.environ.get("SCALE_JOB_MB", "16")) * 2**20 / 4))
    weight = torch.randn(256, 256)
    batch = int(os.environ.get(RANK_BATCH_ENV, "8"))
    timed = os.environ.get("SCALE_JOB_TIMES", "1") == "1"
    for step in range(1, int(os.environ.get("SCALE_JOB_STEPS", "10")) + 1):
        t0 = time.perf_counter()
        x = torch.randn(batch * 16, 256)
        t1 = time.perf_counter()
        for _ in range(8):
            x = (x @ weight).tanh()
        x.sum().item()
        t2 = time.perf_counter()
        dist.all_reduce(grads)
        step_s = time.perf_counter() - t0
        times = dict(rank=rank, step=step, step_s=step_s, data_s=t1 - t0,
                     compute_s=t2 - t1) if timed else {}
        if rank == 0 or timed:
            print(format_line(batch * world / step_s, "samples/s", **times), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
