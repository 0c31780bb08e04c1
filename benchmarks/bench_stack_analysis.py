"""Hang analysis at scale: 16,384 synthetic rank stacks (py-spy JSON) -> culprit.

    .venv/bin/python benchmarks/bench_stack_analysis.py [--ranks N]

The baseline is just decoding the py-spy JSON (json.loads), measured in the same run. The
analysis (classify every rank, name the odd ones out, group identical stacks) must take
well under a second; it fails the run at 1 s. On a quiet 2-core machine it is ~0.2 s,
a fraction of the JSON decoding every attach pays anyway.
"""

from __future__ import annotations

import argparse
import json
import time

from ddpdoctor.attach.analyze import analyze, group_stacks, headline
from ddpdoctor.attach.classify import classify
from ddpdoctor.attach.stacks import RankStack, parse_py_spy_json

SITE = "/venv/lib/python3.11/site-packages"
STDLIB = "/usr/lib/python3.11"


def _frame(name: str, filename: str, line: int) -> dict:
    return {"name": name, "filename": filename, "line": line, "locals": None}


def _stack(rank: int, culprit: bool) -> str:
    """One rank's py-spy dump: 20-frame training stack, plus a pin-memory thread."""
    outer = [_frame(f"Trainer.layer{i}", "/home/u/proj/trainer.py", 100 + i) for i in range(12)]
    outer.append(_frame("<module>", "/home/u/proj/train.py", 200))
    if culprit:
        inner = [_frame("Shards.__getitem__", "/home/u/proj/data.py", 41),
                 _frame("_MapDatasetFetcher.fetch", f"{SITE}/torch/utils/data/_utils/fetch.py", 54),
                 _frame("_BaseDataLoaderIter.__next__", f"{SITE}/torch/utils/data/dataloader.py",
                        741)]
    else:
        inner = [_frame("all_reduce", f"{SITE}/torch/distributed/distributed_c10d.py", 3252),
                 _frame("_exception_logger.<locals>.wrapper",
                        f"{SITE}/torch/distributed/c10d_logger.py", 83),
                 _frame("sync_grads", "/home/u/proj/train.py", 88)]
    pin = [_frame("Condition.wait", f"{STDLIB}/threading.py", 327),
           _frame("_pin_memory_loop", f"{SITE}/torch/utils/data/_utils/pin_memory.py", 52),
           _frame("Thread.run", f"{STDLIB}/threading.py", 982)]
    return json.dumps([
        {"pid": 1000 + rank, "thread_id": 2, "thread_name": "pin_memory", "os_thread_id": 2,
         "active": False, "owns_gil": False, "frames": pin},
        {"pid": 1000 + rank, "thread_id": 1, "thread_name": "MainThread",
         "os_thread_id": 1000 + rank, "active": False, "owns_gil": False,
         "frames": inner + outer},
    ])


def _best_of(n: int, fn):
    best, result = float("inf"), None
    for _ in range(n):
        t0 = time.perf_counter()
        result = fn()
        best = min(best, time.perf_counter() - t0)
    return best, result


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--ranks", type=int, default=16384)
    p.add_argument("--repeat", type=int, default=3)
    args = p.parse_args()
    culprits = {args.ranks // 3, args.ranks - 1}
    dumps = [_stack(r, r in culprits) for r in range(args.ranks)]

    def decode_only():
        return [json.loads(d) for d in dumps]

    def parse_only():
        return [parse_py_spy_json(d) for d in dumps]

    def full():
        stacks = [RankStack(r, 1000 + r, "sleeping", parse_py_spy_json(d))
                  for r, d in enumerate(dumps)]
        states = [classify(s) for s in stacks]
        findings = analyze(states)
        return states, findings, group_stacks(states), headline(states, findings)

    parsed = parse_only()
    t_decode, _ = _best_of(args.repeat, decode_only)
    t_parse, _ = _best_of(args.repeat, parse_only)
    stacks = [RankStack(r, 1000 + r, "sleeping", t) for r, t in enumerate(parsed)]
    t_classify, states = _best_of(args.repeat, lambda: [classify(s) for s in stacks])
    t_analyze, found = _best_of(args.repeat, lambda: analyze(states))
    t_group, groups = _best_of(args.repeat, lambda: group_stacks(states))
    t_full, (_, findings, _, head) = _best_of(args.repeat, full)
    t_analysis = t_classify + t_analyze + t_group

    assert [(f.id, f.ranks) for f in findings] == [("HANG_DATALOADER", sorted(culprits))]
    assert len(groups) == 2
    print(f"{args.ranks} rank stacks, best of {args.repeat}")
    print(f"{'step':<40}{'seconds':>10}{'x baseline':>12}")
    rows = [("baseline: json.loads of the dumps", t_decode),
            ("parse into Frame/ThreadStack", t_parse),
            ("classify every rank", t_classify),
            ("analyze (find the culprits)", t_analyze),
            ("group identical stacks", t_group),
            ("analysis = classify+analyze+group", t_analysis),
            ("full pipeline (parse+analysis)", t_full)]
    for name, t in rows:
        print(f"{name:<40}{t:>10.3f}{t / t_decode:>12.2f}")
    print(f"headline: {head}")
    if t_analysis >= 1.0:
        raise SystemExit(f"too slow: analysis took {t_analysis:.2f} s for {args.ranks} ranks "
                         "(limit 1 s)")


if __name__ == "__main__":
    main()
