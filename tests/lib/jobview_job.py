"""A tiny gloo job for the multi-node run tests: fixed step time, one planted fault.

    --hang R:S    rank R sleeps forever (no CPU) before step S: the others wait in all_reduce
    --crash R:S   rank R raises RuntimeError before step S
    --eval R:S:T  rank R evaluates (CPU busy) for T seconds before step S
Rank 0 prints one line per step; a planted fault prints its wall time first.
"""

import argparse
import gc
import sys
import time

import torch
import torch.distributed as dist


def _at(text):
    return tuple(float(x) for x in text.split(":")) if text else None


def _stuck_forever():
    while True:
        time.sleep(1)  # the planted hang: this rank never reaches the next all_reduce


def _evaluate(seconds):
    end = time.monotonic() + seconds
    x = torch.randn(64, 64)
    while time.monotonic() < end:
        x = torch.tanh(x @ x.T / 64)  # a long evaluation: busy, not hung


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=1000)
    p.add_argument("--step-s", type=float, default=0.2)
    p.add_argument("--hang")
    p.add_argument("--crash")
    p.add_argument("--eval")
    a = p.parse_args()
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    hang, crash, ev = _at(a.hang), _at(a.crash), _at(a.eval)
    t = torch.ones(4)
    # a model and an optimizer, so that run's watch (on unless --no-watch) counts steps
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for step in range(a.steps):
        if hang and hang[:2] == (rank, step):
            print(f"planted hang: rank {rank} at {time.time():.3f}", flush=True)
            _stuck_forever()
        if crash and crash[:2] == (rank, step):
            print(f"planted crash: rank {rank} at {time.time():.3f}", flush=True)
            raise RuntimeError(f"planted crash on rank {rank} at step {step}")
        if ev and ev[:2] == (rank, step):
            print(f"evaluation: rank {rank} for {ev[2]:g} s", flush=True)
            _evaluate(ev[2])
        time.sleep(a.step_s)
        model(torch.ones(2, 4)).sum().backward()
        opt.step()
        opt.zero_grad()
        dist.all_reduce(t)
        if rank == 0:
            print(f"step {step} done", flush=True)
    dist.destroy_process_group()
    # gloo's threads must be joined while Python still runs: without it a rank aborts at
    # exit now and then ("terminate called without an active exception", SIGABRT), as
    # the reference trainer did (pytorch/pytorch#190489; ddpdoctor/train/worker.py)
    del model, opt
    gc.collect()
    return 0


if __name__ == "__main__":
    sys.exit(main())
